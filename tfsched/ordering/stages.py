"""Dependency stages of transfers: what keeps per-step counters free of deadlock.

Under TicTac's counters (§5.1) a transfer waits until every transfer ranked before it on its
channel was released. If one ranked before it can only become ready after it arrives
(a pull the worker needs, ranked behind a control edge from the PS's apply ops that waits for
the worker's pushes), the step deadlocks. The paper's PS model has every pull ready at the start
(§2.4), so it never meets this; real graphs do (``tf.group`` of the apply ops, BN statistics).

The stage of a transfer is the largest number of transfers on any path into its source op.
Ordering by (stage, algorithm's value) is deadlock-free: by induction on stages, every stage-k
transfer waits only for transfers of stage <= k that need nothing of stage >= k to be ready.
"""

from __future__ import annotations

from tfsched.graph.model import CommGraph, Transfer


def transfer_stages(graph: CommGraph) -> dict[Transfer, int]:
    """Stage of every transfer of ``graph`` (0: its source needs no transfer of this step)."""
    into: dict[tuple[str, str], list[Transfer]] = {}
    for t in graph.transfers:
        for c in t.consumers:
            into.setdefault((t.src_op, c), []).append(t)
    level: dict[str, int] = {}
    g = graph.graph
    for n in graph.topological_order():
        lv = 0
        for u in g.predecessors(n):
            crossing = into.get((u, n))
            lv = max(lv, level[u] + 1 if crossing else level[u])
        level[n] = lv
    return {t: level[t.src_op] for t in graph.transfers}
