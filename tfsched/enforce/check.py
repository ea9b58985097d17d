"""Checking a cluster before a run: every task has tfsched's library loaded, and the same build.

The master's pass puts gates on every task, and every task runs the pass that makes its
transfers inline, so each must have loaded the library (``tfsched.start_server``). A task that
has not fails the first step with TensorFlow's ``Op type not registered 'TfschedGate'``, named
by its gRPC address only in the error's last lines; a task that loaded another build (a host
upgraded before the others) runs gates the master's pass did not write them for. This says it
before a run, for each task by its name.

Each task is asked through its own address, as its own master, with a session that sees no
other task (``device_filters``): the master of a session that sees every task waits for each at
the session's creation (``CreateSession still waiting for response from worker``), so one task
down would hold the others' answers, past the session's deadline where that master is in this
process (``list_devices`` waited two minutes with a 5 s ``operation_timeout_in_ms``, in a
probe); a task's own session fails at its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tfsched.deadlines import SESSION_CALL_TIMEOUT_S
from tfsched.errors import TfschedError
from tfsched.graph.devices import cluster_task_devices, short_task, task_of
from tfsched.units import check_seconds

NOT_LOADED = "has no tfsched library loaded: start it with tfsched.start_server"
NO_ANSWER = "did not answer"


@dataclass(frozen=True)
class TaskBuild:
    """What one task answered: ``build`` (``tfsched.enforce.build.build_id``), or ``problem``;
    with ``counters``, its gates' counters (``tfsched.enforce.stats``) where its build is this
    process's."""

    task: str  # /job:<job>/replica:0/task:<i>
    address: str
    build: str | None
    problem: str | None
    stats: dict[str, int] | None = None


def task_builds(
    cluster, *, jobs=None, timeout_s: float = SESSION_CALL_TIMEOUT_S, counters: bool = False
) -> list[TaskBuild]:
    """Ask every task of ``jobs`` (default: all but the coordinator's ``chief``) of ``cluster``
    (a ``tf.train.ClusterSpec``, its dict, or a cluster resolver) which build of tfsched's library
    it runs (and with ``counters`` its gates' counters), all at once, each within ``timeout_s``;
    in the cluster's order.

    A task's ``problem``: it has no tfsched loaded, runs another build than this process (or
    one from before ``TfschedBuild``, which has the other ops), did not answer, or TensorFlow's
    first line of what went wrong."""
    from tfsched.enforce._loader import load_ops
    from tfsched.enforce.api import STAT_NAMES
    from tfsched.graph._tf import import_tensorflow

    check_seconds(timeout_s, "timeout_s")
    devices = cluster_task_devices(cluster, jobs, "to check")
    tf = import_tensorflow()
    ops = load_ops()
    mine = ops.tfsched_build().numpy().decode()
    other = "start every task with the same tfsched and TensorFlow"

    def run_on(address: str, device: str, make):
        """``make()``'s ops placed on ``device`` run by its task's own master, which sees no other."""
        from tfsched.deadlines import session_config

        g = tf.Graph()
        with g.as_default(), g.device(device):
            fetches = make()
        config = session_config(timeout_s=timeout_s)
        config.device_filters.append(task_of(device))
        options = tf.compat.v1.RunOptions(timeout_in_ms=config.operation_timeout_in_ms)
        with tf.compat.v1.Session(f"grpc://{address}", graph=g, config=config) as sess:
            return sess.run(fetches, options=options)

    def ask(address: str, device: str) -> TaskBuild:
        task = task_of(device)
        try:
            try:
                theirs, values = run_on(address, device, lambda: (ops.tfsched_build(), ops.tfsched_stats()))
            except tf.errors.NotFoundError as e:
                if "TfschedBuild" not in str(e):
                    raise
                try:  # a build from before TfschedBuild has its other ops
                    run_on(address, device, ops.tfsched_stats)
                except tf.errors.NotFoundError as e:
                    if "TfschedStats" not in str(e):
                        raise
                    return TaskBuild(task, address, None, NOT_LOADED)
                return TaskBuild(task, address, None, f"runs a tfsched built before TfschedBuild: {other}")
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError):
            return TaskBuild(task, address, None, f"{NO_ANSWER} within {timeout_s:g} s")
        except tf.errors.OpError as e:
            return TaskBuild(task, address, None, _first_line(e))
        theirs = theirs.decode()
        if theirs != mine:
            return TaskBuild(
                task, address, theirs, f"runs tfsched build {theirs}, this process {mine}: {other}"
            )
        stats = dict(zip(STAT_NAMES, (int(v) for v in values), strict=True)) if counters else None
        return TaskBuild(task, address, theirs, None, stats)

    return _at_once(ask, list(devices.items()))


def _at_once(fn, items: list[tuple], most: int = 32) -> list:
    """``fn(*item)`` for each item, at most ``most`` at a time, on daemon threads; the results
    in order. Not a ThreadPoolExecutor: at Ctrl-C it waited for the asks in flight (52 s of a
    60 s deadline, then ``Aborted.``), and its threads are joined at the interpreter's exit."""
    import threading

    out: list = [None] * len(items)
    slots = threading.BoundedSemaphore(most)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            out[k] = fn(*items[k])
        except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
            errors.append(e)
        finally:
            slots.release()

    threads = []
    for k in range(len(items)):
        slots.acquire()
        threads.append(threading.Thread(target=run, args=(k,), name="tfsched-check", daemon=True))
        threads[-1].start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def check_cluster(
    cluster, *, jobs=None, timeout_s: float = SESSION_CALL_TIMEOUT_S, wait_s: float = 0.0
) -> dict[str, str]:
    """Task -> build of tfsched's library, once every task of ``jobs`` (default: all but the
    coordinator's ``chief``) of ``cluster`` has answered within ``timeout_s`` with this process's
    build; else one TfschedError line naming each task that did not and why (``task_builds``).
    ``wait_s``: a cluster that is starting; the tasks that do not answer yet are asked again
    until they do, for at most that long (``wait_answers``).

    Call it where the client or coordinator starts, before its first step: a task started
    without ``tfsched.start_server`` would fail that step, a task with another build would run
    it with gates of another version, and a task that is not up yet would hold the session (for
    good, where its master is in this process: ``tfsched.deadlines.session_config``).

    >>> tfsched.check_cluster(cluster_spec, wait_s=300)  # doctest: +SKIP
    {'/job:ps/replica:0/task:0': 'tf2.21.0-2b7ece3aae355f6d', '/job:worker/replica:0/task:0': ...}
    """
    found = wait_answers(cluster, jobs=jobs, timeout_s=timeout_s, wait_s=wait_s)
    raise_not_ready(found)
    return {b.task: b.build for b in found}


def wait_answers(
    cluster,
    *,
    jobs=None,
    timeout_s: float = SESSION_CALL_TIMEOUT_S,
    wait_s: float = 0.0,
    counters: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[TaskBuild]:
    """``task_builds``, asked again about once a second while some task does not answer, until
    all do or ``wait_s`` has passed; a problem other than no answer (no tfsched, another build)
    ends the wait at once. ``progress(text)``: told which tasks it waits for."""
    check_seconds(wait_s, "wait_s", zero=True)
    deadline = time.monotonic() + wait_s
    while True:
        started = time.monotonic()
        found = task_builds(cluster, jobs=jobs, timeout_s=timeout_s, counters=counters)
        silent = [b for b in found if (b.problem or "").startswith(NO_ANSWER)]
        other = [b for b in found if b.problem is not None and b not in silent]
        if not silent or other or time.monotonic() >= deadline:
            return found
        if progress is not None:
            names = ", ".join(short_task(b.task) for b in silent)
            progress(f"waiting for {len(silent)} of {len(found)} tasks to answer: {names}")
        time.sleep(max(0.0, min(1.0 - (time.monotonic() - started), deadline - time.monotonic())))


def raise_not_ready(found: list[TaskBuild]) -> None:
    """One TfschedError line naming each task of ``found`` with a problem, and the problem."""
    bad = [b for b in found if b.problem is not None]
    if bad:
        raise TfschedError(
            f"{len(bad)} of {len(found)} tasks not ready for tfsched: "
            + "; ".join(f"{b.task} ({b.address}) {b.problem}" for b in bad)
        )


def load_cluster(text: str | None, environ=None) -> tuple[dict, str]:
    """(cluster spec dict, where it came from) from ``text``: a JSON file's path or JSON, of a
    cluster (``{"ps": ["host:port"], "worker": [...]}``) or of a ``TF_CONFIG`` (its
    ``cluster``); None: the ``TF_CONFIG`` of ``environ`` (default: this process's). What is not
    one is one TfschedError line that names where it came from.

    >>> load_cluster('{"ps": ["h:1"], "worker": ["h:2", "h:3"]}')
    ({'ps': ['h:1'], 'worker': ['h:2', 'h:3']}, '--cluster')
    >>> load_cluster(None, {"TF_CONFIG": '{"cluster": {"worker": ["h:2"]}, "task": {}}'})
    ({'worker': ['h:2']}, 'TF_CONFIG')
    """
    import json
    import os

    environ = os.environ if environ is None else environ
    if text is None:
        if not environ.get("TF_CONFIG"):
            raise TfschedError("no cluster to check: give --cluster, or set TF_CONFIG")
        where, raw = "TF_CONFIG", environ["TF_CONFIG"]
    elif os.path.isfile(text):
        where = text
        try:
            with open(text, encoding="utf-8") as f:
                raw = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise TfschedError(f"{text}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    elif not text.lstrip().startswith(("{", "[")):  # a path, mistyped or not a file
        raise TfschedError(f"{text}: no such file, and not a cluster in JSON")
    else:
        where, raw = "--cluster", text
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise TfschedError(f"{where}: not JSON ({e})") from None
    spec = doc.get("cluster", doc) if isinstance(doc, dict) else doc
    if not (isinstance(spec, dict) and spec and all(_addresses(v) for v in spec.values())):
        raise TfschedError(
            f'{where}: not a cluster spec: expected {{job: ["host:port", ...]}}, as in TF_CONFIG\'s cluster'
        )
    return spec, where


def _addresses(value) -> bool:
    """Whether ``value`` is a job's tasks: a list of addresses, or {task index: address}."""
    if isinstance(value, dict):
        return bool(value) and all(str(k).isdigit() and isinstance(a, str) and a for k, a in value.items())
    return isinstance(value, list) and bool(value) and all(isinstance(a, str) and a for a in value)


def _first_line(error) -> str:
    """An OpError's message, its first line past TensorFlow's heading ("Graph execution
    error:"), without the RPC's details TensorFlow adds after it."""
    lines = [line.strip() for line in str(getattr(error, "message", error)).splitlines()]
    lines = [line for line in lines if line and not line.endswith("execution error:")]
    return lines[0] if lines else type(error).__name__
