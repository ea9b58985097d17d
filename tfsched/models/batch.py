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

The upper bound was 256 until the seventh session; it cut VGG16 inference short of its
balance. The balances of the rows of BENCHMARKS.md are well under 1,024 (VGG16 inference 496,
ResNet-50 358, Inception-v3 299); four VGG16 inference workers at 821, the largest batch run,
fit this machine's 24 GiB.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

MIN_BATCH, MAX_BATCH = 1, 1024


@dataclass(frozen=True)
class Balance:
    batch_size: int
    comm_s: float  # per step, at the given bandwidth
    fixed_s: float  # compute per step independent of the batch
    per_example_s: float

    def to_json(self) -> dict:
        return {
            "batch_size": self.batch_size,
            "comm_s": self.comm_s,
            "compute_fixed_s": self.fixed_s,
            "compute_per_example_s": self.per_example_s,
        }


def _compute_time(model: str, mode: str, batch: int, image_size: int | None, steps: int = 3) -> float:
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
        best = float("inf")
        for _ in range(steps):  # the fastest step: the others carry this machine's noise
            start = time.perf_counter()
            sess.run(step)
            best = min(best, time.perf_counter() - start)
        return best


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
    batch = round((comm - fixed) / per_example)
    return Balance(min(MAX_BATCH, max(MIN_BATCH, batch)), comm, fixed, per_example)
