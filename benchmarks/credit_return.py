"""When does the credit come back? The receiver's acknowledgement against the sender's send.

One PS and one worker on an emulated 100 Mbit/s link; seq32 inference (32 weights of 65,536
parameters, partitioned into 128 slices of 16,384) with a credit smaller than one slice, so that
each slice waits for the credit of the one before. For each way the credit comes back
(``enable(credit_return=...)``) it traces steps and reports, on the PS, the gaps between
consecutive gate releases and the span from the first to the last: with acknowledgements a slice
goes once the previous one has reached the worker; with returns on sending, once gRPC has handed
the previous one to the kernel, whose socket buffer and the link's queue then hold several.

    python benchmarks/credit_return.py   # writes benchmarks/results/credit_return.{json,md}
    python benchmarks/credit_return.py --queue 5ms   # ... credit_return-queue5ms.{json,md}

``--queue``: the most of the link's time each shaper queues (the bench's ``--queue``; 400 ms
by default, far more than a switch port). A shallow queue drops what overflows it, and TCP then
keeps the rest in the sender's socket buffer, which returns on sending do not count either.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics

from tfsched.bench import netns
from tfsched.errors import TfschedError
from tfsched.io import write_atomic
from tfsched.units import parse_duration

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
BANDWIDTH_BPS = 100e6
PARTITION, CREDIT = 20_000, 1_000  # parameters: slices of 16,384, a credit under one slice
STEPS, ROUNDS = 3, 2  # traced steps per round; rounds alternate the two ways


def release_times(target, credit_return: str, steps: int) -> list[list[int]]:
    """Per traced step, the PS's gate release times (microseconds, sorted)."""
    import tensorflow as tf

    import tfsched
    from tfsched.models import build_graph

    built = build_graph("seq32", mode="inference")
    cfg = tfsched.enable(partition=PARTITION, credit=CREDIT, credit_return=credit_return, strict=True)
    opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    out = []
    with tf.compat.v1.Session(target, graph=built.graph, config=cfg) as sess:
        sess.run(built.init_op)
        sess.run(built.loss)  # warm-up
        for _ in range(steps):
            md = tf.compat.v1.RunMetadata()
            sess.run(built.loss, options=opts, run_metadata=md)
            out.append(
                sorted(
                    ns.all_start_micros + ns.all_end_rel_micros
                    for dev in md.step_stats.dev_stats
                    if "/job:ps/" in dev.device
                    for ns in dev.node_stats
                    if "/tfsched" in ns.node_name
                    and "_gate_" in ns.node_name
                    and not ns.node_name.endswith("/credit")
                )
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queue", default="400ms", help="the most of the link's time each shaper queues")
    args = ap.parse_args()
    try:
        queue_s = parse_duration(args.queue)
    except TfschedError as e:
        raise SystemExit(f"Error: --queue: {e}") from None
    if queue_s <= 0:
        raise SystemExit("Error: --queue must be a positive time")
    default = queue_s == netns.DEFAULT_QUEUE_S
    name = "credit_return" if default else f"credit_return-queue{queue_s * 1e3:g}ms"
    steps: dict[str, list[list[int]]] = {"ack": [], "sent": []}
    with netns.EmulatedCluster(ps=1, workers=1, bandwidth_bps=BANDWIDTH_BPS, queue_s=queue_s) as cluster:
        for _ in range(ROUNDS):
            for way in steps:
                steps[way] += release_times(cluster.target("worker", 0), way, STEPS)
    rows = {}
    for way, per_step in steps.items():
        gaps = [b - a for times in per_step for a, b in itertools.pairwise(times)]
        rows[way] = {
            "gates": statistics.median(len(t) for t in per_step),
            "median_gap_ms": statistics.median(gaps) / 1e3,
            "gaps_under_1ms": sum(g < 1000 for g in gaps) / len(per_step),
            "span_s": statistics.median((t[-1] - t[0]) / 1e6 for t in per_step),
        }
    doc = {
        "bandwidth_bps": BANDWIDTH_BPS,
        "queue_s": queue_s,
        "partition": PARTITION,
        "credit": CREDIT,
        "steps": {k: len(v) for k, v in steps.items()},
        "rows": rows,
    }
    slice_ms = 16_384 * 4 * 8 / BANDWIDTH_BPS * 1e3
    lines = [
        f"seq32 inference, 1 PS x 1 worker, {BANDWIDTH_BPS / 1e6:g} Mbit/s (links queueing at most "
        f"{queue_s * 1e3:g} ms), partition {PARTITION:,}, "
        f"credit {CREDIT:,} parameters (under one slice; a slice is {slice_ms:.1f} ms on the link); "
        f"medians over {len(steps['ack'])} traced steps per way.",
        "",
        "| credit comes back | gates released | median gap between releases (ms) | gaps under 1 ms per step | first to last release (s) |",
        "|---|---|---|---|---|",
    ]
    for way, r in rows.items():
        lines.append(
            f"| {way} | {r['gates']:.0f} | {r['median_gap_ms']:.2f} | {r['gaps_under_1ms']:.0f} | {r['span_s']:.3f} |"
        )
    os.makedirs(RESULTS, exist_ok=True)
    write_atomic(os.path.join(RESULTS, f"{name}.json"), lambda f: json.dump(doc, f, indent=1))
    write_atomic(os.path.join(RESULTS, f"{name}.md"), lambda f: f.write("\n".join(lines) + "\n"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
