"""Enforcement: the gate op and the Grappler pass, loaded into stock TensorFlow."""

from tfsched.enforce.api import enable, start_server, stats

__all__ = ["enable", "start_server", "stats"]
