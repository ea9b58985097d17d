"""Where a step's non-op CPU goes in the simulator: on the ops (as the bench predicts) or on the
bytes moved, on a saved bench run.

A diagnosis, not a mode of the bench: Par-32 training's step is the messages' CPU (worker 0's
ops take 0.4 ms of a 14 ms step), which the bench's prediction spreads over the ops' times
(``bench.predict.machine_slots_from_cpu``), after the pulls arrive. This predicts the run's
baseline and TIO again with a fraction of the baseline's CPU a step moved from the ops onto
the bytes the workers move (the simulator's ``comm_slot_s_per_byte``), beside what the run
measured.

    python benchmarks/cpu_on_bytes.py DIR --name par32-train --fractions 0,0.5,0.8

DIR: a run of ``tfsched bench ... --traces DIR -o DIR/bench.json`` (as ``repredict.py``).
Writes ``benchmarks/results/cpu-on-bytes-<name>.json`` and ``.md``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, run_dir_errors, run_dir_parser, run_graph, run_title, write  # noqa: E402


def predict(run_dir: str, fractions: list[float]) -> tuple[dict, list[dict]]:
    from tfsched.bench.predict import machine_slots_from_cpu
    from tfsched.graph import load_comm_graph
    from tfsched.oracle.oracle import TimeOracle
    from tfsched.ordering import carry_over, order
    from tfsched.sim import POLICY_OF_MODE, build_sim_graph, seeded_runs
    from tfsched.tracing.replay import graph_that_ran
    from tfsched.tracing.trace import Trace
    from tfsched.units import parse_bandwidth

    with open(os.path.join(run_dir, "bench.json")) as f:
        doc = json.load(f)
    config, modes = doc["config"], {m["mode"]: m for m in doc["modes"]}
    base, workers, cores = modes["baseline"], config["workers"], os.cpu_count() or 1
    solo = Trace.load(os.path.join(run_dir, "baseline.alone.trace.json"))
    with run_graph(config) as (path, built):
        saved = load_comm_graph(path, fetches=built.fetches)
    graph = graph_that_ran(solo, built.fetches, source=run_dir) or saved
    tio = carry_over(order(saved, "tio"), graph)
    moved = sum(t.bytes for t in solo.transfers) / solo.steps * workers  # bytes a step, all workers
    rows = []
    for fraction in fractions:
        per_byte = fraction * base["cpu_s_per_step"] / moved
        oracle = TimeOracle.from_trace(solo, "min")
        oracle.set_links(bandwidth_bps=parse_bandwidth(config["bandwidth"]))
        oracle.machine_slots = machine_slots_from_cpu(
            solo,
            cpu_s_per_step=base["cpu_s_per_step"],
            comm_cpu_s_per_byte=per_byte,
            workers=workers,
            cores=cores,
        )
        oracle.comm_slot_s_per_byte = per_byte * oracle.machine_slots / cores
        row = {"fraction": fraction, "cpu_s_per_byte": per_byte, "machine_slots": oracle.machine_slots}
        for mode, schedule in (("baseline", None), ("tio", tio)):
            sg = build_sim_graph(graph, oracle, schedule, workers=workers)
            policy = "random" if schedule is None else POLICY_OF_MODE[schedule.mode]
            runs = seeded_runs(sg, policy, race=schedule is not None)
            row[mode] = {
                "predicted_s": statistics.fmean(r.step_time for r in runs),
                "measured_s": modes[mode]["iteration_mean_s"] if mode in modes else None,
            }
        rows.append(row)
    return config, rows


def main() -> None:
    ap = run_dir_parser(__doc__.splitlines()[0], "results/cpu-on-bytes-<name>.{json,md}")
    ap.add_argument("--fractions", default="0,0.5,0.8", help="of the baseline's CPU a step, on the bytes")
    args = ap.parse_args()
    try:
        with run_dir_errors():
            fractions = [float(x) for x in args.fractions.split(",")]
            config, rows = predict(args.run_dir, fractions)
    except ValueError as e:
        raise SystemExit(f"Error: --fractions: {e}") from None

    def cell(r: dict) -> str:
        p, m = r["predicted_s"], r["measured_s"]
        return f"{p * 1e3:.1f} ms ({p / m - 1:+.0%})" if m else f"{p * 1e3:.1f} ms"

    md = [
        f"{run_title(config)}: the baseline and TIO predicted with a "
        "fraction of the baseline's CPU a step moved from the ops onto the bytes (error against the "
        "run's slowest workers)",
        "",
        "| on the bytes | CPU s per byte | machine slots | baseline | TIO |",
        "|---|---|---|---|---|",
        *(
            f"| {r['fraction']:.0%} | {r['cpu_s_per_byte']:.3g} | {r['machine_slots']:.3f} "
            f"| {cell(r['baseline'])} | {cell(r['tio'])} |"
            for r in rows
        ),
    ]
    write(f"cpu-on-bytes-{args.name}", {"config": config, "machine": machine(), "rows": rows}, md)


if __name__ == "__main__":
    main()
