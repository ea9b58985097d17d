"""Timing-Independent Ordering (TicTac §4.3, Algorithm 3)."""

from __future__ import annotations

from tfsched.graph.model import CommGraph, Transfer, WorkerView
from tfsched.oracle.oracle import TimeOracle
from tfsched.ordering.properties import Properties


def tio_order_values(view: WorkerView) -> list[float]:
    """``M+`` of every recv of ``view`` under the general time oracle (eq. 6).

    Algorithm 3: with every transfer costing 1 and compute 0, the comparator reduces to ``M+``,
    computed once with all recvs outstanding; recvs with equal ``M+`` share a priority (the
    partial order). A recv that no multi-recv op needs has ``M+ = inf`` and goes last, as in
    the paper.
    """
    props = Properties.of(view, TimeOracle.general())
    if not props.ids.size:
        return []
    _, m_plus = props.update()
    return (m_plus / 1e9).tolist()  # the general oracle's units: number of transfers


def tio_values(graph: CommGraph) -> dict[Transfer, float]:
    """TIO order value of every transfer of every worker.

    Pushes: with compute costing nothing every gradient is ready at once, so TIO cannot tell
    them apart; they all tie (priority 0), which leaves them in the order backward produces them.
    """
    values: dict[Transfer, float] = {}
    for task in graph.worker_tasks:
        view = graph.worker_view(task)
        for t, v in zip(view.recvs, tio_order_values(view), strict=True):
            values[t] = v
        for t in view.sends:
            values[t] = 0.0
    return values
