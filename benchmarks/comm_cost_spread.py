"""How steady the bench's measured CPU cost of a byte and of a message is, run after run.

``tfsched bench`` measures, after its rounds, what moving a byte and sending a message cost the
machine, and the shares of a byte's CPU (and of a message's) the sender's and the receiver's
processes spent (``bench.run._comm_cpu_costs``). The simulator charges the bytes' CPU to the
machine, or on hosts with cores of their own each end's share to its own cores, and each
acknowledgement the cost of a message. This runs one short bench command (the baseline only, one round) ``--runs``
times and reports each run's costs and shares, and their spread. ``--load N`` keeps N more
processes spinning on the machine through every run (as another test does in CI, ``pytest -n
2``): the costs should not take their CPU in.

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


def one_run(bench_args: list[str], load: int = 0) -> dict:
    """One bench run of the baseline: its measured costs of a byte and of a message; ``load``
    processes spin on the machine meanwhile."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        return _measured(bench_args)
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def _measured(bench_args: list[str]) -> dict:
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
    shares = base.get("comm_cpu_shares") or [None, None]
    parts = base.get("comm_cpu_message_shares") or [None, None]
    return {
        "per_byte_s": base.get("comm_cpu_s_per_byte", 0.0),
        "per_message_s": base.get("comm_cpu_s_per_message", 0.0),
        "send_share": shares[0],
        "recv_share": shares[1],
        "message_send_share": parts[0],
        "message_recv_share": parts[1],
    }


def _share(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=positive(int), default=3)
    ap.add_argument("--name", required=True, help="results/<name>.{json,md}")
    ap.add_argument(
        "--load",
        type=positive(int),
        default=0,
        help="processes spinning on the machine meanwhile (default none)",
    )
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then tfsched bench's arguments")
    args = ap.parse_args()
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    runs = [one_run(bench_args, args.load) for _ in range(args.runs)]
    spread = {}
    for key in (
        "per_byte_s",
        "per_message_s",
        "send_share",
        "recv_share",
        "message_send_share",
        "message_recv_share",
    ):
        values = [r[key] for r in runs if r[key] is not None]
        if not values:  # shares not measured (a run of a bench before the sixty-fourth session)
            continue
        mean = statistics.fmean(values)
        spread[key] = {
            "min": min(values),
            "max": max(values),
            "mean": mean,
            "max_over_min": max(values) / min(values) if min(values) > 0 else None,
        }
    command = "python benchmarks/comm_cost_spread.py --runs {}{} --name {} -- {}".format(
        args.runs, f" --load {args.load}" if args.load else "", args.name, " ".join(bench_args)
    )
    md = [
        f"The bench's measured CPU costs, {args.runs} runs of `tfsched bench {' '.join(bench_args)}` "
        "(the baseline, one round)"
        + (
            f", {args.load} more {'process' if args.load == 1 else 'processes'} spinning on the machine"
            if args.load
            else ""
        ),
        "",
        "| run | CPU s per byte | CPU s per message | the sending PS's share of a byte's | the receiving "
        "worker's | the PS's share of a message's | worker 0's |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {k + 1} | {r['per_byte_s']:.3g} | {r['per_message_s']:.3g} | {_share(r['send_share'])} "
            f"| {_share(r['recv_share'])} | {_share(r.get('message_send_share'))} "
            f"| {_share(r.get('message_recv_share'))} |"
            for k, r in enumerate(runs)
        ),
        "",
        "| | per byte | per message | sender's share | receiver's share | the PS's of a message | "
        "worker 0's of a message |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {what} | {spread['per_byte_s'][what]:.3g} | {spread['per_message_s'][what]:.3g} "
            f"| {_share(spread.get('send_share', {}).get(what))} | {_share(spread.get('recv_share', {}).get(what))} "
            f"| {_share(spread.get('message_send_share', {}).get(what))} "
            f"| {_share(spread.get('message_recv_share', {}).get(what))} |"
            for what in ("min", "max", "mean")
        ),
        "",
        "The shares: of the machine's extra CPU for the extra bytes, what the PS's process and worker "
        "0's spent (`/proc/<pid>/stat`); the rest was the kernel's. A message's (since the "
        "hundred-and-third session): of its cost, the cut call's CPU past the empty call's in the two "
        "processes, what each spent.",
        "",
        "```bash",
        command,
        "```",
    ]
    doc = {"machine": machine(), "bench_args": bench_args, "load": args.load, "runs": runs, "spread": spread}
    write(args.name, doc, md)
    print("\n".join(md))


if __name__ == "__main__":
    main()
