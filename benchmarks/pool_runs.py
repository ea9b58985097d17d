"""One mode's speedup over several runs of the same benchmark, pooled.

Each ``tfsched bench`` run gives a mode's throughput over the baseline's in that run, with a 95%
interval from its paired rounds. That interval covers the drift within the run, not what moves
between runs: on the two shared cores the baseline's step moved by 7% between two runs of one
command while the scheduled mode's moved by 2.5% (VGG16 inference at 708, fifty-eighth session).
A target at the line is judged over runs, so this pools them: the geometric mean of the runs'
ratios and Student's t interval over the runs (each run one sample; the rounds' interval of each
stays beside it).

    cd benchmarks/results && python ../pool_runs.py --mode tao+pc+host --target 1.5 \\
        --name vgg16-inference-b708-pooled bench-vgg16-inference-s56-b708.json \\
        bench-vgg16-inference-s56-b708-run2.json bench-vgg16-inference-s57-b708-row.json \\
        bench-vgg16-inference-s58-b708-traced.json bench-vgg16-inference-s58-b708.json \\
        bench-vgg16-inference-s58-b708-run3.json bench-vgg16-inference-s58-b708-run4.json

The runs must be of one benchmark: the same model, mode, cluster, links and batch, on the same
processor; anything else is one error line naming the file. Writes
``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, run_title, write  # noqa: E402

# what makes two runs the same benchmark (keys of a results file's config; their processor must match too)
SAME = ("api", "model", "mode", "workers", "ps", "batch_size", "bandwidth", "latency", "queue", "host_cores")
# what a results file says it is: a session's run, or TensorFlow 2's (``--api tf2``: no synchronized
# step, so no mean step; its ratio is of the workers' steps a second)
BENCHMARKS = ("tfsched bench", "tfsched bench --api tf2")


def pooled(ratios: list[float], level: float = 0.95) -> tuple[float, float | None, float | None]:
    """The geometric mean of ``ratios`` and Student's t interval over them (on their logarithms,
    as ratios multiply); no interval from fewer than two.

    >>> [round(x, 3) for x in pooled([1.2, 1.5, 1.35])]
    [1.344, 1.019, 1.774]
    >>> round(pooled([1.4])[0], 3), pooled([1.4])[1:]
    (1.4, (None, None))
    """
    from tfsched.bench.results import ratio_interval

    if len(ratios) < 2:
        return math.exp(sum(map(math.log, ratios)) / len(ratios)), None, None
    return ratio_interval(ratios, level)


class PoolError(Exception):
    """A results file that cannot be pooled with the others: its message names the file."""


def read_run(path: str, mode: str) -> dict:
    """One results file's run of ``mode``: its config, processor and ratio to the baseline."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise PoolError(f"{path}: {e.strerror}") from None
    except ValueError as e:
        raise PoolError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("benchmark") not in BENCHMARKS or "config" not in doc:
        raise PoolError(f"{path}: not a tfsched bench results file")
    modes = {m.get("mode"): m for m in doc.get("modes", [])}
    if mode not in modes:
        raise PoolError(f"{path}: no mode {mode!r} (its modes: {', '.join(map(str, modes))})")
    m, base = modes[mode], modes.get("baseline")
    if not m.get("vs_baseline") or base is None:
        raise PoolError(f"{path}: {mode!r} has no ratio to a baseline of the same run")
    return {
        "file": path,
        "config": doc["config"],
        "cpu": doc.get("cpu"),
        "rounds": doc["config"].get("rounds"),
        "vs_baseline": m["vs_baseline"],
        "vs_baseline_ci95": m.get("vs_baseline_ci95"),
        "step_s": m.get("iteration_mean_s"),
        "baseline_step_s": base.get("iteration_mean_s"),
    }


def check_same(runs: list[dict]) -> None:
    """A run whose benchmark or processor differs from the first's: one PoolError naming it."""
    first = runs[0]
    for run in runs[1:]:
        for key in SAME:
            if run["config"].get(key) != first["config"].get(key):
                raise PoolError(
                    f"{run['file']}: {key} {run['config'].get(key)!r}, not {first['config'].get(key)!r} "
                    f"as in {first['file']}: not the same benchmark"
                )
        if run["cpu"] != first["cpu"]:
            raise PoolError(f"{run['file']}: ran on {run['cpu']!r}, not {first['cpu']!r} as {first['file']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="tfsched bench results files (-o) of one benchmark")
    ap.add_argument("--mode", required=True, help="the mode to pool, e.g. tao+pc+host")
    ap.add_argument("--target", type=float, help="a ratio to count the runs at or above")
    ap.add_argument("--name", required=True, help="results/<name>.{json,md}")
    args = ap.parse_args()
    try:
        runs = [read_run(p, args.mode) for p in args.files]
        check_same(runs)
    except PoolError as e:
        raise SystemExit(f"Error: {e}") from None
    mean, low, high = pooled([r["vs_baseline"] for r in runs])
    met = None if args.target is None else sum(r["vs_baseline"] >= args.target for r in runs)

    def seconds(s) -> str:
        return "-" if s is None else f"{s:.3f}"

    def ci(pair) -> str:
        return f"{pair[0]:.2f} to {pair[1]:.2f}" if pair and None not in pair else "-"

    md = [
        f"{run_title(runs[0]['config'])}: `{args.mode}` over vanilla TensorFlow in {len(runs)} runs",
        "",
        f"Processor: {runs[0]['cpu']}.",
        "",
        "| run | rounds | vs baseline | 95% (its rounds) | step (s) | baseline's (s) |",
        "|---|---|---|---|---|---|",
        *(
            f"| `{os.path.basename(r['file'])}` | {r['rounds']} | {r['vs_baseline']:.3f}x "
            f"| {ci(r['vs_baseline_ci95'])} | {seconds(r['step_s'])} | {seconds(r['baseline_step_s'])} |"
            for r in runs
        ),
        "",
        f"Pooled: {mean:.3f}x, {ci((low, high))} at 95% over the runs (the geometric mean of their "
        "ratios, Student's t on their logarithms)"
        + ("" if met is None else f"; {met} of {len(runs)} runs at or above {args.target:g}x")
        + ".",
    ]
    result = {
        "mode": args.mode,
        "config": runs[0]["config"],
        "cpu": runs[0]["cpu"],
        "runs": runs,
        "pooled": {"vs_baseline": mean, "vs_baseline_ci95": None if low is None else [low, high]},
        "target": args.target,
        "runs_at_target": met,
        "machine": machine(),
    }
    write(args.name, result, md)


if __name__ == "__main__":
    main()
