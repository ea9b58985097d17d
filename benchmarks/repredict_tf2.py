"""Predict a saved ``tfsched bench --api tf2`` run again, beside its measured throughput.

A run with ``--traces DIR -o RUN.json`` keeps what its prediction needs: worker 0's step function
as the pass got it and its steps traced alone (``DIR/graphs``, ``DIR/solo-round.trace.json``;
for another placement of a run of several, in ``DIR/at-PLACEMENT``), the baseline's traced round, and in ``RUN.json`` each mode's rounds (their throughput and the
machine's CPU). This runs ``bench.tf2.predict_calls`` on them again, with the machine's share of
the cores from the op times the simulator runs (as the bench does), from the trace's mean op
times (as the session bench takes them on shared cores), on hosts with cores of their own from
the op times it runs over the machine's CPU in place of the workers' own (as until the
sixty-fifth session), with the pulls a gate releases together racing instead of going in the
order released (``predict_calls(race=True)``, as until the sixty-sixth session;
``benchmarks/arrival_order.py``), and with the bytes' CPU left in the ops' share where the run
measured what a byte costs (``predict_calls(comm_cpu=False)``, as until the seventy-first
session), so a change to the prediction is measured on one run.

    python benchmarks/repredict_tf2.py RUN.json DIR --name tf2-vgg16-inference
    python benchmarks/repredict_tf2.py DIR|results/runs/NAME.tar.xz --name NAME  # -o DIR/bench.json

Writes ``benchmarks/results/<name>-repredicted.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import UNPACKED, machine, run_dir, run_dir_errors, write  # noqa: E402

# each prediction: predict_calls' arguments and what its column says
VARIANTS = {
    "simulated": ({"work": "simulated"}, "op times run"),
    "traced": ({"work": "traced"}, "mean op times"),
    # on hosts with cores of their own: what the session bench reckoned until the sixty-fifth session
    "machine_cpu": ({"work": "simulated", "task_cpu": False}, "op times run, machine's CPU"),
    # until the sixty-sixth session: the pulls released together race (the session bench's), where
    # TensorFlow 2's go in the order released (benchmarks/arrival_order.py)
    "racing": ({"work": "simulated", "race": True}, "op times run, released pulls racing"),
    # until the seventy-first session: no cost of a byte measured, the bytes' CPU in the ops' share
    "no_comm_cpu": ({"work": "simulated", "comm_cpu": False}, "op times run, bytes' CPU in the ops'"),
}


def repredict(run_json: str, run_dir: str) -> tuple[dict, list[dict]]:
    """The run's config, and per mode its measured steps/s and the prediction of each of
    ``VARIANTS``."""
    from tfsched.bench.tf2 import predict_placements
    from tfsched.errors import TfschedError
    from tfsched.units import parse_bandwidth, parse_duration

    with open(run_json) as f:
        try:
            doc = json.load(f)
        except ValueError as e:
            raise TfschedError(f"{run_json}: not JSON ({e})") from None
    config = doc.get("config", {}) if isinstance(doc, dict) else {}
    if config.get("api") != "tf2":
        raise TfschedError(f"{run_json}: not a tfsched bench --api tf2 result (no config.api tf2)")
    # a run of several placements says each one's channel; a run of one (or before the option) its own
    placed = config.get("ps_placement") or "round-robin"
    placements = (placed,) if isinstance(placed, str) else tuple(placed)
    params = {p: at["channel_params"] for p, at in (config.get("placements") or {}).items()}
    bandwidth = None if config["bandwidth"] == "loopback" else parse_bandwidth(config["bandwidth"])
    predicted = {}
    for variant, (kwargs, _) in VARIANTS.items():
        rows = copy.deepcopy(doc["modes"])
        predict_placements(
            rows,
            run_dir,
            placements,
            channel_params=params or {placements[0]: config["channel_params"]},
            workers=config["workers"],
            steps=config["steps"],
            bandwidth_bps=bandwidth,
            latency_s=parse_duration(config["latency"].replace(" ", "")) if config.get("latency") else 0.0,
            # until the sixty-fifth session not passed: a run on such hosts re-predicted as on shared cores
            host_cores=config.get("host_cores", 0.0),
            **kwargs,
        )
        predicted[variant] = {r["mode"]: r["predicted"] for r in rows}
    rows = [
        {
            "mode": m["mode"],
            "measured_steps_per_s": m["throughput_steps_per_s"],
            # from a call's start to its worker's last pull, the median traced call's
            "pulls_done_s": m["traced"]["pulls_done_s"],
            **{f"predicted_{v}": predicted[v][m["mode"]] for v in VARIANTS},
        }
        for m in doc["modes"]
    ]
    return config, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "run",
        nargs="+",
        help="the run's -o file and its --traces directory; or the directory alone, or the run "
        "packed by keep_run.py, with the -o file in it as bench.json",
    )
    ap.add_argument("--name", required=True, help="results/<name>-repredicted.{json,md}")
    args = ap.parse_args()
    if len(args.run) > 2:
        ap.error("expected RUN.json DIR, or one run (a directory or a packed run)")
    if len(args.run) == 2:
        run_json, where = args.run
    else:
        try:
            where = run_dir(args.run[0])
        except argparse.ArgumentTypeError as e:
            ap.error(str(e))
        run_json = os.path.join(where, "bench.json")
    packed = UNPACKED.get(where)  # a packed run: its file, not where it was unpacked
    with run_dir_errors():
        config, rows = repredict(run_json, where)
    first = {v: rows[0][f"predicted_{v}"] for v in VARIANTS}
    hosts = f", each host {config['host_cores']} cores of its own" if config.get("host_cores") else ""
    md = [
        f"**{config['model']}** (TensorFlow 2, {config['mode']}, batch {config['batch_size']}), {config['ps']} PS x "
        f"{config['workers']} workers, {config['bandwidth']}{hosts}: measured steps/s and the simulator's, with "
        "the machine's share of the cores from the op times it runs (each op's fastest traced time; "
        f"{first['simulated']['machine_slots']:.3f} slots, from {first['simulated'].get('slots_from', '?')}), "
        f"from the trace's mean op times ({first['traced']['machine_slots']:.3f} slots), and from the op "
        f"times it runs over the machine's CPU ({first['machine_cpu']['machine_slots']:.3f} slots; on hosts "
        "with cores of their own as until the sixty-fifth session, elsewhere as the first); and as the "
        "first with the pulls a gate releases together racing, as until the sixty-sixth session (the "
        "others keep them in the order released); and as the first with the bytes' CPU left in the "
        "ops' share, as until the seventy-first session (the others charge it where the run measured it)",
        "",
        "| mode | steps/s "
        + "".join(f"| simulated, {label} | error " for _, label in VARIANTS.values())
        + "| last pull, measured (s) | simulated, op times run (s) |",
        "|---|---" + "|---|---" * len(VARIANTS) + "|---|---|",
        *(
            f"| {r['mode']} | {r['measured_steps_per_s']:.3f} "
            + " ".join(
                f"| {r[f'predicted_{v}']['steps_per_s']:.3f} | {r[f'predicted_{v}']['error']:+.0%}"
                for v in VARIANTS
            )
            + f" | {r['pulls_done_s']:.3f} | {r['predicted_simulated']['pulls_done_s']:.3f} |"
            for r in rows
        ),
        "",
        f"`python benchmarks/repredict_tf2.py {os.path.relpath(packed)} --name {args.name}` on the run packed "
        "by `benchmarks/keep_run.py`."
        if packed
        else f"`python benchmarks/repredict_tf2.py RUN.json DIR --name {args.name}` on the run's `-o` file and "
        "`--traces` directory (not kept in the repository).",
    ]
    record = {"config": config, "machine": machine(), "modes": rows, **({"run": packed} if packed else {})}
    write(f"{args.name}-repredicted", record, md)


if __name__ == "__main__":
    main()
