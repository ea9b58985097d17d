"""Gate state of steps that share one step container (TensorFlow 2's functions): kept per call by
step id (cc/gate.cc KeyedStep), freed once the call's gates all went, or when the call ends or
fails (its cancellation manager fires). Local ``tf.function``s, in a process of their own."""

import json
import subprocess
import sys

import pytest

from tfsched.bench.local import task_env

pytestmark = pytest.mark.tf

SCRIPT = r"""
import json, time
import tensorflow as tf
from tfsched.enforce import stats
from tfsched.enforce._loader import load_ops

ops = load_ops()


def gate(x, channel, priority, size, timeout_ms=100):
    return ops.tfsched_gate(x, channel=channel, priority=priority, channel_size=size,
                            timeout_ms=timeout_ms)


def gates(x, channel, priorities, size):
    # made in priority order: a tf.function runs stateful ops in the order they were made
    return tf.add_n([gate(x + p, channel, p, size) for p in priorities])


@tf.function
def complete(x):
    return gates(x, "a->b", (0, 1, 2), 3)


@tf.function
def partial(x):  # two of its channel's three gates run: the call never finishes it
    return gates(x, "c->d", (0, 1), 3)


def failing_body(x):  # no automatic control dependencies: the last gate waits for the others
    first = gate(x, "e->f", 0, 3, 60000)
    bad = tf.strings.to_number(tf.strings.as_string(first) + "?")  # fails once the first went
    return gate(x + bad, "e->f", 1, 3, 60000) + gate(x, "e->f", 2, 3, 60000)


failing = tf.compat.v1.wrap_function(failing_body, [tf.TensorSpec([], tf.float32)])


def slow():
    time.sleep(0.5)
    return 0.0


def late_body(x):  # as failing_body, but the last gate's input comes after the call failed
    first = gate(x, "g->h", 0, 3, 60000)
    bad = tf.strings.to_number(tf.strings.as_string(first) + "?")
    later = tf.py_function(slow, [], tf.float32)
    return gate(x + bad, "g->h", 1, 3, 60000) + gate(x + later, "g->h", 2, 3, 60000)


late = tf.compat.v1.wrap_function(late_body, [tf.TensorSpec([], tf.float32)])


def counters():
    keys = ("released", "waited", "timeouts", "cancelled", "live_steps", "steps")
    return {k: v for k, v in stats().items() if k in keys}


def settled(within_s=5.0):
    # The last gate of a call releases its tensor, which can end the call, before it forgets the
    # call's state (cc/gate_ops.cc: done(), then ForgetIfFinished) on its own thread: with the
    # cores busy the state can still be there as the call returns. So the counters once no state
    # is live, or as they are after within_s (a state that stays fails the test).
    deadline = time.monotonic() + within_s
    c = counters()
    while c["live_steps"] and time.monotonic() < deadline:
        time.sleep(0.01)
        c = counters()
    return c


def error_of(fn):  # the error type a call of fn ends with (None: it did not fail), and its time
    start = time.monotonic()
    try:
        fn(tf.constant(1.0))
        return None, time.monotonic() - start
    except tf.errors.InvalidArgumentError as e:
        return type(e).__name__, time.monotonic() - start


out = {"start": counters()}
values = [float(complete(tf.constant(1.0))) for _ in range(5)]
out["complete"] = settled()
partial(tf.constant(1.0))
out["partial"] = settled()
out["error"], out["failed_s"] = error_of(failing)
out["failed"] = settled()
out["late_error"], _ = error_of(late)
time.sleep(1.0)  # the executor runs the late gate after the call returned its error
out["late"] = counters()
out["values"] = values
print(json.dumps(out))
"""


def test_each_call_has_its_own_state_freed_when_done_ended_or_failed():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=task_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["values"] == [6.0] * 5  # pass-throughs: (1+0) + (1+1) + (1+2)
    start, complete, partial, failed = (out[k] for k in ("start", "complete", "partial", "failed"))
    # one state per call (a shared container would have held one for all five), each freed at once
    assert complete["steps"] - start["steps"] == 5 and complete["live_steps"] == 0
    assert complete["released"] - start["released"] == 15
    # a call that ends before all of its channel's gates ran: its state goes with the call
    assert partial["steps"] - complete["steps"] == 1 and partial["live_steps"] == 0
    assert partial["released"] - complete["released"] == 2
    # a call that fails while a gate waits: the gate is cancelled at once (not after its 60 s), and
    # the state goes
    assert out["error"] == "InvalidArgumentError" and out["failed_s"] < 30
    assert failed["steps"] - partial["steps"] == 1 and failed["live_steps"] == 0
    assert failed["cancelled"] - partial["cancelled"] == 1
    assert failed["timeouts"] == start["timeouts"]
    # a gate the executor runs after its call failed (its input came later): it makes no state of
    # its own (one no other gate of the call could share), it goes at once, cancelled
    late = out["late"]
    assert out["late_error"] == "InvalidArgumentError"
    assert late["steps"] - failed["steps"] == 1 and late["live_steps"] == 0
    assert late["released"] - failed["released"] == 2 and late["cancelled"] - failed["cancelled"] == 1
    assert late["timeouts"] == start["timeouts"]
