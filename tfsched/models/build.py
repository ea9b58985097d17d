"""PS graphs of built-in models, built the standard TF1 way (``replica_device_setter``).

Each graph is one worker's graph of between-graph replication (``worker_task`` picks which),
or, with ``in_graph_workers=N``, one graph holding N worker replicas that share the variables
(in-graph replication). Variables are spread over ``ps_tasks`` PS tasks by
``replica_device_setter``, each to the least loaded PS by bytes (``ps_placement="bytes"``, the
default), round-robin (``"round-robin"``, the setter's own default), or split first as TensorFlow
2's ``MinSizePartitioner`` splits them, the shards round-robin (``"min-size"``,
:mod:`tfsched.models.shards`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from tfsched.errors import TfschedError


@dataclass
class BuiltGraph:
    """A built model graph with what a session needs to run it."""

    graph: object  # tf.Graph
    train_op: object | None  # the op a training step runs (None for inference)
    loss: object  # the step's scalar output (loss, or the mean of the predictions for inference)
    init_op: object
    model: str
    mode: str
    fetches: list[str] = field(default_factory=list)  # op names of one step, for analyze
    # with cross_workers: the step split across TensorFlow's barrier (train_op is its compute run)
    crossing: object | None = None  # tfsched.enforce.crossing.CrossingStep

    def graph_def(self, add_shapes: bool = True):
        return self.graph.as_graph_def(add_shapes=add_shapes)


def _keras_app(name: str) -> Callable:
    def make(inputs, num_classes, training=True):
        import tensorflow as tf
        import tf_keras

        ctor = {
            "vgg16": tf_keras.applications.VGG16,
            "resnet50": tf_keras.applications.ResNet50,
            "inception_v3": tf_keras.applications.InceptionV3,
            "mobilenet": tf_keras.applications.MobileNet,
        }[name]
        model = ctor(weights=None, input_shape=tuple(inputs.shape[1:]), classes=num_classes)
        # A Python bool, not the learning-phase placeholder: BatchNorm then needs no tf.cond
        # (a functional If that TensorFlow lowers before placement).
        graph = tf.compat.v1.get_default_graph()
        before = set(graph.get_operations())
        probs = model(inputs, training=training)
        # Batch normalization's moving averages, in UPDATE_OPS as TF1's own layers put them:
        # Keras keeps them on the model only, with those of its construction (on the
        # learning-phase placeholder), which no step runs.
        for op in model.updates:
            if op not in before:
                tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, op)
        return probs

    return make


def _toy_seq(n: int, width: int = 256) -> Callable:
    """TicTac's Seq-N: a chain of N dense layers, each with its own weight matrix."""

    def make(inputs, num_classes, training=True):
        import tensorflow as tf

        x = tf.reshape(inputs, [tf.shape(inputs)[0], -1])[:, :width]
        for i in range(n):
            w = tf.compat.v1.get_variable(
                f"seq/w{i}", [width, width], initializer=tf.compat.v1.glorot_uniform_initializer(seed=i)
            )
            x = tf.tanh(tf.matmul(x, w))
        w = tf.compat.v1.get_variable(
            "seq/out", [width, num_classes], initializer=tf.compat.v1.glorot_uniform_initializer(seed=n)
        )
        return tf.nn.softmax(tf.matmul(x, w))

    return make


def _toy_par(n: int, width: int = 256) -> Callable:
    """TicTac's Par-N: N independent dense branches over the same input, summed."""

    def make(inputs, num_classes, training=True):
        import tensorflow as tf

        x = tf.reshape(inputs, [tf.shape(inputs)[0], -1])[:, :width]
        outs = []
        for i in range(n):
            w = tf.compat.v1.get_variable(
                f"par/w{i}", [width, num_classes], initializer=tf.compat.v1.glorot_uniform_initializer(seed=i)
            )
            outs.append(tf.matmul(x, w))
        return tf.nn.softmax(tf.add_n(outs))

    return make


def _alexnet() -> Callable:
    """AlexNet (Krizhevsky et al. 2012; one tower, no LRN or dropout): five convolutions, three dense layers.

    Most of its parameters are in the first dense layer, as in VGG16: one huge tensor.
    """

    def make(inputs, num_classes, training=True):
        import tf_keras

        layers = tf_keras.layers
        x = layers.Conv2D(96, 11, strides=4, padding="same", activation="relu")(inputs)
        x = layers.MaxPooling2D(3, 2, padding="same")(x)
        x = layers.Conv2D(256, 5, padding="same", activation="relu")(x)
        x = layers.MaxPooling2D(3, 2, padding="same")(x)
        for filters in (384, 384, 256):
            x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = layers.MaxPooling2D(3, 2, padding="same")(x)
        x = layers.Flatten()(x)
        for _ in range(2):
            x = layers.Dense(4096, activation="relu")(x)
        return layers.Dense(num_classes, activation="softmax")(x)

    return make


def _transformer(
    n_layers: int = 4, d_model: int = 256, heads: int = 4, d_ff: int = 1024, seq: int = 64, vocab: int = 8000
) -> Callable:
    """A Transformer encoder (Vaswani et al. 2017) classifying token sequences.

    Tokens are derived from the step's random input, so the graph needs no feed; the embedding's
    gradient is sparse (IndexedSlices), as in real language models.
    """

    def make(inputs, num_classes, training=True):
        import tensorflow as tf
        import tf_keras

        layers = tf_keras.layers
        flat = tf.reshape(inputs, [tf.shape(inputs)[0], -1])[:, :seq]
        tokens = tf.cast(flat * vocab, tf.int32)
        x = layers.Embedding(vocab, d_model)(tokens)
        pos = tf.compat.v1.get_variable(
            "transformer/position",
            [seq, d_model],
            initializer=tf.compat.v1.random_normal_initializer(0, 0.02, seed=3),
        )
        x = x + pos
        for _ in range(n_layers):
            a = layers.MultiHeadAttention(heads, d_model // heads)(x, x)
            x = layers.LayerNormalization()(x + a)
            f = layers.Dense(d_ff, activation="relu")(x)
            x = layers.LayerNormalization()(x + layers.Dense(d_model)(f))
        return layers.Dense(num_classes, activation="softmax")(tf.reduce_mean(x, axis=1))

    return make


# name -> (builder, default image size); sizes are the smallest the architectures accept.
MODELS: dict[str, tuple[Callable, int]] = {
    "vgg16": (_keras_app("vgg16"), 32),
    "resnet50": (_keras_app("resnet50"), 32),
    "inception_v3": (_keras_app("inception_v3"), 75),
    "mobilenet": (_keras_app("mobilenet"), 32),
    "alexnet": (_alexnet(), 64),
    "transformer": (_transformer(), 16),
    "seq32": (_toy_seq(32), 16),
    "par32": (_toy_par(32), 16),
}
# the models whose batch normalization keeps moving statistics (build_graph's moving_averages)
BATCH_NORM_MODELS = ("inception_v3", "mobilenet", "resnet50")


def build_graph(
    model: str,
    *,
    mode: str = "train",
    batch_size: int = 4,
    image_size: int | None = None,
    num_classes: int = 10,
    ps_tasks: int = 1,
    worker_task: int = 0,
    in_graph_workers: int = 0,
    optimizer: str = "sgd",
    seed: int = 1,
    ps_placement: str = "bytes",
    cross_workers: int = 0,
    moving_averages: bool = True,
) -> BuiltGraph:
    """Build the PS graph of a built-in model.

    ``ps_placement`` spreads the variables over ``ps_tasks``: ``"bytes"`` balances the bytes
    each PS exchanges a step (:func:`tfsched.placement.plan_placement`); ``"held"`` puts each on
    the PS holding the fewest bytes so far, in creation order (TF1's
    ``GreedyLoadBalancingStrategy`` with ``byte_size_load_fn``, which TensorFlow 2 no longer
    ships: what ``"bytes"`` improves on); ``"round-robin"`` is ``replica_device_setter``'s
    default, which with two PS puts every kernel of a model whose layers alternate kernel and bias
    on the first (VGG16: 33.6M parameters against 12,426); ``"min-size"`` splits every variable
    over 256 KiB along its first axis first, a shard for each 256 KiB begun and at most one per
    PS, and deals the shards and the other variables out round-robin in creation order: what
    ``ParameterServerStrategy`` does with the ``MinSizePartitioner`` TensorFlow 2's guide gives
    it (``tfsched bench --api tf2 --ps-placement min-size``), so the two APIs can be compared on
    the same shards. The weights are the same as whole (each shard starts from its rows).

    ``cross_workers``: the number of workers of a training graph whose steps cross TensorFlow's
    barrier (``tfsched.enforce.crossing``: ``train_op`` is then the step's compute run and
    ``crossing`` the rest); 0, behind it.

    ``moving_averages``: a training step also updates the moving statistics of the model's
    batch normalization (ResNet-50, Inception-v3, MobileNet: ``UPDATE_OPS``), as a user's
    training does and as a TensorFlow 2 step of the same Keras model does: one small push and
    update on the PS per statistic (ResNet-50: 106 of them, 53,120 parameters). False: the
    step applies the gradients only, as every built-in training graph did before the
    eightieth session (the benchmark rows measured then say ``--no-moving-averages``).

    >>> bg = build_graph("seq32", batch_size=2)
    >>> bg.fetches
    ['train']
    """
    if model not in MODELS:
        raise TfschedError(f"unknown model {model!r}; choose one of {', '.join(sorted(MODELS))}")
    if mode not in ("train", "inference"):
        raise TfschedError(f"unknown mode {mode!r}; expected train or inference")
    if ps_placement not in PS_PLACEMENTS:
        raise TfschedError(
            f"unknown ps_placement {ps_placement!r}; expected one of {', '.join(PS_PLACEMENTS)}"
        )
    from tfsched.graph._tf import import_tensorflow, tf_submodule
    from tfsched.models.shards import split_variables

    tf = import_tensorflow()

    make, default_size = MODELS[model]
    size = image_size or default_size
    # tf_keras' batch normalization calls a deprecated colocation API of TensorFlow's: its notice
    # is about tf_keras, not the user's code, and would sit in the middle of our output.
    silence = getattr(tf_submodule("python.util.deprecation"), "silence", contextlib.nullcontext)
    # planned before this build seeds its generators, so that the plan's own build does not move
    # them: the weights do not depend on the number of PS
    strategy = _HeldBytes(ps_tasks) if ps_placement == "held" and ps_tasks > 1 else None
    if ps_placement == "bytes" and ps_tasks > 1:
        strategy = _moved_bytes_plan(
            model,
            ps_tasks,
            mode=mode,
            batch_size=batch_size,
            image_size=size,
            num_classes=num_classes,
            in_graph_workers=in_graph_workers,
            optimizer=optimizer,
            seed=seed,
            moving_averages=moving_averages,
        )
    g = tf.Graph()
    with g.as_default(), silence():
        tf.compat.v1.set_random_seed(seed)
        import tf_keras

        # Keras initializers draw from their own generator: seed it too, so two builds of a model
        # start from the same weights (and vanilla and scheduled runs can be compared bitwise).
        tf_keras.utils.set_random_seed(seed)
        replicas = range(in_graph_workers) if in_graph_workers else [worker_task]
        losses, grads_per_replica = [], []
        opt = _optimizer(optimizer)
        for r in replicas:
            setter = tf.compat.v1.train.replica_device_setter(
                ps_tasks=ps_tasks, worker_device=f"/job:worker/task:{r}", ps_strategy=strategy
            )
            with (
                g.device(setter),
                tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=tf.compat.v1.AUTO_REUSE),
                split_variables(ps_tasks)
                if ps_placement == "min-size" and ps_tasks > 1
                else contextlib.nullcontext(),
            ):
                images = tf.random.stateless_uniform([batch_size, size, size, 3], seed=[seed, r])
                labels = tf.random.stateless_uniform(
                    [batch_size], seed=[seed + 1, r], maxval=num_classes, dtype=tf.int32
                )
                if r != replicas[0] and model not in ("seq32", "par32"):
                    raise TfschedError(
                        "in-graph replication of tf_keras applications is not supported; use seq32 or par32"
                    )
                probs = make(images, num_classes, training=mode == "train")
                loss = tf.reduce_mean(
                    tf_keras.losses.sparse_categorical_crossentropy(labels, probs),
                    name=f"loss_{r}" if in_graph_workers else "loss",
                )
                losses.append(loss)
                if mode == "train":
                    grads_per_replica.append(opt.compute_gradients(loss))
        with g.device(
            tf.compat.v1.train.replica_device_setter(
                ps_tasks=ps_tasks, worker_device=f"/job:worker/task:{worker_task}", ps_strategy=strategy
            )
        ):
            train_op = crossing = None
            if cross_workers and (mode != "train" or in_graph_workers):
                raise TfschedError(
                    "crossing the barrier needs a training graph of one worker (between-graph)"
                )
            if mode == "train":
                step = tf.compat.v1.train.get_or_create_global_step()
                updates = g.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS) if moving_averages else []
                if in_graph_workers:
                    # Synchronous in-graph replication: the replicas' gradients are averaged where
                    # each variable lives, then applied once (two racing applies would make even
                    # vanilla TensorFlow nondeterministic).
                    averaged = []
                    for pairs in zip(*grads_per_replica, strict=True):
                        var = pairs[0][1]
                        with g.device(var.device):
                            averaged.append((tf.add_n([g for g, _ in pairs]) / float(len(pairs)), var))
                    with tf.control_dependencies(updates):
                        train_op = opt.apply_gradients(averaged, global_step=step, name="train")
                elif cross_workers:
                    from tfsched.enforce.crossing import cross_barrier_step

                    crossing = cross_barrier_step(
                        opt,
                        grads_per_replica[0],
                        worker=worker_task,
                        workers=cross_workers,
                        global_step=step,
                        worker_device=f"/job:worker/task:{worker_task}",
                        compute_also=updates,
                    )
                    train_op = crossing.compute_op
                else:
                    with tf.control_dependencies(updates):
                        train_op = opt.apply_gradients(grads_per_replica[0], global_step=step, name="train")
            out = losses[0] if len(losses) == 1 else tf.add_n(losses, name="loss")
        init = tf.compat.v1.global_variables_initializer()
    fetches = [train_op.name] if train_op is not None else [out.op.name]
    return BuiltGraph(
        graph=g,
        train_op=train_op,
        loss=out,
        init_op=init,
        model=model,
        mode=mode,
        fetches=fetches,
        crossing=crossing,
    )


PS_PLACEMENTS = ("bytes", "held", "round-robin", "min-size")


class _HeldBytes:
    """TF1's greedy load balancing by bytes held: each PS op to the task holding the fewest
    bytes so far, in creation order, the lowest index on a tie. One instance serves every setter
    of a graph, so that the loads add up across them."""

    def __init__(self, num_tasks: int):
        self.loads = [0] * num_tasks

    def __call__(self, op) -> int:
        from tfsched.placement import held_bytes

        task = self.loads.index(min(self.loads))
        self.loads[task] += held_bytes(op)
        return task


def _moved_bytes_plan(model: str, ps_tasks: int, **build_args):
    """The :class:`tfsched.placement.Placement` of a built-in model over ``ps_tasks`` PS: the
    model built once on one PS (with ``build_args``, ``build_graph``'s), its transfers found, and
    its variables placed largest first by the bytes each moves a step. The plan is the same in
    every worker's build of the same model and arguments.

    >>> plan = _moved_bytes_plan("seq32", 2, batch_size=2)
    >>> sorted(set(plan.variables.values())), plan.variables["seq/w0"] != plan.variables["seq/w1"]
    ([0, 1], True)
    """
    from tfsched.graph import build_comm_graph
    from tfsched.graph.load import nodes_from_graph_def, output_specs
    from tfsched.placement import Placement

    built = build_graph(model, ps_tasks=1, ps_placement="round-robin", **build_args)
    g = build_comm_graph(
        nodes_from_graph_def(built.graph_def(), model),
        fetches=built.fetches,
        source=model,
        output_specs=output_specs,
    )
    return Placement.of_graph(g, ps_tasks)


def _optimizer(name: str):
    import tensorflow as tf

    opts = {
        "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.01),
        "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.01, 0.9),
        "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.001),
    }
    if name not in opts:
        raise TfschedError(f"unknown optimizer {name!r}; choose one of {', '.join(opts)}")
    return opts[name]()
