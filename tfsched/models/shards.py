"""Variables split over the PS the way TensorFlow 2's ``MinSizePartitioner`` splits them.

TensorFlow 2's guide gives ``ParameterServerStrategy`` a ``variable_partitioner``
(``MinSizePartitioner``), whose shards the strategy then deals out round-robin. Despite its
``min_shard_bytes``, the partitioner makes a shard for each 256 KiB begun, at most one per PS and
per row of the first axis: a variable of 288 KiB becomes two of 144 KiB. A TF1 graph partitions a
variable with ``get_variable(..., partitioner=...)`` or a ``variable_scope`` partitioner, which
Keras layers do not read: their weights are made through ``tf.compat.v1.Variable``.
:func:`split_variables` splits them there, in the variable creators' stack, so a built-in model of
Keras layers built the TF1 way (``build_graph(..., ps_placement="min-size")``) holds the same
shards as under the strategy, and ``replica_device_setter``'s round-robin deals them out in the
order they are made, as the strategy does: the global step aside, the busiest PS holds what
``bench.tf2.channel_params`` says the strategy's busiest does.
"""

from __future__ import annotations

import contextlib
import math

MIN_SHARD_BYTES = 256 << 10  # TensorFlow 2's guide's min_shard_bytes


def min_size_partitioner(ps: int):
    """TensorFlow 2's ``MinSizePartitioner`` over ``ps`` PS, as the guide sets it."""
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()  # without its start-up chatter on the user's stderr

    return tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=MIN_SHARD_BYTES, max_shards=ps
    )


def shard_rows(shape, dtype, partitioner) -> list[int]:
    """The rows of the first axis each shard of a variable of ``shape`` and ``dtype`` holds, split
    as ``ParameterServerStrategy`` splits it with ``partitioner`` (its ``_create_variable``: a
    scalar or a single partition stays whole, one entry; otherwise at most one shard per row, the
    rows dealt out evenly, the first shards one row more).

    >>> import tensorflow as tf
    >>> shard_rows((10, 3), tf.float32, tf.distribute.experimental.partitioners.FixedShardsPartitioner(4))
    [3, 3, 2, 2]
    >>> shard_rows((), tf.float32, min_size_partitioner(2))
    [1]
    """
    dims = [int(d) for d in shape]
    if partitioner is None or not dims:
        return [dims[0] if dims else 1]
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    parts = min(int(partitioner(shape=tf.TensorShape(dims), dtype=dtype)[0]), dims[0])
    if parts <= 1:
        return [dims[0]]
    base, extra = divmod(dims[0], parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def shard_sizes(shape, dtype, partitioner) -> list[int]:
    """The parameters of each shard :func:`shard_rows` makes.

    >>> import tensorflow as tf
    >>> shard_sizes((10, 3), tf.float32, tf.distribute.experimental.partitioners.FixedShardsPartitioner(4))
    [9, 9, 6, 6]
    """
    dims = [int(d) for d in shape]
    if not dims:
        return [1]
    row = math.prod(dims[1:])
    return [rows * row for rows in shard_rows(dims, dtype, partitioner)]


@contextlib.contextmanager
def split_variables(ps: int):
    """Within it, every variable the graph makes through ``tf.compat.v1.Variable`` (Keras layers'
    weights, ``get_variable``'s) that :func:`min_size_partitioner` splits over ``ps`` PS is made as
    a ``PartitionedVariable`` of shards along its first axis, named ``NAME/part_I`` as TensorFlow's
    own partitioned variables and the strategy's shards are. Each shard is a variable of its own,
    which ``replica_device_setter`` places; the model reads the whole through the partitioned
    variable (a concatenation on the reader's device, or ``embedding_lookup``'s gathers from
    each shard), so each shard is a pull of its own and its gradient a push of its own.

    Each shard starts from its rows of the whole variable's initial value, made once (on the
    reader's device, in the initializer only), so the model's weights are those it has whole.
    Slot variables made outside the block (an optimizer's) follow their shard.

    >>> import tensorflow as tf
    >>> with tf.Graph().as_default(), split_variables(2):
    ...     v = tf.compat.v1.Variable(tf.zeros([300, 512]), name="w")
    ...     small = tf.compat.v1.Variable(tf.zeros([4]), name="b")
    >>> [p.name for p in v], [p.shape.as_list() for p in v], isinstance(small, tf.Variable)
    (['w/part_0:0', 'w/part_1:0'], [[150, 512], [150, 512]], True)
    """
    from tfsched.graph._tf import import_tensorflow, tf_submodule

    tf = import_tensorflow()

    variables = tf_submodule("python.ops.variables")
    partitioner = min_size_partitioner(ps)

    def creator(next_creator, **kwargs):
        shape, dtype = kwargs.get("shape"), kwargs.get("dtype")
        init = kwargs.get("initial_value")
        if shape is None and isinstance(init, tf.Tensor):
            shape, dtype = init.shape, dtype or init.dtype
        if (
            dtype is None
            or shape is None
            or not tf.TensorShape(shape).is_fully_defined()
            or kwargs.get("variable_def") is not None
            or kwargs.get("validate_shape") is False
        ):
            return next_creator(**kwargs)
        dims = tf.TensorShape(shape).as_list()
        dtype = tf.as_dtype(dtype).base_dtype
        rows = shard_rows(dims, dtype, partitioner)
        if len(rows) < 2:
            return next_creator(**kwargs)
        with tf.name_scope(kwargs.get("name") or "Variable") as scope:
            name = scope.rstrip("/")
            with tf.compat.v1.init_scope(), tf.name_scope("Initializer"):
                whole = init() if callable(init) else init
                whole = tf.convert_to_tensor(whole, dtype=dtype)
            shards, offset = [], 0
            for i, n in enumerate(rows):
                shard_shape = [n, *dims[1:]]
                shard = next_creator(
                    **{
                        **kwargs,
                        "initial_value": whole[offset : offset + n],
                        "name": f"part_{i}",
                        "shape": shard_shape,
                    }
                )
                shard._set_save_slice_info(
                    variables.Variable.SaveSliceInfo(
                        name, dims, [offset] + [0] * (len(dims) - 1), shard_shape
                    )
                )
                shards.append(shard)
                offset += n
        return variables.PartitionedVariable(
            name=name,
            shape=dims,
            dtype=dtype,
            variable_list=shards,
            partitions=[len(rows)] + [1] * (len(dims) - 1),
        )

    with tf.compat.v1.variable_creator_scope(creator):
        yield
