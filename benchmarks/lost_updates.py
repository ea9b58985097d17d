"""Two workers' updates of one variable at once, in vanilla TensorFlow: which kernels lose one.

A PS and two workers (``bench.local.LocalCluster``, each a process, over gRPC). Each way has a
variable of ``--rows`` rows of ``--width`` float32 zeros on the PS; each round both workers,
started together, subtract 1 from every element of row 1 with the way's optimizer update
(learning rate 1, so every value stays an integer and exact). After ``--rounds`` rounds every
element of the row is -2 x rounds, unless an update was lost: each element short of it is an
addition lost to the other worker's update of the same element at the same moment.

* ``sgd-sparse``: ``GradientDescentOptimizer``'s sparse update, ``resource_scatter_add``, whose
  kernel takes the variable's lock shared for a number type: it has no ``use_locking``;
* ``sgd-sparse-use_locking``: the same optimizer made with ``use_locking=True``, which its sparse
  update does not pass on;
* ``momentum-sparse``: ``MomentumOptimizer``'s (momentum 0) ``ResourceSparseApplyMomentum``,
  whose lock is shared without ``use_locking``;
* ``momentum-sparse-use_locking``: the same with ``use_locking=True``, an exclusive lock;
* ``sgd-dense``: ``GradientDescentOptimizer``'s dense update, ``ResourceApplyGradientDescent``,
  whose lock on a resource variable is exclusive with or without ``use_locking``.

This is TensorFlow's behaviour behind the barrier as much as across it
(``tfsched.enforce.crossing``, whose updates of a step run as vanilla TensorFlow's do, two
workers' at once): a test that compares two runs of a sparse model's training must not have two
workers update one row in a step (``tests/enforce/test_crossing.py``).

    python benchmarks/lost_updates.py [--rounds 200] [--width 262144] --name NAME

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402
from crossing_agreement import in_threads  # noqa: E402

WAYS = {  # way -> (the update's kernel, what the docstring says of its lock)
    "sgd-sparse": ("ResourceScatterAdd", "shared"),
    "sgd-sparse-use_locking": ("ResourceScatterAdd", "shared"),
    "momentum-sparse": ("ResourceSparseApplyMomentum", "shared"),
    "momentum-sparse-use_locking": ("ResourceSparseApplyMomentum", "exclusive"),
    "sgd-dense": ("ResourceApplyGradientDescent", "exclusive"),
}
_KERNELS = {k for k, _ in WAYS.values()}
STEP_TIMEOUT_MS = 120_000  # an update that takes longer fails
ROW = 1  # the row both workers update


def _optimizer(tf, way: str):
    locking = way.endswith("use_locking")
    if way.startswith("momentum"):
        return tf.compat.v1.train.MomentumOptimizer(1.0, 0.0, use_locking=locking)
    return tf.compat.v1.train.GradientDescentOptimizer(1.0, use_locking=locking)


def build(tf, opts):
    """One graph: each way's variable on the PS and each worker's update of its row; the
    update ops by way and worker, each variable's read, and each update's kernel (as the graph
    has it)."""
    tf1 = tf.compat.v1
    graph = tf1.Graph()
    updates: dict[str, list] = {}
    reads = {}
    with graph.as_default():
        for way in WAYS:
            with tf1.device("/job:ps/replica:0/task:0"):
                var = tf1.get_variable(
                    way, [opts.rows, opts.width], initializer=tf1.zeros_initializer(), use_resource=True
                )
                reads[way] = var.read_value()
            updates[way] = []
            for w in range(2):
                with tf1.device(f"/job:worker/replica:0/task:{w}"):
                    ones = tf.ones([1, opts.width])
                    if "sparse" in way:
                        grad = tf.IndexedSlices(ones, tf.constant([ROW]))
                    else:  # the same row, the others 0
                        grad = tf.tensor_scatter_nd_update(tf.zeros([opts.rows, opts.width]), [[ROW]], ones)
                with tf1.device("/job:ps/replica:0/task:0"):
                    updates[way].append(_optimizer(tf, way).apply_gradients([(grad, var)], name=f"{way}_{w}"))
        init = tf1.global_variables_initializer()
    kernels = {
        way: sorted({op.type for op in graph.get_operations() if op.name.startswith(f"{way}_0/")} & _KERNELS)
        for way in WAYS
    }
    return graph, init, updates, reads, kernels


def measure(opts) -> dict:
    from tfsched.bench.local import LocalCluster
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    graph, init, updates, reads, kernels = build(tf, opts)
    config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=STEP_TIMEOUT_MS)
    got = {}
    with LocalCluster(ps=1, workers=2) as cluster:
        sessions = [
            tf.compat.v1.Session(cluster.target("worker", w), graph=graph, config=config) for w in range(2)
        ]
        try:
            sessions[0].run(init)
            for way in WAYS:
                for w in range(2):  # each sets up its step once, before the rounds
                    sessions[w].run(updates[way][w])
                start = threading.Barrier(2, timeout=STEP_TIMEOUT_MS / 1000)

                def rounds(w, way=way, start=start):
                    try:
                        for _ in range(opts.rounds):
                            start.wait()
                            sessions[w].run(updates[way][w])
                    except BaseException:
                        start.abort()  # the other worker stops waiting for this one
                        raise

                in_threads(rounds, 2)
                value = sessions[0].run(reads[way])
                expected = -2.0 * (opts.rounds + 1)
                row = value[ROW].astype(np.float64)
                if np.any(np.delete(value, ROW, axis=0)) or np.any(row < expected):
                    raise SystemExit(f"Error: {way}: a row other than {ROW} moved, or row {ROW} overshot")
                got[way] = {
                    "kernels": kernels[way],
                    "elements_short": int(np.count_nonzero(row != expected)),
                    "additions_lost": int(np.sum(row - expected)),
                    "additions": int(2 * (opts.rounds + 1) * opts.width),
                }
        finally:
            for s in sessions:
                s.close()
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=positive(int), default=200)
    p.add_argument("--width", type=positive(int), default=262_144)
    p.add_argument("--rows", type=positive(int), default=4)
    p.add_argument("--name", required=True)
    opts = p.parse_args()
    if opts.rows <= ROW:
        p.error(f"--rows must be more than {ROW}")
    got = measure(opts)
    lines = [
        f"# Two workers' updates of one row at once in vanilla TensorFlow ({opts.name})",
        "",
        f"`python benchmarks/lost_updates.py --rounds {opts.rounds} --width {opts.width} --rows "
        f"{opts.rows} --name {opts.name}`: a PS and two workers over gRPC, each worker subtracting 1 "
        f"from every one of a row's {opts.width:,} float32 elements, both at once, {opts.rounds} "
        f"rounds (and one to set up); {machine()['cpus']} cores ({machine()['platform']}).",
        "",
        "| way | kernel | its lock | elements short | additions lost | of |",
        "|---|---|---|---|---|---|",
        *(
            f"| {way} | {', '.join(r['kernels'])} | {WAYS[way][1]} | {r['elements_short']:,} | "
            f"{r['additions_lost']:,} | {r['additions']:,} |"
            for way, r in got.items()
        ),
    ]
    write(opts.name, {"machine": machine(), "options": vars(opts), "ways": got}, lines)


if __name__ == "__main__":
    main()
