"""Deadlines for the calls of sessions on a cluster whose tasks can die.

A session whose master task has died does not fail its call: a run or a close waits for the
master to come back, for good without a deadline (``tfsched trace`` was still waiting three
minutes after its worker 0 was killed). So every call of tfsched's own sessions has one: a step
its ``RunOptions.timeout_in_ms``, fitted to the steps run before it (``step_deadline_s``), and
the session's other calls, creating and closing it, the config's ``operation_timeout_in_ms``
(``session_config``).
"""

from __future__ import annotations

import atexit
import math
import threading
import time

from tfsched.units import check_seconds

# A step's deadline, once earlier steps have shown what a step takes (``step_deadline_s``): this
# many times the slowest of them, and never less than the floor. Tracing (FULL_TRACE, the RPC
# logging held on) slows a step, the first traced step sets the tracer up, and a new session's
# first step (``tfsched tune``) registers its graph.
STEP_SLACK = 20
STEP_FLOOR_S = 30.0
# The deadline of a session's other calls (``ConfigProto.operation_timeout_in_ms``): creating it,
# which places the graph, and closing it, which waits this long when its master task has died.
SESSION_CALL_TIMEOUT_S = 30.0


def step_deadline_s(timeout_s: float | None, slowest_s: float | None) -> float | None:
    """A step's deadline: ``timeout_s``, shortened to ``STEP_SLACK`` times the slowest step so far
    (``None``: none yet) and at least ``STEP_FLOOR_S``.

    >>> step_deadline_s(600.0, 0.2), step_deadline_s(600.0, 5.0)
    (30.0, 100.0)
    >>> step_deadline_s(10.0, 0.2), step_deadline_s(600.0, None), step_deadline_s(None, 1.0)
    (10.0, 600.0, None)
    """
    if timeout_s is None or slowest_s is None:
        return timeout_s
    return min(timeout_s, max(STEP_FLOOR_S, STEP_SLACK * slowest_s))


def deadline_ms(timeout_s: float | None) -> int:
    """``RunOptions.timeout_in_ms`` for a deadline of ``timeout_s`` (0: none)."""
    return 0 if timeout_s is None else max(1, math.ceil(timeout_s * 1000))


def session_config(config=None, timeout_s: float = SESSION_CALL_TIMEOUT_S):
    """A copy of ``config`` (a ``ConfigProto``; None: a new one) whose calls without a deadline
    of their own, creating and closing the session, have ``timeout_s``, unless it sets a deadline
    itself. A run given no ``RunOptions.timeout_in_ms`` gets it too.

    Not bounded so: a master in this process waits at the session's first call for every task
    it sees to answer, past this deadline and the run's (a run whose PS was not up still waited
    after 40 s with both at 5 s); ``tfsched.check_cluster`` asks each task within one."""
    import tensorflow as tf

    check_seconds(timeout_s, "session_config: timeout_s")
    out = tf.compat.v1.ConfigProto()
    if config is not None:
        out.CopyFrom(config)
    if not out.operation_timeout_in_ms:
        out.operation_timeout_in_ms = deadline_ms(timeout_s)
    return out


SESSION_CLOSE_TIMEOUT_S = 60.0


def close_sessions(sessions: list) -> None:
    """Close ``sessions`` all at once, waiting at most ``SESSION_CLOSE_TIMEOUT_S`` in all: a
    session whose master task has died waits out its close's deadline (``session_config``),
    and one after another they added up (two of them took 60 s)."""

    def close(sess) -> None:
        try:
            sess.close()
        except Exception:  # noqa: BLE001 - a session of a failed cluster may not close cleanly
            pass

    closers = [threading.Thread(target=close, args=(sess,), daemon=True) for sess in sessions]
    for closer in closers:
        closer.start()
    deadline = time.monotonic() + SESSION_CLOSE_TIMEOUT_S
    for closer in closers:
        closer.join(max(0.0, deadline - time.monotonic()))
        if closer.is_alive():
            # it must return before the interpreter finalizes: a thread that takes the GIL back
            # then is unwound through TensorFlow's bindings, and the process aborts
            atexit.register(closer.join, SESSION_CLOSE_TIMEOUT_S)
