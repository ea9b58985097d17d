"""Inline transfers against TensorFlow's ``_Send``/``_Recv``, on a worker whose inter-op threads
are busy while its pushes wait for credit (``tfsched.bench.busy``).

One PS and one worker on this machine (loopback), the worker with ``--inter-op-threads`` threads
(TensorFlow's default is one per core). Each round runs the busy worker's steps with
``enable(credit=push, ack_share=1)`` (inline transfers, the default) and then with
``inline_transfers=False`` (TensorFlow's ``_Recv`` -> ``TfschedCredit`` and gate -> ``_Send``,
how tfsched ran until the fifty-fourth session), on one cluster, so that both see the same
machine. For each: how long each push waited after the push before it reached the PS (whose
acknowledgement frees the window), where that wait overlapped the worker's chain of kernels, and
the step time.

    python benchmarks/inline_transfers.py [--rounds 3] [--steps 5] [--inter-op-threads 1]

Writes ``benchmarks/results/inline-transfers.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

PUSH = 2_000_000  # parameters a push (8 MB): the window holds one
PUSHES = 6
CHAIN = 60  # 600 x 600 matrix products on the worker


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=positive(int), default=3)
    ap.add_argument("--steps", type=positive(int), default=5, help="traced steps of each setting a round")
    ap.add_argument("--inter-op-threads", type=positive(int), default=1, help="the worker's (and the PS's)")
    args = ap.parse_args(argv)

    import tfsched
    from tfsched.bench.busy import busy_worker_steps
    from tfsched.bench.local import LocalCluster

    settings = {"inline": True, "pool": False}
    steps: dict[str, list] = {name: [] for name in settings}
    with LocalCluster(ps=1, workers=1, inter_op_threads=args.inter_op_threads) as cluster:
        for _ in range(args.rounds):
            for name, inline in settings.items():
                config = tfsched.enable(credit=PUSH, ack_share=1, inline_transfers=inline, strict=True)
                steps[name] += busy_worker_steps(
                    cluster.target("worker", 0),
                    config,
                    pushes=PUSHES,
                    push=PUSH,
                    chain=CHAIN,
                    steps=args.steps,
                )
    if steps["inline"][0].sums != steps["pool"][0].sums:
        raise SystemExit("Error: the two settings computed different sums")

    def summary(name: str) -> dict:
        waits = sorted(w for s in steps[name] for w in s.waits_ms)
        return {
            "waits_ms": waits,
            "median_wait_ms": statistics.median(waits) if waits else None,
            "max_wait_ms": max(waits) if waits else None,
            "steps_with_waits": sum(bool(s.waits_ms) for s in steps[name]),
            "median_chain_ms": statistics.median(s.chain_ms for s in steps[name]),
            "median_step_ms": statistics.median(s.step_ms for s in steps[name]),
        }

    result = {
        "machine": machine(),
        "inter_op_threads": args.inter_op_threads,
        "rounds": args.rounds,
        "steps": args.steps,
        "push_parameters": PUSH,
        "pushes": PUSHES,
        "chain": CHAIN,
        "settings": {name: summary(name) for name in settings},
    }

    def ms(v):
        return "-" if v is None else f"{v:.1f}"

    md = [
        f"A worker with {args.inter_op_threads} inter-op thread(s) pushes {PUSHES} tensors of {PUSH:,} "
        f"parameters to a PS under a window of one while a chain of {CHAIN} 600 x 600 matrix products "
        f"holds its threads; {args.rounds} rounds of {args.steps} traced steps of each setting, "
        "interleaved on one loopback cluster (`python benchmarks/inline_transfers.py"
        + (f" --inter-op-threads {args.inter_op_threads}" if args.inter_op_threads != 1 else "")
        + "`).",
        "",
        "Wait: from a push's arrival at the PS (its RecvTensor's end), whose acknowledgement frees "
        "the window, to the next push's release, for the pushes whose wait overlapped the chain.",
        "",
        "| transfers | pushes waiting in the chain (steps) | median wait (ms) | longest (ms) | chain (ms) | step (ms) |",
        "|---|---|---|---|---|---|",
    ]
    labels = {"inline": "inline (default)", "pool": "TensorFlow's `_Send`/`_Recv` (`inline_transfers=False`)"}
    for name, s in result["settings"].items():
        md.append(
            f"| {labels[name]} | {len(s['waits_ms'])} ({s['steps_with_waits']} of {len(steps[name])}) | "
            f"{ms(s['median_wait_ms'])} | {ms(s['max_wait_ms'])} | {s['median_chain_ms']:.0f} | "
            f"{s['median_step_ms']:.0f} |"
        )
    write("inline-transfers", result, md)


if __name__ == "__main__":
    main()
