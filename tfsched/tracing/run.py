"""``tfsched trace``: trace a built-in model or a user's graph on a local cluster."""

from __future__ import annotations

from collections.abc import Callable

from tfsched.errors import TfschedError, cause_line
from tfsched.tracing.trace import Trace
from tfsched.units import check_seconds


def load_user_graph(graph_path: str, fetches: list[str] | None, init: str | None, tag_set: str | None = None):
    """A user's saved GraphDef, MetaGraphDef or SavedModel (its meta graph ``tag_set``) as a
    tf.Graph: (graph, fetch elements, init op or None)."""
    from tfsched.graph._tf import import_tensorflow
    from tfsched.graph.load import read_graph_file

    tf = import_tensorflow()
    loaded = read_graph_file(graph_path, tag_set=tag_set)
    if loaded.graph_def is None:
        raise TfschedError(
            f"{graph_path}: a run needs a GraphDef, MetaGraphDef or SavedModel, not partition graphs"
        )
    fetches = list(fetches or []) or loaded.fetch_hints
    if not fetches:
        raise TfschedError(f"{graph_path}: name what a step runs with --fetch")
    graph = tf.Graph()
    with graph.as_default():
        try:
            tf.compat.v1.import_graph_def(loaded.graph_def, name="")
        except (ValueError, tf.errors.OpError) as e:  # a device that is none, an unknown op, ...
            raise TfschedError(f"{graph_path}: TensorFlow cannot import the graph: {cause_line(e)}") from None
    names = {op.name for op in graph.get_operations()}
    for f in fetches + ([init] if init else []):
        if f.split(":")[0] not in names:
            raise TfschedError(f"{graph_path}: {f!r} is not in the graph")
    run_fetches = [graph.as_graph_element(f) for f in fetches]
    return graph, run_fetches, (graph.as_graph_element(init) if init else None)


def tasks_for_graph(graph, graph_path: str, ps: int | None, workers: int | None) -> tuple[int, int]:
    """(PS, workers) of a cluster that runs a user's ``graph`` (a tf.Graph): as given, else as
    many as its ops are placed on (at least one each). Fewer than that is one error, before any
    task starts: the first run failed, for an op placed on a task the cluster did not have. So is
    a graph with no op on a PS (one saved without its devices, as a TF2 SavedModel is): it ran,
    and its trace had no transfer to order."""
    from tfsched.graph.build import NO_DEVICES
    from tfsched.graph.devices import tasks_needed

    devices = [op.device for op in graph.get_operations()]
    needed = tasks_needed(devices)
    if not needed["ps"]:  # nothing would cross between tasks: a trace with no transfer in it
        raise TfschedError(
            f"{graph_path}: no op is placed on a PS task (/job:ps), so no tensor would cross "
            "between tasks" + (f"; {NO_DEVICES}" if not any(devices) else "")
        )
    for job, given in (("ps", ps), ("worker", workers)):
        if given is not None and given < needed[job]:
            option = "--ps" if job == "ps" else "--workers"
            raise TfschedError(
                f"{graph_path}: its ops are placed on {needed[job]} {job} tasks (up to "
                f"/job:{job}/task:{needed[job] - 1}); give {option} {needed[job]} or leave it out"
            )
    return (
        ps if ps is not None else max(needed["ps"], 1),
        workers if workers is not None else max(needed["worker"], 1),
    )


def trace_local(
    *,
    model: str | None = None,
    graph_path: str | None = None,
    fetches: list[str] | None = None,
    init: str | None = None,
    tag_set: str | None = None,
    workers: int | None = None,
    ps: int | None = None,
    ps_placement: str = "bytes",
    steps: int = 5,
    warmup: int = 2,
    batch_size: int = 4,
    progress: Callable[[str], None] | None = None,
    step_timeout_s: float = 600.0,
) -> Trace:
    """Start PS and worker processes, run ``steps`` traced steps, return the trace.

    With a built-in model and several workers the graph uses in-graph replication, so that one
    traced step covers every worker. A user's graph (GraphDef, MetaGraphDef or SavedModel, whose
    meta graph ``tag_set`` chooses) runs as saved, with ``fetches`` and, once before, ``init``.
    ``ps_placement``: ``build_graph``'s, how a built-in model's variables are spread over ``ps``
    PS tasks. ``ps`` and ``workers`` (None: 1 for a built-in model) are the cluster's tasks; for
    a user's graph, by default as many as its ops are placed on, and never fewer (the first run
    failed, for an op placed on a task the cluster did not have).

    ``step_timeout_s``: the deadline of the init run and of each warm-up step; a traced step's
    is shorter once the warm-up steps have shown what a step takes (``collect``). A step that
    fails or runs out of time names the cluster's tasks that died, if any did.
    """
    if steps <= 0:
        raise TfschedError(f"--steps must be positive, got {steps}")
    check_seconds(step_timeout_s, "step_timeout_s")
    if (model is None) == (graph_path is None):
        raise TfschedError("give either --model or --graph")
    if model is not None and (fetches or init or tag_set):
        raise TfschedError("--fetch, --init and --tag-set go with --graph; a built-in model has its own")
    from tfsched.bench.local import LocalCluster, dead_tasks_named
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()  # after the arguments' checks: an error in them comes at once
    if model is not None:
        from tfsched.models import build_graph

        ps = 1 if ps is None else ps
        workers = 1 if workers is None else workers
        built = build_graph(
            model,
            ps_tasks=ps,
            batch_size=batch_size,
            in_graph_workers=workers if workers > 1 else 0,
            ps_placement=ps_placement,
        )
        graph, run_fetches, init_op = built.graph, built.train_op, built.init_op
        meta = {"model": model, "fetches": built.fetches}
    else:
        graph, run_fetches, init_op = load_user_graph(graph_path, fetches, init, tag_set)
        meta = {"graph": graph_path, "fetches": [f.name for f in run_fetches]}
        if tag_set:
            meta["tag_set"] = tag_set
        ps, workers = tasks_for_graph(graph, graph_path, ps, workers)
    meta.update({"workers": workers, "ps": ps})
    if model is not None and ps > 1:
        meta["ps_placement"] = ps_placement
    if progress:
        progress(f"starting {ps} PS and {workers} worker processes")
    from tfsched.deadlines import SESSION_CALL_TIMEOUT_S, deadline_ms, session_config
    from tfsched.tracing.collector import collect

    # every call has a deadline: the steps' own, and the session's (creating and closing it)
    config = session_config(timeout_s=min(step_timeout_s, SESSION_CALL_TIMEOUT_S))
    with LocalCluster(ps=ps, workers=workers, vanilla=True) as cluster:
        sess = tf.compat.v1.Session(cluster.target("worker", 0), graph=graph, config=config)
        try:
            if init_op is not None:
                sess.run(init_op, options=tf.compat.v1.RunOptions(timeout_in_ms=deadline_ms(step_timeout_s)))
            if progress:
                progress(f"tracing {steps} steps after {warmup} warm-up steps")
            return collect(
                sess,
                run_fetches,
                steps=steps,
                warmup=warmup,
                meta=meta,
                tasks=cluster.spec,
                timeout_s=step_timeout_s,
            )
        except tf.errors.OpError as e:
            dead = dead_tasks_named(cluster.dead_tasks)
            if dead:
                raise TfschedError(f"{graph_path or model}: cluster task {'; '.join(dead)}") from None
            raise TfschedError(f"{graph_path or model}: a step failed: {cause_line(e)}") from None
        finally:
            try:
                sess.close()
            except tf.errors.OpError:
                pass  # its master is gone: the deadline ended the close
