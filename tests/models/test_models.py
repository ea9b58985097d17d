"""The model zoo: every built-in graph builds as a PS graph whose transfers tfsched finds."""

import subprocess
import sys

import pytest

from tfsched.models import MODELS, build_graph

pytestmark = pytest.mark.tf


@pytest.mark.parametrize("model", ["alexnet", "transformer"])
@pytest.mark.parametrize("mode", ["train", "inference"])
def test_new_models_build_and_every_variable_is_pulled(model, mode, tmp_path):
    import tensorflow as tf

    from tfsched.analysis import analyze

    built = build_graph(model, mode=mode, batch_size=2, ps_tasks=2)
    with built.graph.as_default():
        variables = tf.compat.v1.trainable_variables()
    assert variables and all(v.device.startswith("/job:ps/task:") for v in variables)
    path = tmp_path / "g.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    a = analyze(str(path), fetches=built.fetches, algorithm="tio")
    pulls = [t for t in a.graph.transfers if t.kind == "pull"]
    pushes = [t for t in a.graph.transfers if t.kind == "push"]
    assert {t.variable for t in pulls} >= {v.op.name for v in variables}
    if mode == "train":
        assert len(pushes) >= len(variables)
    else:  # forward only: nothing updates a variable (the Transformer sends its token ids to the lookup)
        assert all(t.variable is None for t in pushes)
    assert a.prediction.scheduled_s > 0


def test_alexnet_has_one_huge_tensor():
    import tensorflow as tf

    built = build_graph("alexnet", image_size=224, batch_size=1)
    with built.graph.as_default():
        sizes = sorted(v.shape.num_elements() for v in tf.compat.v1.trainable_variables())
    assert sizes[-1] > 0.5 * sum(sizes)  # the first dense layer: 12,544 x 4,096


def test_balanced_batch_size_equalizes_compute_and_communication():
    from tfsched.models.batch import MAX_BATCH, REFINE_ROUNDS, REFINE_TOLERANCE, balanced_batch_size

    slow = balanced_batch_size("seq32", bandwidth_bps=1e7, workers=2)
    fast = balanced_batch_size("seq32", bandwidth_bps=1e10, workers=2)
    assert slow.comm_s > fast.comm_s
    assert slow.batch_size >= fast.batch_size
    assert 1 <= fast.batch_size <= slow.batch_size <= MAX_BATCH
    if 1 < slow.batch_size < MAX_BATCH:  # not clamped: compute at that batch is the communication time
        assert slow.fixed_s + slow.batch_size * slow.per_example_s == pytest.approx(slow.comm_s, rel=0.05)
    # The balance was measured at the batches it solved for, the two workers computing at once,
    # and it stopped at the first one within the tolerance, else re-solved from the last.
    assert 1 <= len(slow.measured) <= REFINE_ROUNDS
    assert all(t > 0 for _, t in slow.measured)
    close = [abs(t - slow.comm_s) <= REFINE_TOLERANCE * slow.comm_s for _, t in slow.measured]
    assert not any(close[:-1])
    if close[-1]:
        assert slow.measured[-1][0] == slow.batch_size
    assert slow.to_json()["measured"][-1]["batch_size"] == slow.measured[-1][0]


def test_a_failing_probe_of_processes_at_once_is_one_error_not_a_wait():
    import time

    from tfsched.errors import TfschedError
    from tfsched.models.batch import _compute_time

    start = time.monotonic()
    with pytest.raises(TfschedError) as e:
        _compute_time("seq32", "nonsense", 4, None, copies=2)
    assert "2 processes at once" in str(e.value) and "unknown mode" in str(e.value)
    assert "\n" not in str(e.value)
    assert time.monotonic() - start < 120  # reported by the processes, not found by the timeout


@pytest.mark.parametrize("forked", [False, True], ids=["own-process", "forked"])
def test_a_probe_process_that_dies_is_one_error_and_none_is_left(tmp_path, monkeypatch, forked):
    """Each process of the probe its own, or forked from the zygote (``bench.zygote``) as the
    cluster's tasks are."""
    import os

    from tfsched.bench.zygote import ENV_FLAG
    from tfsched.errors import TfschedError
    from tfsched.models import batch

    # a stand-in for the probe: ready, then gone before its result
    fake = tmp_path / "dying_probe.py"
    fake.write_text(
        "import os, sys\n"
        "print('tfsched-probe {\"ready\": true}', flush=True)\n"
        "print('out of memory', file=sys.stderr, flush=True)\n"
        "os._exit(7)\n"
    )
    monkeypatch.setattr(batch, "_probe_argv", lambda *args: [str(fake)])
    monkeypatch.setenv(ENV_FLAG, "1" if forked else "0")
    with pytest.raises(TfschedError) as e:
        batch._compute_time("seq32", "train", 4, None, copies=3)
    assert "exit code 7" in str(e.value) and "out of memory" in str(e.value)
    left = []  # this process's children still running the stand-in (the call waits for each)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            cmdline = open(f"/proc/{pid}/cmdline").read()
        except (OSError, IndexError, ValueError):
            continue
        if parent == os.getpid() and str(fake) in cmdline:
            left.append(pid)
    assert not left


def test_every_model_is_listed_in_the_cli():
    from tfsched.cli import BUILTIN_MODELS

    assert sorted(BUILTIN_MODELS) == sorted(MODELS)


def test_building_a_batch_norm_model_prints_no_deprecation_notice():
    # tf_keras' batch normalization calls a deprecated TensorFlow API; a fresh process, since
    # TensorFlow prints each notice once per process.
    code = "from tfsched.models import build_graph; build_graph('mobilenet', batch_size=1, image_size=32)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "deprecated" not in p.stderr, p.stderr[-2000:]


def test_a_training_step_updates_batch_norms_moving_averages(tmp_path):
    """MobileNet's 27 batch normalizations keep a moving mean and variance each on the PS: a
    training step updates all 54 (each a push of its batch's statistic, which the analysis finds
    as a transfer to the PS), not with ``moving_averages=False``, and a forward pass has none."""
    from tfsched.analysis import analyze
    from tfsched.enforce.crossing import _run_ancestors

    def updated(**kw) -> tuple:
        built = build_graph("mobilenet", batch_size=2, image_size=32, **kw)
        ops = _run_ancestors([built.graph.get_operation_by_name(f) for f in built.fetches])
        return built, sorted(
            op.inputs[0].op.name
            for op in ops
            if op.type == "AssignSubVariableOp" and op.device.startswith("/job:ps/")
        )

    built, names = updated()
    assert len(names) == 54 and all(n.endswith(("moving_mean", "moving_variance")) for n in names)
    assert not updated(moving_averages=False)[1]
    assert not updated(mode="inference")[1]
    path = tmp_path / "g.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    pushed = {
        t.variable for t in analyze(str(path), fetches=built.fetches).graph.transfers if t.kind == "push"
    }
    assert set(names) <= pushed


def _bytes_per_ps(built) -> dict[str, int]:
    import tensorflow as tf

    with built.graph.as_default():
        variables = tf.compat.v1.global_variables()
    per: dict[str, int] = {}
    for v in variables:
        per[v.device] = per.get(v.device, 0) + v.shape.num_elements() * v.dtype.size
    return per


def _moved_share_per_ps(built) -> list[float]:
    from tfsched.graph import build_comm_graph
    from tfsched.graph.load import nodes_from_graph_def, output_specs

    g = build_comm_graph(
        nodes_from_graph_def(built.graph_def(), built.model),
        fetches=built.fetches,
        source=built.model,
        output_specs=output_specs,
    )
    total = sum(g.ps_load.values())
    return [n / total for n in g.ps_load.values()]


@pytest.mark.parametrize("model", ["vgg16", "transformer"])
def test_two_ps_exchange_half_the_bytes_each_where_round_robin_leaves_one_almost_idle(model):
    balanced = build_graph(model, batch_size=4, ps_tasks=2)
    rr = build_graph(model, batch_size=4, ps_tasks=2, ps_placement="round-robin")
    assert set(_bytes_per_ps(balanced)) == set(_bytes_per_ps(rr)) == {"/job:ps/task:0", "/job:ps/task:1"}
    assert sum(_bytes_per_ps(balanced).values()) == sum(_bytes_per_ps(rr).values())
    # kernels and biases alternate: round-robin puts every kernel on the first PS
    assert max(_moved_share_per_ps(rr)) > 0.99
    # by bytes moved, largest first: VGG16's late 16.8M-parameter fc2 does not find one PS full,
    # the Transformer's embedding counts the rows it sends, not the table it holds
    assert max(_moved_share_per_ps(balanced)) < 0.51
    # TF1's greedy by bytes held, in creation order: VGG16 74%, the Transformer 80%
    held = build_graph(model, batch_size=4, ps_tasks=2, ps_placement="held")
    assert sum(_bytes_per_ps(held).values()) == sum(_bytes_per_ps(rr).values())
    assert max(_moved_share_per_ps(held)) > 0.7


def test_every_worker_of_a_model_builds_the_same_placement():
    # between-graph replication: each worker process builds its own graph, and they must agree
    def placement(worker):
        return {
            v: d
            for v, d in _devices(build_graph("transformer", batch_size=4, ps_tasks=3, worker_task=worker))
        }

    assert placement(0) == placement(3)
    assert {d for _, d in _devices(build_graph("transformer", batch_size=4, ps_tasks=3))} == {
        f"/job:ps/task:{i}" for i in range(3)
    }


def _devices(built):
    import tensorflow as tf

    with built.graph.as_default():
        return [(v.op.name, v.device) for v in tf.compat.v1.global_variables()]


def _variables(built) -> dict[str, tuple[list[int], str]]:
    """name -> (shape, device) of every variable of ``built``, in creation order."""
    import tensorflow as tf

    with built.graph.as_default():
        return {v.op.name: (v.shape.as_list(), v.device) for v in tf.compat.v1.global_variables()}


def _losses(built, steps: int) -> list:
    """``built``'s loss over ``steps`` steps in one local session, its devices cleared."""
    import tensorflow as tf

    graph_def = built.graph_def()
    for node in graph_def.node:
        node.device = ""
    with tf.Graph().as_default() as g:
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(built.init_op.name)
            return [sess.run([built.loss.name, *built.fetches])[0] for _ in range(steps)]


@pytest.mark.parametrize("model,split", [("vgg16", 13), ("transformer", 9)])
def test_min_size_splits_as_tensorflow_2s_partitioner_and_keeps_the_weights(model, split):
    """``ps_placement="min-size"``: each variable that TensorFlow 2's ``MinSizePartitioner``
    splits over 2 PS (every one over 256 KiB) becomes two shards ``NAME/part_I`` of its rows, one
    on each PS (the Transformer's embedding among them, read by ``embedding_lookup``); the rest
    stay whole.
    The model computes what it computes whole: the same losses, bit for bit, over three training
    steps, momentum's slots following their shards."""
    import numpy as np
    import tensorflow as tf

    from tfsched.models.shards import MIN_SHARD_BYTES, min_size_partitioner, shard_rows

    whole = build_graph(model, batch_size=2, ps_tasks=2, ps_placement="round-robin", optimizer="momentum")
    sharded = build_graph(model, batch_size=2, ps_tasks=2, ps_placement="min-size", optimizer="momentum")
    had, have, made = _variables(whole), _variables(sharded), 0
    for name, (shape, _) in had.items():
        if name.endswith("/Momentum"):  # a slot: checked with its variable's shards below
            continue
        rows = shard_rows(shape, tf.float32, min_size_partitioner(2))
        assert (len(rows) > 1) == bool(np.prod(shape) * 4 > MIN_SHARD_BYTES and shape[0] > 1), name
        if len(rows) == 1:
            assert have[name][0] == shape, name
            continue
        made += 1
        parts = [f"{name}/part_{i}" for i in range(len(rows))]
        assert [have[p][0] for p in parts] == [[n, *shape[1:]] for n in rows], name
        assert len(rows) == 2 and rows[0] - rows[1] in (0, 1) and name not in have, name
        assert {have[p][1] for p in parts} == {"/job:ps/task:0", "/job:ps/task:1"}, name
        if f"{name}/Momentum" in had:  # a trainable variable's slot follows its shards
            assert [have[f"{p}/Momentum"] for p in parts] == [have[p] for p in parts], name
    assert made == split
    if model == "transformer":
        assert "embedding/embeddings/part_1" in have
    # the same weights and the same steps: the shards hold the whole variable's initial rows
    assert np.array_equal(_losses(whole, 3), _losses(sharded, 3))
    # dealt out as the strategy deals out its shards: the busiest PS holds what the TF2 bench
    # sizes +pc for (the global step aside, which TensorFlow 2's step has not)
    from tfsched.bench.tf2 import channel_params

    held = {}
    for name, (shape, device) in have.items():
        if name != "global_step" and not name.endswith("/Momentum"):
            held[device] = held.get(device, 0) + int(np.prod(shape))
    assert max(held.values()) == channel_params(model, 2, ps_placement="min-size"), held
    if model == "vgg16":  # one PS holds as much as the other, within a shard: fc2 is split too
        assert max(held.values()) / sum(held.values()) < 0.51, held


def test_an_unknown_ps_placement_is_one_error():
    from tfsched.errors import TfschedError

    with pytest.raises(
        TfschedError,
        match="unknown ps_placement 'random'; expected one of bytes, held, round-robin, min-size",
    ):
        build_graph("seq32", ps_tasks=2, ps_placement="random")


@pytest.mark.parametrize("model", ["alexnet", "transformer", "seq32", "par32"])
def test_a_keras_model_has_the_session_graphs_variables(model):
    """``models.keras`` rebuilds these of Keras layers for TensorFlow 2 (the others are the same
    tf_keras applications): the tensors a step moves must be the session graph's, shape for shape."""
    import tensorflow as tf

    from tfsched.models.keras import keras_model

    built = build_graph(model, batch_size=2)
    with built.graph.as_default():
        session = sorted(tuple(v.shape.as_list()) for v in tf.compat.v1.trainable_variables())
    keras, shape = keras_model(model)
    assert sorted(tuple(v.shape.as_list()) for v in keras.trainable_variables) == session
    assert shape == (MODELS[model][1], MODELS[model][1], 3)
    assert keras(tf.zeros((2, *shape))).shape == (2, 10)
