"""Discrete-event simulation of PS training steps, and TicTac's metrics."""

from __future__ import annotations

import statistics

from tfsched.graph.model import CommGraph
from tfsched.oracle.oracle import TimeOracle
from tfsched.ordering.schedule import Schedule
from tfsched.sim.engine import POLICIES, SimResult, simulate
from tfsched.sim.metrics import Bounds, step_bounds
from tfsched.sim.model import SimGraph, build_sim_graph

# The simulation policy that enforces each schedule mode.
POLICY_OF_MODE = {"counter": "counter", "queue": "queue", "none": "fifo"}
SEEDS = 3  # seeded runs averaged where an order is random


def seeded_runs(sg: SimGraph, policy: str, seeds: int = SEEDS, **kwargs) -> list[SimResult]:
    """``seeds`` seeded runs of ``simulate``: for the orders that are random (the ``random``
    policy's ties, transfers that ``race`` for a channel)."""
    return [simulate(sg, policy, seed=s, **kwargs) for s in range(seeds)]


def mean_step_time(sg: SimGraph, policy: str, seeds: int = SEEDS, **kwargs) -> float:
    """Mean step time of ``seeded_runs``."""
    return mean_step(seeded_runs(sg, policy, seeds, **kwargs))


def mean_step(runs: list[SimResult]) -> float:
    """Mean step time of ``runs``."""
    return statistics.fmean(r.step_time for r in runs)


def mean_by_rank(rows: list[list[float]]) -> list[float]:
    """Each row (one step's or run's workers' times, all of one length) sorted, then the mean of
    the first of every row, of the second, ...: how the workers stagger, the first to finish
    first.

    >>> [round(t, 3) for t in mean_by_rank([[0.3, 0.1], [0.2, 0.4]])]
    [0.15, 0.35]
    """
    return [statistics.fmean(col) for col in zip(*map(sorted, rows), strict=True)] if rows else []


def finish_by_rank(runs: list[SimResult]) -> list[float]:
    """The workers' mean step times by rank over ``runs`` (``mean_by_rank``): how a run staggers
    its workers (its last is the step's time)."""
    return mean_by_rank([[statistics.fmean(v) for v in r.step_times().values()] for r in runs])


def pulls_done(sg: SimGraph, run: SimResult) -> list[float]:
    """Per worker run and step of a ``record``-ed ``run`` of ``sg``: when its last pull arrived,
    from the step's start (what ``bench.tf2.call_times`` measures as ``pulls_done_s``).

    >>> from tfsched.graph.model import CommGraph, Op, Transfer
    >>> from tfsched.oracle.oracle import LinkModel, TimeOracle
    >>> import networkx as nx
    >>> w, ps = "/job:worker/replica:0/task:0", "/job:ps/replica:0/task:0"
    >>> g = nx.DiGraph()
    >>> g.add_node("read", op=Op("read", "ReadVariableOp", ps + "/device:CPU:0", [], []))
    >>> g.add_node("matmul", op=Op("matmul", "MatMul", w + "/device:CPU:0", [], []))
    >>> g.add_edge("read", "matmul", tensors={"read:0"})
    >>> pull = Transfer("read:0", ps + "/device:CPU:0", w + "/device:CPU:0", "pull", 1_000_000, "v", ("matmul",))
    >>> cg = CommGraph(g, [pull], ["matmul"], [ps], [w])
    >>> oracle = TimeOracle({"read": 0.0, "matmul": 0.5}, link=LinkModel(bandwidth_bps=8e8, overhead_s=0.01))
    >>> sg = build_sim_graph(cg, oracle)
    >>> pulls_done(sg, simulate(sg, "fifo", record=True))  # 10 ms, then 1 MB at 100 MB/s
    [0.02]
    """
    last: dict[tuple[str, int], float] = {}
    for i, t in enumerate(sg.transfer):
        if t is not None and t.kind == "pull":
            key = (sg.worker[i], sg.step[i])
            last[key] = max(last.get(key, 0.0), run.ends[i])
    return [round(end - run.run_start[key], 9) for key, end in last.items() if key in run.run_start]


def simulate_schedule(
    graph: CommGraph,
    oracle: TimeOracle,
    schedule: Schedule | None = None,
    *,
    policy: str | None = None,
    workers: int | None = None,
    steps: int = 1,
    partition_bytes: int | None = None,
    credit_bytes: int | None = None,
    host_credit: bool = False,
    seed: int = 0,
    record: bool = False,
) -> SimResult:
    """Simulate ``steps`` steps of ``graph`` under ``schedule`` (FIFO when None)."""
    if policy is None:
        policy = POLICY_OF_MODE[schedule.mode] if schedule is not None else "fifo"
    sg = build_sim_graph(
        graph, oracle, schedule, workers=workers, steps=steps, partition_bytes=partition_bytes
    )
    return simulate(sg, policy, credit_bytes=credit_bytes, host_credit=host_credit, seed=seed, record=record)


__all__ = [
    "POLICIES",
    "Bounds",
    "SimGraph",
    "SimResult",
    "build_sim_graph",
    "finish_by_rank",
    "mean_by_rank",
    "mean_step_time",
    "simulate",
    "seeded_runs",
    "simulate_schedule",
    "step_bounds",
]
