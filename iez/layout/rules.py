"""What Lustre accepts as a layout, checked before iez stores or sets one, and layouts from the tools' JSON.

An administrator's hand-made layout (``iez alloc add --layout``) or default
(``iez layout set-default``) that Lustre would refuse must be refused here,
naming the part at fault, rather than fail later inside an application's
``open``. The rules are Lustre's (``lod_verify_striping``, ``lfs setstripe``):

- a stripe size is a multiple of 64 KiB (``LOV_MIN_STRIPE_SIZE``) and fits in
  32 bits (at most 4 GiB - 64 KiB);
- every extent boundary is a multiple of 64 KiB, and a component's end a
  multiple of its own stripe size;
- a stripe count is 1 to 2000 (``LOV_MAX_STRIPE_COUNT``) or -1 (every OST);
- a Data-on-MDT component comes first, ends before the end of the file, has
  no pool and one stripe as large as itself;
- a pool name has 1 to 15 characters.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Sequence

from iez.layout.model import Layout, components_from_json, mirrored_from_json, with_pool
from iez.lustre_limits import MAX_STRIPE_COUNT, MAX_STRIPE_SIZE, STRIPE_ALIGNMENT
from iez.model import ALL_OSTS, EOF_END, Component, check_pool_name, plain_component

#: Keys the tools' layout JSON may carry besides ``components``.
_PLAIN_KEYS = {"stripe_size", "stripe_count", "osts", "pool", "pattern", "overstriping"}


def _extent(c: Component) -> str:
    return f"[{c.start}, {'EOF' if c.end == EOF_END else c.end})"


def check_stripe_size(size: int, where: str) -> None:
    if size <= 0 or size % STRIPE_ALIGNMENT or size > MAX_STRIPE_SIZE:
        raise ValueError(f"{where}: stripe size {size} must be a positive multiple of {STRIPE_ALIGNMENT} "
                         f"at most {MAX_STRIPE_SIZE} (Lustre keeps it in 32 bits)")


def check_lustre_components(components: Sequence[Component], where: str, template: bool) -> None:
    """:class:`ValueError` naming ``where`` and the component when Lustre would refuse the layout.

    ``template``: a directory default (no component may name OSTs).
    """
    for n, c in enumerate(components):
        at = f"{where}: component {n} {_extent(c)}"
        for name, value in (("start", c.start), ("end", c.end)):
            if value != EOF_END and value % STRIPE_ALIGNMENT:
                raise ValueError(f"{at}: {name} {value} is not a multiple of 64 KiB ({STRIPE_ALIGNMENT}), as Lustre "
                                 "requires of extents")
        if c.dom:
            if c.end == EOF_END:
                raise ValueError(f"{at}: a Data-on-MDT component must end before the end of the file")
            if c.pool:
                raise ValueError(f"{at}: a Data-on-MDT component cannot have a pool")
            if c.stripe_size is not None and c.stripe_size != c.end:
                raise ValueError(f"{at}: a Data-on-MDT component's stripe size must be its size ({c.end}), "
                                 f"not {c.stripe_size}")
            continue
        if c.stripe_size is not None:
            check_stripe_size(c.stripe_size, at)
            if c.end != EOF_END and c.end % c.stripe_size:
                raise ValueError(f"{at}: end {c.end} is not a multiple of the stripe size {c.stripe_size}, as "
                                 "Lustre requires")
        if c.stripe_count != ALL_OSTS and c.stripe_count > MAX_STRIPE_COUNT:
            raise ValueError(f"{at}: stripe count {c.stripe_count} is above Lustre's {MAX_STRIPE_COUNT}")
        if template and c.osts:
            raise ValueError(f"{at}: a default layout names no OSTs (Lustre or iez chooses them per file)")


def dom_sized(components: Sequence[Component]) -> tuple[Component, ...]:
    """Data-on-MDT components with their stripe size stated (their size, as Lustre stores it)."""
    return tuple(replace(c, stripe_size=c.end) if c.dom and c.stripe_size is None and c.end != EOF_END else c
                 for c in components)


def loads(text: str, option: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{option}: not valid JSON ({err.msg} at character {err.pos})") from None


def layout_components(data: Any, where: str, template: bool) -> tuple[Component, ...]:
    """The components of the tools' layout JSON, checked against Lustre's rules.

    ``{"components": [...], "pool": P}`` (the top-level pool applies to each
    OST component without its own) or a plain ``{"stripe_count", "stripe_size",
    "pool"}`` (a template) / ``{"stripe_size", "osts", "pool"}`` (placed).
    A layout with ``mirrors`` goes through :func:`tools_layout`.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a layout must be a JSON object")
    if "mirrors" in data:
        raise ValueError(f"{where}: a layout with mirrors is read by tools_layout")
    pool = data.get("pool")
    if pool is not None:
        check_pool_name(pool, where)
    listed = data.get("components")
    items = listed if isinstance(listed, list) else [data]
    if template and any(isinstance(item, dict) and "osts" in item for item in items):
        raise ValueError(f"{where}: a default layout names no OSTs (Lustre or iez chooses them per file)")
    try:
        comps = _components(data, where, template)
    except ValueError as err:
        message = str(err)
        raise ValueError(message if message.startswith(where) else f"{where}: {message}") from None
    comps = dom_sized(with_pool(comps, pool))
    check_lustre_components(comps, where, template)
    if not template:
        if not any(c.osts for c in comps):
            raise ValueError(f"{where}: no component names OSTs; give osts to the components the file will reach")
    return comps


def _components(data: dict, where: str, template: bool) -> tuple[Component, ...]:
    if "components" in data:
        unknown = sorted(set(data) - {"components", "pool"})
        if unknown:
            raise ValueError(f"{where}: unknown field {unknown[0]!r} beside components (known: components, pool)")
        return components_from_json(data["components"], where, placed=not template)
    unknown = sorted(set(data) - _PLAIN_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (known: components, {', '.join(sorted(_PLAIN_KEYS))})")
    if template and "stripe_count" not in data:
        raise ValueError(f"{where}: a default layout needs components, or a stripe_count")
    if not template and ("osts" not in data or "stripe_size" not in data):
        raise ValueError(f"{where}: a layout needs components, or stripe_size and osts")
    return components_from_json([{"end": EOF_END, **data}], where, placed=not template)


def tools_layout(data: Any, where: str, template: bool) -> Layout:
    """The tools' layout JSON as iez stores it (:func:`as_stored`), mirrors included: ``{"mirrors": [[components],
    ...], "components": the first mirror (optional), "pool", "preferred_mirror"}`` (2 to 4 mirrors, each checked
    as a composite layout of its own; placed mirrors must not share an OST, or one failure takes both)."""
    if not isinstance(data, dict) or "mirrors" not in data:
        return as_stored(layout_components(data, where, template))
    unknown = sorted(set(data) - {"mirrors", "components", "pool", "preferred_mirror", "stale_mirrors"})
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} beside mirrors (known: components, mirrors, pool, "
                         "preferred_mirror, stale_mirrors)")
    layout = mirrored_from_json(data, where, lambda item, w: layout_components(item, w, template))
    seen: dict[int, int] = {}
    for k, mirror in enumerate(layout.mirrors):
        for ost in sorted({o for c in mirror for o in c.osts}):
            if ost in seen:
                raise ValueError(f"{where}: mirrors {seen[ost] + 1} and {k + 1} both use OST {ost}: one failure "
                                 "would take both copies")
            seen[ost] = k
    return layout


def ost_pool(components: Sequence[Component]) -> str | None:
    """The pool all OST components share (Data-on-MDT ones have none), else None."""
    pools = {c.pool for c in components if not c.dom}
    return pools.pop() if len(pools) == 1 else None


def as_stored(components: Sequence[Component]) -> Layout:
    """The layout as iez stores it: plain (no components) when it is one placed RAID-0 component over the
    whole file, composite otherwise."""
    if plain_component(components):
        c = components[0]
        return Layout(c.stripe_size or 0, c.osts, c.pool)
    return Layout.from_components(components)
