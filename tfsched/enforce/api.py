"""What users call: ``enable`` (one line in the session config) and ``start_server``."""

from __future__ import annotations

from tfsched.errors import TfschedError

OPTIMIZER_NAME = "TfschedScheduler"
DEFAULT_TIMEOUT_MS = 60_000
STAT_NAMES = ("released", "waited", "timeouts", "cancelled", "live_steps", "wait_us")


def schedule_priorities(schedule: dict) -> list[str]:
    """``sender|receiver|key|priority`` lines for the pass, from a ``tfsched.schedule/1`` document."""
    lines = []
    for ch in schedule.get("channels", []):
        for t in ch["transfers"]:
            if t["kind"] == "control":
                continue  # control edges carry no tensor and are not gated
            lines.append(f"{ch['sender']}|{ch['receiver']}|{t['key']}|{t['priority']}")
    return lines


def match_schedule(
    schedule: dict, graph_def, fetches: list[str] | None, path: str, ps_job: str = "ps"
) -> tuple[int, int]:
    """How many of a graph's data transfers the schedule names: (matched, total)."""
    from tfsched.graph import build_comm_graph
    from tfsched.graph.load import nodes_from_graph_def, output_specs

    g = build_comm_graph(
        nodes_from_graph_def(graph_def, path),
        fetches=fetches or schedule.get("graph", {}).get("fetches") or None,
        source=path,
        output_specs=output_specs,
        ps_jobs=(ps_job,),
    )
    keys = {(ch["sender"], ch["receiver"], t["key"]) for ch in schedule["channels"] for t in ch["transfers"]}
    by_ps = {
        (ch["sender"] if f"/job:{ps_job}/" in ch["sender"] else ch["receiver"], t["key"])
        for ch in schedule["channels"]
        for t in ch["transfers"]
    }
    data = [t for t in g.transfers if t.kind != "control"]
    matched = sum(
        1
        for t in data
        if (t.src_task, t.dst_task, t.key) in keys
        or ((t.src_task if t.src_task in g.ps_tasks else t.dst_task), t.key) in by_ps
    )
    return matched, len(data)


def enable(
    config=None,
    *,
    schedule: str | None = None,
    algorithm: str = "tio",
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ps_job: str = "ps",
    graph=None,
    fetches: list[str] | None = None,
    strict: bool = False,
):
    """Turn tfsched's pass on in a session config; returns the config (a new one if none given).

    Parameters
    ----------
    config : tf.compat.v1.ConfigProto to extend (it is modified and returned).
    schedule : a ``tfsched analyze -o`` file; without one the pass orders by TIO itself.
    algorithm : ``tio`` (no schedule needed) or the algorithm of the schedule file.
    timeout_ms : the longest a gate waits before it lets its tensor go (0: no limit).
    graph : optionally the tf.Graph or GraphDef the session will run: the schedule is checked
        against it now, and a schedule made for another graph is an error here, not at run time.
    strict : make any error of the pass fail the session (default: TensorFlow logs it and runs the
        graph unscheduled).

    Example
    -------
    >>> config = tfsched.enable(schedule="schedule.json")  # doctest: +SKIP
    >>> sess = tf.compat.v1.Session(server.target, config=config)  # doctest: +SKIP
    """
    from tfsched.ordering.schedule import load_schedule

    if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms < 0:
        raise TfschedError(f"timeout_ms must be a non-negative integer (milliseconds), got {timeout_ms!r}")
    lines: list[str] = []
    mode = "counter"
    if schedule is not None:
        doc = load_schedule(schedule)
        if algorithm not in ("tio", doc["algorithm"]):
            raise TfschedError(f"{schedule}: the schedule is {doc['algorithm']!r}, not {algorithm!r}")
        lines = schedule_priorities(doc)
        mode = "queue" if doc["mode"] == "queue" else "counter"
        if not lines:
            raise TfschedError(f"{schedule}: the schedule has no transfers to order")
        if graph is not None:
            gd = graph.as_graph_def() if hasattr(graph, "as_graph_def") else graph
            matched, total = match_schedule(doc, gd, fetches, schedule, ps_job)
            if matched == 0 or matched < total // 2:
                raise TfschedError(
                    f"{schedule}: the schedule matches {matched} of the {total} transfers of this graph; "
                    "it was made for another graph (run tfsched analyze on this one)"
                )
    elif algorithm != "tio":
        raise TfschedError(
            f"algorithm {algorithm!r} needs a schedule file: tfsched analyze --algorithm {algorithm} -o FILE"
        )

    from tfsched.enforce._loader import load_ops
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    load_ops()  # the master runs the pass: it must be registered in this process
    if config is None:
        config = tf.compat.v1.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    for existing in list(rewrite.custom_optimizers):
        if existing.name == OPTIMIZER_NAME:
            rewrite.custom_optimizers.remove(existing)
    opt = rewrite.custom_optimizers.add(name=OPTIMIZER_NAME)
    opt.parameter_map["timeout_ms"].i = timeout_ms
    opt.parameter_map["ps_job"].s = ps_job.encode()
    opt.parameter_map["mode"].s = mode.encode()
    opt.parameter_map["priorities"].list.s.extend(s.encode() for s in lines)
    if strict:
        rewrite.fail_on_optimizer_errors = True
    return config


def start_server(cluster, job_name: str, task_index: int, *, config=None, start: bool = True):
    """A ``tf.distribute.Server`` in a process that has tfsched's op and pass loaded.

    Start every task (PS and workers) with it: senders run the gates.
    """
    from tfsched.enforce._loader import load_ops
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    load_ops()
    return tf.distribute.Server(cluster, job_name=job_name, task_index=task_index, config=config, start=start)


def stats(session=None, device: str | None = None) -> dict[str, int]:
    """Gate counters: of this process, or (with a session and a device) of the task running ``device``.

    ``live_steps`` is the number of steps whose gate state is still held: 0 between steps.
    """
    from tfsched.enforce._loader import load_ops

    ops = load_ops()
    if session is None:
        values = ops.tfsched_stats().numpy()
    else:
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default(), g.device(device):
            t = ops.tfsched_stats()
        with tf.compat.v1.Session(
            session.sess_str if hasattr(session, "sess_str") else session, graph=g
        ) as s:
            values = s.run(t)
    return dict(zip(STAT_NAMES, (int(v) for v in values), strict=True))
