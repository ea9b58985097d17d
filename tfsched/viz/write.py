"""Writing a visualization, by the output file's extension."""

from __future__ import annotations

import html
import io
import json
import os

from tfsched.errors import TfschedError
from tfsched.io import write_atomic
from tfsched.tracing.trace import Trace
from tfsched.viz.chrome import chrome_trace

FORMATS = (".json", ".png", ".svg", ".html")


def _priorities(schedule_path: str) -> dict[str, int]:
    from tfsched.graph.devices import task_of
    from tfsched.ordering.schedule import load_schedule

    doc = load_schedule(schedule_path)
    return {
        f"{t['tensor']} -> {task_of(t['dst'])}": t["priority"]
        for ch in doc["channels"]
        for t in ch["transfers"]
    }


def _prediction(trace: Trace, graph_path: str, fetches: list[str] | None, step: int, tag_set: str | None):
    """The simulator's record of one step of ``graph_path`` with the trace's oracle."""
    from tfsched.graph import load_comm_graph
    from tfsched.oracle import TimeOracle
    from tfsched.sim import build_sim_graph, simulate
    from tfsched.tracing.match import match_trace, oracle_for
    from tfsched.viz.plots import sim_rows

    graph = load_comm_graph(graph_path, fetches=fetches, tag_set=tag_set)
    match_trace(graph, trace, graph_path)
    oracle = oracle_for(graph, trace, fallback=TimeOracle.from_cost_model(graph))
    sg = build_sim_graph(graph, oracle)
    return sim_rows(sg, simulate(sg, "fifo", record=True))


def write_visualization(
    trace: Trace,
    output: str,
    *,
    schedule: str | None = None,
    graph: str | None = None,
    fetches: list[str] | None = None,
    compare: dict[str, Trace] | None = None,
    step: int = 0,
    tag_set: str | None = None,
) -> None:
    """Write ``output`` by its extension: .json (Chrome trace), .png/.svg (Gantt + CDF), .html (both).

    ``graph`` (with ``fetches``; ``tag_set`` chooses a SavedModel's meta graph) adds the
    simulator's prediction of the step to the picture."""
    ext = os.path.splitext(output)[1].lower()
    if ext not in FORMATS:
        raise TfschedError(
            f"{output}: unsupported output type {ext or '(none)'}; use one of {', '.join(FORMATS)}"
        )
    if not 0 <= step < trace.steps:
        raise TfschedError(f"step {step} is not in the trace (it has steps 0..{trace.steps - 1})")
    if ext == ".json":
        priorities = _priorities(schedule) if schedule else None
        doc = chrome_trace(trace, priorities=priorities)
        write_atomic(output, lambda f: json.dump(doc, f))
        return
    from tfsched.viz.plots import figure

    predicted = _prediction(trace, graph, fetches, step, tag_set) if graph else None
    fig = figure(trace, step=step, predicted=predicted, compare=compare)
    buf = io.BytesIO()
    if ext in (".png", ".svg"):
        fig.savefig(buf, format=ext[1:], dpi=110)
        write_atomic(output, lambda f: f.write(buf.getvalue()), binary=True)
        return
    fig.savefig(buf, format="svg")
    svg = buf.getvalue().decode()
    mean = sum(trace.step_times_us) / len(trace.step_times_us) / 1e3
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>tfsched trace</title>"
        "<style>body{font-family:sans-serif;margin:2em}svg{max-width:100%;height:auto}</style></head><body>"
        f"<h1>tfsched trace</h1><p>{html.escape(json.dumps(trace.meta))}</p>"
        f"<p>{trace.steps} traced steps, mean {mean:.1f} ms; {len(trace.ops)} op records, "
        f"{len(trace.transfers)} transfer records.</p>{svg[svg.index('<svg') :]}</body></html>"
    )
    write_atomic(output, lambda f: f.write(page))
