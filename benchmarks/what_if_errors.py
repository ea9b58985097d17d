"""The simulator's error now against one of its what-ifs, pooled over re-predicted runs.

``benchmarks/repredict.py DIR --name N`` writes ``results/N-repredicted.json``: each mode's
measured step, the prediction now and one per what-if (``repredict.WHAT_IFS``). This lines up
one what-if's column beside "now" over several such files, mode by mode, with the mean absolute
error of each, and for each run whether its fastest measured mode stays at or over the floor no
order can beat (a prediction that lowers the error by raising the floor over a measured step
would be wrong).

    python benchmarks/what_if_errors.py --what-if machine_cpu --name ops-cost-from-task-cpu \
        resnet50-train-10g-hosts-s65 vgg16-train-hosts-s65 vgg16-inference-hosts-s65

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import RESULTS, write  # noqa: E402


def pooled(names: list[str], what_if: str) -> tuple[list[dict], list[dict]]:
    """Per mode of each re-predicted run ``names``: its errors now and with ``what_if``; per run:
    its fastest measured mode against the floor now."""
    rows, runs = [], []
    for name in names:
        path = os.path.join(RESULTS, f"{name}-repredicted.json")
        try:
            with open(path) as f:
                modes = json.load(f)["modes"]
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"error: {path}: not a re-predicted run ({e})") from None
        if f"error_{what_if}" not in modes[0]:
            raise SystemExit(
                f"error: {path}: no what-if {what_if!r} (its columns: error_now and error_<what-if>)"
            )
        for m in modes:
            rows.append(
                {
                    "run": name,
                    "mode": m["mode"],
                    "measured_s": m["measured_s"],
                    "error_now": m["error_now"],
                    f"error_{what_if}": m[f"error_{what_if}"],
                }
            )
        fastest = min(modes, key=lambda m: m["measured_s"])
        runs.append(
            {
                "run": name,
                "fastest": fastest["mode"],
                "fastest_s": fastest["measured_s"],
                "floor_now_s": fastest["floor_now_s"],
                "over_floor": fastest["measured_s"] / fastest["floor_now_s"],
            }
        )
    return rows, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="+", help="re-predicted runs: results/<name>-repredicted.json")
    ap.add_argument("--what-if", required=True, help="a column of repredict.py's WHAT_IFS, e.g. machine_cpu")
    ap.add_argument("--name", required=True, help="results/<name>.{json,md}")
    args = ap.parse_args()
    rows, runs = pooled(args.names, args.what_if)
    other = f"error_{args.what_if}"
    mean = {k: statistics.fmean(abs(r[k]) for r in rows) for k in ("error_now", other)}
    label = args.what_if.replace("_", " ")
    md = [
        f"The simulator's error now and with the what-if {label!r} (`benchmarks/repredict.py`), "
        f"over {len(rows)} modes of {len(runs)} re-predicted runs",
        "",
        f"| run | mode | slowest worker (s) | error now | error, {label} |",
        "|---|---|---|---|---|",
        *(
            f"| {r['run']} | {r['mode']} | {r['measured_s']:.4f} | {r['error_now']:+.1%} | {r[other]:+.1%} |"
            for r in rows
        ),
        "",
        f"Mean absolute error: now {mean['error_now']:.1%}, {label} {mean[other]:.1%}.",
        "",
        "Each run's fastest measured mode against the floor now (no simulated order steps faster):",
        "",
        "| run | fastest mode | its step (s) | floor now (s) | step / floor |",
        "|---|---|---|---|---|",
        *(
            f"| {r['run']} | {r['fastest']} | {r['fastest_s']:.4f} | {r['floor_now_s']:.4f} | {r['over_floor']:.3f} |"
            for r in runs
        ),
    ]
    write(args.name, {"what_if": args.what_if, "mean_abs_error": mean, "modes": rows, "runs": runs}, md)


if __name__ == "__main__":
    main()
