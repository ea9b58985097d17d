"""What crossing TensorFlow's global barrier would gain on kept bench runs (a what-if).

Behind the barrier (``Session.run``: a step ends once all its ops have, pushes and updates
included) a worker's next step cannot pull a variable before the last step's pushes of every
other variable are in, which is why no order passes the floor of training on one PS
(``floor.py``). ByteScheduler crosses it (``../shared/papers/bytescheduler-sosp19.txt`` §3.4,
with a change to TensorFlow's engine): a worker's next step starts once its own ops have run,
and each layer's forward op waits for that layer's update and pull only. The simulator lays
the steps out either way (``sim.build_sim_graph``'s ``cross_barrier``: a read of a variable
waits for every worker's update of it in the last step, and an update for every worker's read
of it in the same step, so each read sees what it sees behind the barrier) and gives each
mode's steady step both ways (``bench.predict.cross_barrier_what_if``), on each run re-predicted
as ``repredict.py`` does. The projected step is the measured one scaled by the simulated gain.

    python benchmarks/cross_barrier.py DIR... --name NAME [--steps 4]

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, run_dir, run_dir_errors, run_title, write  # noqa: E402
from repredict import repredict  # noqa: E402


def crossing_rows(run_dir: str, steps: int) -> tuple[dict, list[dict]]:
    """One kept run's modes: measured, and simulated behind the barrier and across it."""
    config, rows = repredict(run_dir, cross_barrier_steps=steps)
    base = next((r for r in rows if r["mode"] == "baseline"), None)
    if base is None:
        from tfsched.errors import TfschedError

        raise TfschedError(f"{run_dir}: the run has no baseline to measure a gain against")
    out = []
    for r in rows:
        cb = r["cross_barrier"]
        # across, the best of the mode's gates and a queue of the ready messages on every channel
        best = min(cb["crossing_s"], cb.get("crossing_ready_s", cb["crossing_s"]))
        gain = cb["barrier_s"] / best
        projected = r["measured_s"] / gain
        out.append(
            {
                "mode": r["mode"],
                "measured_s": r["measured_s"],
                "measured_gain": base["measured_s"] / r["measured_s"],
                "first_s": cb["first_s"],
                "barrier_s": cb["barrier_s"],
                "crossing_s": cb["crossing_s"],
                "crossing_ready_s": cb.get("crossing_ready_s"),
                "simulated_gain": gain,
                "projected_s": projected,
                "projected_gain": base["measured_s"] / projected,
                "floor_s": r["floor_now_s"],
                "error": r["error_now"],
            }
        )
    return config, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "run_dirs",
        nargs="+",
        type=run_dir,
        help="bench runs' --traces directories, each with its bench.json, or runs packed by keep_run.py",
    )
    ap.add_argument("--name", required=True, help="results/<name>.{json,md}")
    ap.add_argument(
        "--steps", type=positive(int), default=4, help="steps simulated each way, at least 2 (default 4)"
    )
    args = ap.parse_args()
    if args.steps < 2:
        ap.error(f"--steps: crossing the barrier needs at least 2 steps to overlap, got {args.steps}")
    with run_dir_errors():
        runs = [(d, *crossing_rows(d, args.steps)) for d in args.run_dirs]
    md = [
        f"Crossing the global barrier (a what-if): each mode's steady step over {args.steps} simulated steps, "
        "behind TensorFlow's barrier and across it as ByteScheduler crosses it",
        "",
        "| run | mode | measured (s) | its gain | simulated behind (s) | across (s) | across, ready first (s) "
        "| crossing gains | projected (s) | its gain | floor behind (s) | sim. error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, config, rows in runs:
        md += [
            f"| {run_title(config)} | `{r['mode']}` | {r['measured_s']:.3f} | {r['measured_gain']:.3f}x "
            f"| {r['barrier_s']:.3f} | {r['crossing_s']:.3f} "
            f"| {'-' if r['crossing_ready_s'] is None else format(r['crossing_ready_s'], '.3f')} "
            f"| {r['simulated_gain']:.3f}x "
            f"| {r['projected_s']:.3f} | **{r['projected_gain']:.3f}x** | {r['floor_s']:.3f} | {r['error']:+.0%} |"
            for r in rows
        ]
    md += [
        "",
        "its gain: over the measured baseline; simulated behind/across: what each further step adds, "
        "the steps laid out behind the barrier or across it, with the mode's gates; ready first: across "
        "it with every channel a queue of the messages ready, pulls too (ByteScheduler's Core; the pass "
        "counts its pulls, and across the barrier a counter holds every pull behind the first layer's, "
        "updated last); crossing gains: behind over the faster across; projected: the measured step over "
        "that gain; floor behind: what no order passes behind the barrier (floor.py); sim. error: the "
        "simulator's on the mode's one step. A what-if: tfsched's pass cannot move a Session.run's end, "
        "so its modes run behind the barrier.",
    ]
    write(
        args.name,
        {
            "machine": machine(),
            "steps": args.steps,
            "runs": [{"run": d, "config": c, "modes": rows} for d, c, rows in runs],
        },
        md,
    )


if __name__ == "__main__":
    main()
