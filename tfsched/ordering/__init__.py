"""Transfer orderings: TicTac's TIO and TAO, ByteScheduler's layer order, FIFO."""

from __future__ import annotations

from tfsched.errors import TfschedError
from tfsched.graph.model import CommGraph
from tfsched.oracle.oracle import TimeOracle
from tfsched.ordering.layer import fifo_values, layer_values
from tfsched.ordering.schedule import ALGORITHMS, Schedule, load_schedule, normalize, schedule_for
from tfsched.ordering.stages import counter_safe, transfer_stages
from tfsched.ordering.tao import tao_order, tao_values
from tfsched.ordering.tio import tio_order_values, tio_values

# The gate discipline each algorithm is meant for (see schedule.MODES).
DEFAULT_MODE = {"tio": "counter", "tao": "counter", "layer": "queue", "fifo": "none"}


def order(graph: CommGraph, algorithm: str = "tio", oracle: TimeOracle | None = None) -> Schedule:
    """Compute the schedule of ``algorithm`` for every transfer of ``graph``.

    >>> sched = order(graph, "tao", TimeOracle.from_cost_model(graph))  # doctest: +SKIP
    """
    if algorithm == "tio":
        values = tio_values(graph)
    elif algorithm == "tao":
        values = tao_values(graph, oracle or TimeOracle.from_cost_model(graph))
    elif algorithm == "layer":
        values = layer_values(graph)
    elif algorithm == "fifo":
        values = fifo_values(graph)
    else:
        raise TfschedError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    # Transfers between PS tasks or into no worker view (rare) keep graph order at the end.
    missing = [t for t in graph.transfers if t not in values]
    if missing:
        tail = fifo_values(graph)
        top = max(values.values(), default=0.0) + 1.0
        for t in missing:
            values[t] = top + tail[t]
    if DEFAULT_MODE[algorithm] == "counter":
        values = counter_safe(graph, values)
    return schedule_for(graph, algorithm, values, DEFAULT_MODE[algorithm])


__all__ = [
    "ALGORITHMS",
    "counter_safe",
    "DEFAULT_MODE",
    "Schedule",
    "load_schedule",
    "normalize",
    "order",
    "tao_order",
    "tao_values",
    "tio_order_values",
    "transfer_stages",
    "tio_values",
    "layer_values",
    "fifo_values",
]
