"""ByteScheduler's layer priority (SOSP'19 §4.1, Theorem 1) and FIFO, the reference orders."""

from __future__ import annotations

from tfsched.graph.model import CommGraph, Transfer


def layer_values(graph: CommGraph) -> dict[Transfer, float]:
    """Closer to the input goes first, for pulls and pushes alike.

    A variable's layer is the position, in the receiving worker's topological order, of the
    first op that uses its pulled value; a push takes the layer of the variable it updates.
    Transfers with no variable follow, in graph order.
    """
    topo = {n: i for i, n in enumerate(graph.topological_order())}
    big = float(len(topo))
    values: dict[Transfer, float] = {}
    layer: dict[tuple[str, str], float] = {}  # (worker task, variable) -> layer
    for t in graph.transfers:
        if t.kind == "pull" and t.variable:
            pos = float(min(topo[c] for c in t.consumers))
            key = (t.dst_task, t.variable)
            layer[key] = min(layer.get(key, big), pos)
    for t in graph.transfers:
        worker = t.dst_task if t.kind != "push" else t.src_task
        v = layer.get((worker, t.variable)) if t.variable else None
        values[t] = v if v is not None else big + topo[t.src_op]
    return values


def fifo_values(graph: CommGraph) -> dict[Transfer, float]:
    """Graph order of the source op: what an unscheduled run tends to do, kept as a reference."""
    topo = {n: i for i, n in enumerate(graph.topological_order())}
    return {t: float(topo[t.src_op]) for t in graph.transfers}
