"""The built-in model's variables placed three ways over two PS, in one interleaved run.

``build_graph``'s ``ps_placement`` (``tfsched bench --ps-placement``): ``bytes``, tfsched's
plan (largest first by the bytes each variable moves a step, ``tfsched.placement``), against
``held`` (TF1's greedy load balancing by bytes held, in creation order, which it improves on)
and ``round-robin`` (``replica_device_setter``'s default). One ``tfsched bench`` runs every mode
on each placement's graph in the same rounds (``--ps-placement held,bytes,round-robin``: the
modes of the first under their names, the others' as ``MODE@PLACEMENT``), so that drift hits
them alike. Until the thirty-seventh session the bench ran one graph a run, and this script
alternated runs of each placement instead (``results/placement-vgg16-train.md``).

    python benchmarks/placement.py --model vgg16 --mode train --batch-size 103 \\
        --modes baseline,tao+pc+host --name placement-vgg16-train-one-run

Writes ``results/<name>.{md,json}`` (default name ``placement-<model>-<mode>``) and the bench's
own ``results/<name>-bench.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
PLACEMENTS = ("held", "bytes", "round-robin")  # held first: the others are compared with it


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vgg16")
    ap.add_argument("--mode", default="train", choices=["train", "inference"])
    ap.add_argument("--batch-size", type=int, default=103)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--bandwidth", default="1Gbit")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="baseline", help="the bench's --modes, run on each placement")
    ap.add_argument("--name", default=None, help="results/<name>.{md,json}")
    args = ap.parse_args()
    name = args.name or f"placement-{args.model}-{args.mode}"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bench.json")
        cmd = [
            sys.executable, "-m", "tfsched.cli", "bench", "--model", args.model, "--mode", args.mode, "--ps", "2",
            "--workers", str(args.workers), "--bandwidth", args.bandwidth, "--steps", str(args.steps),
            "--rounds", str(args.rounds), "--batch-size", str(args.batch_size), "--modes", args.modes,
            "--ps-placement", ",".join(PLACEMENTS), "-o", out,
        ]  # fmt: skip
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        with open(out) as f:
            doc = json.load(f)
        os.makedirs(RESULTS, exist_ok=True)
        for ext in ("json", "md", "png"):
            shutil.copy(os.path.join(d, f"bench.{ext}"), os.path.join(RESULTS, f"{name}-bench.{ext}"))
    rows = {r["mode"]: r for r in doc["modes"]}

    def row(mode: str, placement: str) -> dict:
        return rows[mode if placement == PLACEMENTS[0] else f"{mode}@{placement}"]

    held = row("baseline", "held")["iteration_mean_s"]
    lines = [
        f"**{args.model}** ({args.mode}, batch {args.batch_size}), 2 PS x {args.workers} workers, "
        f"{args.bandwidth}; every mode on each placement in one run of {args.rounds} interleaved rounds "
        f"of {args.steps} synchronized steps (`{' '.join(['python', 'benchmarks/placement.py', *sys.argv[1:]])}`; "
        f"the bench's own table: `results/{name}-bench.md`). Each cell: the synchronized step (the slowest "
        "worker's, mean), over vanilla TensorFlow placed by bytes held, and the CPU busy.",
        "",
        "| placement | " + " | ".join(modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    for p in PLACEMENTS:
        cells = []
        for m in modes:
            r = row(m, p)
            s = r["iteration_mean_s"]
            cells.append(f"{s:.3f} s, {held / s:.3f}x, {r['cpu_busy']:.0%}")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    with open(os.path.join(RESULTS, name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(RESULTS, name + ".json"), "w") as f:
        json.dump({"args": vars(args), "bench": doc}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
