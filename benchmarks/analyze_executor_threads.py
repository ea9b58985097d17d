"""`tfsched analyze --credit N --inter-op-threads T` beside the bench runs that measured the
credit's modes.

For each bench run kept with ``--traces DIR -o DIR/bench.json``: the model's saved graph as the
run built it, analyzed as a user would (``--workers N --bandwidth B --trace TRACE``, TRACE worker
0's baseline steps traced alone or beside the other workers, ``TRACES``), then each of the run's
modes with a credit and no window of the pushes' own (``+wN``) predicted with its algorithm,
partition, credit, window per task and order, once as before (a spare thread runs an
acknowledgement's ops at once) and once with the run's inter-op threads (``--inter-op-threads``;
the run's ``--inter-op-threads``, else TensorFlow's default, one per core of this machine, where
the runs were made): each acknowledgement's ``TfschedAck`` and ``TfschedCredit`` wait in their
task's ready queue for a free thread where the task's ops, as the trace measured them, hold all.
Beside them the slowest worker measured in that run. ``analyze`` gives each worker a machine of
its own, where the bench's four share two cores: traced beside the others, a worker's ops take as
long as they did in the measured steps, and hold the threads as long (the bench's own prediction
models the sharing: ``benchmarks/repredict.py``).

    python benchmarks/analyze_executor_threads.py DIR[=NAME] [DIR[=NAME] ...]

Writes ``benchmarks/results/analyze-executor-threads.json`` and ``.md``.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import analyze_as_run, each_run, machine, run_graph, write  # noqa: E402


def _credit_modes(run_dir: str) -> tuple[dict, float, list[dict]]:
    """A kept run's config, its baseline's slowest worker (s), and its modes with a credit the
    pass enforces (no ``+wN``)."""
    with open(os.path.join(run_dir, "bench.json")) as f:
        doc = json.load(f)
    baseline = next(m["iteration_mean_s"] for m in doc["modes"] if m["mode"] == "baseline")
    return doc["config"], baseline, [m for m in doc["modes"] if m.get("credit") and not m.get("push_credit")]


# the traces analyze reads: worker 0's baseline steps alone (as the bench orders TAO from), and
# beside the other workers, sharing the machine's cores as the measured steps did
TRACES = {"alone": "baseline.alone.trace.json", "beside": "baseline.trace.json"}


def compare(arg: str) -> dict:
    """``arg``: a run's directory, or ``DIR=NAME`` to name it (its results file's name)."""
    from tfsched.analysis import analyze_graph

    run_dir, _, label = arg.partition("=")
    config, baseline, modes = _credit_modes(run_dir)
    threads = config.get("inter_op_threads") or os.cpu_count() or 1
    rows = [{"mode": m["mode"], "measured_s": m["iteration_mean_s"]} for m in modes]
    with run_graph(config) as (graph_path, built):  # the saved graph, built once for both traces
        analyzed = {
            which: analyze_as_run(config, graph_path, built, os.path.join(run_dir, trace))
            for which, trace in TRACES.items()
        }
    predicted_baseline = {which: ran.prediction.baseline_s for which, ran in analyzed.items()}
    for which, ran in analyzed.items():
        for row, m in zip(rows, modes, strict=True):
            knobs = dict(
                algorithm=m["mode"].split("+")[0],
                workers=config["workers"],
                simulate_on=ran.simulated,
                partition=m["partition"],
                credit=m["credit"],
                host_credit=bool(m["host_credit"]),
                host_order=m.get("host_order") or "steps",
                ack_share=m["ack_share"],
                credit_return=m["credit_return"],
            )
            spare, waits = (
                analyze_graph(ran.graph, ran.oracle, executor_threads=t, **knobs).prediction
                for t in (None, threads)
            )
            row[which] = {"spare_thread_s": spare.scheduled_s, "executor_threads_s": waits.scheduled_s}
            row["acknowledged"], row["messages"] = waits.acknowledged, waits.messages
    return {
        "run": label or os.path.basename(os.path.normpath(run_dir)),
        "config": config,
        "executor_threads": threads,
        "baseline": {"measured_s": baseline, "predicted_s": predicted_baseline},
        "modes": rows,
    }


def _cell(predicted: float, measured: float) -> str:
    return f"{predicted:.3f} ({predicted / measured - 1:+.0%})"


def main() -> None:
    runs = each_run(__doc__.splitlines()[0], compare)
    md = [
        "`tfsched analyze --algorithm A --workers N --bandwidth B --trace TRACE --partition P --credit C "
        "[--host-credit] [--host-order priority]`, without and with `--inter-op-threads T` (T: the "
        "run's inter-op threads, else one per core of this machine), beside the slowest worker "
        "measured in the bench run that traced it (seconds; error against the measurement). TRACE: "
        "worker 0's baseline steps traced alone (`DIR/baseline.alone.trace.json`), or beside the other "
        "workers, sharing the two cores as the measured steps did (`DIR/baseline.trace.json`). analyze "
        "gives each worker a machine of its own. Produced by "
        "`python benchmarks/analyze_executor_threads.py DIR[=NAME] ...`, each run named by its results "
        "file (`benchmarks/results/NAME.md`).",
        "",
        "| run | T | mode | acknowledged / messages | measured | alone, a spare thread | alone, T threads "
        "| beside, a spare thread | beside, T threads |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        c = r["config"]
        name = f"{r['run']}: {c['model']} {c['mode']}, batch {c['batch_size']}"
        b, t = r["baseline"], r["executor_threads"]
        cells = " | ".join(f"{_cell(b['predicted_s'][w], b['measured_s'])} | " for w in TRACES)
        md.append(f"| {name} | {t} | baseline | - | {b['measured_s']:.3f} | {cells} |")
        for m in r["modes"]:
            ms = m["measured_s"]
            cells = " | ".join(
                f"{_cell(m[w]['spare_thread_s'], ms)} | {_cell(m[w]['executor_threads_s'], ms)}"
                for w in TRACES
            )
            md.append(
                f"| {name} | {t} | {m['mode']} | {m['acknowledged']} / {m['messages']} | {ms:.3f} | {cells} |"
            )
    write("analyze-executor-threads", {"machine": machine(), "runs": runs}, md)


if __name__ == "__main__":
    main()
