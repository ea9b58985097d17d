"""`tfsched analyze --trace` of steps tfsched scheduled, beside the same analysis of the vanilla
steps traced in the same bench run.

A user who runs with ``tfsched.enable`` on traces scheduled steps (a ``TraceHook``); until the
thirty-first session ``analyze`` refused such a trace. For each bench run kept with ``--traces
DIR -o DIR/bench.json``: each mode's trace of worker 0's steps, the other workers running
beside it (the baseline's vanilla, the others scheduled), analyzed as a user would (``--algorithm tao --workers N
--bandwidth B``, B the run's shaped rate), on the saved graph the run built. Each row gives
what the trace's transfers matched, the predicted baseline and TAO steps, the traced step (the
median of the mode's traced steps) and its ordering efficiency E against the predicted bounds,
beside the mode's slowest worker measured in the run. What should hold: a scheduled trace's
predictions come near the vanilla trace's, for the same graph and cluster.

    tfsched bench --model seq32 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 10 \
        --rounds 2 --batch-size 4 --modes baseline,tao,tao+pc,tao+pc+host --traces DIR -o DIR/bench.json
    python benchmarks/analyze_scheduled_trace.py DIR [DIR ...]

The results file has six runs of the thirty-second session, each with ``--ps 1 --workers 4
--bandwidth 1Gbit --modes baseline,tao,tao+pc,tao+pc+host`` (VGG16 inference ``baseline,tao,
tao+pc+host``) and the row's batch of BENCHMARKS.md: Par-32 training and Seq-32 inference with
``--steps 10 --rounds 2``, VGG16 training and inference, ResNet-50 inference and Inception-v3
training with ``--steps 2 --rounds 2`` (VGG16 inference ``--steps 2 --rounds 1``).

Writes ``benchmarks/results/analyze-scheduled-trace.json`` and ``.md``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import analyze_as_run, bench_run, each_run, machine, run_graph, write  # noqa: E402


def compare(run_dir: str) -> dict:
    config, measured = bench_run(run_dir)
    rows = []
    with run_graph(config) as (graph_path, built):
        for mode in measured:
            trace = os.path.join(run_dir, f"{mode}.trace.json")
            if not os.path.exists(trace):
                continue
            a = analyze_as_run(config, graph_path, built, trace)
            m = a.trace_match
            rows.append(
                {
                    "mode": mode,
                    "scheduled": a.traced.scheduled,
                    "gated_transfers": m.gated_transfers,
                    "transfers_matched": m.transfers_matched,
                    "transfers_total": m.transfers_total,
                    "simulated_graph": a.simulated_graph,
                    "predicted_baseline_s": a.prediction.baseline_s,
                    "predicted_tao_s": a.prediction.scheduled_s,
                    "traced_step_s": a.traced.step_s,
                    "traced_efficiency": a.traced.efficiency(a.prediction),
                    "measured_s": measured[mode],
                }
            )
    return {"config": config, "traces": rows}


def _vs(r: dict, vanilla: dict | None, key: str) -> str:
    """``r[key]``, and its change against the vanilla trace's."""
    if vanilla is None or r is vanilla:
        return f"{r[key]:.4f}"
    return f"{r[key]:.4f} ({r[key] / vanilla[key] - 1:+.0%})"


def main() -> None:
    runs = each_run(__doc__.splitlines()[0], compare)
    md = [
        "`tfsched analyze --algorithm tao --workers N --bandwidth B --trace MODE.trace.json` (B the "
        "run's shaped rate) of each mode's traced steps of worker 0, the others running beside it: "
        "the baseline's vanilla, the others scheduled by tfsched. Seconds; the predictions' change against the "
        "vanilla trace's in brackets. Measured: the mode's slowest worker, mean over the run.",
        "",
    ]
    for run in runs:
        c = run["config"]
        md += [
            f"**{c['model']} {c['mode']}, {c['workers']} workers, batch {c['batch_size']}, {c['bandwidth']}**",
            "",
            "| trace of | transfers matched (gated a step) | laid out | predicted baseline | predicted TAO "
            "| traced step | E of it | measured |",
            "|---|---|---|---|---|---|---|---|",
        ]
        vanilla = next((r for r in run["traces"] if not r["scheduled"]), None)

        for r in run["traces"]:
            g = r["simulated_graph"]
            # fewer matched than the vanilla trace: gates' bytes rounded (a trace from before the
            # collector read them from the pass's nodes)
            short = vanilla is not None and r["transfers_matched"] < vanilla["transfers_matched"]
            md.append(
                f"| {r['mode']} | {r['transfers_matched']}/{r['transfers_total']}{' †' if short else ''} "
                f"({r['gated_transfers']}) "
                f"| {g['from']}, {g['transfers']} transfers | {_vs(r, vanilla, 'predicted_baseline_s')} "
                f"| {_vs(r, vanilla, 'predicted_tao_s')} | {r['traced_step_s']:.4f} | {r['traced_efficiency']:.2f} "
                f"| {r['measured_s']:.4f} |"
            )
        md.append("")
    md.append(
        "Transfers matched: of the saved graph's, those the trace's transfers explain; Grappler "
        "rewrites some (Par-32 training pushes 2 tensors a step where the saved graph has 33), and "
        "the prediction lays out the partition graphs that ran."
    )
    if any("†" in line for line in md):
        md.append(
            "† Fewer transfers matched than the vanilla trace's: a trace written before the thirty-first "
            "session has its gates' bytes as the step stats' label rounds them (209,715 for 262,144), "
            "and the tensors whose rounded sizes differ do not match by size."
        )
    write("analyze-scheduled-trace", {"machine": machine(), "runs": runs}, md)


if __name__ == "__main__":
    main()
