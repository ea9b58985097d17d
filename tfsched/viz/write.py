"""Writing a visualization, by the output file's extension."""

from __future__ import annotations

import html
import io
import json
import os

from tfsched.errors import TfschedError
from tfsched.io import write_atomic
from tfsched.tracing.trace import Trace
from tfsched.viz.chrome import chrome_trace, chrome_traces
from tfsched.viz.workers import worker_labels

FORMATS = (".json", ".png", ".svg", ".html")


def _priorities(schedule_path: str, trace: Trace) -> dict[str, int]:
    """The schedule's priority of each transfer of the trace it names, keyed as ``chrome_trace``
    looks them up ("tensor -> receiver task"). A transfer of a scheduled step is matched by the
    tensor its gate forwards (``tracing.replay.scheduled_tensor``); each is matched by tensor and receiver,
    else by the tensor alone where the schedule gives it one priority (a schedule of a
    one-worker graph, as between-graph replication saves it, names worker 0's pulls; the trace
    has every worker's). Sizes must agree where both are known and the tensor went whole.
    One the schedule names by no tensor is matched as the pass matches it, by the key of its
    transfer in the graph that ran (``tracing.replay.transfer_keys``: the variable it reads or
    updates) and its channel, else the key alone: Grappler pushes a gradient without the
    Identity the saved graph sends it through (until the thirty-third session 17 of VGG16
    training's 65 transfers showed no priority, and 9 of AlexNet's 33 data transfers).

    A push that updates several variables (Par-32 training's, one gradient Grappler merged from
    the 32 identical ones the saved graph's schedule names) shows the most urgent of their
    priorities, the one the pass gives it (``ordering.priority_of``).

    An error if the schedule names fewer than half of the tensors the trace moved: a schedule of
    another graph (not all of them: Grappler rewrites what a step sends)."""
    from tfsched.graph.devices import task_of
    from tfsched.ordering.schedule import load_schedule
    from tfsched.tracing.replay import scheduled_tensor, transfer_keys

    doc = load_schedule(schedule_path)
    records = [t for ch in doc["channels"] for t in ch["transfers"]]
    exact = {(t["tensor"], task_of(t["dst"])): t for t in records}
    by_channel = {(task_of(t["src"]), task_of(t["dst"]), t["key"]): t for t in records}
    by_tensor: dict[str, list[dict]] = {}
    by_key: dict[str, list[dict]] = {}
    for t in records:
        by_tensor.setdefault(t["tensor"], []).append(t)
        by_key.setdefault(t["key"], []).append(t)

    def only(recs: list[dict]) -> dict | None:  # the record of a name the schedule gives one priority
        return recs[0] if recs and len({t["priority"] for t in recs}) == 1 else None

    keys = None  # read from the partition graphs only when some tensor is not named
    priorities: dict[str, int] = {}
    moved, named = set(), set()
    for x in trace.transfers:
        tensor, src, dst = scheduled_tensor(x.tensor), task_of(x.src), task_of(x.dst)
        if tensor is None:
            continue
        moved.add((tensor, dst))
        rec = exact.get((tensor, dst)) or only(by_tensor.get(tensor, []))
        if rec is None:
            if keys is None:
                keys = transfer_keys(trace, fetches=doc.get("graph", {}).get("fetches"), source=trace.source)
            recs = [
                by_channel.get((src, dst, k)) or only(by_key.get(k, []))
                for k in keys.get((x.tensor, dst), ())
            ]
            rec = recs[0] if recs else None
            if rec is None and len(recs) > 1:  # a merged push: the most urgent of its variables'
                rec = min((r for r in recs[1:] if r is not None), key=lambda r: r["priority"], default=None)
        if rec is not None and (tensor != x.tensor or rec.get("bytes") in (None, x.bytes)):
            priorities[f"{x.tensor} -> {dst}"] = rec["priority"]
            named.add((tensor, dst))
    if records and len(named) * 2 < len(moved):
        raise TfschedError(
            f"{schedule_path}: the schedule names {len(named)} of the {len(moved)} tensors the trace "
            "moved; it is of another graph"
        )
    return priorities


def _prediction(trace: Trace, graph_path: str, fetches: list[str] | None, step: int, tag_set: str | None):
    """The simulator's record of one step of ``graph_path`` with the trace's oracle, laid out on
    the partition graphs the trace ran where it keeps them (``tracing.replay.graph_that_ran``)."""
    from tfsched.graph import load_comm_graph
    from tfsched.oracle import TimeOracle
    from tfsched.sim import build_sim_graph, simulate
    from tfsched.tracing.match import match_trace, oracle_for
    from tfsched.tracing.replay import graph_that_ran
    from tfsched.viz.plots import sim_rows

    graph = load_comm_graph(graph_path, fetches=fetches, tag_set=tag_set)
    match_trace(graph, trace, trace.source)  # the trace is what is of another graph
    oracle = oracle_for(graph, trace, fallback=TimeOracle.from_cost_model(graph))
    # what the traced steps ran, where the trace keeps it (as `analyze --trace` predicts)
    sg = build_sim_graph(graph_that_ran(trace, graph.fetches) or graph, oracle)
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
    workers: list[Trace] | None = None,
) -> None:
    """Write ``output`` by its extension: .json (Chrome trace), .png/.svg (Gantt + CDF), .html (both).

    ``graph`` (with ``fetches``; ``tag_set`` chooses a SavedModel's meta graph) adds the
    simulator's prediction of the step to the picture. ``workers``: the other workers' traces of
    the same steps (``tfsched bench --traces``'s MODE.worker-K.trace.json), drawn with
    ``trace`` on one time axis (``viz.chrome.chrome_traces``, ``viz.plots.workers_figure``)."""
    ext = os.path.splitext(output)[1].lower()
    if ext not in FORMATS:
        raise TfschedError(
            f"{output}: unsupported output type {ext or '(none)'}; use one of {', '.join(FORMATS)}"
        )
    if not 0 <= step < trace.steps:
        raise TfschedError(f"step {step} is not in the trace (it has steps 0..{trace.steps - 1})")
    # an option that this output does not draw is an error, not ignored
    if (fetches or tag_set) and not graph:
        raise TfschedError("--fetch and --tag-set choose what --graph simulates; give --graph too")
    if schedule and ext != ".json":
        raise TfschedError(
            f"{output}: --schedule puts priorities on the Chrome trace's transfers (.json); a {ext} has none"
        )
    if ext == ".json" and (graph or compare):
        raise TfschedError(
            f"{output}: --graph and --compare draw into a picture or page (.png, .svg, .html), "
            "not into the Chrome trace"
        )
    if workers and (graph or compare):
        raise TfschedError(
            f"{output}: --graph and --compare draw beside one trace, not beside several workers' traces"
        )
    traces = [trace, *(workers or [])]
    for t in workers or []:
        if not 0 <= step < t.steps:
            raise TfschedError(f"{t.source}: step {step} is not in the trace (it has steps 0..{t.steps - 1})")
    labels = worker_labels(traces) if workers else None
    if ext == ".json":
        if workers:
            doc = chrome_traces(
                traces, priorities=[_priorities(schedule, t) if schedule else None for t in traces]
            )
        else:
            doc = chrome_trace(trace, priorities=_priorities(schedule, trace) if schedule else None)
        write_atomic(output, lambda f: json.dump(doc, f))
        return
    from tfsched.viz.plots import figure, workers_figure

    predicted = _prediction(trace, graph, fetches, step, tag_set) if graph else None
    if workers:
        fig = workers_figure(traces, labels, step=step)
    else:
        fig = figure(trace, step=step, predicted=predicted, compare=compare)
    buf = io.BytesIO()
    if ext in (".png", ".svg"):
        fig.savefig(buf, format=ext[1:], dpi=110)
        write_atomic(output, lambda f: f.write(buf.getvalue()), binary=True)
        return
    fig.savefig(buf, format="svg")
    svg = buf.getvalue().decode()
    said = [
        f"{label + ': ' if labels else ''}{t.steps} traced steps, mean "
        f"{sum(t.step_times_us) / len(t.step_times_us) / 1e3:.1f} ms; {len(t.ops)} op records, "
        f"{len(t.transfers)} transfer records."
        for t, label in zip(traces, labels or [None], strict=True)
    ]
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>tfsched trace</title>"
        "<style>body{font-family:sans-serif;margin:2em}svg{max-width:100%;height:auto}</style></head><body>"
        f"<h1>tfsched trace</h1><p>{html.escape(json.dumps(trace.meta))}</p>"
        + "".join(f"<p>{html.escape(line)}</p>" for line in said)
        + f"{svg[svg.index('<svg') :]}</body></html>"
    )
    write_atomic(output, lambda f: f.write(page))
