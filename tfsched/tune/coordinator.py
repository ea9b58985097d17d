"""One task decides, every worker applies: the tuning coordinator, a small service over grpcio.

Messages are JSON objects of a fixed shape (no generated stubs to keep in step with the wire):

* ``Poll {task, step}`` -> ``{epoch, partition, credit, [push_credit,] apply_at, final}``: the
  setting in force from ``apply_at`` (the worker's own step count) on. Every worker polls before
  each step.
* ``Report {task, epoch, steps, seconds, waits}`` -> ``{accepted}``: a worker measured ``steps``
  steps of ``epoch``'s setting in ``seconds``; ``waits``: in synchronous steps, the share of
  each of them it spent waiting for the others at its end, 0 to 1 (empty when the steps are not
  synchronized).

When every worker has reported the current epoch, the coordinator registers the objective with
the search, takes the next setting and announces it. The objective (``OBJECTIVES``) is the
cluster's throughput (the sum of the workers' steps/s), or ``"balanced"``: that throughput times
one minus the straggler effect (``straggler``), so that of two settings as fast, the one whose
workers wait less on each other wins, and one that evens them out wins if it costs less
throughput than the share of the step it saves. When the trial budget is spent it measures the
``confirm`` settings with the highest means once more (``confirm_rounds`` times, in turn), then
announces the one of those with the highest mean (``final``; with two rounds or more, the mean
of the repeats alone, ``_Search.winner``). Each setting is announced for a step every worker
reaches after it polls: ``apply_at`` = the furthest step any worker has polled + ``lead``.

The server listens only on the address it is given (a cluster host, never 0.0.0.0), accepts
calls only from the cluster's hosts, and rejects malformed messages (INVALID_ARGUMENT) and
unknown tasks (PERMISSION_DENIED). A worker that cannot reach it keeps its last setting and
carries on (see ``worker.Follower``).
"""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.tune.search import Setting, _Search, confirm_order
from tfsched.units import is_number

SERVICE = "tfsched.Coordinator"
_POLL = {"task": str, "step": int}
_REPORT = {"task": str, "epoch": int, "steps": int, "seconds": float, "waits": list}
OBJECTIVES = ("throughput", "balanced")
THROUGHPUT = "throughput_steps_per_s"  # a trial's measured throughput, kept with it


def _decode(raw: bytes, shape: dict) -> dict:
    """The message if it is a JSON object of exactly ``shape``; else ValueError."""
    msg = json.loads(raw.decode("utf-8"))
    if not isinstance(msg, dict) or set(msg) != set(shape):
        raise ValueError(f"expected the fields {sorted(shape)}")
    for k, t in shape.items():
        v = msg[k]
        if t is list:
            if not isinstance(v, list) or not all(is_number(x, 0, 1) for x in v):
                raise ValueError(f"field {k!r} must be a list of shares, 0 to 1")
            continue
        ok = is_number(v) if t is float else isinstance(v, t) and not isinstance(v, bool)
        if not ok:
            raise ValueError(f"field {k!r} must be {t.__name__}")
        if t in (int, float) and v < 0:
            raise ValueError(f"field {k!r} must not be negative")
    return msg


def straggler(waits: list[list[float]]) -> float:
    """The straggler effect of synchronized steps (TicTac §6, as ``bench.run.ModeResult``'s): at
    each step the longest any worker waited for the others, over the step; the mean over the
    steps. ``waits``: each worker's share of each step spent waiting.

    >>> straggler([[0.1, 0.3], [0.0, 0.0]])
    0.2
    >>> straggler([[], []])  # steps not synchronized: no wait measured
    0.0
    """
    per_step = [max(w) for w in zip(*waits, strict=False)] if all(waits) else []  # the common steps
    return sum(per_step) / len(per_step) if per_step else 0.0


def _encode(obj: dict) -> bytes:
    return json.dumps(obj).encode("utf-8")


def _peer_host(peer: str) -> str:
    """'ipv4:10.0.0.1:5000' / 'ipv6:[::1]:5000' -> the address."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return rest.rsplit(":", 1)[0]


@dataclass
class Epoch:
    number: int
    setting: Setting
    apply_at: int
    final: bool = False
    confirm: bool = False  # a repeat of one of the leading settings
    reports: dict[str, dict] = field(default_factory=dict)  # task -> its Report

    def to_json(self) -> dict:
        return {
            "epoch": self.number,
            **self.setting.to_json(),
            "apply_at": self.apply_at,
            "final": self.final,
        }


class Coordinator:
    """The deciding side. ``tasks``: the workers (``/job:worker/task:0`` ...) that take part;
    ``objective``: what the search maximizes (``OBJECTIVES``; the module's docstring)."""

    def __init__(
        self,
        search: _Search,
        tasks: list[str],
        *,
        host: str,
        allowed_hosts: list[str],
        trials: int,
        confirm: int = 0,
        confirm_rounds: int = 1,
        lead: int = 2,
        objective: str = "throughput",
        on_trial: Callable[[int, Setting, float, bool, dict], None] | None = None,
    ):
        if objective not in OBJECTIVES:
            raise TfschedError(f"unknown objective {objective!r}; choose {', '.join(OBJECTIVES)}")
        if trials < 1:
            raise TfschedError(f"trials must be at least 1, got {trials}")
        if confirm < 0:
            raise TfschedError(f"confirm must not be negative, got {confirm}")
        ip = ipaddress.ip_address(host)
        if ip.is_unspecified:
            raise TfschedError("the coordinator listens on a cluster host, not on every address")
        self.search = search
        self.tasks = set(tasks)
        self.host = host
        self.allowed = {str(ipaddress.ip_address(h)) for h in allowed_hosts} | {str(ip)}
        self.trials = trials
        self.confirm = confirm
        self.confirm_rounds = confirm_rounds
        confirm_order([], confirm_rounds)  # a bad count: its error line, before any trial
        self._repeats: list[Setting] | None = None  # chosen when the trial budget is spent
        self.leaders: list[Setting] = []  # the settings measured again; the winner is among them
        self.lead = lead
        self.objective = objective
        self.on_trial = on_trial
        self._lock = threading.Lock()
        self._last_step: dict[str, int] = {}
        self.epoch = Epoch(0, search.next_setting(), apply_at=0)
        self.done = threading.Event()  # the final setting is announced
        self.rejected = 0
        self._server = None
        self.address = ""

    # -- service -----------------------------------------------------------------------------

    def best(self):
        """The winner so far (``_Search.winner``)."""
        return self.search.winner(self.leaders, self.confirm_rounds)

    def start(self) -> str:
        import grpc

        handlers = {
            "Poll": grpc.unary_unary_rpc_method_handler(self._poll),
            "Report": grpc.unary_unary_rpc_method_handler(self._report),
        }
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4),
            handlers=[grpc.method_handlers_generic_handler(SERVICE, handlers)],
            options=[("grpc.max_receive_message_length", 4096)],  # messages are tiny
        )
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = self._server.add_insecure_port(f"{host}:0")
        if port == 0:
            raise TfschedError(f"the coordinator cannot listen on {self.host}")
        self._server.start()
        self.address = f"{host}:{port}"
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None

    def _check(self, raw: bytes, context, shape: dict) -> dict | None:
        import grpc

        if _peer_host(context.peer()) not in self.allowed:
            self.rejected += 1
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not a host of this cluster")
        try:
            msg = _decode(raw, shape)
        except (ValueError, UnicodeDecodeError) as e:
            self.rejected += 1
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed message: {e}")
        if msg["task"] not in self.tasks:
            self.rejected += 1
            context.abort(grpc.StatusCode.PERMISSION_DENIED, f"unknown task {msg['task']!r}")
        return msg

    def _poll(self, raw: bytes, context) -> bytes:
        msg = self._check(raw, context, _POLL)
        with self._lock:
            self._last_step[msg["task"]] = max(self._last_step.get(msg["task"], 0), msg["step"])
            return _encode(self.epoch.to_json())

    def _report(self, raw: bytes, context) -> bytes:
        import grpc

        msg = self._check(raw, context, _REPORT)
        if msg["waits"] and len(msg["waits"]) != msg["steps"]:
            self.rejected += 1
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "malformed message: one wait a step, or none")
        with self._lock:
            e = self.epoch
            if e.final or msg["epoch"] != e.number or msg["steps"] == 0 or msg["seconds"] <= 0:
                return _encode({"accepted": False})
            e.reports[msg["task"]] = msg
            if set(e.reports) == self.tasks:
                self._decide()
            return _encode({"accepted": True})

    def _decide(self) -> None:
        e = self.epoch
        reports = list(e.reports.values())
        throughput = sum(r["steps"] / r["seconds"] for r in reports)
        measured = {THROUGHPUT: throughput}
        value = throughput
        if self.objective == "balanced":
            measured["straggler"] = straggler([r["waits"] for r in reports])
            value = throughput * (1.0 - measured["straggler"])
        self.search.register(e.setting, value, confirm=e.confirm, measured=measured)
        if self.on_trial:
            self.on_trial(len(self.search.history), e.setting, value, e.confirm, measured)
        apply_at = max(self._last_step.values(), default=0) + self.lead
        if sum(not t.confirm for t in self.search.history) < self.trials:
            self.epoch = Epoch(e.number + 1, self.search.next_setting(), apply_at)
            return
        if self._repeats is None:  # the budget is spent: measure the leaders once more
            self.leaders = self.search.to_confirm(self.confirm)
            self._repeats = confirm_order(self.leaders, self.confirm_rounds)
        if self._repeats:
            self.epoch = Epoch(e.number + 1, self._repeats.pop(0), apply_at, confirm=True)
        else:
            # the winner is one of the leaders, each measured again
            best = self.best()
            self.epoch = Epoch(e.number + 1, best.setting, apply_at, final=True)
            self.done.set()


class CoordinatorClient:
    """A worker's side: one channel, short deadlines; None when the coordinator cannot be reached."""

    def __init__(self, address: str, task: str, timeout_s: float = 2.0):
        import grpc

        self.task = task
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(address)
        self._poll = self._channel.unary_unary(f"/{SERVICE}/Poll")
        self._report = self._channel.unary_unary(f"/{SERVICE}/Report")

    def poll(self, step: int) -> dict | None:
        return self._call(self._poll, {"task": self.task, "step": step})

    def report(self, epoch: int, steps: int, seconds: float, waits: list[float] = ()) -> dict | None:
        """``waits``: the share of each of the ``steps`` the worker spent waiting for the others
        (synchronous steps)."""
        msg = {"task": self.task, "epoch": epoch, "steps": steps, "seconds": float(seconds)}
        return self._call(self._report, {**msg, "waits": [float(w) for w in waits]})

    def _call(self, method, msg: dict) -> dict | None:
        import grpc

        try:
            return json.loads(method(_encode(msg), timeout=self.timeout_s))
        except grpc.RpcError:
            return None

    def close(self) -> None:
        self._channel.close()
