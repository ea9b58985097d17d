"""A worker whose inter-op threads are busy while its pushes wait for credit: how long each push
waits after the push before it reached the PS (whose acknowledgement frees the window).

The setting of VGG16 training's backward pass, made small: the worker pushes ``pushes`` tensors of
``push`` parameters under a window of one (``enable(credit=push, ack_share=1)``), and a chain of
``chain`` matrix products, which starts with a scalar from the PS (within the first push), holds
the worker's inter-op threads (start the worker with one: ``LocalCluster(inter_op_threads=1)``).
With TensorFlow's ``_Recv`` -> ``TfschedCredit`` and gate -> ``_Send``
(``enable(inline_transfers=False)``), a push whose window frees during the chain goes when the
chain ends; with inline transfers (cc/transfers.cc) it goes as the acknowledgement of the push
before arrives: a round trip after that push reached the PS. Used by
``tests/enforce/test_inline_transfers.py`` and ``benchmarks/inline_transfers.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfsched.errors import TfschedError
from tfsched.tracing.replay import GRAPH_TAG

MATRIX = 600  # the chain's matrices: MATRIX x MATRIX
# a push's gate, as the pass names it ("SRC/tfsched_gate_to_ps_0.TAG")
GATE = re.compile(rf"/tfsched_gate_to_ps_0{GRAPH_TAG}$")
_EDGE = re.compile(r"edge_\d+_(\S+) from ")


@dataclass(frozen=True)
class BusyStep:
    """One step: the waits (ms) of the pushes whose wait overlapped the chain, from the arrival at
    the PS of the push before (whose acknowledgement frees the window) to their release; the
    chain's span and the step's (ms); the PS's sums of the pushes (the step's values)."""

    waits_ms: list[float]
    chain_ms: float
    step_ms: float
    sums: list[float]


def busy_worker_steps(
    target: str, config, *, pushes: int, push: int, chain: int, steps: int
) -> list[BusyStep]:
    """``steps`` traced steps (after one untraced) of the busy worker of ``target``'s cluster (one
    PS, ``/job:ps/task:0``; one worker, ``/job:worker/task:0``) under ``config``. A traced step
    that did not record every push's arrival at the PS is traced again (a CI run's step recorded
    none), up to ``steps`` more times, as the oracle leaves such steps out
    (``Trace.complete_steps``)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:worker/task:0"):
            tensors = [tf.random.stateless_uniform([push], seed=[i, 7]) for i in range(pushes)]
        with tf.device("/job:ps/task:0"):
            sums = [tf.reduce_sum(t, name=f"sum{i}") for i, t in enumerate(tensors)]
            trigger = tf.reduce_sum(tf.random.uniform([4]))  # stateful: not folded away
        with tf.device("/job:worker/task:0"):
            m = tf.random.stateless_uniform([MATRIX, MATRIX], seed=[1, 2])
            x = tf.fill([MATRIX, MATRIX], trigger * 1e-6)
            for k in range(chain):
                x = tf.tanh(tf.matmul(x, m, name=f"product{k}") * 1e-3)
    opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    out = []
    tries = 0
    from tfsched.deadlines import session_config

    with tf.compat.v1.Session(target, graph=g, config=session_config(config)) as sess:
        sess.run([sums, x])  # warm-up: kernels made, connections open
        while len(out) < steps:
            if tries == 2 * steps:
                raise TfschedError(
                    f"only {len(out)} of {tries} traced steps recorded every push's arrival at the PS"
                )
            tries += 1
            md = tf.compat.v1.RunMetadata()
            values, _ = sess.run([sums, x], options=opts, run_metadata=md)
            start, end, arrived = {}, {}, []
            for dev in md.step_stats.dev_stats:
                for ns in dev.node_stats:
                    start[ns.node_name] = ns.all_start_micros
                    end[ns.node_name] = ns.all_start_micros + ns.all_end_rel_micros
                    # the PS's RecvTensor of a push ends when its last byte is in (TF-NOTES), when
                    # an inline acknowledgement leaves
                    edge = _EDGE.search(ns.timeline_label) if ns.node_name == "RecvTensor" else None
                    if edge and GATE.search(edge.group(1)):
                        arrived.append(ns.all_start_micros + ns.all_end_rel_micros)
            # one push in flight at a time: the (i+1)-th gate to go waited for the i-th to arrive
            # and its acknowledgement to come back
            released = sorted(t for n, t in end.items() if GATE.search(n))
            arrived.sort()
            if len(released) != pushes:
                raise TfschedError(
                    f"traced {len(released)} gated pushes, not {pushes}: give the config a credit of "
                    "one push and ack_share=1"
                )
            if len(arrived) != pushes:  # the trace missed some arrivals: not this step's fault
                continue
            first, last = start["product0"], start[f"product{chain - 1}"]
            waits = [
                (gate - came) / 1000
                for came, gate in zip(arrived, released[1:], strict=False)
                if came < last and gate > first
            ]
            out.append(
                BusyStep(
                    waits_ms=waits,
                    chain_ms=(end[f"product{chain - 1}"] - first) / 1000,
                    step_ms=(max(end.values()) - min(start.values())) / 1000,
                    sums=[float(v) for v in values],
                )
            )
    return out
