"""What no order can beat on kept bench runs: the simulator's floor beside the measured steps.

Each run kept with ``--traces DIR -o DIR/bench.json`` is predicted again as ``repredict.py`` does
(``bench.predict.annotate`` on its traced baseline), which gives the floor of its graph
(``sim.metrics.Bounds.floor``: for each link, channel and task, the least time before the first
thing it serves, its work, and the least time after the last; and the longest path). No order
steps faster, as far as the simulator is right, and its error on the run's modes is beside it. The
most any order can gain is then the baseline's measured step over the floor: a target above it is
out of every order's reach on that emulation.

    python benchmarks/floor.py DIR... --name NAME [--target train=1.25,inference=1.5]

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import UNPACKED, machine, positive, run_dir, run_dir_errors, run_title, write  # noqa: E402
from repredict import repredict  # noqa: E402


def floor_row(run_dir: str) -> dict:
    """One kept run: its baseline (measured, simulated), its floor and its fastest measured mode."""
    config, rows = repredict(run_dir)
    base = next((r for r in rows if r["mode"] == "baseline"), None)
    if base is None:
        from tfsched.errors import TfschedError

        raise TfschedError(f"{run_dir}: the run has no baseline to set the floor against")
    fastest = min(rows, key=lambda r: r["measured_s"])
    errors = [r["error_now"] for r in rows]
    return {
        "run": UNPACKED.get(run_dir, run_dir),  # a packed run: its file, not where it was unpacked
        "title": run_title(config),
        "config": config,
        "baseline_s": base["measured_s"],
        "baseline_predicted_s": base["predicted_now_s"],
        "floor_s": base["floor_now_s"],
        "floor_by": base["floor_by_now"],
        "most_gain": base["measured_s"] / base["floor_now_s"],
        "most_gain_simulated": base["predicted_now_s"] / base["floor_now_s"],
        "fastest_mode": fastest["mode"],
        "fastest_s": fastest["measured_s"],
        "fastest_gain": base["measured_s"] / fastest["measured_s"],
        # above 1: the fastest mode's measured step over the floor; under 1, the simulator's op
        # times were slower than the run's, and the floor is off as much
        "fastest_over_floor": fastest["measured_s"] / base["floor_now_s"],
        "error_range": [min(errors), max(errors)],
    }


def reach(row: dict, target: float) -> str:
    """Whether a run met ``target``, and if not, whether its floor leaves room for it.

    >>> reach({"fastest_gain": 1.26, "most_gain": 1.21}, 1.25)
    'met'
    >>> reach({"fastest_gain": 1.20, "most_gain": 1.22}, 1.25)
    'out of reach'
    """
    if row["fastest_gain"] >= target:
        return "met"
    return "within reach" if row["most_gain"] >= target else "out of reach"


def targets(text: str) -> dict[str, float]:
    """``--target``: one speedup for every run, or one per bench mode (``train=X,inference=Y``).

    >>> targets("1.3"), targets("train=1.25,inference=1.5")
    ({'train': 1.3, 'inference': 1.3}, {'train': 1.25, 'inference': 1.5})
    """
    try:
        if "=" not in text:
            return dict.fromkeys(("train", "inference"), positive(float)(text))
        out = {}
        for part in text.split(","):
            mode, _, value = part.partition("=")
            if mode not in ("train", "inference"):
                raise argparse.ArgumentTypeError(f"{mode!r} is not train or inference")
            out[mode] = positive(float)(value)
        return out
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
        "--target",
        type=targets,
        help="a speedup to say is met, within reach or not: X, or train=X,inference=Y",
    )
    args = ap.parse_args()
    with run_dir_errors():
        rows = [floor_row(d) for d in args.run_dirs]
    head = (
        "| run | baseline (s) | simulated (s) | floor (s) | most any order gains | fastest mode | its gain "
        "| its step over the floor | sim. error |"
    )
    md = [
        "What no order can beat: each run's floor (the simulator's, over every order) beside its measured "
        "steps"
        + (
            ", against " + " and ".join(f"{v:g}x in {k}" for k, v in args.target.items())
            if args.target
            else ""
        ),
        "",
        head + (" target |" if args.target else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if args.target else ""),
    ]
    for r in rows:
        line = (
            f"| {r['title']} | {r['baseline_s']:.3f} | {r['baseline_predicted_s']:.3f} | {r['floor_s']:.3f} "
            f"| **{r['most_gain']:.3f}x** (simulated {r['most_gain_simulated']:.3f}x) | `{r['fastest_mode']}` "
            f"| {r['fastest_gain']:.3f}x | {r['fastest_over_floor']:.3f} "
            f"| {r['error_range'][0]:+.0%} to {r['error_range'][1]:+.0%} |"
        )
        target = (args.target or {}).get(r["config"]["mode"])
        if args.target:
            line += f" {reach(r, target)} at {target:g}x |" if target else " - |"
        md.append(line)
    md += ["", "What sets each floor (the driver's call to the worker not counted):", ""]
    md += [f"- {r['title']}: {r['floor_by']}." for r in rows]
    md += [
        "",
        "most any order gains: the measured baseline over the floor (simulated: the simulated baseline "
        "over it); its step over the floor: under 1, the fastest mode measured faster than the floor, whose "
        "op times were then slower than the run's; sim. error: the simulator's error on the run's modes, "
        "as far as the floor is right.",
    ]
    write(args.name, {"machine": machine(), "target": args.target, "runs": rows}, md)


if __name__ == "__main__":
    main()
