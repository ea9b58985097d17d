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
ResNet-50 358, Inception-v3 299); four VGG16 inference workers at 821, the largest batch run,
fit this machine's 24 GiB.
"""

from __future__ import annotations

import multiprocessing
import queue
import statistics
import time
from dataclasses import dataclass

from tfsched.errors import TfschedError

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
    model: str, mode: str, batch: int, image_size: int | None, steps: int, barrier=None
) -> list[float]:
    """Seconds of each of ``steps`` steps of the model in this process (devices cleared), after
    a warm-up step and, if given, once every process at ``barrier`` is ready."""
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
        if barrier is not None:
            barrier.wait(PROBE_TIMEOUT_S)
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            sess.run(step)
            times.append(time.perf_counter() - start)
        return times


def _probe_process(model, mode, batch, image_size, steps, barrier, results) -> None:
    """One of the processes of ``_compute_time(copies=N)``: reports its step times or its error.
    It runs a step more than it reports, so the others' last steps share the machine too."""
    try:
        results.put(("ok", _step_times(model, mode, batch, image_size, steps + 1, barrier)[:steps]))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        barrier.abort()  # the others stop waiting for this one
        first = str(e).splitlines()[0] if str(e) else ""
        results.put(("error", first if isinstance(e, TfschedError) else f"{type(e).__name__}: {first}"))


def _compute_time(
    model: str, mode: str, batch: int, image_size: int | None, steps: int = 3, copies: int = 1
) -> float:
    """Compute seconds per step at ``batch``: the fastest of ``steps`` steps in this process, or,
    with ``copies`` > 1, the mean step of that many processes computing at once (each its own
    TensorFlow, as the tasks of a cluster on this machine). Every wait of the parent ends: a
    process that fails reports why, one that dies is seen dead, and all of it within
    ``PROBE_TIMEOUT_S``."""
    if copies <= 1:
        # the fastest step: the others carry this machine's noise
        return min(_step_times(model, mode, batch, image_size, steps))
    ctx = multiprocessing.get_context("spawn")  # a fresh TensorFlow in each, as in the cluster
    barrier, results = ctx.Barrier(copies), ctx.Queue()
    procs = [
        ctx.Process(
            target=_probe_process,
            args=(model, mode, batch, image_size, steps, barrier, results),
            daemon=True,
            name=f"tfsched-probe-{i}",
        )
        for i in range(copies)
    ]
    where = f"batch-size probe ({model} {mode}, batch {batch}, {copies} processes at once)"
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    means: list[float] = []
    try:
        for p in procs:
            p.start()
        while len(means) < copies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TfschedError(f"{where}: no result after {PROBE_TIMEOUT_S:.0f} s")
            try:
                status, payload = results.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise TfschedError(f"{where}: a process exited with code {dead[0]}") from None
                continue
            if status != "ok":
                raise TfschedError(f"{where}: {payload}")
            means.append(statistics.fmean(payload))
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(10)
        results.close()
    return statistics.fmean(means)


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
) -> Balance:
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
        t = _compute_time(model, mode, batch, image_size, copies=copies)
        measured.append((batch, t))
        if abs(t - comm) <= REFINE_TOLERANCE * comm or (batch == MAX_BATCH and t < comm):
            break
        per_example = max((t - fixed) / batch, 1e-9)
        if solve() == batch:
            break
        batch = solve()
    return Balance(batch, comm, fixed, per_example, tuple(measured))
