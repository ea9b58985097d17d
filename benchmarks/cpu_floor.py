"""The CPU floor of a prediction, tried on every stored bench run: each mode's simulated step held
to the CPU a baseline step spent over the machine's cores (``bench.predict.machine_cpu_floor``).

No order takes the baseline's work away, so no mode's step should be predicted shorter than
that work on the machine's cores; the simulator, whose machine runs each op at its fastest
traced time, can predict one shorter at the cores' limit. This reads the stored results (their
``simulated_s``, the simulator's own step, where the file has it, else ``predicted_s``, which
was the simulator's until the eighty-sixth session), holds each to its run's floor, and
compares the errors against the measured step (``bench.results.step_of``) with and without.
Runs stored twice (a row's file and the run's own) count once.

    python benchmarks/cpu_floor.py [FILE.json ...] --name NAME

Without files, every ``benchmarks/results/*.json`` that is a bench run whose baseline measured
its CPU and was predicted. Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import RESULTS, machine, write  # noqa: E402


def run_modes(doc: dict, path: str) -> list[dict]:
    """One stored run's modes, each with its measured step, its simulated step and the floor;
    none where the file is not a predicted bench run whose baseline measured its CPU."""
    from tfsched.bench.predict import machine_cpu_floor
    from tfsched.bench.results import machine_cores, step_of

    if not isinstance(doc, dict) or not isinstance(doc.get("modes"), list) or "config" not in doc:
        return []
    cores = machine_cores(doc)
    base = next((m for m in doc["modes"] if isinstance(m, dict) and m.get("mode") == "baseline"), None)
    if not cores or base is None or base.get("predicted_s") is None:
        return []
    floor = machine_cpu_floor(base.get("cpu_s_per_step") or 0.0, cores)
    if floor is None:
        return []
    workers = doc["config"].get("workers", 0)
    rows = []
    for m in doc["modes"]:
        simulated = m.get("simulated_s", m.get("predicted_s"))
        step = step_of(m, workers)
        if simulated and step:
            rows.append(
                {
                    "run": os.path.basename(path),
                    "mode": m["mode"],
                    "host_cores": doc["config"].get("host_cores") or 0,
                    "measured_s": step,
                    "simulated_s": simulated,
                    "floor_s": floor,
                    "cpu_vs_baseline": (m.get("cpu_s_per_step") or 0.0) / base["cpu_s_per_step"],
                }
            )
    return rows


def errors(r: dict) -> tuple[float, float]:
    """A mode's error against its measured step: as simulated, and held to the floor."""
    return tuple(
        abs(p - r["measured_s"]) / r["measured_s"]
        for p in (r["simulated_s"], max(r["simulated_s"], r["floor_s"]))
    )


def summary(rows: list[dict]) -> dict:
    """The errors without the floor and with it, over ``rows``."""
    before, after = zip(*map(errors, rows), strict=True) if rows else ((), ())
    further = [a - b for a, b in zip(after, before, strict=True) if a > b + 1e-12]
    return {
        "runs": len({r["run"] for r in rows}),
        "modes": len(rows),
        "mean_error": statistics.fmean(before) if rows else None,
        "mean_error_floored": statistics.fmean(after) if rows else None,
        "median_error": statistics.median(before) if rows else None,
        "median_error_floored": statistics.median(after) if rows else None,
        "closer": sum(a < b - 1e-12 for a, b in zip(after, before, strict=True)),
        "further": len(further),
        "most_further": max(further, default=0.0),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "files", nargs="*", help="stored bench runs (default: every benchmarks/results/*.json)"
    )
    parser.add_argument("--name", default="cpu-floor", help="the results' name (default: cpu-floor)")
    args = parser.parse_args(argv)
    paths = args.files or sorted(glob.glob(os.path.join(RESULTS, "*.json")))
    rows, seen = [], set()
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"error: {path}: {e}")
        these = run_modes(doc, path)
        key = json.dumps([(r["mode"], round(r["measured_s"], 6)) for r in these])
        if these and key not in seen:  # a row's file and the run's own: the same run
            seen.add(key)
            rows += these
    if not rows:
        sys.exit("error: no stored bench run with its baseline's CPU and predictions among the files")
    groups = {
        "shared cores": [r for r in rows if not r["host_cores"]],
        "cores of their own": [r for r in rows if r["host_cores"]],
    }
    result = {"machine": machine(), "groups": {k: summary(v) for k, v in groups.items() if v}, "modes": rows}
    lines = [
        "# Each mode's simulated step held to the CPU a baseline step spent over the machine's cores",
        "",
        "`python benchmarks/cpu_floor.py` over the stored bench runs (`bench.predict.machine_cpu_floor`); "
        "the error of each mode's step against its measured one, without the floor and with it.",
        "",
        "| tasks | runs | modes | mean error | with the floor | median | with the floor | closer | further "
        "| most further |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in result["groups"].items():
        lines.append(
            f"| {name} | {s['runs']} | {s['modes']} | {s['mean_error']:.1%} | {s['mean_error_floored']:.1%} "
            f"| {s['median_error']:.1%} | {s['median_error_floored']:.1%} | {s['closer']} | {s['further']} "
            f"| {s['most_further']:.1%} |"
        )
    worse = sorted((r for r in rows if (e := errors(r))[1] > e[0] + 1e-12), key=lambda r: r["run"])
    if worse:
        lines += [
            "",
            "The modes the floor put further off (each spent less CPU a step than its baseline):",
            "",
            "| run | mode | measured (s) | simulated (s) | floor (s) | CPU vs the baseline's |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['run']} | {r['mode']} | {r['measured_s']:.3f} | {r['simulated_s']:.3f} | {r['floor_s']:.3f} "
            f"| {r['cpu_vs_baseline']:.3f} |"
            for r in worse
        ]
    write(args.name, result, lines)


if __name__ == "__main__":
    main()
