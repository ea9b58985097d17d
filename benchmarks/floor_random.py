"""How close the floor comes to the best simulated order, on random training graphs.

``sim.metrics.Bounds.floor`` is a bound over every order: no simulated run may go under it, and
the nearer the best run comes to it, the more it says about what an order can still gain. This
draws the random cases of ``tests/sim/test_engine.py::test_no_simulated_order_beats_the_floor``
(``tests.helpers.random_training_case``: a chain of two to five layers trained by two or three
workers, random sizes and op times, some on a shared machine, some with the PS's links slower
than its channels) for many seeds, runs each under
every policy, with and without slices and a window per task (``tests.helpers.simulated_orders``),
and reports the best run over the floor: its quantiles, and every run under the floor (none may
be).

    python benchmarks/floor_random.py [--seeds 150] [--name floor-random]

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # the repository: tests.helpers
from _results import machine, positive, write  # noqa: E402

from tests.helpers import random_training_case, simulated_orders  # noqa: E402


def case(seed: int) -> dict:
    """One random graph: its floor, the best simulated step over every order, and what set it."""
    from tfsched.ordering import order
    from tfsched.sim import build_sim_graph, step_bounds

    g, o, workers = random_training_case(seed)
    s = order(g, "tio")
    bounds = step_bounds(build_sim_graph(g, o, s, workers=workers))
    best = min(
        r.step_time
        for partition in (None, 100_000)
        for r in simulated_orders(build_sim_graph(g, o, s, workers=workers, partition_bytes=partition))
    )
    return {
        "seed": seed,
        "floor_s": bounds.floor,
        "lower_s": bounds.lower,
        "best_s": best,
        "best_over_floor": best / bounds.floor,
        "floor_by": bounds.floor_text,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=positive(int), default=150, help="random graphs, seeds 0 to N-1")
    ap.add_argument("--name", default="floor-random")
    args = ap.parse_args()
    cases = [case(seed) for seed in range(args.seeds)]
    over = sorted(c["best_over_floor"] for c in cases)
    under = [c for c in cases if c["best_s"] < c["floor_s"] - 1e-9]
    q = statistics.quantiles(over, n=20, method="inclusive")  # q[9]: the median, q[18]: the 95th
    # TicTac's lower bound (the busiest resource) beside it: how much the dependencies add
    lower = statistics.median(c["best_s"] / c["lower_s"] for c in cases)
    summary = {
        "cases": len(cases),
        "under_floor": len(under),
        "best_over_floor": {"min": over[0], "median": q[9], "p95": q[18], "max": over[-1]},
        "best_over_lower_median": lower,
    }
    md = [
        f"The floor against the best simulated order on {len(cases)} random training graphs "
        "(`tests.helpers.random_training_case`, seeds 0 to "
        f"{len(cases) - 1}; every policy, with and without slices and a window per task)",
        "",
        "| runs under the floor | best over floor: min | median | 95th percentile | max | best over TicTac's lower bound: median |",
        "|---|---|---|---|---|---|",
        f"| {len(under)} | {over[0]:.3f} | {q[9]:.3f} | {q[18]:.3f} | {over[-1]:.3f} | {lower:.3f} |",
        "",
        "```bash",
        f"python benchmarks/floor_random.py --seeds {args.seeds} --name {args.name}",
        "```",
    ]
    write(args.name, {"machine": machine(), "summary": summary, "cases": cases}, md)
    if under:
        raise SystemExit(
            f"Error: {len(under)} simulated runs went under the floor (seeds {[c['seed'] for c in under]})"
        )


if __name__ == "__main__":
    main()
