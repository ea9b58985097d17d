"""A sum whose received operand arrives last, in vanilla TensorFlow: in which order it adds.

TensorFlow's ``AddN`` computes into the buffer of the first input it may take over (one nobody
else holds) and adds the others to it in their order (core/kernels/aggregate_ops.h). Floats do
not add associatively, so which input it takes over shows in the sum's last bits. A tensor
received from another task is held, for a moment after the ``_Recv`` is done, by the gRPC call
that received it: ``RpcRemoteRendezvous::RecvFromRemoteAsync`` calls the recv's done callback with
the call's tensor and only then releases the call (core/distributed_runtime/rpc/
rpc_rendezvous_mgr.cc). If the received tensor is the sum's last input, the executor runs the sum
on another thread at once, and whether the call still holds the tensor then is a race.

A PS and a worker (``bench.local.LocalCluster``, each a process, over gRPC). The worker sums
``[x, a, b]``: ``x`` = 1e8 received from the PS, ``a`` = -1e8 fed (held by the feed: never taken
over), ``b`` = 1 computed on the worker. Taking over ``x`` (or a new buffer) adds
``(x + a) + b = 1``; taking over ``b`` adds ``(b + x) + a = 0`` (1e8 + 1 rounds to 1e8 in
float32). ``received last``: the PS computes ``x`` after ``--work`` matrix products, so it comes
last; ``received first``: the worker computes ``b`` after as many. Grappler is off, so the graph
runs as built.

This is why a graph's result can change with when its tensors arrive, without tfsched or with it
(``benchmarks/random_graphs.py``'s *vanilla varies*): tfsched changes when tensors arrive, by
design.

    python benchmarks/recv_race.py [--steps 300] [--work 30] --name NAME

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

BIG = 1e8  # 1e8 + 1 is 1e8 in float32
WIDTH = 8
SIDE = 200  # the matrix products that make one side late


def _late(tf, like, work: int):
    """``like`` plus 0 x the sum of ``work`` products of a SIDE x SIDE matrix: the same values,
    ready only after them."""
    m = tf.random.stateless_uniform([SIDE, SIDE], seed=[1, 2])
    _, h = tf.while_loop(lambda i, y: i < work, lambda i, y: (i + 1, tf.matmul(y, m) * 0.001), [0, m])
    return like + tf.reduce_sum(h) * 0.0


def build(tf, work: int):
    """The graph, the two sums by case, and the feeds."""
    tf1 = tf.compat.v1
    graph = tf1.Graph()
    sums = {}
    with graph.as_default():
        a = tf1.placeholder(tf.float32, [WIDTH], name="a")
        one = tf1.placeholder(tf.float32, [], name="one")
        for case, x_late in (("received last", True), ("received first", False)):
            with tf1.device("/job:ps/task:0"):
                x = tf.fill([WIDTH], BIG)
                x = _late(tf, x, work) if x_late else x * 1.0
            with tf1.device("/job:worker/task:0"):
                b = tf.ones([WIDTH]) * one
                b = b if x_late else _late(tf, b, work)
                sums[case] = tf.add_n([x, a, b]) * 1.0  # not fetched itself: a fetch is sent away
    feeds = {a: np.full([WIDTH], -BIG, np.float32), one: 1.0}
    return graph, sums, feeds


def measure(opts) -> dict:
    from tfsched.bench.local import LocalCluster
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    graph, sums, feeds = build(tf, opts.work)
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    got = {}
    with (
        LocalCluster(ps=1, workers=1, vanilla=True) as cluster,
        tf.compat.v1.Session(cluster.target("worker", 0), graph=graph, config=config) as sess,
    ):
        for case, total in sums.items():
            seen = collections.Counter(float(sess.run(total, feeds)[0]) for _ in range(opts.steps))
            unknown = set(seen) - {1.0, 0.0}
            if unknown:
                raise SystemExit(f"Error: {case}: sums other than 1 and 0: {sorted(unknown)}")
            got[case] = {"took_over_x_or_new": seen[1.0], "took_over_b": seen[0.0], "steps": opts.steps}
    return got


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=positive(int), default=300)
    p.add_argument("--work", type=positive(int), default=30, help="matrix products on the late side")
    p.add_argument("--name", required=True)
    opts = p.parse_args()
    got = measure(opts)
    lines = [
        f"# A sum whose received operand arrives last, in vanilla TensorFlow ({opts.name})",
        "",
        f"`python benchmarks/recv_race.py --steps {opts.steps} --work {opts.work} --name {opts.name}`: "
        f"a PS and a worker over gRPC; the worker sums x (received), a (fed) and b (its own); "
        f"{machine()['cpus']} cores ({machine()['platform']}).",
        "",
        "| case | steps | sum 1: took over x or a new buffer | sum 0: took over b |",
        "|---|---|---|---|",
        *(
            f"| {case} | {r['steps']} | {r['took_over_x_or_new']} | {r['took_over_b']} |"
            for case, r in got.items()
        ),
    ]
    write(opts.name, {"machine": machine(), "options": vars(opts), "cases": got}, lines)


if __name__ == "__main__":
    main()
