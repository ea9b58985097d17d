"""With tfsched on, training is bitwise identical to vanilla TensorFlow, and gates really run."""

import collections
import os

import pytest

from tests.enforce.conftest import assert_bitwise_equal, settled_stats, train
from tfsched.models import build_graph

pytestmark = [pytest.mark.tf, pytest.mark.cluster]


def _strict(tfsched_config=None):
    import tensorflow as tf

    cfg = tfsched_config or tf.compat.v1.ConfigProto()
    cfg.graph_options.rewrite_options.fail_on_optimizer_errors = True
    return cfg


def _gates(target, built, config):
    import tensorflow as tf

    md = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(target, graph=built.graph, config=config) as sess:
        sess.run(built.init_op)
        sess.run(
            built.train_op, options=tf.compat.v1.RunOptions(output_partition_graphs=True), run_metadata=md
        )
    return [n for pg in md.partition_graphs for n in pg.node if n.op == "TfschedGate"]


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_tio_bitwise_identical(cluster, optimizer):
    import tfsched

    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("seq32", ps_tasks=2, optimizer=optimizer), 10, _strict())
    built = build_graph("seq32", ps_tasks=2, optimizer=optimizer)
    scheduled = train(target, built, 10, tfsched.enable(_strict(), strict=True))
    assert_bitwise_equal(vanilla, scheduled)
    gates = _gates(
        target, build_graph("seq32", ps_tasks=2, optimizer=optimizer), tfsched.enable(_strict(), strict=True)
    )
    pulls = [g for g in gates if g.device.startswith("/job:ps")]
    pushes = [g for g in gates if g.device.startswith("/job:worker")]
    assert len(pulls) >= 33 and len(pushes) >= 33  # every variable's read and its gradient


def test_tao_schedule_file_bitwise_identical(cluster, tmp_path):
    import tfsched
    from tfsched.analysis import analyze

    built = build_graph("seq32", ps_tasks=2)
    path = tmp_path / "seq32.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    sched = tmp_path / "tao.json"
    analyze(str(path), fetches=built.fetches, algorithm="tao").schedule.save(str(sched))
    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("seq32", ps_tasks=2), 10, _strict())
    cfg = tfsched.enable(_strict(), schedule=str(sched), algorithm="tao", graph=built.graph, strict=True)
    assert_bitwise_equal(vanilla, train(target, built, 10, cfg))


def test_between_graph_two_workers_two_ps(cluster):
    """Two workers' graphs, stepped alternately from here so that vanilla is deterministic too."""
    import tensorflow as tf

    import tfsched

    def run(config):
        builts = [build_graph("par32", ps_tasks=2, worker_task=w) for w in (0, 1)]
        sessions = [
            tf.compat.v1.Session(cluster.target("worker", w), graph=b.graph, config=config)
            for w, b in enumerate(builts)
        ]
        try:
            sessions[0].run(builts[0].init_op)
            losses = []
            for _ in range(5):
                for s, b in zip(sessions, builts, strict=True):
                    losses.append(s.run([b.train_op, b.loss])[1])
            return losses, sessions[1].run(builts[1].graph.get_collection("variables"))
        finally:
            for s in sessions:
                s.close()

    assert_bitwise_equal(run(_strict()), run(tfsched.enable(_strict(), strict=True)))


def _partitioned_embedding():
    """TF1's partitioned variables as a recommender uses them: an embedding table in four
    shards (``fixed_size_partitioner``) looked up by ids, whose gradients are IndexedSlices
    pushed to each shard's PS, and a dense kernel in up to three (``min_max_variable_partitioner``),
    placed by ``replica_device_setter`` over two PS."""
    import types

    import numpy as np
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
        tf.compat.v1.set_random_seed(1)
        emb = tf.compat.v1.get_variable("emb", [5000, 64], partitioner=tf.compat.v1.fixed_size_partitioner(4))
        kernel = tf.compat.v1.get_variable(
            "kernel",
            [64, 256],
            partitioner=tf.compat.v1.min_max_variable_partitioner(max_partitions=3, min_slice_size=8 << 10),
        )
        ids = tf.constant(np.arange(0, 37 * 135, 37, dtype=np.int64) % 5000)
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.embedding_lookup(emb, ids), kernel)))
        step = tf.compat.v1.train.get_or_create_global_step()
        train_op = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=step)
        init_op = tf.compat.v1.global_variables_initializer()
    return types.SimpleNamespace(graph=g, train_op=train_op, loss=loss, init_op=init_op)


@pytest.mark.parametrize(
    "knobs",
    [
        {},
        {"partition": 20_000, "credit": 40_000},
        {"partition": 20_000, "credit": 40_000, "host_credit": True},
    ],
    ids=["tio", "pc", "pc-host"],
)
def test_partitioned_variables_and_sparse_gradients_train_bitwise_identical(cluster, knobs):
    import tfsched

    target = cluster.target("worker", 0)
    vanilla = train(target, _partitioned_embedding(), 5, _strict())
    config = tfsched.enable(_strict(), strict=True, **knobs)
    assert_bitwise_equal(vanilla, train(target, _partitioned_embedding(), 5, config))
    import tensorflow as tf

    gates = _gates(target, _partitioned_embedding(), config)
    on = collections.Counter(
        (spec.job, spec.task) for spec in (tf.DeviceSpec.from_string(g.device) for g in gates)
    )
    # every shard's lookup or read leaves its PS gated, and so do the worker's pushes to both
    assert on["ps", 0] >= 3 and on["ps", 1] >= 3 and on["worker", 0] >= 6, on
    for device in ("/job:ps/task:0", "/job:ps/task:1", "/job:worker/task:0"):
        s = settled_stats(target, device)
        assert s["timeouts"] == 0 and s["live_steps"] == 0, (device, s)


def test_in_graph_replication(cluster):
    import tfsched

    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("seq32", ps_tasks=2, in_graph_workers=2), 5, _strict())
    built = build_graph("seq32", ps_tasks=2, in_graph_workers=2)
    assert_bitwise_equal(vanilla, train(target, built, 5, tfsched.enable(_strict(), strict=True)))
    gates = _gates(
        target, build_graph("seq32", ps_tasks=2, in_graph_workers=2), tfsched.enable(_strict(), strict=True)
    )
    channels = {g.attr["channel"].s.decode() for g in gates}
    # both workers pull from both PS tasks and push to them: 8 channels
    assert len(channels) == 8, channels


def test_release_order_follows_priorities(cluster):
    """From a traced step: on every channel a gate never finishes before one of lower priority."""
    import tensorflow as tf

    import tfsched

    built = build_graph("seq32", ps_tasks=2)  # a chain: TIO gives distinct priorities
    md = tf.compat.v1.RunMetadata()
    opts = tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True
    )
    with tf.compat.v1.Session(
        cluster.target("worker", 0), graph=built.graph, config=tfsched.enable(_strict(), strict=True)
    ) as sess:
        sess.run(built.init_op)
        for _ in range(3):
            sess.run(built.train_op, options=opts, run_metadata=md)
    attrs = {
        n.name: (n.attr["channel"].s.decode(), n.attr["priority"].i)
        for pg in md.partition_graphs
        for n in pg.node
        if n.op == "TfschedGate"
    }
    ends = {}
    for dev in md.step_stats.dev_stats:
        for ns in dev.node_stats:
            if ns.node_name in attrs:
                ends[ns.node_name] = ns.all_start_micros + ns.op_end_rel_micros
    assert set(ends) == set(attrs), "every gate appears in the trace under its name"
    assert all("tfsched_gate" in n for n in ends)
    by_channel = {}
    for name, (channel, prio) in attrs.items():
        by_channel.setdefault(channel, []).append((prio, ends[name]))
    checked = 0
    for gates in by_channel.values():
        for pa, ea in gates:
            for pb, eb in gates:
                if pa < pb:
                    assert ea <= eb, (pa, ea, pb, eb)
                    checked += 1
    assert checked > 100


def test_default_session_no_config_is_untouched(cluster):
    """Loading the library changes nothing unless enable() is called."""
    target = cluster.target("worker", 0)
    assert _gates(target, build_graph("seq32", ps_tasks=2), _strict()) == []


def test_sums_sent_away_ungated_run_bitwise_identical(cluster):
    """Sums of three or more tensors sent to the PS, one that the pass does not gate (it depends
    on a Switch's output: its operands' transfers stay TensorFlow's) and one it does (held), with
    the received operands cut: every step's result is TensorFlow's, and the gates ran. (Which
    operand such a sum takes over depends on timing too: this graph ran the same under the pass
    before the 124th session as well; tests/enforce/test_pass.py checks what the pass leaves.)"""
    import tensorflow as tf

    import tfsched
    from tests.enforce.conftest import ungated_sums_graph

    def run(config):
        g, out, update = ungated_sums_graph()
        with g.as_default():
            init = tf.compat.v1.global_variables_initializer()
        md = tf.compat.v1.RunMetadata()
        with tf.compat.v1.Session(cluster.target("worker", 0), graph=g, config=config) as sess:
            sess.run(init)
            outs = [sess.run([out, update])[0] for _ in range(3)]
            sess.run(
                [out, update],
                options=tf.compat.v1.RunOptions(output_partition_graphs=True),
                run_metadata=md,
            )
        return outs, [n.name for pg in md.partition_graphs for n in pg.node if n.op == "TfschedGate"]

    vanilla, none = run(_strict())
    scheduled, gates = run(tfsched.enable(_strict(), strict=True, partition=1024))
    assert not none and gates
    assert [o.tobytes() for o in vanilla] == [o.tobytes() for o in scheduled]
    sources = {name.split("/tfsched")[0] for name in gates}  # what each gate sends
    assert "apart" in sources and not sources & {"own", "mine", "inner"}, sources


@pytest.mark.skipif(os.environ.get("TFSCHED_SKIP_SLOW") == "1", reason="slow")
def test_thousand_steps_leave_no_state(cluster):
    import tensorflow as tf

    import tfsched

    g = tf.Graph()
    with g.as_default():
        with g.device("/job:ps/task:0"):
            v = tf.compat.v1.get_variable("v", [8], initializer=tf.compat.v1.zeros_initializer())
        with g.device("/job:worker/task:0"):
            step = tf.compat.v1.assign_add(v, tf.ones([8]) * tf.reduce_sum(v.read_value() * 0 + 1))
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(
        cluster.target("worker", 0), graph=g, config=tfsched.enable(_strict(), strict=True)
    ) as sess:
        sess.run(init)
        before = tfsched.enforce.stats(sess, "/job:ps/task:0")
        for _ in range(1000):
            sess.run(step)
        after = settled_stats(sess, "/job:ps/task:0")
    assert after["released"] - before["released"] >= 1000
    assert after["live_steps"] == 0
    assert after["timeouts"] == before["timeouts"]


def test_monitored_training_session(cluster):
    """The usual TF1 training loop: MonitoredTrainingSession with tfsched's config, same losses."""
    import tensorflow as tf

    import tfsched

    def run(config):
        built = build_graph("seq32", ps_tasks=2, optimizer="momentum")
        losses = []
        with built.graph.as_default():
            with tf.compat.v1.train.MonitoredTrainingSession(
                master=cluster.target("worker", 0),
                is_chief=True,
                config=config,
                save_checkpoint_secs=None,
                save_summaries_steps=None,
                log_step_count_steps=None,
            ) as sess:
                for _ in range(5):
                    losses.append(sess.run([built.train_op, built.loss])[1])
        return losses

    vanilla = run(_strict())
    scheduled = run(tfsched.enable(_strict(), strict=True))
    assert [x.tobytes() for x in vanilla] == [x.tobytes() for x in scheduled]
    assert len(set(float(x) for x in vanilla)) > 1  # it trains


def _partitioned_graph():
    """One large embedding-like kernel split over both PS by ``fixed_size_partitioner``, which is
    what ``analyze`` advises for a variable that alone moves more than a PS's share."""
    import tensorflow as tf

    from tfsched.models.build import BuiltGraph

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(7)
        with tf.compat.v1.device(
            tf.compat.v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")
        ):
            x = tf.random.stateless_uniform([8, 512], seed=[3, 4])
            big = tf.compat.v1.get_variable(
                "big", [512, 256], partitioner=tf.compat.v1.fixed_size_partitioner(2)
            )
            small = tf.compat.v1.get_variable("small", [256, 10])
            loss = tf.reduce_mean(tf.square(tf.matmul(tf.tanh(tf.matmul(x, big)), small)), name="loss")
            step = tf.compat.v1.train.get_or_create_global_step()
            train_op = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(
                loss, global_step=step, name="train"
            )
        init = tf.compat.v1.global_variables_initializer()
    return BuiltGraph(graph=g, train_op=train_op, loss=loss, init_op=init, model="partitioned", mode="train")


def test_a_variable_partitioned_over_the_ps_trains_bitwise_identical_with_each_part_gated(cluster):
    import tfsched

    built = _partitioned_graph()
    with built.graph.as_default():
        import tensorflow as tf

        parts = sorted({v.device for v in tf.compat.v1.global_variables() if v.op.name.startswith("big/")})
    assert parts == ["/job:ps/task:0", "/job:ps/task:1"]  # one part on each PS
    target = cluster.target("worker", 0)
    vanilla = train(target, _partitioned_graph(), 6, _strict())
    cfg = tfsched.enable(_strict(), partition=20000, credit=40000, strict=True)
    assert_bitwise_equal(vanilla, train(target, built, 6, cfg))
    gates = _gates(target, _partitioned_graph(), cfg)
    # each part's read is sliced and gated on its own PS, each part's gradient on the worker
    pulls = {g.device.split("/")[3] for g in gates if g.name.startswith("big/ConcatPartitions")}
    pushes = {g.name.split("tfsched_to_")[1][:4] for g in gates if g.name.startswith("gradients/big/")}
    assert pulls == {"task:0", "task:1"} and pushes == {"ps_0", "ps_1"}, sorted(g.name for g in gates)


def _sync_replicas_graph(worker: int, sparse: bool = False, container: str = ""):
    """Worker ``worker``'s graph of synchronous training the TF1 way: ``SyncReplicasOptimizer``
    over two workers, the gradients gathered in the PS's accumulators, a token queue that lets
    a worker go on once the chief has applied the step's update. ``sparse``: with an embedding
    too, whose sparse gradient goes into a sparse accumulator. ``container``: where the PS keeps
    its variables, accumulators and token queue (a run that closes the queue needs its own)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default(), tf.compat.v1.container(container):
        with tf.compat.v1.device(
            tf.compat.v1.train.replica_device_setter(ps_tasks=2, worker_device=f"/job:worker/task:{worker}")
        ):
            x = tf.random.stateless_uniform([16, 128], seed=[worker, 5])
            w1 = tf.compat.v1.get_variable(
                "w1", [128, 256], initializer=tf.compat.v1.glorot_uniform_initializer(1)
            )
            w2 = tf.compat.v1.get_variable(
                "w2", [256, 64], initializer=tf.compat.v1.glorot_uniform_initializer(2)
            )
            h = tf.tanh(tf.matmul(x, w1))
            variables = [w1, w2]
            if sparse:
                emb = tf.compat.v1.get_variable(
                    "emb", [100, 256], initializer=tf.compat.v1.glorot_uniform_initializer(3)
                )
                # rows chosen by the step's own values, so that Grappler cannot fold them into a
                # constant (it would copy a constant's few indices instead of sending them)
                ids = tf.math.floormod(tf.cast(tf.abs(tf.reduce_sum(h, axis=1)) * 1000, tf.int32), 100)
                h += tf.nn.embedding_lookup(emb, ids)
                variables.append(emb)
            loss = tf.reduce_mean(tf.square(tf.matmul(h, w2)), name="loss")
            step = tf.compat.v1.train.get_or_create_global_step()
            opt = tf.compat.v1.train.SyncReplicasOptimizer(
                tf.compat.v1.train.GradientDescentOptimizer(0.5),
                replicas_to_aggregate=2,
                total_num_replicas=2,
            )
            train_op = opt.minimize(loss, global_step=step, name="train")
        parts = {
            "train": train_op,
            "loss": loss,
            "init": tf.compat.v1.global_variables_initializer(),
            "optimizer": opt,
            "variables": [*variables, step],
        }
    return g, parts


def _train_sync_replicas(cluster, config, steps: int, sparse: bool = False):
    """Both workers step at once in threads, the chief's queue runner applying each step's mean
    gradient; returns each worker's losses and the variables at the end."""
    import threading

    import tensorflow as tf

    graphs = [_sync_replicas_graph(w, sparse) for w in (0, 1)]
    sessions = [
        tf.compat.v1.Session(cluster.target("worker", w), graph=g, config=config)
        for w, (g, _) in enumerate(graphs)
    ]
    chief = graphs[0][1]
    coord = tf.train.Coordinator()
    losses: list[list] = [[], []]
    ran = tf.compat.v1.RunMetadata()  # worker 1's first step's partition graphs
    runners = []
    try:
        sessions[0].run(chief["init"])
        sessions[0].run(chief["optimizer"].chief_init_op)
        for s, (_, p) in zip(sessions, graphs, strict=True):
            s.run(p["optimizer"].local_step_init_op)
        runners = (
            chief["optimizer"].get_chief_queue_runner().create_threads(sessions[0], coord=coord, start=True)
        )

        # SyncReplicasOptimizer lets a worker that takes a token before the other does take the
        # next one too: both of its gradients then make an update, and (each worker stepping a set
        # number of times) the other's last gradient waits for a second one that never comes. A
        # loaded CI machine did so once, in the vanilla or the scheduled run alike (an update of
        # other gradients, or a hang). The workers start each step together: one token each.
        together = threading.Barrier(2)

        def work(w):
            p = graphs[w][1]
            for k in range(steps):
                together.wait(timeout=120)
                traced = (w, k) == (1, 0)
                options = tf.compat.v1.RunOptions(output_partition_graphs=True) if traced else None
                out = sessions[w].run(
                    [p["train"], p["loss"]], options=options, run_metadata=ran if traced else None
                )
                losses[w].append(out[1])

        workers = [threading.Thread(target=work, args=(w,)) for w in (0, 1)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(120)
            assert not t.is_alive(), "a synchronous step hung"
        values = sessions[0].run(chief["variables"])
        coord.request_stop()
    finally:
        for s in sessions:
            s.close()  # ends the queue runner's wait for the next step's gradients
    coord.join(runners, stop_grace_period_secs=10, ignore_live_threads=True)
    return [x for ws in losses for x in ws], values, ran.partition_graphs


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"partition": 8192, "credit": 16384, "host_credit": True},
        {"partition": 8192, "credit": 16384, "host_credit": True, "host_order": "priority"},
    ],
    ids=["tio", "pc-host", "pc-lockstep"],
)
def test_sync_replicas_optimizer_trains_bitwise_identical(cluster, settings):
    """TF1's synchronous PS training (``SyncReplicasOptimizer``): every push into the PS's
    accumulators and every pull gated (with partitioning and one credit window per task too),
    the chief's queue runner (a run of its own) alongside, the same losses and variables as
    vanilla TensorFlow, and no step's state left on the PS."""
    import tfsched
    from tfsched.enforce import stats

    vanilla = _train_sync_replicas(cluster, _strict(), 6)
    assert len(set(float(x) for x in vanilla[0])) > 2  # it trains
    assert vanilla[1][-1] == 6  # one update a synchronous step
    before = stats(cluster.target("worker", 0), "/job:ps/task:0")
    scheduled = _train_sync_replicas(cluster, tfsched.enable(_strict(), strict=True, **settings), 6)
    assert_bitwise_equal(vanilla[:2], scheduled[:2])
    gates = [n for pg in scheduled[2] for n in pg.node if n.op == "TfschedGate"]
    assert not [n for pg in vanilla[2] for n in pg.node if n.op == "TfschedGate"]

    # worker 1's step: its pulls of both weights and of its token gated on the PS, its two
    # gradients into the accumulators gated on the worker
    def sources(task):
        return collections.Counter(n.name.split("/tfsched_")[0] for n in gates if n.device.startswith(task))

    pulls, pushes = sources("/job:ps/"), sources("/job:worker/replica:0/task:1/")
    assert {"MatMul/ReadVariableOp", "MatMul_1/ReadVariableOp", "sync_token_q_Dequeue"} <= set(pulls), pulls
    assert len([t for t in pushes if t.startswith("gradients/")]) == 2, pushes
    if settings:  # w1's 32,768 parameters in slices of 8,192, each gated
        assert pulls["MatMul/ReadVariableOp"] == 4, pulls
    after = settled_stats(cluster.target("worker", 0), "/job:ps/task:0")
    assert after["released"] > before["released"]  # gates ran on the PS
    assert after["timeouts"] == before["timeouts"] and after["live_steps"] == 0


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "embedding"])
def test_a_schedule_reaches_the_gradients_pushed_into_sync_replicas_accumulators(cluster, tmp_path, sparse):
    """``analyze`` and the pass name a gradient pushed into SyncReplicasOptimizer's accumulator
    by the variable it updates (the accumulator's name), though the chief's step that applies it
    is in neither worker's fetches; an embedding's sparse gradient too (its indices, which the
    optimizer casts on the PS, are the lookup's rows, and Grappler sends them once for both: that
    tensor is no variable's in the pass). A schedule that puts every gradient ahead of the
    worker's local step, the reverse of TIO's order, reaches worker 1's gates, and training
    stays bitwise identical."""
    import tfsched
    from tfsched.analysis import analyze

    graph, parts = _sync_replicas_graph(0, sparse)
    path = tmp_path / "sync.pb"
    path.write_bytes(graph.as_graph_def(add_shapes=True).SerializeToString())
    schedule = analyze(str(path), fetches=[parts["train"].name], workers=2).schedule
    pushes = {t.tensor: t for t in schedule.priorities if t.kind == "push"}
    gradients = {n: t.variable for n, t in pushes.items() if n.startswith("gradients/")}
    local_steps = [t for n, t in pushes.items() if n.startswith("sync_replicas/ReadVariableOp")]
    assert sorted(gradients.values()) == (["emb", "emb"] if sparse else []) + ["w1", "w2"], gradients
    # each accumulator's local step (no variable's), first in TIO's order; after them here
    assert len(local_steps) == (3 if sparse else 2)
    for t in local_steps:
        assert t.variable is None and schedule.priorities[t] == 0
        schedule.priorities[t] = 1
    for n in gradients:
        schedule.priorities[pushes[n]] = 0
    sched = tmp_path / "gradients-first.json"
    schedule.save(str(sched))

    vanilla = _train_sync_replicas(cluster, _strict(), 4, sparse)
    cfg = tfsched.enable(_strict(), schedule=str(sched), graph=graph, strict=True)
    scheduled = _train_sync_replicas(cluster, cfg, 4, sparse)
    assert_bitwise_equal(vanilla[:2], scheduled[:2])
    # worker 1's gates to each PS: its gradients (Grappler renamed w1's) and its local step
    gates = collections.defaultdict(lambda: collections.defaultdict(list))
    for pg in scheduled[2]:
        for n in pg.node:
            sender, _, receiver = n.attr["channel"].s.decode().partition("->")
            if n.op == "TfschedGate" and sender == "/job:worker/replica:0/task:1":
                if n.name.startswith("sync_replicas/ReadVariableOp"):
                    gates[receiver]["local step"].append(n.attr["priority"].i)
                elif n.name.startswith("gradients/"):
                    gates[receiver]["gradient"].append(n.attr["priority"].i)
    assert sorted(gates) == ["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]
    for channel in gates.values():
        assert channel["gradient"] and max(channel["gradient"]) < min(channel["local step"]), gates


def _train_sync_replicas_monitored(cluster, config, steps: int):
    """The way SyncReplicasOptimizer is meant to be run: each worker in a
    ``MonitoredTrainingSession`` with the optimizer's hook, which initializes the chief and runs
    its queue runner; the non-chief starts once the chief's session is up (else it polls for it
    every 30 s). No initial tokens, so that every update takes one step of each worker. The
    hook's queue runner closes the token queue at the end, so each run has a container of its
    own on the PS."""
    import threading
    import uuid

    import tensorflow as tf

    container = f"sync-{uuid.uuid4().hex[:8]}"
    graphs = [_sync_replicas_graph(w, container=container) for w in (0, 1)]
    losses: list[list] = [[], []]
    chief_up, errors = threading.Event(), []
    together = threading.Barrier(2)  # each step of both workers at once (``_train_sync_replicas``)

    def work(w):
        g, p = graphs[w]
        try:
            with g.as_default():
                hook = p["optimizer"].make_session_run_hook(is_chief=w == 0, num_tokens=0)
                with tf.compat.v1.train.MonitoredTrainingSession(
                    master=cluster.target("worker", w),
                    is_chief=w == 0,
                    hooks=[hook],
                    config=config,
                    save_checkpoint_secs=None,
                    save_summaries_steps=None,
                    log_step_count_steps=None,
                    # the chief's queue runner waits for a next step's gradients until the
                    # session closes, which is after this grace period (default 120 s)
                    stop_grace_period_secs=1,
                ) as sess:
                    chief_up.set()
                    for _ in range(steps):
                        together.wait(timeout=120)
                        losses[w].append(sess.run([p["train"], p["loss"]])[1])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
            together.abort()  # the other worker's wait ends too
            chief_up.set()

    chief = threading.Thread(target=work, args=(0,), daemon=True)
    chief.start()
    assert chief_up.wait(120), "the chief's session did not come up"
    worker = threading.Thread(target=work, args=(1,), daemon=True)
    worker.start()
    for t in (chief, worker):
        t.join(120)
        assert not t.is_alive(), "a synchronous step hung"
    assert not errors, errors
    g, p = graphs[0]
    with tf.compat.v1.Session(cluster.target("worker", 0), graph=g) as sess:
        values = sess.run(p["variables"])
    return [x for ws in losses for x in ws], values


# the chief's queue runner, waiting for a next step's gradients, is cancelled when its session
# closes, and TensorFlow's thread ends with that CancelledError (in vanilla TensorFlow too)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_sync_replicas_in_monitored_training_sessions_with_its_hook(cluster):
    """SyncReplicasOptimizer as its documentation runs it (``make_session_run_hook`` in each
    worker's ``MonitoredTrainingSession``), with tfsched's config: the same losses and
    variables as vanilla TensorFlow."""
    import tfsched

    vanilla = _train_sync_replicas_monitored(cluster, _strict(), 5)
    assert vanilla[1][-1] == 5 and len(set(float(x) for x in vanilla[0])) > 2
    scheduled = _train_sync_replicas_monitored(cluster, tfsched.enable(_strict(), strict=True), 5)
    assert_bitwise_equal(vanilla, scheduled)
