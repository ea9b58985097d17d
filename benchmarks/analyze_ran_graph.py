"""`tfsched analyze --trace` on the saved graph and on the graph that ran, beside the bench run
that traced it.

For each bench run kept with ``--traces DIR -o DIR/bench.json``: the model's saved graph as the
run built it, analyzed as a user would (``--algorithm tao --workers N --bandwidth B --trace
DIR/baseline.alone.trace.json``), its prediction laid out on the saved graph (as before the
thirtieth session) and on the partition graphs the trace ran (``tracing.replay.graph_that_ran``),
beside the baseline's and TAO's slowest workers measured in that run. ``analyze`` gives every
worker a machine of its own, as a cluster does; the bench's four workers share two cores, so
on compute-heavy rows the measurement is the slower.

    python benchmarks/analyze_ran_graph.py DIR [DIR ...]

Writes ``benchmarks/results/analyze-graph-that-ran.json`` and ``.md``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import analyze_as_run, bench_run, each_run, machine, run_graph, write  # noqa: E402


def compare(run_dir: str) -> dict:
    from tfsched.analysis import analyze_graph

    config, measured = bench_run(run_dir)
    with run_graph(config) as (graph_path, built):
        ran = analyze_as_run(config, graph_path, built, os.path.join(run_dir, "baseline.alone.trace.json"))
    saved = analyze_graph(ran.graph, ran.oracle, algorithm="tao", workers=config["workers"])
    return {
        "config": config,
        "simulated_graph": ran.simulated_graph,
        "measured_baseline_s": measured["baseline"],
        "measured_tao_s": measured.get("tao"),
        "saved": {"baseline_s": saved.prediction.baseline_s, "tao_s": saved.prediction.scheduled_s},
        "ran": {"baseline_s": ran.prediction.baseline_s, "tao_s": ran.prediction.scheduled_s},
    }


def _cell(predicted: float, measured: float) -> str:
    return f"{predicted:.4f} ({predicted / measured - 1:+.0%})"


def main() -> None:
    rows = each_run(__doc__.splitlines()[0], compare)
    md = [
        "`tfsched analyze --algorithm tao --workers N --bandwidth B --trace` (B the run's shaped rate; worker 0's baseline steps traced "
        "alone) laid out on the saved graph and on the graph that ran, beside the slowest worker "
        "measured in the run that traced it (seconds; error against the measurement). The bench's "
        "workers share two cores, analyze gives each its own machine.",
        "",
        "| run | transfers a worker (saved → ran) | measured baseline | saved graph | ran graph "
        "| measured TAO | saved graph | ran graph |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c, g, mb, mt = r["config"], r["simulated_graph"], r["measured_baseline_s"], r["measured_tao_s"]
        tao = (
            f"{mt:.4f} | {_cell(r['saved']['tao_s'], mt)} | {_cell(r['ran']['tao_s'], mt)}"
            if mt
            else "- | - | -"
        )
        md.append(
            f"| {c['model']} {c['mode']}, batch {c['batch_size']} | {g['saved_transfers']} → {g['transfers']} "
            f"| {mb:.4f} | {_cell(r['saved']['baseline_s'], mb)} | {_cell(r['ran']['baseline_s'], mb)} | {tao} |"
        )
    write("analyze-graph-that-ran", {"machine": machine(), "runs": rows}, md)


if __name__ == "__main__":
    main()
