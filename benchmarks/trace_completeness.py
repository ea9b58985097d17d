"""How many traced steps lose transfers, with and without RPC logging held on (``tracing.rpclog``).

A traced step's transfers come from the tasks' RPC logs, which TensorFlow turns on for the step
with an asynchronous request that races it. On one local cluster (a PS and ``--workers`` worker
processes, in-graph replication so that one step covers every worker) this traces ``--steps``
steps without the hold and ``--steps`` with it, alternating ``--alternations`` times, and counts
the steps whose records miss a transfer the partition graphs send (a control edge's dummy aside).
``--load N`` keeps N processes spinning meanwhile, as a busy machine (CI's) would.

    python benchmarks/trace_completeness.py
    python benchmarks/trace_completeness.py --model seq32 --workers 2 --steps 40 --load 2

Writes ``benchmarks/results/trace_completeness-load<N>.{json,md}``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

from tfsched.bench.results import cpu_description  # noqa: E402
from tfsched.errors import TfschedError  # noqa: E402


def _spin() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="seq32")
    ap.add_argument("--workers", type=positive(int), default=2)
    ap.add_argument("--steps", type=positive(int), default=40, help="traced steps per block")
    ap.add_argument("--alternations", type=positive(int), default=2)
    ap.add_argument("--load", type=int, default=2, help="spinning processes meanwhile (0: none)")
    args = ap.parse_args()
    if args.load < 0:
        sys.exit(f"Error: --load must not be negative, got {args.load}")

    import tensorflow as tf

    from tfsched.bench.local import LocalCluster
    from tfsched.models import build_graph
    from tfsched.tracing import collect
    from tfsched.tracing.collector import missing_transfers

    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    blocks = []
    try:
        built = build_graph(args.model, in_graph_workers=args.workers if args.workers > 1 else 0)
        with LocalCluster(ps=1, workers=args.workers, vanilla=True) as cluster:
            with tf.compat.v1.Session(cluster.target(), graph=built.graph) as sess:
                sess.run(built.init_op)
                for p in spinners:
                    p.start()
                for _ in range(args.alternations):
                    for held in (False, True):
                        trace = collect(
                            sess,
                            built.train_op,
                            steps=args.steps,
                            warmup=1,
                            tasks=cluster.spec if held else (),
                        )
                        missing = missing_transfers(trace)  # each step against its partition graphs
                        recorded = {t.edge for t in trace.transfers if t.step == 0}
                        crossing = len(recorded) + len(missing.get(0, []))
                        blocks.append(
                            {
                                "held": held,
                                "steps": args.steps,
                                "transfers_per_step": crossing,
                                "steps_missing_some": len(missing),
                                "transfers_missing": sum(map(len, missing.values())),
                            }
                        )
    except TfschedError as e:
        sys.exit(f"Error: {e}")
    finally:
        for p in spinners:
            if p.is_alive():
                p.kill()
    lines = [
        f"{args.model}, 1 PS + {args.workers} workers on loopback, {args.load} spinning processes "
        f"meanwhile; blocks of {args.steps} traced steps. Processor: {cpu_description()}.",
        "",
        "| RPC logging | steps | steps missing a transfer | transfers missing (of each step's) |",
        "|---|---|---|---|",
    ]
    summary = {}
    for held in (False, True):
        mine = [b for b in blocks if b["held"] == held]
        steps = sum(b["steps"] for b in mine)
        short = sum(b["steps_missing_some"] for b in mine)
        lost = sum(b["transfers_missing"] for b in mine)
        summary["held" if held else "tensorflow_alone"] = {"steps": steps, "steps_missing_some": short}
        lines.append(
            f"| {'held on (rpclog)' if held else 'TensorFlow alone'} | {steps} | {short} | "
            f"{lost} (of {mine[0]['transfers_per_step']}) |"
        )
    write(
        f"trace_completeness-load{args.load}",
        {
            "benchmark": "trace_completeness",
            "machine": machine(),
            "cpu": cpu_description(),
            "config": vars(args),
            "blocks": blocks,
            "summary": summary,
        },
        lines,
    )


if __name__ == "__main__":
    main()
