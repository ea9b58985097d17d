"""Gate state of steps that share one step container (TensorFlow 2's functions): kept per call by
step id (cc/gate.cc KeyedStep), freed once the call's gates all went, and dropped after sitting
unused when a call never ran all of its gates. Local ``tf.function``s, in a process of their own:
the idle time is shortened there by $TFSCHED_TEST_KEYED_IDLE_MS, read once by the library."""

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


def gates(x, channel, priorities, size):
    # made in priority order: a tf.function runs stateful ops in the order they were made
    return tf.add_n([ops.tfsched_gate(x + p, channel=channel, priority=p, channel_size=size,
                                      timeout_ms=100) for p in priorities])


@tf.function
def complete(x):
    return gates(x, "a->b", (0, 1, 2), 3)


@tf.function
def partial(x):  # two of its channel's three gates run: the call never finishes it
    return gates(x, "c->d", (0, 1), 3)


def counters():
    return {k: v for k, v in stats().items() if k in ("released", "timeouts", "live_steps", "steps")}


out = {"start": counters()}
values = [float(complete(tf.constant(1.0))) for _ in range(5)]
out["complete"] = counters()
partial(tf.constant(1.0))
out["partial"] = counters()
time.sleep(1.0)  # past the idle time the test sets
complete(tf.constant(1.0))
out["swept"] = counters()
out["values"] = values
print(json.dumps(out))
"""


def test_each_call_has_its_own_state_freed_when_done_or_idle():
    env = dict(task_env(), TFSCHED_TEST_KEYED_IDLE_MS="300")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["values"] == [6.0] * 5  # pass-throughs: (1+0) + (1+1) + (1+2)
    start, complete, partial, swept = (out[k] for k in ("start", "complete", "partial", "swept"))
    # one state per call (a shared container would have held one for all five), each freed at once
    assert complete["steps"] - start["steps"] == 5 and complete["live_steps"] == 0
    assert complete["released"] - start["released"] == 15
    # a call that never ran all of its channel's gates keeps its state ...
    assert partial["steps"] - complete["steps"] == 1 and partial["live_steps"] == 1
    # ... until it sat unused past the idle time: the next call's first gate drops it
    assert swept["steps"] - partial["steps"] == 1 and swept["live_steps"] == 0
    assert swept["timeouts"] == start["timeouts"]
