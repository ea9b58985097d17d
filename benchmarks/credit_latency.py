"""How long a credit's bookkeeping waits for TensorFlow's executor, in a bench run's traced steps.

With a credit, the receiver's ``TfschedAck`` runs once a tensor (or slice) has arrived and the
sender's ``TfschedCredit`` once the acknowledgement has: only then can the sender's window
release more. Both are cheap ops, but TensorFlow's executor runs what a transfer makes ready on
its inter-op thread pool, as many threads as cores by default; while they all run kernels that
wait on the intra-op pool (a convolution's), these ops wait behind them. This script measures
that wait on the workers, where the model's kernels run: for each pushed tensor, from the
arrival of its acknowledgement (the end of that transfer) to the start of its
``TfschedCredit``; for each pulled one, from its arrival to the start of its ``TfschedAck``.

    tfsched bench --model vgg16 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 \
        --rounds 3 --batch-size 103 --modes baseline,tao+pc+lockstep,tao+pc+lockstep+w1000000 \
        --trace-steps 1 --traces DIR -o DIR/bench.json [--inter-op-threads 4]
    python benchmarks/credit_latency.py DIR [DIR ...]

Every traced worker's steps of every mode with a credit, the run's inter-op threads beside them.
Writes ``benchmarks/results/credit-latency.json`` and ``.md``.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import each_run, machine, run_title, write  # noqa: E402


def waits(trace) -> dict[str, list[float]]:
    """Milliseconds from arrival to start on the worker: ``push``, each ``TfschedCredit`` after its
    acknowledgement arrived; ``pull``, each ``TfschedAck`` after its tensor arrived."""
    ops = {(o.step, o.node): o for o in trace.ops}
    arrived = {}  # (step, tensor's op) -> when its transfer ended
    for t in trace.transfers:
        arrived[(t.step, t.tensor.rsplit(":", 1)[0])] = t.start_us + t.duration_us
    out: dict[str, list[float]] = {"push": [], "pull": []}
    for (step, node), o in ops.items():
        if "/job:worker/" not in o.device:
            continue
        if o.op == "TfschedCredit":  # "<gate>/credit": its input is "<gate>/ack", sent from the PS
            gate = node.removesuffix("/credit")
            at = arrived.get((step, f"{gate}/ack"))
            kind = "push"
        elif o.op == "TfschedAck":  # "<gate>/ack": its input is the gate's tensor, pulled from the PS
            gate = node.removesuffix("/ack")
            at = arrived.get((step, gate))
            kind = "pull"
        else:
            continue
        if at is not None:
            out[kind].append((o.start_us - at) / 1e3)
    return out


def _summary(ms: list[float]) -> dict:
    if not ms:
        return {"n": 0}
    ms = sorted(ms)
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "p90_ms": ms[min(len(ms) - 1, int(0.9 * len(ms)))],
        "max_ms": ms[-1],
        "over_10ms": sum(1 for m in ms if m > 10) / len(ms),
    }


def compare(run_dir: str) -> dict:
    from tfsched.errors import TfschedError
    from tfsched.tracing.trace import Trace

    with open(os.path.join(run_dir, "bench.json")) as f:
        doc = json.load(f)
    rows = []
    for m in doc["modes"]:
        if not m.get("credit"):
            continue
        files = sorted(glob.glob(os.path.join(glob.escape(run_dir), f"{glob.escape(m['mode'])}.*trace.json")))
        files = [f for f in files if not f.endswith(".alone.trace.json")]
        if not files:
            raise TfschedError(f"{run_dir}: no traces of mode {m['mode']} (a run with --traces DIR)")
        got: dict[str, list[float]] = {"push": [], "pull": []}
        for path in files:
            for kind, ms in waits(Trace.load(path)).items():
                got[kind] += ms
        rows.append(
            {
                "mode": m["mode"],
                "workers_traced": len(files),
                "vs_baseline": m.get("vs_baseline"),
                "straggler": m.get("straggler"),
                **{kind: _summary(ms) for kind, ms in got.items()},
            }
        )
    return {"config": doc["config"], "modes": rows}


def _cell(s: dict) -> str:
    if not s["n"]:
        return "–"
    return (
        f"{s['median_ms']:.1f} / {s['p90_ms']:.1f} / {s['max_ms']:.0f} ({s['over_10ms']:.0%} over 10 ms; "
        f"{s['n']})"
    )


def main() -> None:
    runs = each_run(__doc__.splitlines()[0], compare)
    md = [
        "How long the workers' credit ops waited for the executor after what they answer arrived, over every "
        "traced worker's steps: the sender's `TfschedCredit` after the PS's acknowledgement of a push, the "
        "receiver's `TfschedAck` after a pulled tensor. Milliseconds: median / 90th percentile / most "
        "(the share over 10 ms; how many).",
        "",
    ]
    for run in runs:
        c = run["config"]
        threads = c.get("inter_op_threads") or "the default (one per core)"
        md += [
            f"{run_title(c)}; inter-op threads a task: {threads}",
            "",
            "| mode | vs baseline | straggler | credit after a push's acknowledgement | ack after a pull |",
            "|---|---|---|---|---|",
        ]
        for r in run["modes"]:
            md.append(
                f"| {r['mode']} | {r['vs_baseline']:.3f}x | {r['straggler']:.3f} | {_cell(r['push'])} "
                f"| {_cell(r['pull'])} |"
            )
        md.append("")
    write("credit-latency", {"machine": machine(), "runs": runs}, md)


if __name__ == "__main__":
    main()
