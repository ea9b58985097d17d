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


def mean_step_time(sg: SimGraph, policy: str, seeds: int = SEEDS, **kwargs) -> float:
    """Mean step time of ``seeds`` seeded runs of ``simulate``: for the orders that are random
    (the ``random`` policy's ties, transfers that ``race`` for a channel)."""
    return statistics.fmean(simulate(sg, policy, seed=s, **kwargs).step_time for s in range(seeds))


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
    "mean_step_time",
    "simulate",
    "simulate_schedule",
    "step_bounds",
]
