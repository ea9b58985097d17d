"""Predict a saved bench run again with the simulator as it is now, beside its old predictions.

A bench run with ``--traces DIR -o DIR/bench.json`` keeps everything the prediction needs: the
baseline's traced steps (with and without the other workers), the machine's CPU per step and
per byte, and each mode's measured synchronized steps. This runs ``bench.predict.annotate``
on them again, so a change to the simulator is measured on the same run, not on a new one, and
once more for each what-if (``WHAT_IFS``: each message's overhead holding its channel, as
until the forty-fourth session, ``overlap=False``; the links shared evenly between the
workers' flows, as until the forty-fifth, ``worker_weight=1``, or unequally by a set weight;
the acknowledgements' ops waiting for no thread of the executor, as until the fifty-second,
``executor_waits=False``; the machine's share of the cores from the op seconds the simulator
runs, ``annotate``'s ``work="simulated"``; each simulated op taking its mean traced time, not
its fastest, ``op_statistic="mean"``; each message no credit window holds sent 16 or
32 MiB at a time, ``stream_window_bytes``, after ``benchmarks/arrival_order.py``; each simulated task taking
whatever of the machine the others leave, as until the sixtieth session, ``host_cores=0``, or
the bytes' CPU taken from the machine alone and not from each end's own cores, as until the
sixty-third, ``host_bytes=False``, or each end spending half of it and the kernel none, as
until the sixty-fourth, ``even_byte_shares``, or an op's cost reckoned from the machine's CPU and
not the workers' own, as until the sixty-fifth, ``task_cpu=False``: these change only the runs
whose tasks had cores of their own; a mode across the barrier not charged its gates' ops on the
PS, as until the eighty-third, ``gate_ops=False``; a mode predicted as the simulator steps it, below
the CPU a baseline step spent over the machine's cores too, as until the eighty-sixth,
``cpu_floor=False``; that floor and step without the copies that put a mode's cut tensors back together, as
until the ninetieth, ``copies=False``, and the step without either, ``simulated_no_copies``; the
copies at the oracle's default cost where the run measured none, ``default_copies``) beside it.

    python benchmarks/repredict.py DIR --name resnet50-inference-traced [--what-ifs A,B]

DIR: the run's ``--traces`` directory, or the run packed by ``benchmarks/keep_run.py``
(``results/runs/<name>.tar.xz``).

Writes ``benchmarks/results/<name>-repredicted.json`` and ``.md``.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, run_dir_errors, run_dir_parser, run_graph, run_title, write  # noqa: E402

from tfsched.oracle.oracle import DEFAULT_COPY_S_PER_BYTE  # noqa: E402

# what an acknowledgement cost on the AMD EPYC (benchmarks/ack_cost.py, results/ack-cost-s91.json)
ACK_CPU_S91 = 5e-4


def repredict(run_dir: str, **what_if) -> tuple[dict, list[dict]]:
    """The run in ``run_dir`` predicted again: its config and a row per mode. ``what_if``:
    more of ``annotate``'s arguments (``overhead_s``, ``work``, ``overlap``, ``worker_weight``,
    ``cross_barrier_steps``)."""
    from tfsched.bench.predict import annotate
    from tfsched.bench.run import ModeResult, placed_mode, split_placed
    from tfsched.tracing.trace import Trace
    from tfsched.units import parse_bandwidth

    with open(os.path.join(run_dir, "bench.json")) as f:
        doc = json.load(f)
    config = doc["config"]
    bandwidth = None if config["bandwidth"] == "loopback" else parse_bandwidth(config["bandwidth"])
    results = {}
    # each placement's modes apart (a run of several, ``--ps-placement bytes,held``: MODE@held)
    for where in dict.fromkeys(split_placed(m["mode"])[1] for m in doc["modes"]):
        # the timing-aware orders' trace (``--traces`` keeps it): without it TAO is ordered from
        # the cost model, not as the run ordered it
        order_path = os.path.join(run_dir, f"{placed_mode('order', where)}.alone.trace.json")
        order_trace = Trace.load(order_path) if os.path.exists(order_path) else None
        group = {}
        for m in doc["modes"]:
            plain, at = split_placed(m["mode"])
            if at != where:
                continue
            r = ModeResult(mode=m["mode"], iterations=m["iterations"], steps=m["steps"])
            # the rounds (their wall times are not kept): a mode across the barrier is laid out a
            # round's steps at a time (until the eighty-third session all its steps at once)
            r.rounds = [(config["steps"], 0.0)] * config.get("rounds", 1)
            if m.get("ordered_from"):
                r.order_trace = order_trace
            # the sizes the run used, and whether its transfers were inline (until the sixty-first
            # session not copied: a credit mode of a run since the fifty-fourth was predicted on
            # TensorFlow's _Send/_Recv, its acknowledgements waiting for the executor's threads)
            r.knobs = {k: m[k] for k in ("partition", "credit", "inline_transfers") if k in m}
            if plain == "baseline":
                # cpu_per_step as run
                r.cpu_s, r.cpu_total_s = m["cpu_s_per_step"] * len(m["iterations"]), 1.0
                r.comm_cpu_s_per_byte = m.get("comm_cpu_s_per_byte", 0.0)  # absent: measured as none
                r.comm_cpu_s_per_message = m.get("comm_cpu_s_per_message", 0.0)
                r.comm_cpu_shares = m.get("comm_cpu_shares")  # absent (before the sixty-fourth): half each
                # absent before the ninetieth session: not measured, no copy counted (as then)
                r.copy_cpu_s_per_byte = m.get("copy_cpu_s_per_byte", 0.0)
                # absent before the ninety-first: not measured, an acknowledgement a message (as then)
                r.ack_cpu_s = m.get("ack_cpu_s", 0.0)
                # absent before the sixty-fifth: the machine's CPU, as then
                r.task_cpu_s = {
                    t: s * len(m["iterations"]) for t, s in m.get("task_cpu_s_per_step", {}).items()
                }
                r.trace = Trace.load(os.path.join(run_dir, f"{m['mode']}.trace.json"))
                r.solo_trace = Trace.load(os.path.join(run_dir, f"{m['mode']}.alone.trace.json"))
            group[plain] = results[m["mode"]] = r
        with run_graph(config, where) as (graph_path, built):
            annotate(
                group,
                graph_path=graph_path,
                fetches=built.fetches,
                workers=config["workers"],
                bandwidth_bps=bandwidth,
                inter_op_threads=config.get("inter_op_threads") or None,
                **{"host_cores": config.get("host_cores", 0), **what_if},
            )
    rows = [
        {
            "mode": m["mode"],
            "measured_s": m["iteration_mean_s"],
            "predicted_then_s": m["predicted_s"],
            "error_then": m["prediction_error"],
            "predicted_now_s": results[m["mode"]].measured["predicted_s"],
            "error_now": results[m["mode"]].measured["prediction_error"],
            "efficiency_then": m["efficiency_E"],
            "efficiency_now": results[m["mode"]].measured["efficiency_E"],
            "finish_by_rank_s": m.get("finish_by_rank_s"),
            "predicted_finish_by_rank_now_s": results[m["mode"]].measured["predicted_finish_by_rank_s"],
            "worker_weight_now": results[m["mode"]].measured["worker_weight"],
            "floor_now_s": results[m["mode"]].measured["floor_s"],
            "floor_by_now": results[m["mode"]].measured["floor_by"],
            # with what_if's cross_barrier_steps (benchmarks/cross_barrier.py)
            "cross_barrier": results[m["mode"]].measured.get("cross_barrier"),
        }
        for m in doc["modes"]
    ]
    return config, rows


# what-ifs (annotate's arguments), each beside the prediction now
WHAT_IFS = {
    "serial_channel": (
        {"overlap": False},
        "each message's overhead holding its channel, as until the forty-fourth session",
    ),
    "unequal_links": (
        {"worker_weight": 0.7},
        "the links shared unequally between the workers, worker k's flows weighing 0.7 ** k "
        "(TCP's flows need not share a link evenly; a sensitivity, not a fit)",
    ),
    "even_links": (
        {"worker_weight": 1.0},
        "the links shared evenly between the workers' flows, as until the forty-fifth session (now: "
        "as unequally as makes the simulated baseline's workers stagger as the measured ones did)",
    ),
    "no_executor_waits": (
        {"executor_waits": False},
        "the acknowledgements' ops waiting for no thread of the executor, as until the fifty-second "
        "session (now: for one of the task's inter-op threads, where its ops can hold them all)",
    ),
    "simulated_ops": (
        {"work": "simulated"},
        "the machine's share of the cores from the op seconds the simulator runs (as the TensorFlow 2 "
        "bench takes it; tried in the forty-fourth session and not kept; on hosts with cores of their own "
        "where the run measured the workers' CPU, as now: that is reckoned from the same op seconds)",
    ),
    "mean_ops": (
        {"op_statistic": "mean"},
        "each simulated op taking its mean traced time, not its fastest (TicTac's): the time the "
        "machine's share of the cores is reckoned from, so a saturated machine does the measured work "
        "(tried in the fifty-eighth session and not kept)",
    ),
    "bytes_on_machine": (
        {"host_bytes": False},
        "the bytes' CPU taken from the machine alone, not from each end's own cores, as until the "
        "sixty-third session; only runs whose tasks had cores of their own (--host-cores) differ",
    ),
    "even_byte_shares": (
        {"even_byte_shares": True},
        "each end of a flow spending half the bytes' CPU in its own cores and the kernel none, as "
        "until the sixty-fourth session (now: the shares the run measured, where it did)",
    ),
    "machine_cpu": (
        {"task_cpu": False},
        "an op's cost reckoned from the machine's CPU per step, as until the sixty-fifth session "
        "(now: from the workers' own processes' CPU, where the run measured it); only runs whose "
        "tasks had cores of their own (--host-cores) differ",
    ),
    "gates_uncharged": (
        {"gate_ops": False},
        "a mode across the barrier not charged its gates' ops on the PS, as until the eighty-third "
        "session; only modes across the barrier differ",
    ),
    "no_cpu_floor": (
        {"cpu_floor": False},
        "each mode predicted as the simulator steps it, below the CPU a baseline step spent over the "
        "machine's cores too, as until the eighty-sixth session",
    ),
    "no_copies": (
        {"copies": False},
        "a mode's CPU floor and simulated step not counting the copies that put its cut tensors back "
        "together, as until the ninetieth session; only modes with partitioning of runs that measured "
        "a copy's cost differ",
    ),
    "default_copies": (
        {"copy_cpu_s_per_byte": DEFAULT_COPY_S_PER_BYTE},
        "the copies that put a mode's cut tensors back together at the oracle's default cost "
        "(oracle.DEFAULT_COPY_S_PER_BYTE) in place of the run's measurement: for a run of before the "
        "ninetieth session, which measured none",
    ),
    "ack_cost_s91": (
        {"ack_cpu_s": ACK_CPU_S91},
        "a mode's CPU floor counting each acknowledgement at the 0.5 ms benchmarks/ack_cost.py measured "
        "one to cost on the AMD EPYC (results/ack-cost-s91.md) in place of the bench's message; only "
        "modes with acknowledgements at the cores' limit differ",
    ),
    "simulated_no_copies": (
        {"cpu_floor": False, "copies": False},
        "each mode predicted as the simulator steps it, without the CPU floor and without the copies "
        "that put its cut tensors back together, as the simulator stepped it until the ninetieth "
        "session (beside no_cpu_floor: what the copies add to the simulated step)",
    ),
    "shared_cores": (
        {"host_cores": 0},
        "each simulated task taking whatever of the machine the others leave, as until the sixtieth "
        "session; only runs whose tasks had cores of their own (--host-cores) differ",
    ),
    **{
        f"stream_window_{mb}mb": (
            {"stream_window_bytes": mb << 20},
            f"each message no credit window holds sent {mb} MiB at a time, its rest behind the messages "
            "waiting for its channel (a large message's HTTP/2 stream yielding between flow-control "
            "windows; benchmarks/arrival_order.py)",
        )
        for mb in (16, 32)
    },
}


def what_ifs(text: str) -> dict:
    """An argparse type: ``WHAT_IFS`` of the comma-separated names in ``text``."""
    import argparse

    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in WHAT_IFS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"no what-if {', '.join(unknown) or text!r}; there are {', '.join(WHAT_IFS)}"
        )
    return {n: WHAT_IFS[n] for n in names}


def main() -> None:
    ap = run_dir_parser(__doc__.splitlines()[0], "results/<name>-repredicted.{json,md}")
    ap.add_argument(
        "--what-ifs",
        type=what_ifs,
        default=WHAT_IFS,
        metavar="A,B",
        help=f"only these what-ifs (each a simulation of the whole run again): of {', '.join(WHAT_IFS)}",
    )
    args = ap.parse_args()
    chosen = args.what_ifs
    with run_dir_errors():
        config, rows = repredict(args.run_dir)
        undone = {key: repredict(args.run_dir, **kw)[1] for key, (kw, _) in chosen.items()}
    for key, other in undone.items():
        for r, o in zip(rows, other, strict=True):
            r[f"predicted_{key}_s"], r[f"error_{key}"] = o["predicted_now_s"], o["error_now"]
            r[f"predicted_finish_by_rank_{key}_s"] = o["predicted_finish_by_rank_now_s"]
            r[f"worker_weight_{key}"] = o["worker_weight_now"]
    md = [
        f"{run_title(config)}: the run's predictions and the simulator's now",
        "",
        "| mode | slowest worker (s) | predicted then (s) | error then | predicted now (s) | error now | link weight "
        + "".join(f"| {key.replace('_', ' ')} (s) | error " for key in chosen)
        + "| E then | E now |",
        "|---|---|---|---|---|---|---" + "|---|---" * len(chosen) + "|---|---|",
        *(
            f"| {r['mode']} | {r['measured_s']:.4f} | {r['predicted_then_s']:.4f} | {r['error_then']:+.0%} "
            f"| {r['predicted_now_s']:.4f} | {r['error_now']:+.0%} | {r['worker_weight_now']:.3f} "
            + "".join(f"| {r[f'predicted_{key}_s']:.4f} | {r[f'error_{key}']:+.0%} " for key in chosen)
            + f"| {r['efficiency_then']:.2f} | {r['efficiency_now']:.2f} |"
            for r in rows
        ),
        "",
        "now: the simulator as it is (link weight: worker k's flows weigh its k-th power, fitted to the "
        "baseline's measured stagger); "
        + "; ".join(f"{key.replace('_', ' ')}: as now but with {what}" for key, (_, what) in chosen.items())
        + ".",
    ]
    write(f"{args.name}-repredicted", {"config": config, "machine": machine(), "modes": rows}, md)


if __name__ == "__main__":
    main()
