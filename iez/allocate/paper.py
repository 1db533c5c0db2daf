"""``paper``: Algorithm 2 of the iez paper exactly as printed, solved with networkx.

Graph: source → request (capacity ``stripeCount``, cost 0) → every OST
(capacity 1, cost = its OSS load) → sink (capacity ``kbytesAvail /
stripeSize``, cost = the OST's used fraction). Each OST→sink edge has one
constant cost per unit, so the optimum sends every request to the same
cheapest OSTs: 16 requests of 8 stripes on 15 OSTs fill 8 OSTs with 16
stripes each. The product keeps this policy as the baseline that shows the
flaw; ``iez`` is the balanced form.

networkx needs integer costs: fractions are scaled by :data:`COST_SCALE` and
rounded. The paper solves the flow "using the Ford-Fulkerson algorithm"; networkx's
``capacity_scaling`` is that family (successive shortest paths), and like the
paper's solver it breaks ties by graph order, which is what makes the collapse
visible even on equal OSTs. The printed algorithm computes ``ostCapacity`` inside a loop with
one ``stripeSize``; with mixed sizes we use the largest, the conservative
reading.
"""

from __future__ import annotations

from typing import Sequence

import networkx as nx

from iez.allocate.base import AllocationError, Policy, Refused
from iez.model import ClusterState, WriteRequest

COST_SCALE = 10_000
#: Largest graph (request→OST edges) the literal formulation is attempted on;
#: beyond it networkx needs hours, and the policy refuses instead of hanging.
MAX_EDGES = 200_000


class PaperPolicy(Policy):
    name = "paper"

    def __init__(self, seed: int = 0, cpu_weight: float = 0.5, mem_weight: float = 0.5,
                 max_edges: int = MAX_EDGES, **kw):
        super().__init__(seed, **kw)
        self.max_edges = max_edges
        self.cpu_weight = cpu_weight
        self.mem_weight = mem_weight

    def build_graph(self, cluster: ClusterState, counts: Sequence[int], sizes: Sequence[int]) -> nx.DiGraph:
        """The flow graph of the paper's Fig. 6."""
        total = sum(counts)
        stripe_size = max(sizes)
        graph = nx.DiGraph()
        graph.add_node("source", demand=-total)
        graph.add_node("sink", demand=total)
        for ost in cluster.osts:
            used = (ost.kbytes_total - ost.kbytes_avail) / ost.kbytes_total
            graph.add_edge(
                ("ost", ost.index), "sink", weight=round(used * COST_SCALE), capacity=ost.bytes_avail // stripe_size
            )
        for r, count in enumerate(counts):
            graph.add_edge("source", ("req", r), weight=0, capacity=count)
            for ost in cluster.osts:
                oss = cluster.oss_of(ost)
                load = (self.cpu_weight * oss.cpu_pct + self.mem_weight * oss.mem_pct) / 100.0
                graph.add_edge(("req", r), ("ost", ost.index), weight=round(load * COST_SCALE), capacity=1)
        return graph

    def _place(self, cluster: ClusterState, requests: Sequence[WriteRequest], counts, sizes
               ) -> list[Sequence[int] | Refused]:
        edges = len(requests) * len(cluster.osts)
        if edges > self.max_edges:
            raise AllocationError(None, f"paper: the flow graph would have {edges:,} request-OST edges, "
                                  f"above the {self.max_edges:,} networkx is given here")
        graph = self.build_graph(cluster, counts, sizes)
        try:
            _, flow = nx.capacity_scaling(graph)
        except nx.NetworkXUnfeasible as err:
            raise AllocationError(None, f"paper: no flow places every stripe ({err})") from None
        return [
            [node[1] for node, units in flow[("req", r)].items() if units]
            for r in range(len(requests))
        ]
