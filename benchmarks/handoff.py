"""How long a credit returned when sent takes to let the next held tensor go, and the run
re-predicted with it.

A mode that holds every counted tensor until the one before it on its channel was sent (one
tensor in flight: ``tio+c1+sent``, ``enable(credit=1, credit_return="sent")``) hands each
channel over once per counted tensor: gRPC lets go of the sent tensor's buffer, its credit
comes back, and the next gate puts its tensor out. In a kept bench run (``--traces DIR -o
DIR/bench.json``), for each such mode and each channel from the PS to a worker in every traced
step (worker 0's trace and the others', ``MODE.worker-K``), this takes the counted pulls (at
least the pass's ``MIN_ACKED_BYTES``) in the order their gates let them go, and for each after
the first its hand-off: from the arrival of the pull before it (the RecvTensor RPC's end) to
its own gate's end on the PS. The processes share the machine's clock. The emulated link adds
no latency, so in the simulator a message's last byte leaves and arrives at once and its
credit comes back then: the median hand-off is the time ``sim.simulate``'s ``handoff_s`` adds
where ops hold the sender's cores (as they held this machine's while the mode ran, where the
bench reports it 95% busy or more), and what the model without it leaves out. The run is then
predicted again
(``benchmarks/repredict.py``) with no hand-off and with the measured one.

Reported per mode: the number of hand-offs, their median and 10th and 90th percentiles; per
traced step, the span of the counted pulls from the first gate's release to the last arrival
beside the time their bytes take on the link; and each mode's measured step beside the two
predictions.

    tfsched bench --model resnet50 --mode train --ps 1 --workers 2 --bandwidth 10Gbit --steps 4 \\
        --rounds 12 --batch-size 8 --modes baseline,tio,tio+c1+sent,tio+c40000000+sent \\
        --traces DIR -o DIR/bench.json
    python benchmarks/handoff.py DIR --name resnet50-train-10g-handoff

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import bench_run, machine, run_dir_errors, run_dir_parser, run_title, write  # noqa: E402
from repredict import repredict  # noqa: E402


def held_modes(modes) -> list[str]:
    """The modes that hold one counted tensor in flight a channel: a credit returned when sent,
    smaller than the least tensor it counts (``parse_mode``'s sizes are in parameters)."""
    from tfsched.analysis import MIN_ACKED_BYTES, PARAM_BYTES
    from tfsched.bench.run import parse_mode

    out = []
    for mode in modes:
        spec = parse_mode(mode)
        counted_from = max(MIN_ACKED_BYTES, spec.credit * PARAM_BYTES // spec.effective_ack_share)
        if spec.credit and spec.credit_return == "sent" and spec.credit * PARAM_BYTES < counted_from:
            out.append(mode)
    return out


def handoffs(trace, link_bps: float | None) -> tuple[list[float], list[dict]]:
    """A trace's hand-offs (seconds) and, per traced step and channel, the counted pulls' span
    beside their bytes' time on the link (None without a link)."""
    from tfsched.analysis import MIN_ACKED_BYTES

    gate_end = {  # (step, gate) -> when it let its tensor go, the PS's gates only
        (o.step, o.node): o.start_us + o.duration_us
        for o in trace.ops
        if o.op == "TfschedGate" and "/job:ps/" in o.device
    }
    channels: dict[tuple[int, str, str], list] = {}  # (step, src, dst) -> (release, transfer)
    for t in trace.transfers:
        released = gate_end.get((t.step, t.tensor.rsplit(":", 1)[0]))
        if "/job:ps/" in t.src and t.bytes >= MIN_ACKED_BYTES and released is not None:
            channels.setdefault((t.step, t.src, t.dst), []).append((released, t))
    gaps, spans = [], []
    # step by step, each step's channels in the order their first pull was traced
    for (step, src, dst), pulls in sorted(channels.items(), key=lambda kv: kv[0][0]):
        pulls.sort(key=lambda p: p[0])
        arrived = [t.start_us + t.duration_us for _, t in pulls]
        gaps += [
            (released - before) / 1e6 for (released, _), before in zip(pulls[1:], arrived[:-1], strict=True)
        ]
        nbytes = sum(t.bytes for _, t in pulls)
        spans.append(
            {
                "step": step,
                "channel": f"{src} -> {dst}",
                "pulls": len(pulls),
                "span_s": (max(arrived) - pulls[0][0]) / 1e6,
                "wire_s": nbytes * 8 / link_bps if link_bps else None,
            }
        )
    return gaps, spans


def main() -> None:
    from tfsched.tracing.trace import Trace
    from tfsched.units import parse_bandwidth

    ap = run_dir_parser(__doc__.splitlines()[0], "results/<name>.{json,md}")
    args = ap.parse_args()
    with run_dir_errors():
        config, measured = bench_run(args.run_dir)
        held = held_modes(measured)
        if not held:
            raise SystemExit(
                f"Error: {args.run_dir}: no mode of the run holds one tensor in flight (tio+c1+sent)"
            )
        link = None if config["bandwidth"] == "loopback" else parse_bandwidth(config["bandwidth"])
        found = {}
        for mode in held:
            gaps, spans = [], []
            for name in sorted(os.listdir(args.run_dir)):
                if name.startswith(f"{mode}.") and name.endswith(".trace.json") and ".alone." not in name:
                    g, s = handoffs(Trace.load(os.path.join(args.run_dir, name)), link)
                    gaps += g
                    spans += s
            if len(gaps) < 2:
                raise SystemExit(f"Error: {args.run_dir}: the traces of {mode} have no held pulls to measure")
            deciles = statistics.quantiles(gaps, n=10)
            found[mode] = {
                "handoffs": len(gaps),
                "median_s": statistics.median(gaps),
                "p10_s": deciles[0],
                "p90_s": deciles[-1],
                "spans": spans,
                "gaps_s": gaps,
            }
        # every held mode's hand-offs together; the simulator has no negative one
        handoff_s = max(0.0, statistics.median(g for f in found.values() for g in f["gaps_s"]))
        _, plain = repredict(args.run_dir)
        _, with_handoff = repredict(args.run_dir, handoff_s=handoff_s)
    rows = [
        {
            "mode": a["mode"],
            "measured_s": a["measured_s"],
            "predicted_s": a["predicted_now_s"],
            "error": a["error_now"],
            "predicted_with_handoff_s": b["predicted_now_s"],
            "error_with_handoff": b["error_now"],
        }
        for a, b in zip(plain, with_handoff, strict=True)
    ]
    ms = 1e3
    md = [
        f"{run_title(config)}: the hand-offs of one tensor in flight, and the run predicted with them",
        "",
        "| mode | hand-offs | median (ms) | 10th percentile (ms) | 90th percentile (ms) |",
        "|---|---|---|---|---|",
        *(
            f"| {mode} | {f['handoffs']} | {f['median_s'] * ms:.2f} | {f['p10_s'] * ms:.2f} | {f['p90_s'] * ms:.2f} |"
            for mode, f in found.items()
        ),
        "",
        "A hand-off: from a counted pull's arrival to the release of the next on its channel (its gate's end "
        "on the PS); negative where the next went before the one before it had arrived.",
        "",
        "| mode | step | channel | counted pulls | first release to last arrival (ms) | their bytes on the link (ms) |",
        "|---|---|---|---|---|---|",
        *(
            f"| {mode} | {s['step']} | {s['channel']} | {s['pulls']} | {s['span_s'] * ms:.1f} | "
            + (f"{s['wire_s'] * ms:.1f} |" if s["wire_s"] is not None else "- |")
            for mode, f in found.items()
            for s in f["spans"]
        ),
        "",
        "Predicted again with no hand-off (the simulator's default) and with the median measured, "
        f"{handoff_s * ms:.2f} ms (`sim.simulate(handoff_s=...)`: a credit returned when sent waits "
        "for it where ops hold the sender's cores):",
        "",
        "| mode | slowest worker (s) | predicted (s) | error | with the hand-off (s) | error |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['mode']} | {r['measured_s']:.4f} | {r['predicted_s']:.4f} | {r['error']:+.0%} "
            f"| {r['predicted_with_handoff_s']:.4f} | {r['error_with_handoff']:+.0%} |"
            for r in rows
        ),
    ]
    result = {"config": config, "machine": machine(), "handoff_s": handoff_s, "held": found, "modes": rows}
    write(args.name, result, md)


if __name__ == "__main__":
    main()
