"""How steady the bench's measured CPU cost of a byte and of a message is, run after run.

``tfsched bench`` measures, after its rounds, what moving a byte and sending a message cost the
machine (``bench.run._comm_cpu_costs``); the simulator charges the bytes' CPU to the machine, or
on hosts with cores of their own to each end's share, and each acknowledgement the cost of a
message. This runs one short bench command (the baseline only, one round) ``--runs`` times and
reports both costs of each run and their spread.

    python benchmarks/comm_cost_spread.py --runs 3 --name comm-cost-spread -- \\
        --model resnet50 --mode train --workers 2 --bandwidth 10Gbit --batch-size 8 --host-cores 0.5

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

RUN_TIMEOUT_S = 3600  # one short bench run; its own steps have deadlines, this bounds the rest


def one_run(bench_args: list[str]) -> dict:
    """One bench run of the baseline: its measured costs of a byte and of a message."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        cmd = [sys.executable, "-m", "tfsched.cli", "bench", *bench_args]
        cmd += ["--modes", "baseline", "--rounds", "1", "--steps", "2", "-o", out]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"Error: {' '.join(cmd)} did not end within {RUN_TIMEOUT_S} s") from None
        if p.returncode != 0:
            last = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
            raise SystemExit(f"Error: {' '.join(cmd)} failed: {last}")
        with open(out) as f:
            base = json.load(f)["modes"][0]
    return {
        "per_byte_s": base.get("comm_cpu_s_per_byte", 0.0),
        "per_message_s": base.get("comm_cpu_s_per_message", 0.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=positive(int), default=3)
    ap.add_argument("--name", required=True, help="results/<name>.{json,md}")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then tfsched bench's arguments")
    args = ap.parse_args()
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    runs = [one_run(bench_args) for _ in range(args.runs)]
    spread = {}
    for key in ("per_byte_s", "per_message_s"):
        values = [r[key] for r in runs]
        mean = statistics.fmean(values)
        spread[key] = {
            "min": min(values),
            "max": max(values),
            "mean": mean,
            "max_over_min": max(values) / min(values) if min(values) > 0 else None,
        }
    command = "python benchmarks/comm_cost_spread.py --runs {} --name {} -- {}".format(
        args.runs, args.name, " ".join(bench_args)
    )
    md = [
        f"The bench's measured CPU costs, {args.runs} runs of `tfsched bench {' '.join(bench_args)}` "
        "(the baseline, one round)",
        "",
        "| run | CPU s per byte | CPU s per message |",
        "|---|---|---|",
        *(f"| {k + 1} | {r['per_byte_s']:.3g} | {r['per_message_s']:.3g} |" for k, r in enumerate(runs)),
        "",
        "| | per byte | per message |",
        "|---|---|---|",
        *(
            f"| {what} | {spread['per_byte_s'][key]:.3g} | {spread['per_message_s'][key]:.3g} |"
            for what, key in (("min", "min"), ("max", "max"), ("mean", "mean"))
        ),
        "",
        "```bash",
        command,
        "```",
    ]
    write(args.name, {"machine": machine(), "bench_args": bench_args, "runs": runs, "spread": spread}, md)
    print("\n".join(md))


if __name__ == "__main__":
    main()
