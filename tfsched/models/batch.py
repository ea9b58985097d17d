"""The default batch size of a benchmark: communication and computation about equal (TicTac §6).

Communication per step: every worker pulls every parameter and pushes a gradient of each, and
all of it crosses the PS hosts' links, shared by the workers: bytes x workers / (PS tasks x
bandwidth) per direction (the directions run in parallel). Computation per step is measured
here: the fastest step of the model (devices cleared, one process) at two batch sizes, far
enough apart for the difference to stand out of the noise, gives its fixed part and its cost
per example; the batch size whose compute time equals the communication time
is the default, within [1, 1024]. When the workers of an emulated cluster share this machine,
each one computes ``workers`` times slower, and the balance accounts for it: the probe already
runs on all the machine's cores (TensorFlow's intra-op threads), so four workers at once each
get a quarter of it. Until the seventh session the factor was ``workers / cores``, as if the
probe used one core; VGG16 inference (1 PS x 4 workers, 1 Gbit/s) then balanced at 821, where
the traced lower bound of a step was 9.15 s of the machine's compute against 4.3 s of the PS's
link (the factor ``workers`` expects 8.6 s).

The two probes are small batches, and a line through them is not the cost at the batch it
solves for: since the fourteenth session the balance is measured there, with ``workers``
processes computing at once when they share the machine (each its own TensorFlow, as the
cluster's tasks are), and the batch is re-solved from that measurement (the fixed part kept, the
per-example cost taken from it) until compute is within ``REFINE_TOLERANCE`` of communication,
at most ``REFINE_ROUNDS`` times. VGG16 inference (1 PS x 4 workers, 1 Gbit/s): the line through
the probes gave 496 in the seventh session and 348 in the fourteenth, while four processes at
once took 6.0 s a step at 496 (one process alone 1.37 s, so four 5.5 s) against 4.3 s of the
link.

The upper bound was 256 until the seventh session; it cut VGG16 inference short of its
balance. The balances of the rows of BENCHMARKS.md are well under 1,024 (VGG16 inference 331,
ResNet-50 inference 680, Inception-v3 inference 299); four VGG16 inference workers at 821, the largest batch run,
fit this machine's 24 GiB.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass

from tfsched.errors import TfschedError
from tfsched.models import _probe

MIN_BATCH, MAX_BATCH = 1, 1024
# measuring at the solved batch: stop within this share of communication, or after this many
REFINE_TOLERANCE = 0.10
REFINE_ROUNDS = 3
# a probe of processes computing at once that has not reported by then has failed
PROBE_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Balance:
    batch_size: int
    comm_s: float  # per step, at the given bandwidth
    fixed_s: float  # compute per step independent of the batch
    per_example_s: float
    # (batch size, compute seconds per step) measured at the solved batches, the last one last
    measured: tuple[tuple[int, float], ...] = ()

    def to_json(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "comm_s": self.comm_s,
            "compute_fixed_s": self.fixed_s,
            "compute_per_example_s": self.per_example_s,
            "measured": [{"batch_size": b, "compute_s": t} for b, t in self.measured],
        }


def _step_times(
    model: str, mode: str, batch: int, image_size: int | None, steps: int, ready=None
) -> list[float]:
    """Seconds of each of ``steps`` steps of the model in this process (devices cleared), after
    a warm-up step and, if given, ``ready()`` (which returns when the steps may start)."""
    from tfsched.graph._tf import import_tensorflow
    from tfsched.models import build_graph

    tf = import_tensorflow()
    built = build_graph(model, mode=mode, batch_size=batch, image_size=image_size)
    gd = built.graph_def(add_shapes=False)
    for n in gd.node:
        n.device = ""
    for f in gd.library.function:  # branches of functional ops carry devices too
        for n in f.node_def:
            n.device = ""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    step = built.fetches[0]
    init = built.init_op.name
    with tf.compat.v1.Session(graph=g) as sess:
        sess.run(init)
        sess.run(step)  # warm-up
        if ready is not None:
            ready()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            sess.run(step)
            times.append(time.perf_counter() - start)
        return times


def _forward(index: int, stream, lines: queue.Queue) -> None:
    """Puts each of a probe process's messages on ``lines`` as (index, message), then (index,
    None) at its end; its other output (TensorFlow's) is not a message."""
    try:
        for line in stream:
            if line.startswith(_probe.PREFIX):
                try:
                    lines.put((index, json.loads(line[len(_probe.PREFIX) :])))
                except ValueError:
                    lines.put((index, {"error": f"unreadable message {line.strip()!r}"}))
    finally:
        lines.put((index, None))


def _probe_argv(model: str, mode: str, batch: int, image_size: int | None, steps: int) -> list[str]:
    """What one process of a probe runs, as ``python ARGV`` (``bench.zygote.Zygote.start``'s).

    >>> _probe_argv("seq32", "train", 4, None, 3)
    ['-m', 'tfsched.models._probe', 'seq32', 'train', '4', '0', '3']
    """
    return ["-m", _probe.__name__, model, mode, str(batch), str(image_size or 0), str(steps)]


def _compute_time(
    model: str,
    mode: str,
    batch: int,
    image_size: int | None,
    steps: int = 3,
    copies: int = 1,
    host_cores: float = 0.0,
) -> float:
    """Compute seconds per step at ``batch``: the fastest of ``steps`` steps in this process, or,
    with ``copies`` > 1, the mean step of that many processes computing at once (each its own
    TensorFlow, started as the cluster's tasks are, so a caller needs no ``__main__`` guard).
    They start their steps together, once all have warmed up, and each runs one step more than
    it reports, so the others' last steps share the machine too. Every wait ends: a process that
    fails reports why, one that dies is seen at the end of its output, and all of it within
    ``PROBE_TIMEOUT_S``; the processes do not outlive the call. ``host_cores``: each of the
    copies capped at that many cores, as the bench's hosts are (``bench.hostcpu``).

    Since the ninetieth session the processes are forked, as the cluster's tasks are, from the
    process's zygote (``bench.zygote``), which imported TensorFlow once: a probe of two
    processes no longer imports it twice (5 s of CPU each on this machine's Intel Xeon), and
    each round of ``balanced_batch_size``'s refinement starts two more. With
    ``TFSCHED_FORKED_TASKS=0`` each is a process of its own, as before."""
    if copies <= 1:
        # the fastest step: the others carry this machine's noise
        return min(_step_times(model, mode, batch, image_size, steps))
    from tfsched.bench.local import stop_processes, task_env
    from tfsched.bench.zygote import TaskHost, start_python, zygote

    where = f"batch-size probe ({model} {mode}, batch {batch}, {copies} processes at once)"
    argv = _probe_argv(model, mode, batch, image_size, steps)
    env = task_env()
    forks = zygote(env)
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    lines: queue.Queue = queue.Queue()
    procs: list = []  # each a Popen or a bench.zygote.ForkedTask
    done: dict[int, list[float]] = {}  # process -> its step times
    tmp = tempfile.TemporaryDirectory(prefix="tfsched-probe-")
    errs = [os.path.join(tmp.name, f"{i}.err") for i in range(copies)]  # their stderr

    def died(i: int) -> TfschedError:
        try:
            code = procs[i].wait(10)
        except subprocess.TimeoutExpired:
            code = None
        with open(errs[i]) as f:  # its last words, if any
            last = [ln.strip() for ln in f if ln.strip()][-1:] or ["no output"]
        return TfschedError(f"{where}: a process ended (exit code {code}) without a result: {last[0]}")

    def message(what: str):
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TfschedError(f"{where}: no {what} after {PROBE_TIMEOUT_S:.0f} s")
            try:
                i, msg = lines.get(timeout=left)
            except queue.Empty:
                continue
            if msg is None:
                if i not in done:
                    raise died(i)
                continue
            if "error" in msg:
                raise TfschedError(f"{where}: {msg['error']}")
            return i, msg

    if host_cores:
        from tfsched.bench.hostcpu import HostCpu

        caps = HostCpu(host_cores)
    else:
        caps = contextlib.nullcontext()
    with tmp, caps:
        try:
            for i in range(copies):
                host = TaskHost(cgroup_procs=caps.procs("probe", i) if host_cores else None)
                with open(errs[i], "w") as err:
                    p = start_python(forks, argv, name=f"probe:{i}", host=host, env=env, stderr=err)
                procs.append(p)
                threading.Thread(target=_forward, args=(i, p.stdout, lines), daemon=True).start()
            ready: set[int] = set()
            while len(ready) < copies:
                i, msg = message("start")
                ready.add(i)
            for i, p in enumerate(procs):  # all warmed up: the steps start together
                try:
                    p.stdin.write("go\n")
                    p.stdin.close()
                except OSError:
                    raise died(i) from None
            while len(done) < copies:
                i, msg = message("result")
                done[i] = msg["times"]
        finally:
            stop_processes(procs)
    return statistics.fmean(statistics.fmean(t) for t in done.values())


def param_bytes(model: str, image_size: int | None) -> int:
    from tfsched.models import build_graph

    built = build_graph(model, batch_size=1, image_size=image_size)
    with built.graph.as_default():
        import tensorflow as tf

        return sum(v.shape.num_elements() * v.dtype.size for v in tf.compat.v1.trainable_variables())


def balanced_batch_size(
    model: str,
    *,
    bandwidth_bps: float,
    workers: int,
    ps: int = 1,
    mode: str = "train",
    image_size: int | None = None,
    probe: int = 4,
    shared_cores: bool = True,
    host_cores: float = 0.0,
) -> Balance:
    """The batch whose compute per step is about ``workers`` x the model's bytes over the PS
    tasks' links (module docstring). ``host_cores``: the bench's workers each capped at that many
    cores (``bench.hostcpu``); the batch is then measured with the copies capped alike."""
    nbytes = param_bytes(model, image_size)
    comm = nbytes * workers / (ps * bandwidth_bps / 8.0)
    shared = float(workers) if shared_cores else 1.0
    t1 = _compute_time(model, mode, probe, image_size) * shared
    # The second probe must be large enough for the per-example cost to stand out of the fixed
    # part (a forward pass of a small-image model at batch 8 costs about what it costs at 4).
    big = 4 * probe
    t2 = _compute_time(model, mode, big, image_size) * shared
    while t2 < 1.5 * t1 and big < MAX_BATCH:
        big = min(MAX_BATCH, 4 * big)
        t2 = _compute_time(model, mode, big, image_size) * shared
    per_example = max((t2 - t1) / (big - probe), 1e-6)
    fixed = max(t1 - probe * per_example, 0.0)

    def solve() -> int:
        return min(MAX_BATCH, max(MIN_BATCH, round((comm - fixed) / per_example)))

    batch = solve()
    measured: list[tuple[int, float]] = []
    copies = workers if shared_cores else 1
    # Where communication is less than the fixed part, no batch balances it: the smallest stays.
    while len(measured) < REFINE_ROUNDS and fixed < comm:
        t = _compute_time(model, mode, batch, image_size, copies=copies, host_cores=host_cores)
        measured.append((batch, t))
        if abs(t - comm) <= REFINE_TOLERANCE * comm or (batch == MAX_BATCH and t < comm):
            break
        per_example = max((t - fixed) / batch, 1e-9)
        resolved = solve()
        if resolved == batch:
            break
        batch = resolved
    return Balance(batch, comm, fixed, per_example, tuple(measured))
