"""``tfsched.deadlines.session_config``: the deadline a session's calls get, and what it refuses."""

import pytest

from tfsched.deadlines import SESSION_CALL_TIMEOUT_S, session_config
from tfsched.errors import TfschedError


def test_a_config_without_a_deadline_gets_one_and_one_with_a_deadline_keeps_it():
    import tensorflow as tf

    assert session_config().operation_timeout_in_ms == SESSION_CALL_TIMEOUT_S * 1000
    assert session_config(timeout_s=0.0004).operation_timeout_in_ms == 1  # whole milliseconds
    mine = tf.compat.v1.ConfigProto(operation_timeout_in_ms=7000, inter_op_parallelism_threads=3)
    out = session_config(mine, timeout_s=5)
    assert (out.operation_timeout_in_ms, out.inter_op_parallelism_threads) == (7000, 3)
    assert out is not mine and session_config(tf.compat.v1.ConfigProto(), 5).operation_timeout_in_ms == 5000


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), 1e300, "30", None])
def test_a_deadline_that_is_no_number_of_seconds_is_one_error(bad):
    """Before the hundred-and-eighteenth session, -1 was a deadline of a millisecond, and
    infinity an OverflowError from ``math.ceil``."""
    with pytest.raises(TfschedError, match="session_config: timeout_s must be a number of seconds, above 0"):
        session_config(timeout_s=bad)


def _collect(bad):
    from tfsched.tracing import collect

    collect(None, [], steps=1, timeout_s=bad)


def _trace_local(bad):
    from tfsched.tracing.run import trace_local

    trace_local(model="seq32", step_timeout_s=bad)


def _stats(bad):
    from tfsched.enforce import stats

    stats("grpc://127.0.0.1:1", "/job:ps/task:0", timeout_s=bad)


def _check_cluster(bad):
    import tfsched

    tfsched.check_cluster({"ps": ["127.0.0.1:1"]}, timeout_s=bad)


@pytest.mark.parametrize("call", [_collect, _trace_local, _stats, _check_cluster])
def test_every_deadline_a_user_gives_is_checked_before_anything_runs(call):
    """One check (``tfsched.units.check_seconds``) for each: nothing is started, nothing asked."""
    for bad in (0, float("inf"), float("nan"), 2 * 86400):
        with pytest.raises(TfschedError, match="must be a number of seconds, above 0, at most a day"):
            call(bad)
