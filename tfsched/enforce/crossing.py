"""Crossing TensorFlow's barrier between steps, with no change to TensorFlow's engine.

A ``Session.run`` ends once every op of its step has run, the last pushes and the PS's
updates included, so no order of the transfers lets a step's pulls start before the last
step's pushes end: that barrier, not synchronous training, is the floor the bench measures on
hosts with cores of their own (``benchmarks/reading.md``). ByteScheduler crosses it (§3.4)
with a 13-line change to TensorFlow's engine that ends the step early and holds each
variable's next read until its update is done. tfsched does it in the graph instead:

* a step is two runs. The **compute** run reads the variables, runs the forward and backward
  passes and leaves each gradient in a queue of its own on the worker; it ends with the
  worker's ops. The **apply** run, on a thread of its own, takes each gradient as it is
  queued, pushes it, and updates its variable on the PS. The next compute run starts while
  the last apply run still pushes.
* each variable has a **gate** on its PS before every read of it: a count of its updates by
  each worker (``cc/crossing.cc``). A worker's update of the variable adds one to its own; a
  worker's read in its step t waits for every worker's to reach t. So a read waits for that
  variable's updates of the last step by every worker, and no longer: the pulls of the layers
  updated first (the last layers, whose gradients are out first) cross while the first layers'
  pushes still run.
* the reverse: each worker's read adds one to its count of the variable's reads, and an update
  in step t waits for every worker's to reach t + 1, so no update of a step lands before every
  worker's read of it in that step. Each read sees what it sees behind the barrier (the
  simulator's ``sim.build_sim_graph(cross_barrier=True)`` lays out the same two rules). Four
  ops a variable a worker's step on its PS, whatever W: the token queues they replace (a token
  put in each reader's queue by each update, until the eighty-fourth session) ran 4W+3, W^2 a
  variable a step on the PS (``benchmarks/crossing_ops.py`` counts both).
* a worker whose input ends (``CrossingRunner.run`` at an input iterator's end, ``retire``
  for a worker fed its batches) is **retired** once its steps are applied: the counts' waits
  leave it out, and the other workers train on (a dataset sharded unevenly). Its session
  stays open: it starts its input again and primes its gates, and the next epoch goes on in
  the same sessions. Each prime moves the worker into its next **generation** on the counts: a
  wait goes only once every worker is in its generation (or left it retired), so a worker
  primed for the next epoch waits at its first reads for the others to end theirs and be
  primed too, with no barrier of the caller's (or, where that may take longer than a run's
  deadline, in ``CrossingRunner.join``, a run of its own with a deadline of its own). An
  apply run takes its step's **go** before any gradient, which the compute run gives once it
  has its batch; at the input's end the runner's stop ends the apply run waiting for a step
  that met it.
* two compute runs are in flight (``CrossingRunner``'s depth): the next step's reads wait on
  the PS for their variables' updates, not for this step's last op, so a pull goes as soon as
  its variable is updated, during this step's backward pass, as ByteScheduler's engine lets
  it. A token queue on the worker lets one run at a time through the read gates, in the order
  the runs take it, so a worker's waits on a count go in its steps' order (the count's wait
  takes its step from that order).
* what a run's effect hangs on the order of (``_in_order``: an input iterator's next batch, a
  stateful random op's draw such as dropout's mask, a moving mean's update) waits on a second
  token, taken in the run's turn and given back once the run has done all of it: two runs in
  flight take their batches and masks, and update their means, one after the other, in order.
* a step's feeds (``feeds``: a batch fed each step) are queued on the worker in the steps'
  order before their compute run starts, and a run takes the next ones in its turn.

Every wait is a queue's dequeue or a count's wait: it holds no thread (an asynchronous kernel),
ends with the run's deadline (``RunOptions.timeout_in_ms``), and ends when its session is
closed (the master cancels the step), as a failed run's is (``CrossingRunner.run``); a count's
wait left from a run before ends when its worker primes the gates again. The pass's gates
work on both runs (``tfsched.enable(ready=True)``: a counter would hold every pull behind the
first layer's, updated last); it names a transfer by the variable it pulls or updates, so a
schedule made from the graph behind the barrier orders both runs.

The workers' updates of one step land at once, as they do behind the barrier, and TensorFlow's
sparse updates take their variable's lock shared: two workers adding to one row of an embedding
at once can lose an addition, across the barrier as behind it (``benchmarks/lost_updates.py``
measured SGD's ``resource_scatter_add``, ``use_locking`` or not, and Momentum's sparse update
without it). An optimizer made with ``use_locking=True`` whose sparse update takes the lock
(Momentum's) loses none.
"""

from __future__ import annotations

import math
import operator
import threading
import time
from dataclasses import dataclass

from tfsched.errors import TfschedError
from tfsched.units import is_steps

# what ends the apply run that waited for a step whose compute run met the input's end (its
# error's message): the runner's stop (``CrossingStep.stop_op``), given once no compute run is left
STOPPED = "tfsched crossing: no step left to apply (the input ended)"

# a join's longest timeout: 2**53 ms (about 285,000 years), so that its milliseconds fit
# RunOptions' int64 ``timeout_in_ms`` with room for a deadline's microseconds past the clock's now
_MAX_TIMEOUT_S = 2**53 / 1000


@dataclass
class CrossingStep:
    """One worker's step split across TensorFlow's barrier (``cross_barrier_step``).

    Run ``prime_op`` on every worker (it resets the gates and moves the worker into its next
    generation: every read of the first step passes once every worker is primed), then per
    step ``compute_op`` and, on another thread, ``apply_op`` (``CrossingRunner`` does both, and
    at the input's end ``pass_op``, ``stop_op`` and ``retire_op``; ``join_op`` in ``join``)."""

    compute_op: object  # the reads, forward, backward and the gradients queued on the worker
    apply_op: object  # the pushes and the PS's updates of one step
    # empties this worker's queues and sets its gates' counts to the first step of its next
    # generation (cc/crossing.cc)
    prime_op: object
    pass_op: object  # gives the turn on for a run that met the input's end and took it
    # takes this worker out of what the other workers' steps wait for, its input ended and its
    # steps applied (until its next prime)
    retire_op: object
    # ends the apply run that waits for a step whose compute run met the input's end (``STOPPED``)
    stop_op: object
    # waits until every worker is in this one's generation, or left it retired (``CrossingRunner.join``)
    join_op: object
    variables: list  # the variables gated, in the order of their gradients
    workers: int
    worker: int
    feed_op: object = None  # queues one step's feeds (``feeds``) for the run in the next turn
    feeds: tuple = ()  # the tensors a step is fed (``cross_barrier_step(feeds=...)``)
    apply_feeds: tuple = ()  # those the apply run reads too (a learning rate), fed to it as well
    turn: object = None  # the turn a compute run took: its step's place since the prime


def _run_ancestors(ops) -> set:
    """Every op ``ops`` depend on, through data and control edges."""
    seen: set = set()
    stack = list(ops)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


def _readers(var, within: set) -> list:
    """The ops of the compute run that read ``var``: every consumer of its handle (a resource
    variable) or of its reference (a ``VariableV2``) in ``within``."""
    handle = var.handle if hasattr(var, "handle") else var.op.outputs[0]
    return [op for op in handle.consumers() if op in within]


def _queue_name(var, role: str, worker: int, workers: int, held: list | None = None) -> str:
    """A queue's name in its task's resources, which outlive a session: the same for every
    graph of the same step (each worker's, each session's), another for another cluster size or
    gradient (a queue's capacity and shapes are fixed when first made). ``held``: the tensors
    the queue holds (``_parts``)."""
    return _queue_name_of(f"{var.op.name}/{role}", worker, workers, held)


def _queue_name_of(of: str, worker: int, workers: int, held: list | None = None) -> str:
    """``_queue_name``'s, for a queue of no variable (``of``: its role)."""
    of = f"tfsched_cross/{of}{worker}of{workers}"
    if held is not None:
        of += "/" + "+".join(f"{t.dtype.name}{'x'.join(map(str, t.shape.as_list()))}" for t in held)
    return of


def _parts(grad) -> list:
    """The tensors a gradient is held as between the runs: a dense one itself, a sparse one
    (``tf.IndexedSlices``, an embedding's) its values and indices."""
    if hasattr(grad, "indices"):
        return [grad.values, grad.indices]
    return [grad]


class _Edits:
    """The changes ``cross_barrier_step`` makes to the caller's ops (a read's control input on its
    gate, a fed tensor's reader reading the feeds' queue), recorded so that a split that fails
    undoes them: the graph trains behind the barrier as it did before the call. The ops the split
    made stay in the graph (TensorFlow removes none), read by none of the caller's.

    Until the eighty-fourth session an error after the first change (an op both runs read a
    feed through, an optimizer's update not found) left every variable's readers waiting on a
    gate that nothing primes, and the fed tensors' readers reading a queue nothing fills."""

    def __init__(self):
        self.inputs: list = []  # (op, index, the tensor it read before), in the order changed
        self.controls: dict = {}  # op -> its control inputs before the first change

    def update_input(self, op, index: int, tensor) -> None:
        self.inputs.append((op, index, op.inputs[index]))
        op._update_input(index, tensor)

    def add_control_input(self, op, control) -> None:
        self.controls.setdefault(op, list(op.control_inputs))
        op._add_control_input(control)

    def undo(self) -> None:
        for op, index, before in reversed(self.inputs):
            op._update_input(index, before)
        for op, before in self.controls.items():
            op._remove_all_control_inputs()
            op._add_control_inputs(before)


def cross_barrier_step(
    optimizer,
    grads_and_vars: list,
    *,
    worker: int,
    workers: int,
    global_step=None,
    worker_device: str | None = None,
    compute_also: tuple | list = (),
    feeds: tuple | list = (),
    name: str = "tfsched_cross",
) -> CrossingStep:
    """Split one worker's training step across TensorFlow's barrier (the module's doc).

    ``optimizer`` and ``grads_and_vars`` as for ``optimizer.apply_gradients`` (a TF1
    ``tf.compat.v1.train.Optimizer``, between-graph replication: each of ``workers`` workers
    builds its own graph and applies its own gradients, as the bench's graphs do);
    ``worker_device`` holds the gradients between the two runs (default: the gradients'
    device). Call it in the graph's context, where ``apply_gradients`` would be called. A
    gradient of a shape known only in the run (a sparse one of a batch's rows) is held in a
    padding queue; one of unknown rank is an error.

    ``compute_also``: ops the step runs besides its gradients, such as batch normalization's
    moving averages (``tf.compat.v1.GraphKeys.UPDATE_OPS``), which behind the barrier go in as
    ``with tf.control_dependencies(update_ops): optimizer.apply_gradients(...)``. Not that way
    here: the apply run would run the forward pass again. They run in the compute run, before
    any of its gradients is held; what they alone read or write (a moving mean) waits for the
    compute run before to finish its own, so two runs in flight update it one after the other
    (measured without that wait: a moving mean 0.07 off vanilla's after two steps).

    ``feeds``: the tensors a step is fed (a batch's placeholders, a learning rate's), each
    step's values given to ``CrossingRunner.run(feed_dicts=...)``. The compute run does not
    take them as a feed: two runs in flight take their turns in either order, and a feed goes
    with a run. The runner queues each step's values on the worker in the steps' order, and a
    compute run takes the next ones in its turn, so the n-th turn's run computes with the n-th
    values; the ops of the compute run that read a fed tensor read the queue's instead (the
    same values). A fed tensor the apply run reads too (the optimizer's learning rate) is also
    fed to the step's apply run, which runs in the steps' order. A feed of unknown rank is an
    error, and so is one an op of both runs reads. On an error the caller's ops read and wait
    for what they did before the call (``_Edits``).

    An improvement on ByteScheduler's crossing (§3.4), which patches TensorFlow's engine: the
    same release, per variable, built from TensorFlow's queues and tfsched's counts (the op
    library every task of the cluster loads, ``tfsched.start_server``), so it runs on stock pip
    TensorFlow. The gradients' values are TensorFlow's, and each read sees the values it sees
    behind the barrier, so training is bitwise the same with one worker (the tests check it);
    with several, the updates of one variable in one step land in the order they arrive,
    behind the barrier as across it.
    """
    import tensorflow as tf

    if workers < 1 or not 0 <= worker < workers:
        raise TfschedError(f"crossing the barrier: worker {worker} of {workers} workers")
    pairs = [(g, v) for g, v in grads_and_vars if g is not None]
    if not pairs:
        raise TfschedError("crossing the barrier: no variable has a gradient")
    for g, v in pairs:
        if any(t.shape.rank is None for t in _parts(g)):
            raise TfschedError(
                f"crossing the barrier: variable {v.op.name} has a gradient of unknown rank; only "
                "gradients of known rank are held between the runs"
            )
    from tfsched.enforce._loader import load_ops

    ops = load_ops()  # the gates' counts (cc/crossing.cc)
    v1 = tf.compat.v1
    graph = v1.get_default_graph()
    feeds = list(feeds)
    for t in feeds:
        if not isinstance(t, tf.Tensor) or t.graph is not graph:
            raise TfschedError(f"crossing the barrier: feed {t!r} is not a tensor of this graph")
        if t.shape.rank is None:
            raise TfschedError(
                f"crossing the barrier: feed {t.name} has an unknown rank; only feeds of known rank "
                "are queued for the compute runs"
            )
    also = [getattr(x, "op", x) for x in compute_also]  # ops or tensors

    def sides() -> set:
        return _run_ancestors([t.op for g, _ in pairs for t in _parts(g)] + also)

    edits = _Edits()  # what is changed of the caller's ops: undone if the split fails
    try:
        compute_side, existing = sides(), set(graph.get_operations())
        compute, queued, resets = [], [], []

        def count(v, side: str) -> str:
            """The name of ``v``'s count of ``side`` ("read" or "updated") on its PS (cc/crossing.cc)."""
            return f"tfsched_cross/{v.op.name}/{side}/of{workers}"

        turns_at = worker_device or pairs[0][0].device  # the worker's turn queues
        with tf.name_scope(name):
            # One compute run at a time through the read gates, in the order they take the turn:
            # two runs in flight (CrossingRunner's depth) wait on the counts in their steps' order.
            with tf.device(turns_at):
                turn = v1.FIFOQueue(
                    capacity=2,
                    dtypes=[tf.int32],
                    shapes=[[]],
                    shared_name=f"tfsched_cross/turn{worker}of{workers}",
                )
                my_turn = turn.dequeue()
                if feeds:
                    feed_op, fed, fed_queue = _queue_feeds(
                        feeds, my_turn, compute_side, worker, workers, edits
                    )
            if feeds:  # the run's ops as they are now: the fed tensors' reads read the queue's
                compute_side = sides() - (set(graph.get_operations()) - existing)
            read_by = [_readers(v, compute_side) for _, v in pairs]
            in_order = _in_order(compute_side, {op for rs in read_by for op in rs})
            with tf.device(turns_at):
                # what hangs on the runs' order (``_in_order``: a moving mean's update, an input
                # iterator's next element, dropout's draw), one run's after the other's: it waits
                # for the run before to finish its own, or two runs in flight would both read the
                # mean before either wrote it, or take each other's batch
                turns = [turn]
                if in_order:
                    turns.append(
                        v1.FIFOQueue(
                            capacity=2,
                            dtypes=[tf.int32],
                            shapes=[[]],
                            shared_name=f"tfsched_cross/order{worker}of{workers}",
                        )
                    )
                    # taken in the run's turn, and before it passes the turn on: two runs started
                    # together would otherwise each hold the token the other waits for (the later
                    # run's token first, then its reads wait for the earlier run's updates)
                    with tf.control_dependencies([my_turn]):
                        order_turn = turns[1].dequeue()
            passed = []
            for (g, v), readers in zip(pairs, read_by, strict=True):
                with tf.device(v.device):
                    # a variable no op of the step reads has no read gate: nothing to wait for,
                    # and its updates count nothing
                    if readers:
                        with tf.control_dependencies([my_turn]):
                            # every worker's updates of the steps before this one
                            _, taken = ops.tfsched_cross_wait(
                                [], count=count(v, "updated"), worker=worker, workers=workers, offset=0
                            )
                        passed.append(taken)
                        for op in readers:
                            edits.add_control_input(op, taken.op)
                    with tf.control_dependencies(readers):
                        compute.append(ops.tfsched_cross_arrive(count=count(v, "read"), worker=worker))
                parts = _parts(g)
                with tf.device(worker_device or g.device):
                    # a sparse gradient of rows known only in the run (the lookup of a batch of
                    # unknown size): a padding queue, whose dequeue gives each gradient as it was
                    # queued (the prime's dequeue_many pads what it empties)
                    known = all(t.shape.is_fully_defined() for t in parts)
                    held = (v1.FIFOQueue if known else v1.PaddingFIFOQueue)(
                        capacity=2,
                        dtypes=[t.dtype for t in parts],
                        shapes=[t.shape for t in parts],
                        shared_name=_queue_name(v, "held", worker, workers, parts),
                        name="held",
                    )
                    with tf.control_dependencies(also):
                        compute.append(held.enqueue(parts))
                    resets.append(held.dequeue_many(held.size()))
                queued.append((held, bool(readers), v, g))
            if in_order:
                passed.append(order_turn)
            if feeds:  # the next run's feeds are the next ones queued
                passed.append(fed)
            with tf.device(turns_at):
                with tf.control_dependencies(passed or [my_turn]):
                    # the next run's turn, numbered: this one's gates all passed
                    compute.append(turn.enqueue(my_turn + 1))

            # the apply run: each gradient pushed as it is queued, held on the PS until every
            # worker has read the variable in this step, then the optimizer's own update. It
            # first takes its step's go, which the compute run gives once it has its input (no
            # gradient comes before it); a compute run that met the input's end gives none, and
            # the runner's stop ends the apply run waiting for it (``STOPPED``), where a held
            # gradient's dequeue could be ended only by closing the session
            with tf.device(turns_at):
                go = v1.FIFOQueue(
                    capacity=-1,  # no bound: a compute run's go never waits for an apply run
                    dtypes=[tf.bool],
                    shapes=[[]],
                    shared_name=_queue_name_of("go", worker, workers),
                    name="go",
                )
                went = tf.debugging.Assert(go.dequeue(), [STOPPED], name="went")
            applied = []
            for held, _, v, g in queued:
                with tf.control_dependencies([went]):
                    got = held.dequeue()
                with tf.device(v.device):
                    # every worker's reads of this step and the steps before it
                    released, _ = ops.tfsched_cross_wait(
                        got if isinstance(got, list) else [got],
                        count=count(v, "read"),
                        worker=worker,
                        workers=workers,
                        offset=1,
                        name="released",
                    )
                    if len(released) == 1:
                        applied.append((released[0], v))
                    else:  # a sparse gradient: the optimizer's sparse update, as behind the barrier
                        static = g.dense_shape is not None and v.shape.is_fully_defined()
                        shape = tf.constant(v.shape.as_list(), g.dense_shape.dtype) if static else None
                        applied.append((tf.IndexedSlices(released[0], released[1], shape), v))
            before = set(graph.get_operations())
            update = optimizer.apply_gradients(applied, global_step=global_step)
            made = [op for op in graph.get_operations() if op not in before]
            release = []
            for (g, v), (_, read, _, _) in zip(applied, queued, strict=True):
                if read:
                    with tf.device(v.device), tf.control_dependencies(_updates_of(v, g, made)):
                        release.append(ops.tfsched_cross_arrive(count=count(v, "updated"), worker=worker))
            with tf.control_dependencies([update]):
                apply_op = tf.group(*release, name="apply")

            apply_side = _run_ancestors([apply_op])
            if feeds and fed in apply_side:
                shared = sorted(
                    op.name for op in apply_side & compute_side if any(t.op is fed for t in op.inputs)
                )
                raise TfschedError(
                    f"crossing the barrier: both runs of a step run {', '.join(shared) or 'an op'} that reads "
                    "a feed: the apply run cannot take the compute run's feeds"
                )
            if in_order:
                # an op the apply run runs too (a learning rate both runs read) is left out: the
                # apply run takes no token
                in_order = [op for op in in_order if op not in apply_side]
                for op in in_order:
                    edits.add_control_input(op, order_turn.op)
                with tf.device(turns_at), tf.control_dependencies(also + in_order):
                    compute.append(turns[1].enqueue(0))
            with tf.device(turns_at):
                # the step's go, once it has what may meet the input's end: its batch taken (the
                # ops of the runs' order that no read of a variable leads to), or its feeds
                has_input = _inputs(in_order, {op for rs in read_by for op in rs}, compute_side)
                with tf.control_dependencies(has_input + ([fed] if feeds else []) or [my_turn]):
                    compute.append(go.enqueue(True, name="given"))
            compute_op = tf.group(*compute, name="compute")

            retires, joins = [], []
            for _, read, v, _ in queued:
                with tf.device(v.device):  # this worker's arrivals and waits none, and it is in
                    for side in ("read", "updated") if read else ("read",):
                        resets.append(ops.tfsched_cross_reset(count=count(v, side), worker=worker))
                        retires.append(ops.tfsched_cross_retire(count=count(v, side), worker=worker))
                    # every worker in this one's generation (``CrossingRunner.join``): its prime
                    # resets the read count of every variable, so each shows it
                    joins.append(
                        ops.tfsched_cross_wait(
                            [], count=count(v, "read"), worker=worker, workers=workers, offset=0, join=True
                        )[1]
                    )
            with tf.device(turns_at):
                for q in turns:
                    with tf.control_dependencies([q.dequeue_many(q.size())]):
                        resets.append(q.enqueue(0))
                if feeds:  # what a run that met the input's end or failed left
                    resets.append(fed_queue.dequeue_many(fed_queue.size()))
                resets.append(go.dequeue_many(go.size()))  # a stop no apply run took
            prime_op = tf.group(*resets, name="prime")
            with tf.device(turns_at):
                pass_op = tf.group(*(q.enqueue(0) for q in turns), name="pass")
                stop_op = go.enqueue(False, name="stop")
            retire_op = tf.group(*retires, name="retire")
            join_op = tf.group(*joins, name="join")
        return CrossingStep(
            compute_op=compute_op,
            apply_op=apply_op,
            prime_op=prime_op,
            pass_op=pass_op,
            retire_op=retire_op,
            stop_op=stop_op,
            join_op=join_op,
            turn=my_turn,
            variables=[v for _, v in pairs],
            workers=workers,
            worker=worker,
            feed_op=feed_op if feeds else None,
            feeds=tuple(feeds),
            apply_feeds=tuple(t for t in feeds if t.op in apply_side),
        )
    except BaseException:
        edits.undo()
        raise


def _queue_feeds(feeds: list, my_turn, compute_side: set, worker: int, workers: int, edits) -> tuple:
    """A queue of ``feeds``' values on the worker (the caller's device), one step's at a time:
    the op that queues them (fed the user's values of ``feeds``, which it reads), the
    dequeue of the run in its turn (after ``my_turn``), and the queue. Every op of
    ``compute_side`` that reads a fed tensor reads the dequeued one instead: the compute run
    takes each step's values in its turn, not as a feed of its own. A feed of a shape known
    only in the run (a batch of unknown size) is held in a padding queue, as it is. Each
    changed input is recorded in ``edits`` (``_Edits``)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    known = all(t.shape.is_fully_defined() for t in feeds)
    queue = (v1.FIFOQueue if known else v1.PaddingFIFOQueue)(
        capacity=2,  # CrossingRunner's depth at most: each run started takes one
        dtypes=[t.dtype for t in feeds],
        shapes=[t.shape for t in feeds],
        shared_name=_queue_name_of("feed", worker, workers, feeds),
        name="feeds",
    )
    feed_op = queue.enqueue(feeds, name="feed")
    with tf.control_dependencies([my_turn]):
        fed = queue.dequeue(name="fed")
    fed = fed if isinstance(fed, list) else [fed]
    for t, value in zip(feeds, fed, strict=True):
        for op in t.consumers():
            if op in compute_side:
                for i, x in enumerate(op.inputs):
                    if x.op is t.op and x.value_index == t.value_index:
                        edits.update_input(op, i, value)
    return feed_op, fed[0].op, queue


def _in_order(compute_side: set, gated: set) -> list:
    """The ops of a compute run whose effect hangs on the order two runs in flight run them in,
    but the gated reads (``gated``): what the ops beside the gradients read or write of their
    own (a moving mean), and the step's other stateful ops (an input iterator's next element, a
    stateful random op's draw: dropout's mask; a read of a variable no gradient updates). Ops
    without inputs are left out: a variable's or an iterator's handle, which the apply run uses
    too, and which draws nothing."""
    import tensorflow as tf

    def touches(op) -> bool:
        return any(t.dtype == tf.resource or t.dtype._is_ref_dtype for t in op.inputs)

    return sorted(
        (op for op in compute_side - gated if op.inputs and (touches(op) or op._is_stateful)),
        key=lambda op: op.name,
    )


def _inputs(in_order: list, reads: set, compute_side: set) -> list:
    """The ops of ``in_order`` (``_in_order``'s) that no op of ``reads`` leads to within
    ``compute_side``: the step's input (an iterator's next element, a queue's dequeue), which
    may meet the input's end, where a dropout's draw or a moving mean's update follows the
    model's reads, and a stateful op of the backward pass its gradients: the go the apply run
    waits for (``cross_barrier_step``) waits for the input alone."""
    after: set = set()
    stack = [c for op in reads for t in op.outputs for c in t.consumers()]
    stack += [c for op in reads for c in op._control_outputs]
    while stack:
        op = stack.pop()
        if op in after or op not in compute_side:
            continue
        after.add(op)
        stack.extend(c for t in op.outputs for c in t.consumers())
        stack.extend(op._control_outputs)
    return [op for op in in_order if op not in after]


def _updates_of(var, grad, made: list) -> list:
    """The ops among ``made`` (the optimizer's) that take ``grad`` and write ``var``: the ones
    its read gates must wait for."""
    handle = var.handle if hasattr(var, "handle") else var.op.outputs[0]
    downstream = {t.op for t in _parts(grad)}
    for op in made:  # in creation order: an op's inputs are made before it
        if any(t.op in downstream for t in op.inputs) or any(c in downstream for c in op.control_inputs):
            downstream.add(op)
    writes = [op for op in made if op in downstream and any(t is handle for t in op.inputs)]
    if not writes:
        raise TfschedError(f"crossing the barrier: the optimizer's update of {var.op.name} was not found")
    return writes


class CrossingRunner:
    """Runs a ``CrossingStep``'s steps on one session: up to ``depth`` compute runs at once (the
    next step's pulls cross while this one's backward pass runs: its reads wait, on the PS, for
    their variables' updates only), and the apply runs on a thread of their own, one per step.

    >>> runner = CrossingRunner(sess, step, options=tf.compat.v1.RunOptions(timeout_in_ms=60000))  # doctest: +SKIP
    >>> runner.prime()  # on every worker: its first reads wait for every worker's  # doctest: +SKIP
    >>> ends = runner.run(100)  # doctest: +SKIP

    ByteScheduler's engine change lets the next step's pulls go once their update is done;
    with one compute run at a time they would wait for this step's last op (measured: VGG16
    training on hosts with cores of their own, 1.12x the baseline at depth 1, ``BENCHMARKS.md``).
    A second run in flight does what the engine change does, within stock TensorFlow: its ops
    wait on the gates in the graph, so the two runs' values are the ones one run at a time
    gives. Every run has ``options``' deadline (without ``options``, the pass's default
    ``timeout_ms``: a gate of the graph never waits longer than a gate of the pass).

    A failed run fails ``run``, and ``run`` closes the session first: that cancels what still
    waits (the apply run, on a gradient that never comes; a compute run, on its gates), and
    leaves no run behind to take the gradients of a run after it. The runner is done then: a
    new session and runner, primed on every worker, go on (the queues and gates live in the
    tasks, and priming empties them). Until the seventy-eighth session the apply run was left
    waiting until its deadline or until the caller closed the session. The input's end is not
    a failure: the session stays open, and the next epoch steps on it once primed (``run``).
    """

    def __init__(self, sess, step: CrossingStep, *, options=None, depth: int = 2):
        if depth not in (1, 2):
            raise TfschedError(f"crossing the barrier: depth must be 1 or 2 compute runs, got {depth!r}")
        if options is None:
            import tensorflow as tf

            from tfsched.enforce.api import DEFAULT_TIMEOUT_MS

            options = tf.compat.v1.RunOptions(timeout_in_ms=DEFAULT_TIMEOUT_MS)
        self.sess = sess
        self.step = step
        self.options = options
        self.depth = depth
        self.failed: BaseException | None = None  # the failure that closed the session
        self.applied = 0  # the steps whose updates are all in, over the runner's life
        self.fetched: list = []  # the last call's ``fetches``, one value per step
        self.retired = False  # this worker's input ended (``retire``) since the last prime
        self.primed = False  # ``prime`` ran: the gates' counts are this runner's, not stale ones

    def _usable(self) -> None:
        if self.failed is not None:
            raise TfschedError(
                f"crossing the barrier: a run failed ({type(self.failed).__name__}) and closed its "
                "session: open a new session and runner, and prime every worker's"
            )

    def prime(self) -> None:
        """Reset this worker's gates (and take it back in if it was retired), into their next
        generation: on every worker, each before its first run of an epoch. Its first reads
        wait for every other worker to be primed into the same generation (or to have left it
        retired), so no caller's barrier is needed between the primes and the runs (where that
        wait may outlast a run's deadline, ``join`` holds it instead). A ``run``
        before a runner's first prime is an error: the counts and queues live in the tasks,
        and would be a session's before."""
        self._usable()
        self.sess.run(self.step.prime_op, options=self.options)
        self.retired = False
        self.primed = True

    def join(self, timeout_s: float) -> None:
        """Wait, up to ``timeout_s`` seconds, until every worker is primed into this worker's
        generation or has left it retired: after ``prime``, on a worker whose epoch may end
        longer than a run's deadline before the others'. Without it, that worker's first run's
        reads wait for them on the PS, within the run's deadline (``options``), and the run
        fails there, closing the session. The join is a run of its own, whose deadline is
        ``timeout_s``: past it one ``TfschedError`` says so, and the runner goes on (its session
        open, nothing of the join left in the counts), to ``join`` again or ``run``. It costs no
        step anything: its waits (one a variable, on its PS's count of its reads) are a run of
        their own, and are not counted as a step's. Until the hundred-and-fourth session such a
        worker had to wait for the others itself, with a barrier of the caller's."""
        self._usable()
        if not self.primed or self.retired:
            raise TfschedError(
                "crossing the barrier: prime the runner before it joins (runner.prime(), then join)"
            )
        # a number of seconds above 0 whose milliseconds fit RunOptions' int64 deadline (not NaN,
        # not infinity: a join waits no longer than it is told, and never for ever)
        if not (
            isinstance(timeout_s, (int, float))
            and not isinstance(timeout_s, bool)
            and 0 < timeout_s < _MAX_TIMEOUT_S
        ):
            raise TfschedError(
                f"crossing the barrier: a join's timeout must be a finite number of seconds above 0 "
                f"(below {_MAX_TIMEOUT_S:.3g}), got {timeout_s!r}"
            )
        import tensorflow as tf

        options = type(self.options)()
        options.CopyFrom(self.options)
        options.timeout_in_ms = max(1, math.ceil(timeout_s * 1000))
        try:
            self.sess.run(self.step.join_op, options=options)
        except tf.errors.DeadlineExceededError:
            raise TfschedError(
                f"crossing the barrier: worker {self.step.worker}'s join: the other workers were not all "
                f"primed into its generation within {timeout_s:g} s (their epoch goes on, or one stopped)"
            ) from None

    def retire(self) -> None:
        """This worker's input has ended where ``run`` cannot see it (its last ``feed_dicts``, a
        loop of the caller's): the other workers' steps wait for its reads and updates no
        longer, and train on. ``run`` has applied every step it started when it returns, so
        they have its updates; an input iterator's end retires the worker in ``run``.

        Its steps would now wait for workers that went on without it: a ``run`` after it is an
        error until its runner is primed again (the next epoch, ``run``)."""
        self._usable()
        self.sess.run(self.step.retire_op, options=self.options)
        self.retired = True

    def run(self, steps: int, run_metadata: list | None = None, fetches=None, feed_dicts=None) -> list[float]:
        """``steps`` steps; each one's end (``time.perf_counter``), in order: a compute run's,
        the last one's at the end of its updates (no next step overlaps them). Nothing is kept
        for a step before it starts, so ``steps`` may be as many as any input has, to run to the
        input's end (until the hundred-and-third session each step's place was made at the
        call's start: two lists of 8-byte places, 16 GB for 10**9 steps).

        ``fetches``: what each compute run fetches besides its step (the loss, a metric: what a
        step behind the barrier fetches with ``train_op``); its values, one per step in order,
        are in ``fetched`` once the call returns (or raises at the input's end). A value is the
        one behind the barrier: the compute run reads what the step reads.

        ``feed_dicts``: for a step built with ``feeds``, an iterable of one feed dict per step,
        each mapping every fed tensor (or its name) to the step's value, as ``Session.run``'s
        ``feed_dict``; it is read as the steps start (a generator may read each batch then).
        Before a compute run starts, its step's values are queued on the worker, and the run
        takes the next ones in its turn: the two runs in flight at the start of a call may take
        their turns in either order, and the steps go in the order of ``feed_dicts``. When it
        ends before ``steps``, the steps started are applied and their ends returned, fewer
        than ``steps`` (where that is the end of this worker's input and the others' has more,
        ``retire`` it); when it raises, or gives a feed dict that lacks a fed tensor, feeds
        another or feeds a value the tensor cannot take (``Session.run``'s error), the steps
        started are applied and then the error raised (the runner goes on).
        A step's input can come from the graph too (``tf.data``): each run takes its next batch
        in its turn. The steps are put in order by the turns their compute runs took
        (``fetched``, ``run_metadata``; ``ends`` are the runs' ends in time): a run's return may
        come after the next one's where a step's ops take less than the return.

        At the end of the input (a compute run's ``OutOfRangeError``: an iterator's last batch
        taken) no step starts after it, the steps before it are applied in full (``applied``
        counts them), and then the error is raised. The turn the run that met it took is given
        on (``pass_op``), so a run after it meets the end too. That step has nothing to apply:
        its compute run gave no go, and once no compute run is left the stop (``stop_op``) ends
        the apply run that waits for one, before it takes a gradient. Once its steps are
        applied, the worker is retired (``retire_op``): the other workers' steps wait for its
        reads and updates no longer, so a worker whose input has more batches (a dataset sharded
        unevenly) trains on, its reads waiting for the updates of the workers still training, as
        each worker's own steps go on behind the barrier. Until the hundred-and-second session
        every worker had to meet the end at the same step, or the others' next reads waited for
        its updates until their deadline.

        The session stays open. The next epoch: each worker, once its ``run`` has raised (or its
        ``retire`` returned), starts its input again (its iterator's initializer), primes its
        runner and steps on; a ``run`` before the prime is an error. It need not wait for the
        others: its first reads wait on the PS until every worker has ended the epoch and been
        primed (the counts' generations, ``cc/crossing.cc``), and the workers still in the last
        epoch finish it without it. That wait is its first run's, within the run's deadline
        (``options``): a worker whose epoch may end longer than that before the others' joins
        them first (``join``, with a deadline of its own), or its run fails at the deadline. Until the
        hundred-and-third session the input's end closed the session, as a failure does (the
        apply run waiting for the gradients of the step that met it could be ended no other
        way), the next epoch needed a new session and runner, and the caller had to hold every
        prime until every worker's input had ended (a worker primed early stepped on out of
        lockstep).

        ``run_metadata``: a list, to trace the steps (``FULL_TRACE``, with the partition graphs):
        each step's ``RunMetadata`` is appended to it in order, its compute run's and its apply
        run's merged into one (``tracing.collector.trace_of`` reads it as one step, from its first
        op to its last update: a step's records overlap the next one's)."""
        if not is_steps(steps):
            raise TfschedError(
                f"crossing the barrier: steps must be a whole number at least 1, got {steps!r}"
            )
        steps = operator.index(steps)
        self._usable()
        if not self.primed:
            # the counts and queues live in the tasks: a run before the prime would step on what
            # a session before left there (a count at its last step, a held gradient)
            raise TfschedError(
                "crossing the barrier: prime the runner before its first run (runner.prime(), on "
                "every worker)"
            )
        if self.retired:
            raise TfschedError(
                "crossing the barrier: this worker was retired (its input ended) and the others went "
                "on without it: prime its runner to step again (the next epoch)"
            )
        given = self._feeding(feed_dicts)
        # each step's RunMetadata, traced: by its compute run's step, and by its apply run's place
        # (none kept for steps not started: ``steps`` may be far more than the input has)
        options, computed, applied = self.options, {}, {}
        if run_metadata is not None:
            options = type(self.options)()
            options.CopyFrom(self.options)
            options.trace_level = options.FULL_TRACE
            options.output_partition_graphs = True
        import tensorflow as tf

        errors: list[BaseException] = []
        ended: list[BaseException] = []  # the input's end, as each run that met it saw it
        bad: list[BaseException] = []  # ``feed_dicts``' error: no step starts after it
        done: dict[int, tuple[float, int, object]] = {}  # a compute run's end, turn and fetched values
        lock = threading.Lock()
        slots = threading.Semaphore(self.depth)
        started: list = []  # each step started, its apply run's feed dict (None: none)
        no_more = threading.Event()  # no step starts after those started
        stopped = threading.Event()  # the input ended: the apply run waiting for a go is stopped
        wake = threading.Condition()
        self.fetched = []

        def traced(op, into: dict, k: int, feed=None):
            if run_metadata is None:
                return self.sess.run(op, feed_dict=feed, options=options)
            into[k] = tf.compat.v1.RunMetadata()
            return self.sess.run(op, feed_dict=feed, options=options, run_metadata=into[k])

        def guarded(fn, *args) -> None:
            try:
                fn(*args)
            except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                errors.append(e)

        def applies() -> None:
            for k in range(steps):
                with wake:  # the step's compute run started (its feeds known), or none will
                    while k >= len(started) and not (no_more.is_set() or errors):
                        wake.wait(0.1)
                    if errors or k >= len(started):
                        return
                try:
                    traced(self.step.apply_op, applied, k, started[k])
                except tf.errors.InvalidArgumentError as e:
                    if stopped.is_set() and STOPPED in e.message:
                        return  # the step that met the input's end: nothing to apply
                    raise
                self.applied += 1

        def compute(k: int) -> None:
            try:
                out = traced(
                    (self.step.compute_op, self.step.turn, *(() if fetches is None else (fetches,))),
                    computed,
                    k,
                )
                with lock:
                    done[k] = (time.perf_counter(), out[1], None if fetches is None else out[2])
            except tf.errors.OutOfRangeError as e:
                ended.append(e)
            finally:
                slots.release()

        def start(k: int) -> bool:
            apply_feed = None
            if given is not None:
                try:
                    feed, apply_feed = next(given)
                except StopIteration:
                    return False
                except Exception as e:  # noqa: BLE001 - raised once the steps started are applied
                    bad.append(e)
                    return False
                try:  # queued: the run's turn takes it
                    self.sess.run(self.step.feed_op, feed, self.options)
                except (ValueError, TypeError, tf.errors.InvalidArgumentError) as e:  # the values
                    bad.append(e)  # not queued: nothing is left half-way
                    return False
                except BaseException as e:  # noqa: BLE001 - raised in the caller's thread
                    errors.append(e)
                    return False
            with wake:
                started.append(apply_feed)
                wake.notify_all()
            runs.append(
                threading.Thread(target=guarded, args=(compute, k), daemon=True, name="tfsched-cross")
            )
            runs[-1].start()
            return True

        applier = threading.Thread(target=guarded, args=(applies,), daemon=True, name="tfsched-cross-apply")
        applier.start()
        runs = []
        for k in range(steps):
            while not slots.acquire(timeout=0.1):
                if errors or ended:
                    break
            if errors or ended or not start(k):
                break
        with wake:
            no_more.set()
            wake.notify_all()
        # each run ends by its deadline; at the input's end, every compute run (a run after the
        # one that met it waits for the turn that one took: given it, it meets the end too), and
        # then the updates of those that ended well: the apply run after them waits for a go
        # that no compute run is left to give, and the stop ends it
        passed = False
        for t in runs:
            while t.is_alive() and not errors:
                if ended and not passed:
                    passed = True
                    guarded(self.sess.run, self.step.pass_op, None, self.options)
                t.join(0.1)
        if ended and not errors:
            stopped.set()
            guarded(self.sess.run, self.step.stop_op, None, self.options)
        while applier.is_alive() and not errors:
            applier.join(0.1)
        if ended and not errors:  # every step it took applied: the other workers go on without it
            guarded(self.sess.run, self.step.retire_op, None, self.options)
        if errors:
            self._fail(errors[0], [*runs, applier])
        # the steps' order: the turns the runs took (a run's return may come after the next
        # one's where a step's ops take less than the return; measured with a toy model)
        order = sorted(done, key=lambda k: done[k][1])
        if fetches is not None:  # at the input's end too: the values of the steps applied
            self.fetched = [done[k][2] for k in order]
        if ended:
            self.retired = True
            raise ended[0]
        if bad:
            raise bad[0]
        ends = sorted(end for end, _, _ in done.values())  # the i-th step to end, the i-th end
        if ends:
            ends[-1] = max(ends[-1], time.perf_counter())
        if run_metadata is not None:
            for k, apply_md in zip(order, (applied[i] for i in range(len(order))), strict=True):
                computed[k].MergeFrom(apply_md)
                run_metadata.append(computed[k])
        return ends

    def _feeding(self, feed_dicts):
        """``feed_dicts`` checked against the step's feeds, as an iterator of each step's feed
        dicts: its compute run's (for ``feed_op``) and its apply run's (None when it reads
        none). None without ``feed_dicts``."""
        step = self.step
        names = [t.name for t in step.feeds]
        if feed_dicts is None:
            if step.feeds:
                raise TfschedError(
                    f"crossing the barrier: the step is fed {', '.join(names)}: pass feed_dicts, a feed "
                    "dict a step"
                )
            return None
        if not step.feeds:
            raise TfschedError(
                "crossing the barrier: feed_dicts for a step that takes no feeds (cross_barrier_step's "
                "feeds name the tensors a step is fed)"
            )

        def each():
            for n, feed in enumerate(feed_dicts):
                by_name = {
                    key if isinstance(key, str) else getattr(key, "name", repr(key)): v
                    for key, v in feed.items()
                }
                missing = [name for name in names if name not in by_name]
                extra = sorted(set(by_name) - set(names))
                if missing or extra:
                    what = [f"lacks {', '.join(missing)}"] if missing else []
                    what += [f"feeds {', '.join(extra)}, which the step is not fed"] if extra else []
                    raise TfschedError(f"crossing the barrier: feed dict {n} {' and '.join(what)}")
                yield (
                    {t: by_name[t.name] for t in step.feeds},
                    {t: by_name[t.name] for t in step.apply_feeds} or None,
                )

        return each()

    def _fail(self, error: BaseException, threads: list) -> None:
        """Close the session, wait (up to a run's deadline) for ``threads``' runs to end, and raise
        ``error``. A session to a task that died may take long to close where the tasks wait for
        it to come back (``GRPC_FAIL_FAST``, README): then what has not ended by the deadline is
        left to it, each run bounded by its own deadline."""
        self.failed = error

        def close() -> None:
            try:
                self.sess.close()
            except Exception:  # noqa: BLE001 - the run's own error is the one to raise
                pass

        closer = threading.Thread(target=close, daemon=True, name="tfsched-cross-close")
        closer.start()
        from tfsched.enforce.api import DEFAULT_TIMEOUT_MS

        deadline = time.monotonic() + (self.options.timeout_in_ms or DEFAULT_TIMEOUT_MS) / 1000
        for t in [closer, *threads]:
            t.join(max(0.0, deadline - time.monotonic()))
        raise error

    def close(self) -> None:
        """Close the session, which cancels a run still waiting (``run`` does, on a failure)."""
        self.sess.close()
