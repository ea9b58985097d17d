"""Vanilla TensorFlow's step with the built-in model's variables placed three ways over two PS.

``build_graph``'s ``ps_placement`` (``tfsched bench --ps-placement``): ``bytes``, tfsched's
plan (largest first by the bytes each variable moves a step, ``tfsched.placement``), against
``held`` (TF1's greedy load balancing by bytes held, in creation order, which it improves on)
and ``round-robin`` (``replica_device_setter``'s default). The bench runs every mode on one
graph, so placements cannot share a run: each is its own ``tfsched bench --modes baseline``,
and the placements alternate (round-robin, held, bytes, round-robin, ...) so that drift hits
them alike. Writes ``results/placement-<model>-<mode>.{md,json}``.

    python benchmarks/placement.py --model vgg16 --mode train --batch-size 103 --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
PLACEMENTS = ("round-robin", "held", "bytes")


def bench(args, placement: str, out: str) -> dict:
    cmd = [
        "tfsched", "bench", "--model", args.model, "--mode", args.mode, "--ps", "2",
        "--workers", str(args.workers), "--bandwidth", args.bandwidth, "--steps", str(args.steps),
        "--rounds", str(args.rounds), "--batch-size", str(args.batch_size), "--modes", "baseline",
        "--ps-placement", placement, "-o", out,
    ]  # fmt: skip
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    with open(out) as f:
        return json.load(f)["modes"][0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vgg16")
    ap.add_argument("--mode", default="train", choices=["train", "inference"])
    ap.add_argument("--batch-size", type=int, default=103)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--bandwidth", default="1Gbit")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=2, help="runs of each placement, alternating")
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {p: [] for p in PLACEMENTS}
    with tempfile.TemporaryDirectory() as d:
        for k in range(args.pairs):
            for p in PLACEMENTS:
                runs[p].append(bench(args, p, os.path.join(d, f"{p}-{k}.json")))
    step = {p: [r["iteration_mean_s"] for r in rs] for p, rs in runs.items()}
    mean = {p: statistics.mean(v) for p, v in step.items()}
    lines = [
        f"**{args.model}** ({args.mode}, batch {args.batch_size}), 2 PS x {args.workers} workers, "
        f"{args.bandwidth}, vanilla TensorFlow; {args.pairs} runs of each placement, alternating, "
        f"each {args.rounds} rounds of {args.steps} synchronized steps (`{' '.join(sys.argv)}`)",
        "",
        "| placement | synchronized step (s), each run | mean (s) | vs held | CPU busy |",
        "|---|---|---|---|---|",
    ]
    for p in PLACEMENTS:
        each = ", ".join(f"{s:.3f}" for s in step[p])
        busy = statistics.mean(r["cpu_busy"] for r in runs[p])
        lines.append(f"| {p} | {each} | {mean[p]:.3f} | {mean['held'] / mean[p]:.3f}x | {busy:.0%} |")
    name = f"placement-{args.model}-{args.mode}"
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(RESULTS, name + ".json"), "w") as f:
        json.dump({"args": vars(args), "runs": runs}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
