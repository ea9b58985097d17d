"""TensorFlow's own protos and op registry, without paying for ``import tensorflow``.

``import tensorflow`` takes about 4 s on this machine; the generated ``*_pb2`` modules and the
C++ op registry it wraps take 0.02 s and 1.3 s. Offline analysis only needs those, so when
TensorFlow is not imported yet we load the submodules under a temporary package stub instead
of running ``tensorflow/__init__.py``. The modules stay registered under their real names, so a
later ``import tensorflow`` reuses them (same message classes, one descriptor pool).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import threading
import types

from tfsched.errors import TfschedError

_lock = threading.Lock()


def tf_submodule(name: str) -> types.ModuleType:
    """Import ``tensorflow.<name>`` (e.g. ``core.framework.graph_pb2``) without the package init."""
    full = f"tensorflow.{name}"
    if full in sys.modules:
        return sys.modules[full]
    with _lock:
        if "tensorflow" in sys.modules:
            return importlib.import_module(full)
        spec = importlib.util.find_spec("tensorflow")
        if spec is None or not spec.submodule_search_locations:
            raise TfschedError("TensorFlow is not installed: pip install 'tensorflow>=2.21,<2.22'")
        stub = types.ModuleType("tensorflow")
        stub.__path__ = list(spec.submodule_search_locations)
        sys.modules["tensorflow"] = stub
        try:
            return importlib.import_module(full)
        finally:
            if sys.modules.get("tensorflow") is stub:
                del sys.modules["tensorflow"]


_op_defs: dict[str, object] = {}


@contextlib.contextmanager
def quiet_stderr():
    """Silence the C++ start-up chatter (oneDNN, CUDA probes) of TensorFlow's shared libraries.

    It is printed by absl before any log level setting is read, so only the file descriptor
    can hold it back; Python exceptions still propagate.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def op_def(op_type: str):
    """TensorFlow's registered ``OpDef`` for an op type, or None for an op TensorFlow does not know."""
    if op_type not in _op_defs:
        with quiet_stderr():
            registry = tf_submodule("python.framework._op_def_registry")
        op_def_pb2 = tf_submodule("core.framework.op_def_pb2")
        raw = registry.get(op_type)
        _op_defs[op_type] = op_def_pb2.OpDef.FromString(raw) if raw is not None else None
    return _op_defs[op_type]


def import_tensorflow():
    """``import tensorflow`` without its C++ start-up chatter on stderr.

    The chatter includes the GPU platform's probe, which runs when the devices are first listed
    (the first session, not the import) and logs an error on every machine without a CUDA
    driver; the devices are listed here, inside the silence, so that it does not reach the
    user's terminal at the first ``Session``.
    """
    if "tensorflow" in sys.modules and hasattr(sys.modules["tensorflow"], "Graph"):
        return sys.modules["tensorflow"]
    with quiet_stderr():
        import tensorflow

        tensorflow.config.list_physical_devices()

    return tensorflow
