"""The worker's side of tuning: follow the coordinator's settings step by step.

``Follower`` is the bookkeeping (poll before each step, switch at the announced step, measure,
report); ``TunedSession`` applies both knobs in a plain training loop, ``CreditTuneHook``
applies credit inside ``MonitoredTrainingSession``.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from tfsched.tune.coordinator import CoordinatorClient
from tfsched.tune.search import Setting, Space

log = logging.getLogger("tfsched.tune")

# The pass needs some credit to put acknowledgements in the graph; the live setting rules. The
# pass acknowledges tensors of at least credit/ack_share (an eighth): a tuned session's is given
# the smallest credit the search reaches, so that every live setting has those tensors to limit.
# One tensor in flight (a credit of 1, ``Space.one_in_flight``, a probe outside the space) has a
# session of its own whose pass has that credit, and counts every tensor ``enable(credit=1)``
# counts.
PASS_CREDIT = 2 ** int(Space().credit_log2[0])


def pass_credit(setting: Setting) -> int:
    """The credit the pass of ``setting``'s session is enabled with (the live credit then rules).

    >>> pass_credit(Setting(0, 1)), pass_credit(Setting(2**20, 2**22)) == PASS_CREDIT
    (1, True)
    """
    return 1 if setting.credit == 1 else PASS_CREDIT


class Follower:
    """Which setting is in force at this worker's step, and the measurement of each epoch.

    ``settle`` steps after a switch are not measured (a new partition size costs a graph rewrite
    on the first step); then ``measure`` steps are timed and reported. A coordinator that cannot
    be reached leaves the last setting in force; it is asked again every ``retry_every`` steps.
    """

    def __init__(
        self, client: CoordinatorClient, *, settle: int = 1, measure: int = 3, retry_every: int = 20
    ):
        self.client = client
        self.settle, self.measure, self.retry_every = settle, measure, retry_every
        self.step = 0
        self.epoch = -1
        self.setting: Setting | None = None
        self.final = False
        self.lost = 0  # consecutive polls without an answer
        self._pending: dict | None = None
        self._in_epoch = 0
        self._window: list[float] = []
        self._waits: list[float] = []
        self._reported = True

    def before_step(self) -> Setting | None:
        """The setting to apply before this step, if it changes now; else None."""
        if not self.final and (self.lost == 0 or self.step % self.retry_every == 0):
            msg = self.client.poll(self.step)
            if msg is None:
                if self.lost == 0:
                    log.warning("tfsched tune: coordinator unreachable; keeping the current setting")
                self.lost += 1
            else:
                self.lost = 0
                if msg["epoch"] > self.epoch and (
                    self._pending is None or msg["epoch"] > self._pending["epoch"]
                ):
                    self._pending = msg
        p = self._pending
        if p is None or p["apply_at"] > self.step:
            return None
        self._pending = None
        self.epoch, self.final = p["epoch"], p["final"]
        new = Setting(p["partition"], p["credit"], p.get("push_credit", 0))
        changed = new != self.setting
        self.setting = new
        self._in_epoch, self._window, self._waits, self._reported = 0, [], [], self.final
        return new if changed else None

    def after_step(self, seconds: float, wait: float | None = None) -> None:
        """The step took ``seconds``; ``wait``: of them, how long this worker waited for the
        others at its end (synchronous steps; None: not synchronized)."""
        self.step += 1
        if self._reported:
            return
        self._in_epoch += 1
        if self._in_epoch > self.settle:
            self._window.append(seconds)
            if wait is not None:
                self._waits.append(min(1.0, wait / seconds) if seconds > 0 else 0.0)  # its share
        if len(self._window) >= self.measure:
            self.client.report(self.epoch, len(self._window), sum(self._window), self._waits)
            self._reported = True  # also when unanswered: the coordinator decides without us


class TunedSession:
    """A training session whose partition and credit follow the coordinator.

    Credit changes live (``CreditSetter``) on the ``devices``' gates; a new partition size opens
    a new session on the same graph and target with the pass set to it (the variables live on
    the PS, so training carries on: no checkpoint, no restart), as does one tensor in flight
    (``pass_credit``). Up to ``max_sessions`` are kept open for sizes seen again.
    ``push_devices``: the tasks that push (the worker's own), whose gates take the setting's
    pushes' window, live too (the credit where it has none). ``operation_timeout_ms``: its
    sessions' ``ConfigProto.operation_timeout_in_ms`` (0: none), the deadline of every call
    not given one, creating and closing them too.
    """

    def __init__(
        self,
        target: str,
        graph,
        *,
        client: CoordinatorClient,
        devices: list[str],
        push_devices: list[str] = (),
        settle: int = 1,
        measure: int = 3,
        max_sessions: int = 3,
        step_barrier=None,
        barrier_timeout_s: float = 600.0,
        operation_timeout_ms: int = 0,
        **enable_kwargs,
    ):
        from tfsched.enforce.api import CreditSetter

        # synchronous steps (``tfsched tune --sync``): a ``threading.Barrier`` the workers' loops
        # share; each step ends when every worker has finished it, and is timed so
        self._barrier, self._barrier_timeout_s = step_barrier, barrier_timeout_s
        self.target, self.graph = target, graph
        self.follower = Follower(client, settle=settle, measure=measure)
        self._enable = enable_kwargs
        self._operation_timeout_ms = operation_timeout_ms
        self._sessions: OrderedDict[tuple[int, int], object] = OrderedDict()  # (partition, credit)
        self._max = max_sessions
        self._credit = CreditSetter(target, devices)
        self._push = CreditSetter(target, list(push_devices)) if push_devices else None
        self._current = None
        self.partition: int | None = None

    def _session_for(self, partition: int, credit: int = PASS_CREDIT):
        import tensorflow as tf

        import tfsched

        key = (partition, credit)
        if key in self._sessions:
            self._sessions.move_to_end(key)
            return self._sessions[key]
        config = tfsched.enable(partition=partition, credit=credit, **self._enable)
        config.operation_timeout_in_ms = self._operation_timeout_ms
        sess = tf.compat.v1.Session(self.target, graph=self.graph, config=config)
        self._sessions[key] = sess
        while len(self._sessions) > self._max:
            _, old = self._sessions.popitem(last=False)
            old.close()
        return sess

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        new = self.follower.before_step()
        if new is not None:
            self._credit(new.credit)
            if self._push is not None:
                self._push(new.push_credit or new.credit)
            self._current = self._session_for(new.partition, pass_credit(new))
            self.partition = new.partition
        if self._current is None:  # no word from the coordinator yet: the pass's defaults
            self._current = self._session_for(0)
            self.partition = 0
        start = time.perf_counter()
        out = self._current.run(fetches, feed_dict=feed_dict, options=options, run_metadata=run_metadata)
        wait = None
        if self._barrier is not None:
            # the step lasts until the slowest worker has finished it (threading.BrokenBarrierError
            # when another worker's loop ended or failed, or after the timeout)
            ran = time.perf_counter()
            self._barrier.wait(timeout=self._barrier_timeout_s)
            wait = time.perf_counter() - ran
        self.follower.after_step(time.perf_counter() - start, wait)
        return out

    def close(self) -> None:
        from tfsched.deadlines import close_sessions

        # all at once, the credit setters' side sessions too: each waits out its deadline if the
        # worker (their master) has died
        close_sessions(
            [*self._sessions.values(), self._credit, *([self._push] if self._push is not None else [])]
        )
        self._sessions.clear()
        self.follower.client.close()


def credit_tune_hook(
    address: str, task: str, target: str, devices: list[str], *, settle: int = 1, measure: int = 3
):
    """A ``SessionRunHook`` that applies the coordinator's credit inside ``MonitoredTrainingSession``.

    The session's partition size is fixed (the hook cannot swap sessions): tune credit only,
    with ``Space(partition=...)`` on the coordinator (and no pushes' window: the hook sets one
    credit on all ``devices``). The live credit limits the tensors the pass
    acknowledges, those of at least the pass's credit/ack_share (an eighth by default): enable
    the pass with the smallest credit the search reaches.
    """
    import tensorflow as tf

    from tfsched.enforce.api import CreditSetter

    class CreditTuneHook(tf.compat.v1.train.SessionRunHook):
        def __init__(self):
            self.follower = Follower(CoordinatorClient(address, task), settle=settle, measure=measure)
            self._setter = None
            self._start = 0.0

        def after_create_session(self, session, coord):
            self._setter = CreditSetter(target, devices)

        def before_run(self, run_context):
            new = self.follower.before_step()
            if new is not None:
                self._setter(new.credit)
            self._start = time.perf_counter()

        def after_run(self, run_context, run_values):
            self.follower.after_step(time.perf_counter() - self._start)

        def end(self, session):
            if self._setter is not None:
                self._setter.close()
            self.follower.client.close()

    return CreditTuneHook()
