"""Transfer orderings: TicTac's TIO and TAO, ByteScheduler's layer order, FIFO."""

from __future__ import annotations

from tfsched.errors import TfschedError
from tfsched.graph.model import CommGraph, Transfer
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
    return schedule_for(
        graph, algorithm, _gated_first(graph, values, DEFAULT_MODE[algorithm]), DEFAULT_MODE[algorithm]
    )


def _gated_first(graph: CommGraph, values: dict, mode: str) -> dict[Transfer, int]:
    """Ranks per channel: the transfers the pass gates in the order of ``values`` (made safe for
    the counters where ``mode`` is theirs, over those alone, as the pass's ``CounterSafe``), then
    those it leaves ungated (``CommGraph.ungated``), in graph order: they take no place in the
    counters, and the order the schedule gives them is never enforced."""
    gated = {t: v for t, v in values.items() if t not in graph.ungated}
    ranks = normalize(counter_safe(graph, gated) if mode == "counter" else gated)
    top = max(ranks.values(), default=-1) + 1
    for i, t in enumerate(graph.transfers):
        if t in values and t in graph.ungated:
            ranks[t] = top + i
    return ranks


def carry_over(schedule: Schedule, graph: CommGraph) -> Schedule:
    """``schedule``, made for another graph of the model, as the pass applies it to ``graph``
    (``cc/scheduler.cc``), which Grappler may have rewritten: a transfer takes the priority of
    the schedule's transfer with its channel and key (``Transfer.key``: the variable it reads or
    updates, which survives the rewrites), else of one with its PS side and key; a push that
    updates several variables (``Transfer.updates``: Grappler merged their gradients) takes the
    most urgent of their pushes' priorities; those the schedule names none of follow the named
    ones of their channel, in TIO order. Then made safe for the counters, as the pass does.

    The bench simulates each mode on the partition graphs the baseline ran
    (``tracing.replay.graph_that_ran``) with the order its pass was given, which was made from
    the saved graph."""
    exact: dict[tuple[str, str, str], int] = {}
    by_ps: dict[tuple[str, str], int] = {}
    for t, p in schedule.priorities.items():
        # a key two transfers share (a sparse gradient's indices and values) takes the later
        # of their priorities, as the pass's (cc/scheduler.cc, ``keep_later``)
        for table, k in ((exact, (t.src_task, t.dst_task, t.key)), (by_ps, (_ps_side(t, graph), t.key))):
            table[k] = max(table.get(k, p), p)
    tio = tio_values(graph)
    top = max(exact.values(), default=0) + 1.0
    values: dict[Transfer, tuple[float, float]] = {}  # (named priority, 0) or (after them, TIO's)
    for t in graph.transfers:
        p = priority_of(t, exact, by_ps, _ps_side(t, graph))
        values[t] = (p, 0.0) if p is not None else (top, tio.get(t, 0.0))
    carried = schedule_for(
        graph, schedule.algorithm, _gated_first(graph, values, schedule.mode), schedule.mode
    )
    carried.partition, carried.credit = schedule.partition, schedule.credit
    return carried


def priority_of(
    t: Transfer, exact: dict[tuple[str, str, str], int], by_ps: dict[tuple[str, str], int], ps_side: str
) -> int | None:
    """The schedule's priority for ``t`` as the pass finds it (``cc/scheduler.cc``): by its
    channel and key, else its PS side and key; for a push that updates several variables, the
    smallest (most urgent) found by theirs. None: the schedule does not name it."""

    def one(key: str) -> int | None:
        return exact.get((t.src_task, t.dst_task, key), by_ps.get((ps_side, key)))

    own = one(t.key)
    if own is not None or not t.updates:
        return own
    found = [p for p in map(one, t.keys[1:]) if p is not None]
    return min(found) if found else None


def _ps_side(t: Transfer, graph: CommGraph) -> str:
    return t.src_task if t.src_task in graph.ps_tasks else t.dst_task


__all__ = [
    "ALGORITHMS",
    "carry_over",
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
