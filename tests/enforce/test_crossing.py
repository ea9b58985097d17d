"""Steps across TensorFlow's barrier (tfsched.enforce.crossing) on a real gRPC cluster: the
values are vanilla TensorFlow's, every read waits for the last step's updates, and no gate
waits past its run's deadline."""

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from tests.enforce.conftest import assert_bitwise_equal, train, within
from tfsched.enforce.crossing import CrossingRunner, CrossingStep
from tfsched.errors import TfschedError
from tfsched.models import build_graph

pytestmark = [pytest.mark.tf, pytest.mark.cluster]


def _options(timeout_s: float = 60.0):
    import tensorflow as tf

    return tf.compat.v1.RunOptions(timeout_in_ms=int(timeout_s * 1000))


def _cross_train(targets, builts, steps, options=None, config=None, depth=2):
    """Every worker's ``steps`` steps across the barrier at once, two compute runs in flight;
    (worker 0's loss, the variables' values, the global step) after the last update."""
    import tensorflow as tf

    sessions = [
        tf.compat.v1.Session(t, graph=b.graph, config=config) for t, b in zip(targets, builts, strict=True)
    ]
    try:
        sessions[0].run(builts[0].init_op)
        runners = [
            CrossingRunner(s, b.crossing, options=options or _options(), depth=depth)
            for s, b in zip(sessions, builts, strict=True)
        ]
        for r in runners:
            r.prime()
        errors = []

        def work(w):
            try:
                ends = runners[w].run(steps)
                assert len(ends) == steps and ends == sorted(ends)
            except BaseException as e:  # noqa: BLE001 - raised below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(len(runners))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        loss = sessions[0].run(builts[0].loss)  # on the last step's updates
        step = sessions[0].run(tf.compat.v1.train.get_global_step(builts[0].graph))
        values = sessions[0].run(builts[0].graph.get_collection("variables"))
    finally:
        for s in sessions:
            s.close()
    return loss, values, step


@pytest.mark.parametrize("optimizer,depth", [("sgd", 2), ("momentum", 2), ("adam", 2), ("sgd", 1)])
def test_one_worker_across_the_barrier_is_bitwise_vanilla(cluster, optimizer, depth):
    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("seq32", ps_tasks=2, optimizer=optimizer), 6)
    crossed = build_graph("seq32", ps_tasks=2, optimizer=optimizer, cross_workers=1)
    assert crossed.crossing is not None and crossed.train_op is crossed.crossing.compute_op
    got = _cross_train([target], [crossed], 6, depth=depth)
    assert_bitwise_equal(([], vanilla[1]), ([], got[1]))
    # the global step counts every update: the last apply run ended before the values were read
    assert got[2] == 6


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_sparse_gradient_crosses_the_barrier_bitwise_vanilla(cluster, optimizer):
    """The Transformer's embedding has a sparse gradient (its lookups' rows and their indices):
    both are held between the runs and go into the optimizer's sparse update, as behind the
    barrier, so the values are vanilla TensorFlow's."""
    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("transformer", ps_tasks=2, batch_size=2, optimizer=optimizer), 4)
    crossed = build_graph("transformer", ps_tasks=2, batch_size=2, optimizer=optimizer, cross_workers=1)
    held = [op for op in crossed.graph.get_operations() if op.type == "QueueDequeueV2" and "/held" in op.name]
    assert any(len(op.outputs) == 2 for op in held)  # the embedding's values and indices
    got = _cross_train([target], [crossed], 4)
    assert_bitwise_equal(([], vanilla[1]), ([], got[1]))
    assert got[2] == 4


def _moving_average_graph(cross: bool, also: bool = True):
    """A layer normalized by its batch's moments, whose moving mean is kept as batch
    normalization keeps it (an op of ``UPDATE_OPS``, run beside the step's gradients), on two PS."""
    import tensorflow as tf

    from tfsched.enforce.crossing import cross_barrier_step

    v1 = tf.compat.v1
    graph = tf.Graph()
    worker = "/job:worker/task:0"
    with graph.as_default(), graph.device(v1.train.replica_device_setter(ps_tasks=2, worker_device=worker)):
        x = tf.constant(np.random.RandomState(0).randn(8, 16).astype(np.float32))
        w1 = v1.get_variable(
            "w1", [16, 16], initializer=v1.glorot_uniform_initializer(seed=1), use_resource=True
        )
        w2 = v1.get_variable(
            "w2", [16, 4], initializer=v1.glorot_uniform_initializer(seed=2), use_resource=True
        )
        moving = v1.get_variable("moving_mean", [16], initializer=v1.zeros_initializer(), trainable=False)
        h = tf.matmul(x, w1)
        mean, var = tf.nn.moments(h, [0])
        update = moving.assign(moving * 0.9 + mean * 0.1)
        loss = tf.reduce_mean(
            tf.square(tf.matmul(tf.nn.batch_normalization(h, mean, var, None, None, 1e-3), w2))
        )
        opt = v1.train.GradientDescentOptimizer(0.1)
        step = v1.train.get_or_create_global_step()
        grads = opt.compute_gradients(loss)
        crossing = None
        if cross:
            crossing = cross_barrier_step(
                opt, grads, worker=0, workers=1, global_step=step, compute_also=[update] if also else ()
            )
            train_op = crossing.compute_op
        else:
            with tf.control_dependencies([update]):
                train_op = opt.apply_gradients(grads, global_step=step)
        init = v1.global_variables_initializer()
    return SimpleNamespace(graph=graph, train_op=train_op, loss=loss, init_op=init, crossing=crossing)


def test_ops_beside_the_gradients_run_in_the_compute_run_bitwise_vanilla(cluster):
    """Batch normalization's moving averages (``compute_also``) run once a step, in its compute
    run and before its gradients are held, as ``control_dependencies(update_ops)`` runs them
    behind the barrier: every value, the moving mean's too, is vanilla TensorFlow's."""
    target = cluster.target("worker", 0)
    vanilla = train(target, _moving_average_graph(cross=False), 5)
    got = _cross_train([target], [_moving_average_graph(cross=True)], 5)
    assert_bitwise_equal(([], vanilla[1]), ([], got[1]))
    assert np.abs(vanilla[1][2]).sum() > 0  # the moving mean moved
    # without them the step runs no update of the moving mean
    missed = _cross_train([target], [_moving_average_graph(cross=True, also=False)], 5)
    assert not np.abs(missed[1][2]).any()


def test_a_built_in_models_batch_norm_crosses_the_barrier_bitwise_vanilla(cluster):
    """MobileNet's batch normalization keeps 54 moving statistics on the PS. Its step updates
    them (``build_graph(moving_averages=True)``): behind the barrier before the gradients'
    updates, across it in the compute run (``compute_also``). Every value, the statistics'
    too, is vanilla TensorFlow's after three steps; the statistics moved."""
    target = cluster.target("worker", 0)
    args = {"batch_size": 2, "image_size": 32, "ps_tasks": 2}
    built = build_graph("mobilenet", **args)
    vanilla = train(target, built, 3)
    got = _cross_train([target], [build_graph("mobilenet", cross_workers=1, **args)], 3)
    assert_bitwise_equal(([], vanilla[1]), ([], got[1]))
    names = [v.op.name for v in built.graph.get_collection("variables")]
    moving = [i for i, n in enumerate(names) if n.endswith(("moving_mean", "moving_variance"))]
    assert len(moving) == 54
    # the means start at 0 and the variances at 1: each moved
    assert all(np.abs(vanilla[1][i] - ("variance" in names[i])).sum() > 0 for i in moving)
    assert got[2] == 3


def test_a_run_takes_the_token_of_the_ops_beside_the_gradients_only_in_its_turn(cluster):
    """The order behind a deadlock a CI rehearsal hit: a compute run that took the token of the
    ops beside the gradients before its turn held it while the run before, which has the turn,
    waited for it (its moving mean's update; its gradients are held only after it), and the
    later run's reads waited for those gradients' updates. With the turn held here (where the
    run before would hold it), a run waits for the turn and leaves the token alone; given the
    turn, it runs, and returns both."""
    import tensorflow as tf

    built = _moving_average_graph(cross=True)
    with built.graph.as_default(), tf.device("/job:worker/task:0"):
        # the runs' own queues, by their shared names (tfsched.enforce.crossing)
        turn, order = (
            tf.compat.v1.FIFOQueue(2, [tf.int32], shapes=[[]], shared_name=f"tfsched_cross/{n}0of1")
            for n in ("turn", "order")
        )
        take_turn, give_turn, sizes = turn.dequeue(), turn.enqueue(0), (turn.size(), order.size())
    with tf.compat.v1.Session(cluster.target("worker", 0), graph=built.graph) as sess:
        sess.run(built.init_op)
        # while the run waits for its turn, the token is still there
        _a_run_held_for_its_turn(sess, built, take_turn, give_turn, lambda: sess.run(sizes) == (0, 1))
        assert sess.run(sizes) == (1, 1)  # both passed on for the next run


def _a_run_held_for_its_turn(sess, built, take_turn, give_turn, meanwhile) -> None:
    """One step of ``built``'s runner on ``sess`` with the turn taken (``take_turn``: where the
    run before would hold it): after 2 s the run still waits, and ``meanwhile()`` holds; given
    the turn (``give_turn``), the run ends, its step applied."""
    runner = CrossingRunner(sess, built.crossing, options=_options())
    runner.prime()
    sess.run(take_turn)
    box = {}
    run = threading.Thread(target=lambda: box.setdefault("ends", runner.run(1)), daemon=True)
    run.start()
    time.sleep(2.0)
    assert run.is_alive()  # waiting for its turn
    assert meanwhile()
    sess.run(give_turn)
    run.join(60)
    assert not run.is_alive() and len(box["ends"]) == runner.applied == 1


_BATCHES = [3, 1, 4, 2, 5, 3, 2]  # a batch's rows: known only in its run


def _input_graph(cross: bool, optimizer=None):
    """An embedding looked up by each batch's ids, a batch of a size known only in its run (an
    input iterator's next element), through a layer with dropout (a stateful random
    draw), on two PS: the embedding's gradient is sparse, of unknown rows."""
    import tensorflow as tf

    from tfsched.enforce.crossing import cross_barrier_step

    v1 = tf.compat.v1
    graph = tf.Graph()
    worker = "/job:worker/task:0"
    everything = np.random.RandomState(0).randint(0, 20, sum(_BATCHES)).astype(np.int32)
    with graph.as_default(), graph.device(v1.train.replica_device_setter(ps_tasks=2, worker_device=worker)):
        starts = tf.constant(np.cumsum([0, *_BATCHES]), tf.int64)
        batches = tf.data.Dataset.range(len(_BATCHES)).map(
            lambda i: tf.gather(tf.constant(everything), tf.range(starts[i], starts[i + 1]))
        )
        iterator = v1.data.make_initializable_iterator(batches)
        ids = iterator.get_next()
        emb = v1.get_variable(
            "emb", [20, 8], initializer=v1.glorot_uniform_initializer(seed=1), use_resource=True
        )
        w = v1.get_variable("w", [8, 4], initializer=v1.glorot_uniform_initializer(seed=2), use_resource=True)
        h = tf.nn.dropout(tf.matmul(tf.nn.embedding_lookup(emb, ids), w), rate=0.5, seed=7)
        loss = tf.reduce_mean(tf.square(h))
        opt = (optimizer or v1.train.AdamOptimizer)(0.01)
        step = v1.train.get_or_create_global_step()
        grads = opt.compute_gradients(loss)
        crossing = None
        if cross:
            crossing = cross_barrier_step(opt, grads, worker=0, workers=1, global_step=step)
            train_op = crossing.compute_op
        else:
            train_op = opt.apply_gradients(grads, global_step=step)
        init = tf.group(v1.global_variables_initializer(), iterator.initializer)
    batches = np.split(everything, np.cumsum(_BATCHES)[:-1])
    return SimpleNamespace(
        graph=graph,
        train_op=train_op,
        init_op=init,
        crossing=crossing,
        iterator=iterator,
        batches=batches,
        loss=loss,
    )


def _values(target, built):
    import tensorflow as tf

    with tf.compat.v1.Session(target, graph=built.graph) as sess:
        return sess.run(built.graph.get_collection("variables"))


@pytest.mark.parametrize("left", [1, 0, None])
def test_an_input_iterators_batches_and_dropouts_draws_keep_their_order_to_the_inputs_end(cluster, left):
    """Two compute runs in flight each take a batch from the input iterator and draw dropout's
    mask: a run takes them after the run before took its own (the order token), so each step
    has the batch and the mask it has behind the barrier. At the input's end the steps before it
    are applied in full, and the iterator's error is raised, with ``left`` batches when two runs
    start together (none: the second waits for the turn the first took when it met the end;
    ``within``: it is given it, and meets the end too), or in one call from the first batch
    (``left`` None: steps applied while the call still starts runs count). The session stays
    open, and a second epoch follows in it, the iterator started again and the gates primed:
    every value is vanilla TensorFlow's, trained for two epochs until its iterator ended. (With an optimizer whose every update waits
    for its gradient: Adam's sparse update scales its slots first, which a step that meets the
    end may have done, behind the barrier too, as its ops happen to run.)"""
    import tensorflow as tf

    v1 = tf.compat.v1
    momentum = lambda rate: v1.train.MomentumOptimizer(rate, 0.9)  # noqa: E731
    target = cluster.target("worker", 0)
    vanilla = _input_graph(cross=False, optimizer=momentum)
    with tf.compat.v1.Session(target, graph=vanilla.graph) as sess:
        sess.run(vanilla.init_op)
        for _ in range(2):  # two epochs
            with pytest.raises(tf.errors.OutOfRangeError):
                for _ in range(len(_BATCHES) + 1):
                    sess.run(vanilla.train_op)
            sess.run(vanilla.iterator.initializer)
        expected = sess.run(vanilla.graph.get_collection("variables"))
    crossed = _input_graph(cross=True, optimizer=momentum)
    ops = crossed.graph.get_operations()
    taken = [
        op for op in ops if op.type in ("IteratorGetNext", "RandomUniform") and "Initializer" not in op.name
    ]
    assert len(taken) == 2
    for op in taken:  # each waits for the run before to take its own
        queues = [
            c.inputs[0].op.get_attr("shared_name") for c in op.control_inputs if c.type == "QueueDequeueV2"
        ]
        assert queues == [b"tfsched_cross/order0of1"]
    # the apply run's go is given once the batch is taken, not after dropout's draw: the apply
    # run takes no gradient before it, so it starts no later than the gradients come
    given = crossed.graph.get_operation_by_name("tfsched_cross/given")
    assert given.inputs[0].op.get_attr("shared_name") == b"tfsched_cross/go0of1"
    # the control input goes on the value the go enqueues, made in its context
    assert [c.type for op in [given, given.inputs[1].op] for c in op.control_inputs] == ["IteratorGetNext"]
    # the embedding's gradient, of rows known only in the run, is held in a padding queue
    assert any(
        op.type == "PaddingFIFOQueueV2" and b"emb/held" in op.get_attr("shared_name")
        for op in crossed.graph.get_operations()
    )
    with tf.compat.v1.Session(target, graph=crossed.graph) as sess:
        sess.run(crossed.init_op)
        runner = CrossingRunner(sess, crossed.crossing, options=_options())
        runner.prime()
        if left is not None:
            assert len(runner.run(len(_BATCHES) - left)) == len(_BATCHES) - left
        # two runs started together: with a batch left, the one that takes its turn second
        # meets the end, whichever of the two it is, and the other's step is applied
        steps = len(_BATCHES) + 3 if left is None else 3
        ran = within(30, lambda: runner.run(steps, fetches=crossed.loss))  # the runs' deadline is 60 s
        assert isinstance(ran.get("error"), tf.errors.OutOfRangeError), ran
        assert runner.applied == len(_BATCHES)
        assert len(runner.fetched) == (len(_BATCHES) if left is None else left)  # the steps applied
        with pytest.raises(TfschedError, match="this worker was retired"):
            runner.run(1)
        # the next epoch in the same session: the iterator started again, the gates primed
        sess.run(crossed.iterator.initializer)
        runner.prime()
        ran = within(30, lambda: runner.run(10**9))  # until the input's end: no step kept ahead
        assert isinstance(ran.get("error"), tf.errors.OutOfRangeError), ran
        assert runner.applied == 2 * len(_BATCHES)
    # the variables live on the PS (the same as vanilla's, whose values were read before)
    got = _values(target, crossed)
    assert_bitwise_equal(([], expected), ([], got))
    names = [v.op.name for v in crossed.graph.get_collection("variables")]
    assert got[names.index("global_step")] == 2 * len(_BATCHES)  # every step's update, no more


def _sharded_graph(worker: int, batches: int, fed: bool = False):
    """A linear regression on two PS, worker ``worker`` of two, whose input (``tf.data``, or a
    batch ``fed`` each step) has ``batches`` batches of 4 rows: the shard of a dataset split
    unevenly. SGD, across the barrier."""
    import tensorflow as tf

    from tfsched.enforce.crossing import cross_barrier_step

    v1 = tf.compat.v1
    graph = tf.Graph()
    rows = np.random.RandomState(10 + worker)
    x = rows.uniform(-1, 1, (batches * 4, 3)).astype(np.float32)
    y = rows.uniform(-1, 1, (batches * 4, 1)).astype(np.float32)
    device = f"/job:worker/task:{worker}"
    with graph.as_default(), graph.device(v1.train.replica_device_setter(ps_tasks=2, worker_device=device)):
        iterator = v1.data.make_initializable_iterator(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))
        bx, by = (v1.placeholder(tf.float32, [None, n]) for n in (3, 1)) if fed else iterator.get_next()
        w = v1.get_variable("w", [3, 1], initializer=v1.glorot_uniform_initializer(seed=3), use_resource=True)
        b = v1.get_variable("b", [1], initializer=v1.ones_initializer(), use_resource=True)
        loss = tf.reduce_mean(tf.square(tf.matmul(bx, w) + b - by))
        opt = v1.train.GradientDescentOptimizer(0.5)
        step = v1.train.get_or_create_global_step()
        feeds = [bx, by] if fed else ()
        grads = opt.compute_gradients(loss)
        crossing = cross_barrier_step(opt, grads, worker=worker, workers=2, global_step=step, feeds=feeds)
        init = tf.group(v1.global_variables_initializer(), iterator.initializer)
    feed_dicts = [{bx: x[k : k + 4], by: y[k : k + 4]} for k in range(0, len(x), 4)] if fed else None
    return SimpleNamespace(
        graph=graph,
        crossing=crossing,
        init_op=init,
        iterator=iterator,
        w=w,
        b=b,
        x=x,
        y=y,
        feed_dicts=feed_dicts,
    )


def _assert_two_epochs_in_lockstep(cluster, builts, shards, w, b) -> None:
    """The variables after two epochs of ``_sharded_graph``'s workers (``shards`` batches each,
    from ``w`` and ``b``) are a numpy SGD's that applies, each step, the gradients of the workers
    with a batch left, all computed on the last step's values (a read that missed an update
    would be off by much more than a rounding)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with v1.Session(cluster.target("worker", 1), graph=builts[1].graph) as sess:
        got_w, got_b, step = sess.run([builts[1].w, builts[1].b, v1.train.get_global_step(builts[1].graph)])
    assert step == 2 * sum(shards)
    start_w = w = w.astype(np.float64)
    b = b.astype(np.float64)
    for t in [*range(max(shards))] * 2:
        dw, db = np.zeros_like(w), np.zeros_like(b)
        for bt, n in zip(builts, shards, strict=True):
            if t < n:
                x, y = bt.x[4 * t : 4 * t + 4].astype(np.float64), bt.y[4 * t : 4 * t + 4].astype(np.float64)
                r = x @ w + b - y
                dw += 2 * x.T @ r / len(x)
                db += 2 * r.sum(0) / len(x)
        w, b = w - 0.5 * dw, b - 0.5 * db
    assert np.linalg.norm(w - start_w) > 0.1  # the steps trained
    np.testing.assert_allclose(got_w, w, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got_b, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fed", [False, True], ids=["iterator", "fed"])
def test_a_worker_whose_input_ends_first_is_retired_and_the_other_trains_on(cluster, fed):
    """Two workers' inputs end at different steps (a dataset sharded unevenly: 2 batches and 4).
    The first's runner applies its 2 steps and retires it: at its iterator's end, before it
    raises it, or, fed, once its feed dicts have ended (``retire``). The second's steps after
    them wait for its own updates only, and it trains its 4 steps well within the runs' deadline
    (until the hundred-and-second session its third step's reads waited for the first worker's
    updates until the deadline). Every read sees every update of the step before by the workers
    still training: the values are a numpy SGD's that applies, each step, the gradients of the
    workers with a batch left, all computed on the last step's values (a read that missed an
    update would be off by much more than a rounding). A second epoch follows in the same
    sessions, each worker's input started again and its runner primed as soon as its own epoch
    ends: the first worker's first reads of it wait for the second to end its epoch and be
    primed too (the counts' generations), so the second epoch's steps go in lockstep again
    (until the hundred-and-third session an iterator's end closed its runner's session, and the
    caller had to hold every prime until every worker's input had ended)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    shards = [2, 4]
    builts = [_sharded_graph(w, n, fed) for w, n in enumerate(shards)]
    sessions = [v1.Session(cluster.target("worker", w), graph=b.graph) for w, b in enumerate(builts)]
    try:
        sessions[0].run(builts[0].init_op)
        sessions[1].run(builts[1].iterator.initializer)
        w, b = sessions[0].run([builts[0].w, builts[0].b])
        runners = [
            CrossingRunner(s, bt.crossing, options=_options(30.0))
            for s, bt in zip(sessions, builts, strict=True)
        ]
        boxes: list = [[], []]  # each worker's epochs
        refused: list = [[], []]  # each epoch's end: a run before the next prime was refused

        def work(k):
            runner = runners[k]

            def steps():
                ends = runner.run(10, feed_dicts=builts[k].feed_dicts)
                runner.retire()  # fed: the input's end is the caller's to say
                return ends

            # each worker's next epoch at once, in the same session: its input started again and
            # its runner primed, with no wait for the other's epoch to end (the counts' generations)
            for epoch in (1, 2):
                if epoch > 1 and not fed:
                    sessions[k].run(builts[k].iterator.initializer)
                runner.prime()
                boxes[k].append(within(60, steps))
                try:
                    runner.run(1, feed_dicts=[] if fed else None)
                except TfschedError as e:
                    refused[k].append(runner.retired and runner.failed is None and "was retired" in str(e))

        started = time.perf_counter()
        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        took = time.perf_counter() - started
        for epochs, runner, n, ends in zip(boxes, runners, shards, refused, strict=True):
            assert len(epochs) == 2, epochs
            for box in epochs:
                if fed:
                    assert len(box.get("value", ())) == n, box
                else:
                    assert isinstance(box.get("error"), tf.errors.OutOfRangeError), box
            assert ends == [True, True]
            assert runner.applied == 2 * n
        assert took < 40, took  # no wait for a retired worker's updates until a deadline (30 s)
    finally:
        for s in sessions:
            s.close()
    _assert_two_epochs_in_lockstep(cluster, builts, shards, w, b)


def test_a_worker_whose_epoch_ends_long_before_the_others_joins_them_past_a_runs_deadline(cluster):
    """Worker 0's epoch is 1 fed batch, worker 1's 6 batches read slowly (0.8 s each): worker 1
    ends its epoch some 4 s after worker 0, longer than the runs' deadline (3 s). Worker 0 primes
    for its next epoch and joins: a join of 0.5 s fails with one ``TfschedError`` and leaves the
    runner usable; one of 30 s returns once worker 1 is primed too, and worker 0's next epoch
    steps within its runs' deadline (its first reads would otherwise wait on the PS for worker 1
    until that deadline, and the run fail). The values are the lockstep SGD's over both epochs."""
    import tensorflow as tf

    v1 = tf.compat.v1
    shards = [1, 6]
    builts = [_sharded_graph(w, n, fed=True) for w, n in enumerate(shards)]
    sessions = [v1.Session(cluster.target("worker", w), graph=b.graph) for w, b in enumerate(builts)]
    try:
        sessions[0].run(builts[0].init_op)
        w, b = sessions[0].run([builts[0].w, builts[0].b])
        runners = [
            CrossingRunner(s, bt.crossing, options=_options(3.0))
            for s, bt in zip(sessions, builts, strict=True)
        ]
        primed: list = [[], []]  # when each worker was primed for its second epoch
        joined: list = []  # worker 0's joins: (a short one's error, the long one's end)
        applied: list = [[], []]

        def slowly(feed_dicts):
            for feed in feed_dicts:
                time.sleep(0.8)
                yield feed

        def work(k):
            runner = runners[k]
            for epoch in (1, 2):
                runner.prime()
                primed[k].append(time.perf_counter())
                if epoch == 2:
                    if k == 0:
                        with pytest.raises(TfschedError, match="worker 0's join: the other workers were not"):
                            runner.join(0.5)
                        joined.append(runner.failed is None and not runner.sess._closed)
                    runner.join(30)
                    if k == 0:
                        joined.append(time.perf_counter())
                feeds = builts[k].feed_dicts
                applied[k].append(
                    len(runner.run(10, feed_dicts=slowly(feeds) if epoch == 1 and k else feeds))
                )
                runner.retire()

        boxes = [{}, {}]

        def guarded(k):
            boxes[k].update(within(60, lambda: work(k)))

        threads = [threading.Thread(target=guarded, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert boxes == [{"value": None}, {"value": None}], boxes
        assert applied == [[1, 1], [6, 6]]
        # worker 0 was primed for its second epoch well before worker 1, and its join returned
        # only once worker 1 was primed too
        assert primed[1][1] - primed[0][1] > 3.0, primed
        assert joined[0] is True
        assert joined[1] >= primed[1][1] - 0.05, (joined, primed)
    finally:
        for s in sessions:
            s.close()
    _assert_two_epochs_in_lockstep(cluster, builts, shards, w, b)


def test_a_run_takes_its_batch_only_in_its_turn(cluster):
    """With the turn held here (where the run before would hold it), a run waits for its turn
    and leaves the input iterator alone: a batch taken meanwhile is the first. Given the turn,
    the run takes the next one."""
    import tensorflow as tf

    crossed = _input_graph(cross=True)
    with crossed.graph.as_default(), tf.device("/job:worker/task:0"):
        turn = tf.compat.v1.FIFOQueue(2, [tf.int32], shapes=[[]], shared_name="tfsched_cross/turn0of1")
        take_turn, give_turn, first = turn.dequeue(), turn.enqueue(0), crossed.iterator.get_next()
    with tf.compat.v1.Session(cluster.target("worker", 0), graph=crossed.graph) as sess:
        sess.run(crossed.init_op)
        first_batch = crossed.batches[0].tolist()
        _a_run_held_for_its_turn(
            sess, crossed, take_turn, give_turn, lambda: sess.run(first).tolist() == first_batch
        )


def test_a_sparse_gradient_of_rows_known_only_in_the_run_crosses_bitwise_vanilla(cluster):
    """Each step's batch of ids is as long as the step has (an input iterator's next element):
    the embedding's gradient has rows known only in the run, held as it is (a padding queue)
    and given to Adam's sparse update of its own step. Each step's loss, fetched by its compute
    run (``fetches``), is the one behind the barrier."""
    import tensorflow as tf

    target = cluster.target("worker", 0)
    steps = len(_BATCHES) - 1  # short of the end: every update waits on its step's batch
    vanilla = _input_graph(cross=False)
    with tf.compat.v1.Session(target, graph=vanilla.graph) as sess:
        sess.run(vanilla.init_op)
        losses = [sess.run([vanilla.train_op, vanilla.loss])[1] for _ in range(steps)]
        expected = sess.run(vanilla.graph.get_collection("variables"))
    crossed = _input_graph(cross=True)
    with tf.compat.v1.Session(target, graph=crossed.graph) as sess:
        sess.run(crossed.init_op)
        runner = CrossingRunner(sess, crossed.crossing, options=_options())
        runner.prime()
        assert len(runner.run(2, fetches=crossed.loss)) == runner.applied == 2
        first = runner.fetched
        assert len(runner.run(steps - 2, fetches={"loss": crossed.loss})) == steps - 2
        fetched = first + [v["loss"] for v in runner.fetched]
    assert_bitwise_equal((losses, expected), (fetched, _values(target, crossed)))
    assert len(set(losses)) == steps  # each step its own batch, mask and values


_FED = [4, 2, 5, 1, 3]  # each step's batch: its rows, known only when it is fed


def _fed_graph(cross: bool):
    """A batch fed each step (its features and labels, of as many rows as the step has) and a
    learning rate fed each step, which the optimizer's update reads, on two PS."""
    import tensorflow as tf

    from tfsched.enforce.crossing import cross_barrier_step

    v1 = tf.compat.v1
    graph = tf.Graph()
    with (
        graph.as_default(),
        graph.device(v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")),
    ):
        x = v1.placeholder(tf.float32, [None, 6], name="x")
        y = v1.placeholder(tf.float32, [None, 3], name="y")
        rate = v1.placeholder(tf.float32, [], name="rate")
        w = v1.get_variable("w", [6, 5], initializer=v1.glorot_uniform_initializer(seed=3), use_resource=True)
        v = v1.get_variable("v", [5, 3], initializer=v1.glorot_uniform_initializer(seed=4), use_resource=True)
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.tanh(tf.matmul(x, w)), v) - y))
        opt = v1.train.MomentumOptimizer(rate, 0.9)
        step = v1.train.get_or_create_global_step()
        grads = opt.compute_gradients(loss)
        crossing = None
        if cross:
            crossing = cross_barrier_step(
                opt, grads, worker=0, workers=1, global_step=step, feeds=[x, y, rate]
            )
            train_op = crossing.compute_op
        else:
            train_op = opt.apply_gradients(grads, global_step=step)
        init = v1.global_variables_initializer()
    rng = np.random.RandomState(5)
    feeds = [
        {x: rng.randn(n, 6).astype(np.float32), y: rng.randn(n, 3).astype(np.float32), rate: 0.1 / (1 + k)}
        for k, n in enumerate(_FED)
    ]
    return SimpleNamespace(
        graph=graph, train_op=train_op, init_op=init, crossing=crossing, loss=loss, feeds=feeds
    )


def test_a_step_fed_each_run_crosses_bitwise_vanilla(cluster):
    """Each step fed its batch (of its own size) and its learning rate: the compute runs take
    each step's batch in their turns, and each apply run the rate of its step, so every loss
    and value is vanilla TensorFlow's fed the same feed dicts one step after the other. The
    feed dicts end before the steps asked for: the steps fed are applied and no more. A feed
    dict that lacks a fed tensor, or feeds a value of another shape, fails the call once the
    steps started are applied, and the runner goes on."""
    import tensorflow as tf

    target = cluster.target("worker", 0)
    vanilla = _fed_graph(cross=False)
    with tf.compat.v1.Session(target, graph=vanilla.graph) as sess:
        sess.run(vanilla.init_op)
        losses = [sess.run([vanilla.train_op, vanilla.loss], feed_dict=f)[1] for f in vanilla.feeds]
        expected = sess.run(vanilla.graph.get_collection("variables"))
    crossed = _fed_graph(cross=True)
    step = crossed.crossing
    assert [t.op.name for t in step.feeds] == ["x", "y", "rate"]
    assert [t.op.name for t in step.apply_feeds] == ["rate"]  # the optimizer's update reads it
    with tf.compat.v1.Session(target, graph=crossed.graph) as sess:
        sess.run(crossed.init_op)
        runner = CrossingRunner(sess, step, options=_options())
        runner.prime()
        with pytest.raises(TfschedError, match="the step is fed x:0, y:0, rate:0: pass feed_dicts"):
            runner.run(1)
        first = dict(crossed.feeds[0])
        lacking = {k: v for k, v in crossed.feeds[1].items() if k.op.name != "y"}
        with pytest.raises(TfschedError, match="feed dict 1 lacks y:0$"):
            runner.run(3, feed_dicts=[first, lacking], fetches=crossed.loss)
        assert runner.applied == 1 and len(runner.fetched) == 1  # the step started, applied
        fetched = list(runner.fetched)
        wrong = {k: (np.zeros([2, 7], np.float32) if k.op.name == "x" else v) for k, v in first.items()}
        with pytest.raises(ValueError, match="Cannot feed value of shape \\(2, 7\\)"):
            runner.run(1, feed_dicts=[wrong])
        assert runner.applied == 1
        by_name = [{k.name: v for k, v in f.items()} for f in crossed.feeds[1:]]  # names feed too
        ends = runner.run(len(_FED) + 2, feed_dicts=iter(by_name), fetches=crossed.loss)
        assert len(ends) == len(_FED) - 1 and ends == sorted(ends)  # as many as the feed dicts
        assert runner.applied == len(_FED)
        fetched += runner.fetched
    assert_bitwise_equal((losses, expected), (fetched, _values(target, crossed)))
    assert len(set(losses)) == len(_FED)


def test_one_worker_across_the_barrier_under_the_pass_is_bitwise_vanilla(cluster):
    """TIO's gates served by priority among the arrived (enable(ready=True)), the large tensors
    cut into slices under a credit, on both runs of each step: the gates ran, and the values
    are vanilla TensorFlow's."""
    import tfsched
    from tests.enforce.conftest import settled_stats

    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("seq32", ps_tasks=2), 6)
    ps = [f"/job:ps/replica:0/task:{k}" for k in range(2)]
    before = [settled_stats(target, d) for d in ps]
    config = tfsched.enable(ready=True, partition=32_768, credit=131_072, strict=True)
    got = _cross_train([target], [build_graph("seq32", ps_tasks=2, cross_workers=1)], 6, config=config)
    assert_bitwise_equal(([], vanilla[1]), ([], got[1]))
    after = [settled_stats(target, d) for d in ps]
    # every weight's pull in two slices, each step, from the two PS
    assert sum(a["released"] - b["released"] for a, b in zip(after, before, strict=True)) >= 6 * 32 * 2
    assert all(a["live_steps"] == 0 for a in after)  # each run freed its gates' state


def _looked_up_rows(target, built) -> set[int]:
    """The rows of its embedding that ``built``'s step looks up: the same each step (a built-in
    model's inputs are drawn with a fixed seed)."""
    import tensorflow as tf

    gathers = [op for op in built.graph.get_operations() if op.type == "ResourceGather"]
    assert len(gathers) == 1, [op.name for op in gathers]
    with tf.compat.v1.Session(target, graph=built.graph) as sess:
        return set(sess.run(gathers[0].inputs[1]).ravel().tolist())


@pytest.mark.parametrize("model,steps,seed", [("seq32", 5, 1), ("transformer", 3, 20)])
def test_two_workers_read_every_update_of_the_last_step(cluster, model, steps, seed):
    """Each read waits for both workers' updates of its variable in the step before, and each
    update for both workers' reads in its step: two runs train the same values, up to the order
    two updates of one step land in (a rounding), and no update is lost.

    A rounding can flip a ReLU unit of the Transformer's for a token, which moves a few values
    of a few variables by more than a rounding (``benchmarks/crossing_agreement.py``, six pairs of
    runs of five steps: two parted by 1.5e-5, in 6 of 69 variables, each by at most 7.3e-4 of
    how far it moved): each variable agrees to 1e-6, or differs by at most 1% of how far it
    moved. A read that misses an update misses by much more: vanilla TensorFlow's racing steps,
    four pairs of runs each, came out 0.33 to 0.63 of the way apart (seq32, five steps) and 0.75
    to 1.4 (the Transformer, three).

    The Transformer's embedding has a sparse gradient, which TensorFlow adds to the variable
    with the lock shared (``ResourceScatterAdd``): two workers adding to one row at once can
    lose an addition, in vanilla TensorFlow too (``benchmarks/lost_updates.py``). The seed is
    one whose two workers look up no row in common."""
    import tensorflow as tf

    targets = [cluster.target("worker", w) for w in range(2)]
    runs = []
    for _ in range(2):
        crossed = [
            build_graph(model, ps_tasks=2, worker_task=w, cross_workers=2, batch_size=2, seed=seed)
            for w in range(2)
        ]
        runs.append(_cross_train(targets, crossed, steps))
    if model == "transformer":
        rows = [_looked_up_rows(t, b) for t, b in zip(targets, crossed, strict=True)]
        assert all(len(r) > 100 for r in rows) and not rows[0] & rows[1]
    with tf.compat.v1.Session(targets[0], graph=crossed[0].graph) as sess:
        sess.run(crossed[0].init_op)
        initial = sess.run(crossed[0].graph.get_collection("variables"))
    names = [v.op.name for v in crossed[0].graph.get_collection("variables")]
    (_, first, step), (_, second, _) = runs
    assert step == 2 * steps  # the global step: every worker's every update
    moved = 0
    for name, x, y, x0 in zip(names, first, second, initial, strict=True):
        x, y, x0 = (np.asarray(v, np.float64) for v in (x, y, x0))
        if x.size and np.abs(y - x).max() > 1e-6:
            assert np.linalg.norm(y - x) <= 0.01 * np.linalg.norm(x - x0), name
        moved += int(not np.allclose(x, x0, rtol=0, atol=1e-6))
    assert moved > len(first) // 2  # the steps trained


def test_a_read_gate_waits_no_longer_than_the_runs_deadline(cluster):
    """Worker 1 never steps: worker 0's second step waits on its updates, and fails at the
    deadline; closing the session ends the apply run still waiting."""
    import tensorflow as tf

    target = cluster.target("worker", 0)
    built = build_graph("seq32", ps_tasks=2, worker_task=0, cross_workers=2)
    peer = build_graph("seq32", ps_tasks=2, worker_task=1, cross_workers=2)
    sess = tf.compat.v1.Session(target, graph=built.graph)
    sess.run(built.init_op)
    with tf.compat.v1.Session(cluster.target("worker", 1), graph=peer.graph) as other:
        other.run(peer.crossing.prime_op)  # its gates reset, as before any step
    runner = CrossingRunner(sess, built.crossing, options=_options(2.0))
    runner.prime()
    t = time.perf_counter()
    with pytest.raises(tf.errors.DeadlineExceededError):
        # the first step's reads pass (the gates were primed); the second's wait for worker 1's
        # updates of the first, and the first's updates for worker 1's reads
        runner.run(2)
    assert time.perf_counter() - t < 30
    # the failed run closed its session: its apply run, which waited on worker 1's reads, is
    # over, and nothing is left to take the gradients of a run after it
    alive = [t.name for t in threading.enumerate() if t.name.startswith("tfsched-cross")]
    assert alive == []
    assert runner.failed is not None and sess._closed
    with pytest.raises(TfschedError, match="a run failed .DeadlineExceededError. and closed its session"):
        runner.run(1)
    with pytest.raises(TfschedError, match="closed its session"):
        runner.prime()
    box = within(60, runner.close)  # closing again is harmless
    assert "error" not in box


def test_a_count_lets_each_wait_go_at_its_step_and_a_reset_ends_a_stale_one(cluster):
    """The gates' counts (cc/crossing.cc) on a PS, as the crossing uses them for 2 workers: a
    worker's n-th wait since its reset goes once each worker has arrived n + offset times,
    passing its tensors through as they are; a wait its run gave up (the deadline) is not
    counted; a second wait of the same worker at once is an error; a reset ends a wait parked
    from before and moves its worker into its next generation, its arrivals none. A wait goes
    once every worker is in its worker's generation: a worker that left it without retiring (a
    failure's prime) is still waited for, one not yet primed into it too; a retired worker is
    waited for no longer (its waits parked go), nor after it left the generation retired (its
    input ended, and it was primed for the next epoch at once). A join waits for the generation
    alone, and is not one of its worker's waits."""
    import uuid

    import tensorflow as tf

    from tfsched.enforce._loader import load_ops

    ops = load_ops()
    name = f"test/{uuid.uuid4().hex}"
    with tf.Graph().as_default(), tf.device("/job:ps/replica:0/task:0"):
        value = tf.constant([1.5, -0.0, 3.25e-30], tf.float32)
        (passed,), reached = ops.tfsched_cross_wait([value], count=name, worker=0, workers=2, offset=0)
        _, other = ops.tfsched_cross_wait([], count=name, worker=1, workers=2, offset=1)
        arrive = [ops.tfsched_cross_arrive(count=name, worker=w) for w in range(2)]
        reset = [ops.tfsched_cross_reset(count=name, worker=w) for w in range(2)]
        retire = [ops.tfsched_cross_retire(count=name, worker=w) for w in range(2)]
        _, join1 = ops.tfsched_cross_wait([], count=name, worker=1, workers=2, offset=0, join=True)
        with tf.compat.v1.Session(cluster.target("worker", 0)) as sess:

            def waiting(fetch, timeout_s=60.0):
                box: dict = {}

                def run():
                    try:
                        box["value"] = sess.run(fetch, options=_options(timeout_s))
                    except Exception as e:  # noqa: BLE001 - asserted below
                        box["error"] = e

                thread = threading.Thread(target=run, daemon=True)
                thread.start()
                return thread, box

            def held(thread) -> bool:
                time.sleep(1.0)
                return thread.is_alive()

            # worker 0 primed, worker 1 not yet: worker 0's first wait waits for it
            sess.run(reset[0])
            first, box0 = waiting([passed, reached])
            assert held(first)
            sess.run(reset[1])
            first.join(60)
            got, at = box0["value"]  # no arrival needed
            assert at == 0 and got.tobytes() == np.array([1.5, -0.0, 3.25e-30], np.float32).tobytes()
            # given up at its deadline: not counted, the next wait of worker 0 still waits for one
            # arrival of each worker
            with pytest.raises(tf.errors.DeadlineExceededError):
                sess.run(reached, options=_options(1.0))
            second, box0 = waiting(reached)
            time.sleep(1.0)
            sess.run(arrive[0])
            sess.run(arrive[0])
            assert held(second)  # worker 0 twice, worker 1 not yet: not a sum
            # another wait of worker 0 meanwhile: its error at once, the first one left waiting
            with pytest.raises(tf.errors.FailedPreconditionError, match="two waits of worker 0"):
                sess.run(reached, options=_options(30.0))
            assert second.is_alive()
            sess.run(arrive[1])
            second.join(60)
            assert box0 == {"value": 1}
            # worker 1's first wait (offset 1) needs one of each, which the count has
            assert sess.run(other, options=_options(30.0)) == 1
            # a wait of worker 0 parked when it is reset ends (its run is from before the prime)
            third, box0 = waiting(reached)
            assert held(third)
            sess.run(reset[0])  # a failed run's worker, primed again: its next generation
            third.join(60)
            assert isinstance(box0.get("error"), tf.errors.AbortedError), box0
            # it left worker 1's generation without retiring: worker 1 still waits for its
            # arrivals there, which do not come; and its own first wait in the next generation
            # waits for worker 1 to be primed into it
            fourth, box1 = waiting(other)  # worker 1's second: two of each
            sess.run(arrive[1])
            fifth, box0 = waiting(reached)
            assert held(fourth) and held(fifth)
            sess.run(reset[1])  # worker 1 primed too: its stale wait ends, worker 0's goes
            fourth.join(60)
            fifth.join(60)
            assert isinstance(box1.get("error"), tf.errors.AbortedError), box1
            assert box0 == {"value": 0}
            # worker 0 retired (its input ended): worker 1's parked wait goes on its own arrivals
            sess.run(arrive[0])
            sess.run(arrive[1])
            assert sess.run(other, options=_options(30.0)) == 1
            sixth, box1 = waiting(other)  # two of each
            sess.run(arrive[1])
            assert held(sixth)
            sess.run(retire[0])
            sixth.join(60)
            assert box1 == {"value": 2}
            # worker 0 primed for the next epoch at once, worker 1 still in this one: it left
            # this generation retired, so worker 1 trains on without it
            sess.run(reset[0])
            sess.run(arrive[1])
            assert sess.run(other, options=_options(30.0)) == 3
            # and worker 0's first wait in its new generation waits for worker 1's epoch to end
            # and its prime, not for its retire alone
            seventh, box0 = waiting(reached)
            assert held(seventh)
            sess.run(retire[1])
            assert held(seventh)
            sess.run(reset[1])
            seventh.join(60)
            assert box0 == {"value": 0}

            def on_one_of_each(fetch) -> dict:
                """``fetch``'s wait: held past worker 1's arrival, gone on worker 0's."""
                thread, box = waiting(fetch)
                sess.run(arrive[1])
                assert held(thread)
                sess.run(arrive[0])
                thread.join(60)
                return box

            # both in the new generation, none retired: one arrival of each again
            assert on_one_of_each(other) == {"value": 1}
            # worker 1 primed again (not retired: a failure's prime), a generation ahead of
            # worker 0: its join waits for worker 0, and one given up at its deadline leaves
            # nothing parked; worker 0's epoch ends and it is primed: the join goes
            sess.run(reset[1])
            with pytest.raises(tf.errors.DeadlineExceededError):
                sess.run(join1, options=_options(1.0))
            joining, box1 = waiting(join1)
            assert held(joining)
            sess.run(retire[0])
            sess.run(reset[0])
            joining.join(60)
            assert box1 == {"value": 0}
            # the joins were not worker 1's waits: its first wait after them still waits for
            # one arrival of each (its target 1, not 2 or 3)
            assert on_one_of_each(other) == {"value": 1}


def test_a_traced_step_across_the_barrier_holds_both_of_its_runs(cluster):
    """``run(steps, run_metadata)``: each step's compute and apply runs in one RunMetadata, which
    ``trace_of`` reads as one step with every transfer of it (the pulls and the pushes, none
    missing), the next step starting before this one's updates end."""
    import tensorflow as tf

    from tfsched.tracing.collector import trace_of
    from tfsched.tracing.rpclog import RpcLogging

    target = cluster.target("worker", 0)
    built = build_graph("seq32", ps_tasks=2, cross_workers=1)
    with tf.compat.v1.Session(target, graph=built.graph) as sess:
        sess.run(built.init_op)
        runner = CrossingRunner(sess, built.crossing, options=_options())
        runner.prime()
        runner.run(2)  # untraced: nothing to append to
        mds = []
        with RpcLogging(cluster.cluster_spec()):
            ends = runner.run(3, run_metadata=mds)
    assert len(ends) == 3 and len(mds) == 3
    trace = trace_of(mds, built.graph, {"mode": "cross"})
    assert trace.steps == 3 and trace.missing() == {}
    from tfsched.graph.devices import task_of

    worker = "/job:worker/replica:0/task:0"
    for k in range(3):
        moved = [t for t in trace.transfers if t.step == k]
        pulls = [t for t in moved if task_of(t.dst) == worker]
        pushes = [t for t in moved if task_of(t.src) == worker]
        # seq32: 32 weights, each pulled in the compute run and its gradient pushed in the apply run
        assert len({t.tensor for t in pulls}) >= 32 and len({t.tensor for t in pushes}) >= 32
        assert max(t.start_us for t in pushes) > min(t.start_us for t in pulls)
    # a step's records overlap the next one's: in one pair at least, as on two cores shared with
    # another test (pytest -n 2) a step's updates once ended 2 ms before the next step's first op
    overlaps = [
        trace.step_starts_us[k + 1] < trace.step_starts_us[k] + trace.step_times_us[k] for k in range(2)
    ]
    assert any(overlaps), (trace.step_starts_us, trace.step_times_us)


def test_what_cannot_cross():
    import tensorflow as tf

    with pytest.raises(TfschedError, match="training graph"):
        build_graph("seq32", mode="inference", cross_workers=2)
    from tfsched.enforce.crossing import cross_barrier_step

    with tf.Graph().as_default():
        v1 = tf.compat.v1
        emb = v1.get_variable("emb", [10, 4])
        # a variable whose shape is known only in the run: its gradient's rank neither
        shapeless = v1.Variable(
            v1.placeholder_with_default(tf.zeros([3]), shape=None), validate_shape=False, name="shapeless"
        )
        loss = tf.reduce_sum(tf.gather(emb, v1.placeholder(tf.int32, [None]))) + tf.reduce_sum(shapeless)
        opt = v1.train.GradientDescentOptimizer(0.1)
        with pytest.raises(TfschedError, match="shapeless has a gradient of unknown rank"):
            cross_barrier_step(opt, opt.compute_gradients(loss), worker=0, workers=1)
        # a lookup of rows known only in the run crosses
        unknown_rows = tf.reduce_sum(tf.gather(emb, v1.placeholder(tf.int32, [None])))
        assert cross_barrier_step(
            opt, opt.compute_gradients(unknown_rows), worker=0, workers=1
        ).variables == [emb]
        with pytest.raises(TfschedError, match="worker 2 of 2"):
            cross_barrier_step(opt, opt.compute_gradients(loss), worker=2, workers=2)
        # a feed of unknown rank, one not a tensor, and one that both runs read (an op of the
        # forward pass the optimizer's learning rate is too)
        unknown = v1.placeholder(tf.float32, None, name="unknown")
        with pytest.raises(TfschedError, match="feed unknown:0 has an unknown rank"):
            cross_barrier_step(opt, opt.compute_gradients(unknown_rows), worker=0, workers=1, feeds=[unknown])
        with pytest.raises(TfschedError, match="feed 0.5 is not a tensor of this graph"):
            cross_barrier_step(opt, opt.compute_gradients(unknown_rows), worker=0, workers=1, feeds=[0.5])
    with tf.Graph().as_default():
        rate = v1.placeholder(tf.float32, [], name="rate")
        scale = tf.identity(rate, name="scale")
        w = v1.get_variable("w", [3])
        shared = v1.train.GradientDescentOptimizer(scale)
        grads = shared.compute_gradients(tf.reduce_sum(w) * scale)
        train = shared.apply_gradients(grads)
        wiring = {
            op: ([t.name for t in op.inputs], [c.name for c in op.control_inputs])
            for op in tf.compat.v1.get_default_graph().get_operations()
        }
        with pytest.raises(TfschedError, match="both runs of a step run scale that reads a feed"):
            cross_barrier_step(shared, grads, worker=0, workers=1, feeds=[rate])
        # the error came after the split had rewired the caller's ops (w's reads wait on a gate,
        # scale reads the feeds' queue): every one reads and waits for what it did before
        assert {
            op: ([t.name for t in op.inputs], [c.name for c in op.control_inputs]) for op in wiring
        } == wiring
        assert scale.op.inputs[0] is rate
        with tf.compat.v1.Session() as sess:  # and the graph trains behind the barrier as before
            sess.run(w.assign([1.0, 2.0, 3.0]))
            sess.run(train, {rate: 0.5})
            assert sess.run(w).tolist() == [0.75, 1.75, 2.75]
    runner = CrossingRunner(None, CrossingStep(None, None, None, None, None, None, None, [], 1, 0))
    # a run before the prime: the counts it would wait on are a session's before
    with pytest.raises(TfschedError, match="prime the runner before its first run"):
        runner.run(1)
    with pytest.raises(TfschedError, match="prime the runner before it joins"):
        runner.join(30)
    runner.primed = True  # as after its prime
    # not above 0, not a number, for ever, or past what a run's deadline can hold
    for timeout_s in (0, -1, float("nan"), float("inf"), 1e300, "30", None, True):
        with pytest.raises(TfschedError, match="a join's timeout must be a finite number of seconds above 0"):
            runner.join(timeout_s)
    runner.retired = True  # its input ended: the next epoch's prime first
    with pytest.raises(TfschedError, match="prime the runner before it joins"):
        runner.join(30)
    runner.retired = False
    # feed dicts for a step built without feeds
    with pytest.raises(TfschedError, match="feed_dicts for a step that takes no feeds"):
        runner.run(1, feed_dicts=[{}])
    with pytest.raises(TfschedError, match="depth must be 1 or 2"):
        CrossingRunner(None, None, depth=3)
    # not a whole number of steps at least 1 (10**9, to run to the input's end, is one)
    for steps in (0, -1, 1e9, 2.0, "3", None, True):
        with pytest.raises(TfschedError, match="steps must be a whole number at least 1"):
            CrossingRunner(None, None).run(steps)
    # numpy's integers are steps: past that check, the run wants its prime
    with pytest.raises(TfschedError, match="prime the runner before its first run"):
        CrossingRunner(None, None).run(np.int64(2))
