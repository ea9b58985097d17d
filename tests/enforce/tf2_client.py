"""A TensorFlow 2 coordinator for the tests: ``python tf2_client.py ARGS_JSON``.

Trains a small Keras model with ``ParameterServerStrategy`` and a ``ClusterCoordinator`` on the
cluster of ARGS_JSON's ``spec`` (its PS and workers serving already), with tfsched's pass on
(``enable_functions(**kwargs)``) or off (``kwargs`` null). Prints one JSON line: the losses and
the final variables' bytes (hashed), and each task's gate counters once its steps are over. With
``fail_at`` K, the K-th call fails on the worker in its backward pass (its pulls arrived, some of
its pushes went and the first layer's kernel's never comes): the line then holds the error's type
and how long the calls took to end. With ``fit``, Keras's ``model.fit`` runs the steps instead;
with ``connect``, no strategy: a function of the coordinator's own (``connect``); with ``trace``,
calls inside a profiling window (``traced``); with ``probe``, one call of a second function after
the steps (``probe``); with ``shards`` N, the strategy splits every variable into N shards
(``variable_partitioner``: ``ShardedVariable``s, their shards spread over the PS round-robin);
with ``held`` (a model and a bench placement), no steps: the parameters each PS holds of the
built-in model made under the strategy as ``tfsched bench --api tf2`` makes it.

A process of its own: the pass goes into the process's eager context, which a test process shares
with every other test.
"""

import hashlib
import importlib
import json
import sys
import time


def main(args: dict) -> dict:
    import numpy as np
    import tensorflow as tf

    import tfsched
    from tfsched.bench.local import free_port

    if args["kwargs"] is not None:
        tfsched.enable_functions(**args["kwargs"])
    # the coordinator's own task: the strategy serves it at this address
    spec = dict(args["spec"], chief=[f"127.0.0.1:{free_port()}"])
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    if args.get("connect"):
        return connect(args, resolver)
    partitioner = None
    if args.get("shards"):
        partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(args["shards"])
    if args.get("held"):  # the bench's placement (its partitioner) of a built-in model
        from tfsched.bench.tf2 import variable_partitioner

        partitioner = variable_partitioner(args["held"]["ps_placement"], len(spec["ps"]))
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    if args.get("held"):
        return held(args["held"]["model"], strategy)
    if args.get("fit"):
        return fit(args, strategy)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    # tf.keras is Keras 3's; with tf_keras, tf_keras's model and optimizer (as tfsched bench --api tf2)
    keras = importlib.import_module("tf_keras") if args.get("tf_keras") else tf.keras
    model, rs = make_model(keras, strategy, args)
    with strategy.scope():
        optimizer = keras.optimizers.SGD(0.01)

    @tf.function
    def step(x, y, ok):
        def replica(x, y, ok):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            # fail_at: once the backward pass has reached the first layer's bias, before its kernel
            with tf.control_dependencies([grads[1]]):
                check = tf.debugging.assert_equal(ok, True, message="fail_at")
            with tf.control_dependencies([check]):
                grads[0] = tf.identity(grads[0])
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.run(replica, args=(x, y, ok))

    x = tf.constant(rs.uniform(-1, 1, (8, *input_shape(args))).astype("float32"))
    y = tf.constant(rs.uniform(-1, 1, (8, 10)).astype("float32"))
    before = counters(args, settle=False)
    oks = [tf.constant(i != args.get("fail_at")) for i in range(args["steps"])]
    start = time.monotonic()
    if args.get("trace"):
        return traced(args, resolver, coordinator, step, (x, y, tf.constant(True)))
    losses = [coordinator.schedule(step, args=(x, y, ok)) for ok in oks]
    try:
        coordinator.join()
    except tf.errors.OpError as e:
        if args.get("fail_at") is None:
            raise
        return {
            "error": type(e).__name__,
            "seconds": time.monotonic() - start,
            "stats": growth(before, counters(args, settle=True)),
        }
    blob = b"".join(v.numpy().tobytes() for v in model.trainable_variables)
    out = {
        "losses": [float(np.float32(r.fetch())) for r in losses],
        "variables": hashlib.sha256(blob).hexdigest(),
        # where the variables the steps trained live, each by its task (a shard by its own)
        "held_by": sorted(task_of(v) for v in model.trainable_variables),
    }
    if args.get("probe"):
        out["probe"] = float(np.float32(coordinator.schedule(probe(tf, model)).fetch()))
    out["stats"] = growth(before, counters(args, settle=True))
    return out


def task_of(v) -> str:
    """The task holding variable ``v`` (a Keras 3 variable: the TensorFlow variable it wraps)."""
    return (v.device if hasattr(v, "device") else v.value.device).split("/device:")[0]


def held(name: str, strategy) -> dict:
    """The built-in model ``name`` made under the strategy, as ``tfsched bench --api tf2`` makes
    it: the parameters each PS holds."""
    from tfsched.models.keras import keras_model

    with strategy.scope():
        model, _ = keras_model(name)
    out = {}
    for v in model.variables:
        out[task_of(v)] = out.get(task_of(v), 0) + v.shape.num_elements()
    return {"held": out}


def probe(tf, model):
    """A second function the workers run: the sum of every variable, read from the PS under
    names of its own (``probe/``), which a schedule made for the step names none of."""

    @tf.function
    def probe():
        with tf.name_scope("probe"):
            return tf.add_n([tf.reduce_sum(v) for v in model.trainable_variables])

    return probe


def traced(args: dict, resolver, coordinator, step, inputs) -> dict:
    """One call, then calls one after the other for ``args["window"]`` - 2 s inside a profiling
    window of ``args["window"]`` s (``tfsched.trace_functions``), written to ``args["trace"]``:
    every call's loss and how many calls ran."""
    import numpy as np

    import tfsched

    losses = [coordinator.schedule(step, args=inputs)]
    coordinator.join()  # traced outside the window, as a user's first step
    with tfsched.trace_functions(resolver, args["trace"], seconds=args["window"], functions=[step]):
        until = time.monotonic() + args["window"] - 2
        while time.monotonic() < until:
            losses.append(coordinator.schedule(step, args=inputs))
            coordinator.join()
    return {"losses": [float(np.float32(r.fetch())) for r in losses]}


def input_shape(args: dict) -> tuple:
    """An example's shape: ``args["width"]`` features, or (``conv``) an 8 x 8 RGB image."""
    return (8, 8, 3) if args.get("conv") else (args["width"],)


def make_model(keras, strategy, args: dict):
    """``args["layers"]`` dense layers of ``args["width"]`` (or, with ``conv``, convolutions of
    ``args["width"]`` channels, with ``bn`` each followed by a batch normalization) and one of
    10, made by ``keras`` under
    the strategy, and a random state that set their variables: the same start in every run (the
    initializers' seeds are not)."""
    import numpy as np

    width = args["width"]
    with strategy.scope():
        if args.get("conv"):  # 3 x 3 convolutions of ``width`` channels on 8 x 8 x 3 inputs
            layers = [
                keras.layers.Conv2D(width, 3, padding="same", activation="tanh")
                for _ in range(args["layers"])
            ]
            if args.get("bn"):  # a batch normalization after each (fused: its inputs are 4-D)
                layers = [x for conv in layers for x in (conv, keras.layers.BatchNormalization())]
            layers.append(keras.layers.Flatten())
        else:
            layers = [keras.layers.Dense(width, activation="tanh") for _ in range(args["layers"])]
        model = keras.Sequential([*layers, keras.layers.Dense(10)])
        model.build((None, *input_shape(args)))
    rs = np.random.RandomState(0)
    for v in model.trainable_variables:
        v.assign(rs.uniform(-0.1, 0.1, v.shape).astype("float32"))
    return model, rs


def fit(args: dict, strategy) -> dict:
    """Keras's own loop: ``model.fit`` with the strategy (tf_keras; Keras 3 has no
    ParameterServerStrategy), two epochs of ``steps`` // 2 steps over a fixed dataset."""
    import tensorflow as tf
    import tf_keras as keras

    width = args["width"]
    model, rs = make_model(keras, strategy, args)
    with strategy.scope():
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    x = rs.uniform(-1, 1, (64, width)).astype("float32")
    y = rs.uniform(-1, 1, (64, 10)).astype("float32")

    def dataset(_):
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)

    before = counters(args, settle=False)
    history = model.fit(
        keras.utils.experimental.DatasetCreator(dataset),
        epochs=2,
        steps_per_epoch=args["steps"] // 2,
        verbose=0,
    )
    blob = b"".join(v.numpy().tobytes() for v in model.trainable_variables)
    return {
        "losses": [float(v) for v in history.history["loss"]],
        "variables": hashlib.sha256(blob).hexdigest(),
        "stats": growth(before, counters(args, settle=True)),
    }


def connect(args: dict, resolver) -> dict:
    """No strategy: the coordinator joins the cluster (``experimental_connect_to_cluster``), puts
    the variables on the PS and runs a function whose model is on the worker, ``steps`` times."""
    import numpy as np
    import tensorflow as tf

    tf.config.experimental_connect_to_cluster(
        resolver, job_name="chief", task_index=0, make_master_device_default=False
    )
    width = args["width"]
    rs = np.random.RandomState(0)
    shapes = [s for _ in range(args["layers"]) for s in ((width, width), (width,))] + [(width, 10), (10,)]
    with tf.device("/job:ps/task:0"):
        variables = [tf.Variable(rs.uniform(-0.1, 0.1, s).astype("float32")) for s in shapes]
    x = tf.constant(rs.uniform(-1, 1, (8, width)).astype("float32"))
    y = tf.constant(rs.uniform(-1, 1, (8, 10)).astype("float32"))

    @tf.function
    def step(x, y):
        with tf.device("/job:worker/task:0"):
            with tf.GradientTape() as tape:
                h = x
                for kernel, bias in zip(variables[:-2:2], variables[1:-2:2], strict=True):
                    h = tf.tanh(h @ kernel + bias)
                loss = tf.reduce_mean((h @ variables[-2] + variables[-1] - y) ** 2)
            updates = [0.01 * g for g in tape.gradient(loss, variables)]
        for v, u in zip(variables, updates, strict=True):
            v.assign_sub(u)
        return loss

    before = counters(args, settle=False)
    losses = [float(step(x, y)) for _ in range(args["steps"])]
    blob = b"".join(v.numpy().tobytes() for v in variables)
    return {
        "losses": losses,
        "variables": hashlib.sha256(blob).hexdigest(),
        "stats": growth(before, counters(args, settle=True)),
    }


def growth(before: dict, after: dict) -> dict:
    """What these steps did: the counters' growth (the cluster may have served other runs)."""
    return {
        d: {k: v if k in ("live_steps", "live_credit") else v - before[d][k] for k, v in s.items()}
        for d, s in after.items()
    }


def counters(args: dict, settle: bool) -> dict:
    """Every task's gate counters (none without the pass); with ``settle``, once no task holds a
    step's state any more, or after 20 s."""
    import tfsched

    out = {}
    if args["kwargs"] is None:
        return out
    target = "grpc://" + args["spec"]["worker"][0]
    for job, addresses in args["spec"].items():
        for i in range(len(addresses)):
            device = f"/job:{job}/task:{i}"
            deadline = time.monotonic() + 20
            while True:  # a call's state goes once its last credit came back
                s = tfsched.enforce.stats(target, device)
                if not settle or s["live_steps"] == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            out[device] = s
    return out


if __name__ == "__main__":
    import faulthandler

    # a client that hangs prints every thread's stack and ends before run_client's 300 s bound
    faulthandler.dump_traceback_later(280, exit=True)
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
