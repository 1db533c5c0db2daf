"""A layout's JSON read back (the contract's form), a request's PFL template, and a path as the library records it.

The layout type itself and its JSON form are :class:`iez.model.Layout` (one
type for allocations, the DB, the API, the simulator, usage and the mover);
it is re-exported here for the modules that import it from this one.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any, Sequence

from iez.model import (
    ALL_OSTS,
    EOF_END,
    Component,
    Layout,
    check_components,
    check_pool_name,
    component_policy,
)


def _int(value: Any, where: str, name: str, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: {name} must be a whole number, not {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{where}: {name}={value} must be at least {low}")
    return value


def component_from_json(item: Any, start: int, where: str, placed: bool) -> Component:
    """One component of the contract's JSON. ``start`` is implied when absent (a template lists only ends);
    ``placed`` components carry ``osts``."""
    if not isinstance(item, dict):
        raise ValueError(f"{where}: a component must be an object with end and stripe_count")
    known = {"start", "end", "stripe_size", "stripe_count", "osts", "pool", "pattern", "overstriping"}
    unknown = sorted(set(item) - known)
    if unknown:
        raise ValueError(f"{where}: unknown component field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    if "end" not in item:
        raise ValueError(f"{where}: a component needs its end (bytes, or -1 for the end of the file)")
    begin = _int(item.get("start", start), where, "start", 0)
    if begin != start:
        raise ValueError(f"{where}: start={begin} but the component before ends at {start}")
    end = _int(item["end"], where, "end", -1)
    dom = item.get("pattern") in ("mdt", "dom")
    if "pattern" in item and not dom and item["pattern"] not in ("raid0", None):
        raise ValueError(f"{where}: pattern {item['pattern']!r} is not 'raid0' or 'mdt' (Data-on-MDT)")
    osts = item.get("osts", [])
    if not isinstance(osts, list):
        raise ValueError(f"{where}: osts must be a list of OST indices")
    osts = tuple(_int(o, where, "an OST index", 0) for o in osts)
    count = item.get("stripe_count", 0 if dom else (len(osts) if osts else None))
    if count is None:
        raise ValueError(f"{where}: a component needs its stripe_count")
    size = item.get("stripe_size")
    size = None if size is None else _int(size, where, "stripe_size", 1)
    pool = item.get("pool")
    if pool is not None:
        check_pool_name(pool, where)
    over = item.get("overstriping", False)
    if not isinstance(over, bool):
        raise ValueError(f"{where}: overstriping must be true or false")
    return Component(begin, end, _int(count, where, "stripe_count", ALL_OSTS), size, pool, osts, dom, over)


def components_from_json(items: Any, where: str, placed: bool = False) -> tuple[Component, ...]:
    """A template (``placed=False``: requests, ``set-default``) or a layout's components from JSON."""
    if not isinstance(items, list) or not items:
        raise ValueError(f"{where}: components must be a non-empty list")
    out, start = [], 0
    for n, item in enumerate(items):
        if start == EOF_END:
            raise ValueError(f"{where}: component {n} follows one that runs to the end of the file (end -1)")
        try:
            comp = component_from_json(item, start, f"{where}: component {n}", placed)
        except ValueError as err:
            raise ValueError(str(err)) from None
        out.append(comp)
        if comp.end == EOF_END:
            start = -1
        else:
            start = comp.end
    return check_components(out, where)


def with_pool(components: Sequence[Component], pool: str | None) -> tuple[Component, ...]:
    """``pool`` for every OST component that names none (a Data-on-MDT component never has one)."""
    if not pool:
        return tuple(components)
    return tuple(c if c.pool or c.dom else replace(c, pool=pool) for c in components)


def layout_from_json(data: Any, where: str) -> Layout:
    """A layout from ``{"components": [...], "pool": NAME}`` or ``{"stripe_size", "osts", "pool"}``."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a layout must be a JSON object")
    pool = data.get("pool")
    if pool is not None:
        check_pool_name(pool, where)
    if "mirrors" in data:
        return mirrored_from_json(data, where, lambda item, w: layout_from_json(item, w).as_components())
    if "components" in data:
        found = Layout.from_components(with_pool(components_from_json(data["components"], where, placed=True), pool),
                                       where)
        return replace(found, pool=pool) if pool else found  # the layout's pool, as the DB's pool column says it
    if "osts" not in data or "stripe_size" not in data:
        raise ValueError(f"{where}: a layout needs components, or stripe_size and osts")
    comp = component_from_json({"end": -1, **{k: v for k, v in data.items() if k != "stripe_count"}}, 0, where,
                               placed=True)
    if not comp.osts:
        raise ValueError(f"{where}: osts must list at least one OST")
    return Layout(comp.stripe_size or 0, comp.osts, pool)


def mirrored_from_json(data: dict, where: str, copy) -> Layout:
    """A mirrored layout from ``{"mirrors": [[components], ...], "components": first mirror (optional),
    "pool", "preferred_mirror", "stale_mirrors"}``; ``copy(data, where)`` reads one mirror's components."""
    mirrors = data["mirrors"]
    if not isinstance(mirrors, list) or not all(isinstance(m, list) for m in mirrors):
        raise ValueError(f"{where}: mirrors must be a list of mirrors, each a list of components")
    pool = data.get("pool")
    copies = []
    for k, m in enumerate(mirrors):
        item = {"components": m, **({"pool": pool} if pool else {})}
        copies.append(tuple(copy(item, f"{where}: mirror {k + 1}")))
    if "components" in data:
        first = tuple(copy({"components": data["components"], **({"pool": pool} if pool else {})}, where))
        if not copies or first != copies[0]:
            raise ValueError(f"{where}: components beside mirrors must be the first mirror (mirrors lists every "
                             "copy, the first included)")
    preferred = data.get("preferred_mirror")
    stale = data.get("stale_mirrors", [])
    if preferred is not None and (isinstance(preferred, bool) or not isinstance(preferred, int)):
        raise ValueError(f"{where}: preferred_mirror must be a mirror's position (0 for the first)")
    if not isinstance(stale, list) or any(isinstance(k, bool) or not isinstance(k, int) for k in stale):
        raise ValueError(f"{where}: stale_mirrors must be a list of mirror positions")
    return Layout.from_mirrors(copies, preferred, stale, where)


def lexical_abspath(path: str) -> str:
    """``path`` made absolute the way the placement library records it.

    Against the working directory, with ``.``, ``..`` and repeated slashes
    folded and symbolic links left alone (``os.path.abspath`` keeps a leading
    ``//``, which the library folds too).
    """
    out = os.path.abspath(os.fsdecode(path))
    return "/" + out.lstrip("/") if out.startswith("//") else out


def request_policy(pool: Any, components: Any, where: str) -> tuple[str | None, tuple[Component, ...]]:
    """A request's ``pool`` and ``components`` (PFL template) from a JSON object's values or a CSV row's text.

    ``components`` may be a list (JSON) or its JSON text (a CSV cell); empty or
    None means none. Errors name ``where``.
    """
    if pool in (None, ""):
        pool = None
    else:
        check_pool_name(pool, where)
    if components in (None, "", []):
        return pool, ()
    if isinstance(components, str):
        try:
            components = json.loads(components)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: components is not valid JSON ({err.msg} at character {err.pos})") from None
    return pool, components_from_json(components, f"{where}: components")


def components_text(components: Sequence[Component]) -> str:
    """The JSON text a CSV cell or a DB column holds for a template (``""`` for none): the contract's form,
    ``end``/``stripe_count`` always, the rest when set."""
    if not components:
        return ""
    out = []
    for c in components:
        item: dict[str, Any] = {"end": c.end, "stripe_count": c.stripe_count}
        if c.stripe_size is not None:
            item["stripe_size"] = c.stripe_size
        out.append(component_policy(item, c))
    return json.dumps(out, separators=(",", ":"))
