"""Loading the compiled library once per process (the Horovod pattern: one private loader)."""

from __future__ import annotations

import threading

from tfsched.errors import TfschedError

_lock = threading.Lock()
_ops = None


def load_ops():
    """Build if needed, load the library, register the gate's gradient; returns the op wrappers.

    The master needs the pass and the op definition, every sender the kernel: every process of
    the cluster loads it (``tfsched.start_server`` does).
    """
    global _ops
    with _lock:
        if _ops is not None:
            return _ops
        from tfsched.enforce.build import build
        from tfsched.graph._tf import import_tensorflow

        tf = import_tensorflow()
        path = build()
        try:
            ops = tf.load_op_library(path)
        except Exception as e:  # tf raises NotFoundError / errors.* with the loader's message
            built_for = path.rsplit("libtfsched-tf", 1)[-1].split("-")[0]
            raise TfschedError(
                f"{path}: cannot load the tfsched op (built for TensorFlow {built_for}, "
                f"found TensorFlow {tf.__version__}): {str(e).splitlines()[0][:200]}; "
                "rebuild with: python -m tfsched.enforce.build --force"
            ) from None

        @tf.RegisterGradient("TfschedGate")
        def _gate_grad(op, grad):  # a pass-through: the gradient passes through unchanged
            return [grad]

        _ops = ops
        return ops
