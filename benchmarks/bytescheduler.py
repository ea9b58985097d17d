"""ByteScheduler's extension on the emulated cluster: priority alone vs + partitioning and credit vs tuned.

For each row: ``tfsched tune`` first finds a (partition, credit) setting on the running cluster
(Bayesian optimization on measured throughput, starting from ByteScheduler's defaults; the
leaders are measured again and the best mean wins) for tfsched's best mode, TAO with one credit window
per sending task; then one ``tfsched bench`` run measures, interleaved and against vanilla
TensorFlow in the same run, TIO and TAO alone, each with ByteScheduler's defaults (+pc:
partition 1,000,000, credit 4,000,000 parameters), TAO with the defaults as one window per task,
and that mode with the tuned setting. One model with one huge tensor (VGG16) and one without
(ResNet-50), at the batch sizes of their rows in BENCHMARKS.md.

    python benchmarks/bytescheduler.py [--rows vgg16,resnet50] [--trials 8]

Writes ``benchmarks/results/tune-<row>.json``, ``bench-bs-<row>.json`` / ``.md`` and
``bytescheduler.md`` (the summary, with each command).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

# The batch sizes of the training rows in emulated_cluster.py (computation about equal to
# communication when they ran; pinned so that the rows compare).
ROWS = {
    "vgg16": "--model vgg16 --ps 1 --workers 4 --bandwidth 1Gbit --batch-size 106",
    "resnet50": "--model resnet50 --ps 1 --workers 2 --bandwidth 1Gbit --batch-size 235",
}
TUNE = "--algorithm tao --host-credit"
BENCH = "--mode train --steps 3 --rounds 2"


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--skip-tune", action="store_true", help="Reuse results/tune-<row>.json.")
    ap.add_argument(
        "--reuse",
        default="",
        help="Rows (comma-separated) whose saved tune and bench results go into the summary as they are.",
    )
    args = ap.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    summary = ["# Partitioning, credit and tuning (ByteScheduler) on the emulated cluster", ""]
    for row in args.rows.split(","):
        args_row = ROWS[row].split()  # one batch size for tuning and benchmark
        tune_out = os.path.join(RESULTS, f"tune-{row}.json")
        tune_cmd = [
            "tfsched",
            "tune",
            *args_row,
            *TUNE.split(),
            "--trials",
            str(args.trials),
            "--measure",
            "3",
            "--confirm",
            "2",
            "--prescreen",
            "2",
            "-o",
            tune_out,
        ]
        reuse = row in args.reuse.split(",")
        if not (args.skip_tune or reuse):
            run(tune_cmd)
        with open(tune_out) as f:
            tuned_doc = json.load(f)
        best = tuned_doc["best"]
        d = tuned_doc["config"].get("defaults")
        runs = [
            t["value"]
            for t in tuned_doc["trials"]
            if d and (t["partition"], t["credit"]) == (d["partition"], d["credit"])
        ]
        vs_defaults = (
            f"; ByteScheduler's defaults on the search's grid (partition {d['partition']:,}, credit "
            f"{d['credit']:,}) {sum(runs) / len(runs):.3f} (mean of {len(runs)})"
            if runs
            else ""
        )
        tuned = f"tao+p{best['partition']}+c{best['credit']}+host"
        modes = f"baseline,tio,tao,tio+pc,tao+pc,tao+pc+host,{tuned}"
        bench_out = os.path.join(RESULTS, f"bench-bs-{row}.json")
        bench_cmd = [
            "tfsched",
            "bench",
            *args_row,
            *BENCH.split(),
            "--modes",
            modes,
            "-o",
            bench_out,
        ]
        if not reuse:
            run(bench_cmd)
        with open(bench_out.replace(".json", ".md")) as f:
            table = f.read().strip()
        summary += [
            f"## {row}",
            "",
            "```bash",
            " ".join(tune_cmd[:-2] + ["-o", f"tune-{row}.json"]),
            " ".join(bench_cmd[:-2] + ["-o", f"bench-bs-{row}.json"]),
            "```",
            "",
            f"Tuned ({args.trials} trials and 2 repeats of the leaders, TAO with one window per sending "
            f"task): partition {best['partition']:,}, credit {best['credit']:,} parameters. During tuning, "
            f"in steps/s summed over the free-running workers: {best['throughput_steps_per_s']:.3f} "
            f"(mean of {best.get('measurements', 1)}){vs_defaults}. The last row of the table is the tuned setting.",
            "",
            table,
            "",
        ]
        with open(os.path.join(RESULTS, "bytescheduler.md"), "w") as f:
            f.write("\n".join(summary) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    sys.exit(main())
