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

``--mode`` may name several modes, comma-separated (ninety-second session): each is pooled over
the runs that have it (runs of one benchmark often differ in the modes beside the baseline), and
a run with none of them is an error. With ``--target`` each mode gets a verdict from its pooled
interval: met when the interval lies at or above the target, not met when it lies below, and
undecided when it straddles it (one run has no interval: undecided). "No mode more than 2% slower"
is ``--target 0.98``:

    cd benchmarks/results && python ../pool_runs.py --target 0.98 --name resnet50-train-10g-amd-pooled \
        --mode tao+pc+host,tao+p1000000+c4000000 bench-resnet50-train-10g-s90.json \
        bench-resnet50-train-10g-sent-s90.json bench-resnet50-train-10g-sent-s91.json
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
SAME = (
    "api",
    "model",
    "mode",
    "workers",
    "ps",
    "batch_size",
    "bandwidth",
    "latency",
    "queue",
    "host_cores",
    "inter_op_threads",
    "thread_spinning",
)
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


class MissingMode(PoolError):
    """A results file that did not run the mode asked for."""


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
        raise MissingMode(f"{path}: no mode {mode!r} (its modes: {', '.join(map(str, modes))})")
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


def verdict(low: float | None, high: float | None, target: float) -> str:
    """Whether a pooled interval says a mode meets ``target``: ``met`` (all of it at or above),
    ``not met`` (all of it below) or ``undecided`` (it straddles the target, or there is none).

    >>> verdict(0.99, 1.03, 0.98), verdict(0.95, 0.97, 0.98), verdict(0.96, 1.01, 0.98)
    ('met', 'not met', 'undecided')
    >>> verdict(None, None, 0.98)
    'undecided'
    """
    if low is None or high is None:
        return "undecided"
    return "met" if low >= target else "not met" if high < target else "undecided"


def pool_mode(files: list[str], mode: str, target: float | None) -> dict:
    """``mode`` pooled over those of ``files`` that ran it (a PoolError where none did): its
    runs, their pooled ratio and interval, and against ``target`` the runs at or above it and the
    verdict of the interval."""
    runs, missing = [], []
    for path in files:
        try:
            runs.append(read_run(path, mode))
        except MissingMode as e:
            missing.append(e)
    if not runs:
        raise missing[0]
    mean, low, high = pooled([r["vs_baseline"] for r in runs])
    judged = target is not None
    return {
        "mode": mode,
        "runs": runs,
        "pooled": {"vs_baseline": mean, "vs_baseline_ci95": None if low is None else [low, high]},
        "runs_at_target": sum(r["vs_baseline"] >= target for r in runs) if judged else None,
        "verdict": verdict(low, high, target) if judged else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="tfsched bench results files (-o) of one benchmark")
    ap.add_argument(
        "--mode", required=True, help="the mode to pool, e.g. tao+pc+host, or several, comma-separated"
    )
    ap.add_argument(
        "--target", type=float, help="a ratio to count the runs at or above, and to judge the pool by"
    )
    ap.add_argument("--name", required=True, help="results/<name>.{json,md}")
    args = ap.parse_args()
    modes = [m for m in args.mode.split(",") if m]
    if not modes or len(set(modes)) != len(modes):
        raise SystemExit(f"Error: --mode {args.mode!r}: expected distinct modes, comma-separated")
    if twice := sorted({f for f in args.files if args.files.count(f) > 1}):
        raise SystemExit(f"Error: {twice[0]}: given twice (each run counts once)")
    try:
        pools = [pool_mode(args.files, m, args.target) for m in modes]
        used = {r["file"] for p in pools for r in p["runs"]}
        for path in args.files:  # each file a run of at least one of the modes
            if path not in used:
                read_run(path, modes[0])  # raises, naming the file and its modes
        check_same([run for p in pools for run in p["runs"]])
    except PoolError as e:
        raise SystemExit(f"Error: {e}") from None
    first = pools[0]["runs"][0]

    def seconds(s) -> str:
        return "-" if s is None else f"{s:.3f}"

    def ci(pair) -> str:
        return f"{pair[0]:.2f} to {pair[1]:.2f}" if pair and None not in pair else "-"

    def judged(p: dict) -> str:
        if args.target is None:
            return ""
        return (
            f"; {p['runs_at_target']} of {len(p['runs'])} runs at or above {args.target:g}x; "
            f"against {args.target:g}x the pooled interval says **{p['verdict']}**"
        )

    def runs_table(p: dict) -> list[str]:
        mean, pair = p["pooled"]["vs_baseline"], p["pooled"]["vs_baseline_ci95"]
        return [
            "| run | rounds | vs baseline | 95% (its rounds) | step (s) | baseline's (s) |",
            "|---|---|---|---|---|---|",
            *(
                f"| `{os.path.basename(r['file'])}` | {r['rounds']} | {r['vs_baseline']:.3f}x "
                f"| {ci(r['vs_baseline_ci95'])} | {seconds(r['step_s'])} | {seconds(r['baseline_step_s'])} |"
                for r in p["runs"]
            ),
            "",
            f"Pooled: {mean:.3f}x, {ci(pair)} at 95% over the runs (the geometric mean of their "
            "ratios, Student's t on their logarithms)" + judged(p) + ".",
        ]

    title = run_title(first["config"])
    common = {"config": first["config"], "cpu": first["cpu"], "target": args.target, "machine": machine()}
    if len(pools) == 1:
        p = pools[0]
        md = [
            f"{title}: `{p['mode']}` over vanilla TensorFlow in {len(p['runs'])} runs",
            "",
            f"Processor: {first['cpu']}.",
            "",
        ]
        write(args.name, {**p, **common}, md + runs_table(p))
        return
    files = sorted({r["file"] for p in pools for r in p["runs"]})
    md = [
        f"{title}: {len(pools)} modes over vanilla TensorFlow in {len(files)} runs",
        "",
        f"Processor: {first['cpu']}.",
        "",
        "| mode | runs | pooled vs baseline | 95% over the runs |"
        + (f" runs at or above {args.target:g}x | verdict |" if args.target is not None else ""),
        "|---|---|---|---|" + ("---|---|" if args.target is not None else ""),
        *(
            f"| `{p['mode']}` | {len(p['runs'])} | {p['pooled']['vs_baseline']:.3f}x | {ci(p['pooled']['vs_baseline_ci95'])} |"
            + (f" {p['runs_at_target']} | {p['verdict']} |" if args.target is not None else "")
            for p in pools
        ),
    ]
    for p in pools:
        md += ["", f"### `{p['mode']}`", "", *runs_table(p)]
    write(args.name, {"modes": pools, **common}, md)


if __name__ == "__main__":
    main()
