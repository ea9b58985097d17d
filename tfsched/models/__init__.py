"""Built-in PS training and inference graphs: tf_keras applications and TicTac's toy models."""

from tfsched.models.build import BATCH_NORM_MODELS, MODELS, BuiltGraph, build_graph

__all__ = ["BATCH_NORM_MODELS", "MODELS", "BuiltGraph", "build_graph"]
