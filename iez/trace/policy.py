"""A file's Lustre policy as a write request carries it: its pool and its PFL template.

Traces (the file's actual layout, or its directory's default) and Darshan
logs (the components Lustre had instantiated) describe layouts; a request
keeps only what the next run's file should get again: the pool, and, for a
composite layout, the template (each component's extent, stripe count and
size, and pool, without OSTs: iez chooses those). A layout of one component
over the whole file that is neither Data-on-MDT nor overstriped is a plain
layout: it gives a pool and no template, so the request stays a plain one.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from iez.layout.model import Layout, components_text
from iez.model import EOF_END, Component


def composite(components: Sequence[Component]) -> bool:
    """Whether ``components`` say more than a plain layout: several, or one that is not plain RAID-0 over the
    whole file (layout text version 2 writes a plain layout with a pool as one such component)."""
    if len(components) != 1:
        return len(components) > 1
    c = components[0]
    return c.start != 0 or c.end != EOF_END or c.dom or c.overstriping


def layout_policy(layout: Layout | None) -> tuple[str | None, tuple[Component, ...]]:
    """``(pool, template)`` of a file's layout or a directory default; ``(None, ())`` for None."""
    if layout is None:
        return None, ()
    comps = layout.template()
    if not composite(comps):
        return comps[0].pool or layout.pool, ()
    return layout.pool, comps


def template_json(components: Sequence[Component]) -> list[dict[str, Any]] | None:
    """The contract's JSON list of a template (``end``, ``stripe_count``, then ``stripe_size``/``pool`` when
    set), None for none: what ``--json`` prints and ``POST /v1/requests`` takes."""
    return json.loads(components_text(components)) if components else None
