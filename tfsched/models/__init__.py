"""Built-in PS training and inference graphs: tf_keras applications and TicTac's toy models."""

from tfsched.models.build import MODELS, BuiltGraph, build_graph

__all__ = ["MODELS", "BuiltGraph", "build_graph"]
