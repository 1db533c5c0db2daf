"""A whole file system's plan: one balancing domain per pool, files kept within their pool.

A domain is a pool's OSTs that take new stripes (state ``active``); with no
pools, every such OST; with pools, the OSTs in no pool form one more domain.
A file moves within a domain when all its OSTs are in it and each of its
components names that pool or none (a composite file whose components lie in
different pools is left to ``iez drain``, which moves objects pool by pool). Domains are planned in turn (pools by name, then the OSTs
in no pool), each from the fills the earlier ones leave, and no file moves
twice. The plan's ``spread_before``/``spread_after`` are the worst domain's.
"""

from __future__ import annotations

from dataclasses import dataclass

from iez.rebalance.inventory import Inventory
from iez.rebalance.plan import DEFAULT_TARGET, DomainPlan, Ost, plan_domain


@dataclass
class Plan:
    target: float
    domains: list[DomainPlan]
    inventory: Inventory
    after: dict[int, int]  # bytes on each OST once the plan is done

    @property
    def moves(self):
        return [m for d in self.domains for m in d.moves]

    @property
    def reached(self) -> bool:
        return all(d.reached for d in self.domains)

    def to_json(self) -> dict:
        moves = self.moves
        return {
            "target": self.target,
            "spread_before": round(max((d.spread_before for d in self.domains), default=0.0), 6),
            "spread_after": round(max((d.spread_after for d in self.domains), default=0.0), 6),
            "bytes_moved": sum(m.bytes for m in moves),
            "files_moved": len(moves),
            "reached": self.reached,
            "moves": [m.to_json() for m in moves],
            "pools": [d.to_json() for d in self.domains],
            "osts": [{"index": o.index, "state": o.state, "pools": list(o.pools),
                      "fill_before": round(o.fill, 6), "fill_after": round(self.after[o.index] / o.capacity, 6)}
                     for o in self.inventory.osts],
            "files_fixed": self.inventory.files_fixed,
            "source": self.inventory.source,
        }


def domains(inv: Inventory, pool: str | None = None) -> list[tuple[str | None, list[int]]]:
    usable = {o.index for o in inv.osts if o.takes_stripes}
    if pool is not None:
        if pool not in inv.pools:
            raise ValueError(f"--pool {pool}: no such pool (pools: {', '.join(sorted(inv.pools)) or 'none'})")
        return [(pool, sorted(set(inv.pools[pool]) & usable))]
    if not inv.pools:
        return [(None, sorted(usable))]
    pooled = set().union(*map(set, inv.pools.values()))
    out: list[tuple[str | None, list[int]]] = [(name, sorted(set(members) & usable))
                                               for name, members in sorted(inv.pools.items())]
    rest = sorted(usable - pooled)
    if rest:
        out.append((None, rest))
    return out


def build(inv: Inventory, target: float = DEFAULT_TARGET, pool: str | None = None, **options) -> Plan:
    """Plan every domain of ``inv`` (``options`` go to :func:`iez.rebalance.plan.plan_domain`)."""
    if not 0.0 < target < 1.0:
        raise ValueError(f"--target {target}: a fill spread between 0 and 1 (e.g. 0.10)")
    load = {o.index: o.used for o in inv.osts}
    by_index = {o.index: o for o in inv.osts}
    moved: set[str] = set()
    plans = []
    for name, members in domains(inv, pool):
        inside = set(members)
        files = [f for f in inv.files if f.path not in moved and set(f.osts) <= inside
                 and all(p is None or p == name for p in f.object_pools())]
        osts = [Ost(j, by_index[j].capacity, load[j], by_index[j].state, by_index[j].pools) for j in members]
        options.setdefault("domains", getattr(inv, "domains", None) or None)
        plan = plan_domain(osts, files, target, inv.fill_cap, pool=name, **options)
        for m in plan.moves:
            moved.add(m.file.path)
            for a, b, n in zip(m.file.osts, m.to, m.file.objects):
                load[a] -= n
                load[b] += n
        plans.append(plan)
    return Plan(target, plans, inv, load)
