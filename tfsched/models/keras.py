"""The built-in models as Keras models, for TensorFlow 2 (``ParameterServerStrategy``).

``build.MODELS`` builds TF1 graphs: Seq-32, Par-32 and the Transformer there make their
variables with ``tf.compat.v1.get_variable``, which a TensorFlow 2 function cannot. Here every
model is a ``tf_keras.Model`` of Keras layers, made inside a strategy's scope so that its
variables go to the PS: the same architectures, layer for layer, at the same default input sizes
(``build.MODELS``), so a TensorFlow 2 run moves the same tensors as the session's graph of the
same model. Weights are not the TF1 graphs' (their generators differ); nothing compares them.
"""

from __future__ import annotations

from tfsched.errors import TfschedError
from tfsched.models.build import MODELS

# the built-in models a Keras model is made of (all of build.MODELS)
KERAS_MODELS = tuple(MODELS)


def keras_model(name: str, *, image_size: int | None = None, num_classes: int = 10, seed: int = 1):
    """``(model, input_shape)``: the built-in model ``name`` as a ``tf_keras.Model`` taking a batch
    of ``input_shape`` images (height, width, 3) and giving class probabilities (a softmax, as
    the applications' constructors end theirs). Made in the caller's scope (a strategy's, for PS
    variables).

    >>> model, shape = keras_model("par32")
    >>> shape, len(model.trainable_variables)
    ((16, 16, 3), 32)
    """
    if name not in MODELS:
        raise TfschedError(f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}")
    from tfsched.graph._tf import import_tensorflow

    import_tensorflow()  # without its start-up chatter, before tf_keras imports it
    import tf_keras

    tf_keras.utils.set_random_seed(seed)
    size = image_size or MODELS[name][1]
    shape = (size, size, 3)
    apps = {
        "vgg16": tf_keras.applications.VGG16,
        "resnet50": tf_keras.applications.ResNet50,
        "inception_v3": tf_keras.applications.InceptionV3,
        "mobilenet": tf_keras.applications.MobileNet,
    }
    if name in apps:
        return apps[name](weights=None, input_shape=shape, classes=num_classes), shape
    inputs = tf_keras.Input(shape)
    if name == "alexnet":  # layers on Keras tensors: build's own maker serves both
        outputs = MODELS[name][0](inputs, num_classes)
    elif name == "transformer":
        outputs = _transformer(tf_keras, inputs, num_classes)
    else:
        outputs = _toy(tf_keras, name, inputs, num_classes)
    return tf_keras.Model(inputs, outputs, name=name), shape


def _flat(tf_keras, inputs, width: int):
    """The first ``width`` values of each example, as build's toy models and Transformer take them."""
    flat = tf_keras.layers.Flatten()(inputs)
    return tf_keras.layers.Lambda(lambda x: x[:, :width])(flat)


def _toy(tf_keras, name: str, inputs, num_classes: int, width: int = 256):
    """TicTac's Seq-32 (a chain of dense layers without bias, tanh) and Par-32 (independent dense
    branches over the same input, summed), as ``build._toy_seq`` and ``_toy_par``."""
    layers = tf_keras.layers
    x = _flat(tf_keras, inputs, width)
    if name == "seq32":
        for i in range(32):
            x = layers.Dense(width, activation="tanh", use_bias=False, name=f"seq_w{i}")(x)
        return layers.Dense(num_classes, activation="softmax", use_bias=False, name="seq_out")(x)
    branches = [layers.Dense(num_classes, use_bias=False, name=f"par_w{i}")(x) for i in range(32)]
    return layers.Softmax()(layers.Add()(branches))


def _transformer(
    tf_keras, inputs, num_classes, n_layers=4, d_model=256, heads=4, d_ff=1024, seq=64, vocab=8000
):
    """``build._transformer`` of Keras layers: the learned positions are a layer's weight."""
    import tensorflow as tf

    layers = tf_keras.layers

    class Positions(layers.Layer):
        def build(self, shape):
            init = tf_keras.initializers.RandomNormal(0.0, 0.02, seed=3)
            self.position = self.add_weight("position", shape=(seq, d_model), initializer=init)

        def call(self, x):
            return x + self.position

    tokens = layers.Lambda(lambda x: tf.cast(x * vocab, tf.int32))(_flat(tf_keras, inputs, seq))
    x = Positions(name="transformer_position")(layers.Embedding(vocab, d_model)(tokens))
    for _ in range(n_layers):
        a = layers.MultiHeadAttention(heads, d_model // heads)(x, x)
        x = layers.LayerNormalization()(x + a)
        f = layers.Dense(d_ff, activation="relu")(x)
        x = layers.LayerNormalization()(x + layers.Dense(d_model)(f))
    pooled = layers.GlobalAveragePooling1D()(x)
    return layers.Dense(num_classes, activation="softmax")(pooled)
