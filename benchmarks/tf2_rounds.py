"""A TensorFlow 2 bench's rounds with each coordinator forked from one process that imported
TensorFlow (``bench.zygote.Forks``, ``bench.tf2.forked_coordinators``) against each a process of
its own that imports it again, as until the eighty-seventh session.

The same run of ``bench.tf2.side_by_side`` (the shaped cluster of the tests' TensorFlow 2 bench by
default: Seq-32, two workers, 200 Mbit/s), made each way in turn, ``--repeats`` times: every
round's wall time, from asking for it to its record (its kind: worker 0's solo round, a timed
round, a traced round, the round that measures a byte's cost), the run's wall time, and each
mode's measured throughput, which forking should leave as it was.

    python benchmarks/tf2_rounds.py [--model seq32] [--repeats 2] --name NAME

Writes ``benchmarks/results/<name>.json`` and ``.md``. Needs root for the namespaces (without
it, ``--bandwidth 0``: loopback, unshaped).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, run_kwargs, run_options, write  # noqa: E402

WAYS = ("own process", "forked")


def kind(args: dict) -> str:
    if args.get("comm_cost"):
        return "byte's cost"
    if args.get("solo"):
        return "solo"
    return "traced" if args.get("trace") else "timed"


def one_run(opts, forked: bool) -> dict:
    """One run of the bench, its rounds timed; ``forked``: as the bench runs them now."""
    from tfsched.bench import tf2

    rounds = []
    real_run, real_forks = tf2.run_round, tf2.forked_coordinators

    def run_round(args, mode, timeout_s, dead_tasks=None):
        start = time.perf_counter()
        rec = real_run(args, mode, timeout_s, dead_tasks)
        rounds.append({"kind": kind(args), "mode": mode, "wall_s": round(time.perf_counter() - start, 3)})
        return rec

    tf2.run_round = run_round
    if not forked:
        tf2.forked_coordinators = contextlib.nullcontext
    try:
        start = time.perf_counter()
        summary = tf2.side_by_side(
            opts.model,
            **run_kwargs(opts),
        )
        wall = time.perf_counter() - start
    finally:
        tf2.run_round, tf2.forked_coordinators = real_run, real_forks
    return {
        "way": WAYS[forked],
        "wall_s": round(wall, 2),
        "rounds": rounds,
        "throughput_steps_per_s": {m["mode"]: m["throughput_steps_per_s"] for m in summary["modes"]},
    }


def main() -> None:
    p = run_options(
        __doc__.split("\n\n")[0], modes="baseline,tio,tao+pc", steps=3, rounds=1, bandwidth_mbps=200.0
    )
    opts = p.parse_args()
    runs = [one_run(opts, forked) for _ in range(opts.repeats) for forked in (False, True)]

    def rounds_of(way: str, k: str | None = None) -> list[float]:
        return [
            r["wall_s"] for run in runs if run["way"] == way for r in run["rounds"] if k in (None, r["kind"])
        ]

    kinds = sorted({r["kind"] for run in runs for r in run["rounds"]})
    lines = [
        f"# TensorFlow 2 bench rounds: forked coordinators against a process each ({opts.name})",
        "",
        f"`python benchmarks/tf2_rounds.py --model {opts.model} --workers {opts.workers} --modes {opts.modes} "
        f"--steps {opts.steps} --rounds {opts.rounds} --batch-size {opts.batch_size} --bandwidth {opts.bandwidth:g} "
        f"--repeats {opts.repeats} --name {opts.name}`, each way {opts.repeats} times in turn; "
        f"{machine()['cpus']} cores ({machine()['platform']}).",
        "",
        "| way | runs' wall (s) | rounds | mean round (s) | "
        + " | ".join(f"mean {k} (s)" for k in kinds)
        + " |",
        "|---|---|---|---|" + "---|" * len(kinds),
    ]
    for way in WAYS:
        walls = [run["wall_s"] for run in runs if run["way"] == way]
        every = rounds_of(way)
        lines.append(
            f"| {way} | {', '.join(f'{w:.1f}' for w in walls)} | {len(every)} | {statistics.mean(every):.2f} | "
            + " | ".join(f"{statistics.mean(rounds_of(way, k)):.2f}" for k in kinds)
            + " |"
        )
    own, forked = (statistics.mean(rounds_of(w)) for w in WAYS)
    lines += [
        "",
        f"A round took {own:.2f} s in a process of its own and {forked:.2f} s forked: "
        f"{own - forked:.2f} s less ({1 - forked / own:.0%}).",
        "",
        "Each mode's measured throughput (steps/s), run by run: forking leaves what a round measures",
        "to the child, after its warm-up, as before.",
        "",
        "| way | " + " | ".join(runs[0]["throughput_steps_per_s"]) + " |",
        "|---|" + "---|" * len(runs[0]["throughput_steps_per_s"]),
    ]
    for run in runs:
        lines.append(
            f"| {run['way']} | "
            + " | ".join(f"{v:.2f}" for v in run["throughput_steps_per_s"].values())
            + " |"
        )
    write(opts.name, {"machine": machine(), "options": vars(opts), "runs": runs}, lines)


if __name__ == "__main__":
    main()
