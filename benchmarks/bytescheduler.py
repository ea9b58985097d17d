"""ByteScheduler's extension on the emulated cluster: priority alone vs + partitioning and credit vs tuned.

For each row: ``tfsched tune`` first finds a (partition, credit) setting on the running cluster
(Bayesian optimization on measured throughput); then one ``tfsched bench`` run measures, interleaved
and against vanilla TensorFlow in the same run, TIO and TAO alone, each with ByteScheduler's
defaults (+pc: partition 1,000,000, credit 4,000,000 parameters) and TIO with the tuned setting.
One model with one huge tensor (VGG16) and one without (ResNet-50).

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

ROWS = {
    "vgg16": "--model vgg16 --ps 1 --workers 4 --bandwidth 1Gbit",
    "resnet50": "--model resnet50 --ps 1 --workers 2 --bandwidth 1Gbit",
}
BENCH = "--mode train --steps 3 --rounds 2"


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--skip-tune", action="store_true", help="Reuse results/tune-<row>.json.")
    args = ap.parse_args()
    from tfsched.models.batch import balanced_batch_size

    os.makedirs(RESULTS, exist_ok=True)
    summary = ["# Partitioning, credit and tuning (ByteScheduler) on the emulated cluster", ""]
    for row in args.rows.split(","):
        # One batch size for tuning and benchmark: computation about equal to communication.
        words = ROWS[row].split()
        model, workers = words[words.index("--model") + 1], int(words[words.index("--workers") + 1])
        batch = balanced_batch_size(model, bandwidth_bps=1e9, workers=workers).batch_size
        args_row = [*words, "--batch-size", str(batch)]
        tune_out = os.path.join(RESULTS, f"tune-{row}.json")
        tune_cmd = [
            "tfsched",
            "tune",
            *args_row,
            "--trials",
            str(args.trials),
            "--measure",
            "2",
            "--prescreen",
            "2",
            "-o",
            tune_out,
        ]
        if not args.skip_tune:
            run(tune_cmd)
        with open(tune_out) as f:
            best = json.load(f)["best"]
        tuned = f"tio+p{best['partition']}+c{best['credit']}"
        modes = f"baseline,tio,tao,tio+pc,tao+pc,{tuned}"
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
            f"Tuned ({args.trials} trials): partition {best['partition']:,}, credit {best['credit']:,} parameters "
            f"({best['throughput_steps_per_s']:.3f} steps/s summed over the workers during tuning); the last "
            "row of the table is that setting.",
            "",
            table,
            "",
        ]
        with open(os.path.join(RESULTS, "bytescheduler.md"), "w") as f:
            f.write("\n".join(summary) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    sys.exit(main())
