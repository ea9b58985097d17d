"""Enforcement: the gate op and the Grappler pass, loaded into stock TensorFlow."""

from tfsched.enforce.api import (
    DEFAULT_ACK_SHARE,
    DEFAULT_CREDIT,
    DEFAULT_PARTITION,
    MAX_TIMEOUT_MS,
    enable,
    enable_functions,
    link_sizes,
    set_credit,
    start_server,
    stats,
)
from tfsched.enforce.check import check_cluster

__all__ = [
    "DEFAULT_ACK_SHARE",
    "DEFAULT_CREDIT",
    "DEFAULT_PARTITION",
    "MAX_TIMEOUT_MS",
    "check_cluster",
    "enable",
    "enable_functions",
    "link_sizes",
    "set_credit",
    "start_server",
    "stats",
]
