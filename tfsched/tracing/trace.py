"""The ``Trace``: what real steps did, per op and per transfer, saved as versioned JSON.

Times are microseconds relative to the start of their step (the earliest op of the step on any
device); ``step_starts_us`` keeps when each step began on the machines' wall clock, which lets
``tfsched viz`` lay several workers' traces of the same steps side by side. A trace keeps the
partition graphs of its run (base64 GraphDefs) so that it is self-contained: ``analyze
--trace`` can check it belongs to the graph it is used with.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import asdict, dataclass, field, replace

from tfsched.errors import TfschedError
from tfsched.io import read_json, write_atomic
from tfsched.units import is_number

SCHEMA = "tfsched.trace/1"
# meta key: traced step (a string, as JSON keys are) -> the transfers its partition graphs send
# that it did not record (tfsched.tracing.collector.missing_transfers)
MISSING = "missing_transfers"
# meta["api"] of a trace of TensorFlow 2 function calls (tracing.functions), whose steps are calls
# and which has no partition graphs
FUNCTIONS_API = "tf2-functions"
# Ops whose time in a trace is waiting, not computing: the runtime's sends, receives and no-ops,
# and tfsched's gates (held until their turn), acknowledgements and credit sinks. A gate of a
# scheduled step can last most of the step; ``viz`` draws these apart from the computing ops
# and ``bench.stagger`` does not count them as computing.
WAIT_OPS = frozenset(
    {"_Send", "_Recv", "_HostSend", "_HostRecv", "NoOp", "TfschedGate", "TfschedAck", "TfschedCredit"}
)


# A receive node of TensorFlow 2's partitioned functions, "SRC/_N": the partitioner names an
# edge's send "SRC/_N-1" and its receive "SRC/_N", one after the other
_RECV_NODE = re.compile(r"/_(\d+)$")


def send_node(recv: str) -> tuple[str, int] | None:
    """The send node of a receive node named as TensorFlow 2's partitioner names them, and its
    number (None for another name: a session's ``edge_N_...``, whose send is in its partition
    graphs).

    >>> send_node("GroupCrossDeviceControlEdges_0/Identity_32/_183")
    ('GroupCrossDeviceControlEdges_0/Identity_32/_182', 182)
    >>> send_node("edge_12_conv1/ReadVariableOp") is None
    True
    """
    m = _RECV_NODE.search(recv)
    if not m:
        return None
    number = int(m[1]) - 1
    return f"{recv[: m.start()]}/_{number}", number


@dataclass(frozen=True)
class OpRecord:
    step: int
    device: str
    node: str
    op: str
    start_us: float
    duration_us: float


@dataclass(frozen=True)
class TransferRecord:
    step: int
    edge: str  # the partitioner's rendezvous name, e.g. edge_12_conv1/ReadVariableOp
    tensor: str  # source tensor, "op:index"
    bytes: int
    src: str  # sender device
    dst: str  # receiver device
    start_us: float
    duration_us: float
    consumers: tuple[str, ...] = ()  # ops on the receiver that use it (from the partition graphs)


def _number(x) -> bool:
    return is_number(x, least=0)


def _listed(items) -> tuple:
    """A JSON list as a tuple; anything else (a text, whose letters ``tuple`` would take for its
    items) a TypeError that says so."""
    if not isinstance(items, list):
        raise TypeError(f"a transfer's consumers must be a list, got {items!r}")
    return tuple(items)


def _record_problem(trace: Trace) -> str | None:
    """What is wrong with a loaded trace's records, None if nothing: each record's step is one
    of the trace's, its names are text (a transfer's consumers too), its times and bytes
    non-negative numbers, and there is one step time per step (what ``viz`` and the oracle index by)."""
    if len(trace.step_times_us) != trace.steps or not all(map(_number, trace.step_times_us)):
        return f"step_times_us must hold one non-negative number per traced step ({trace.steps})"
    if trace.step_starts_us and (
        len(trace.step_starts_us) != trace.steps or not all(map(_number, trace.step_starts_us))
    ):
        return f"step_starts_us must be empty or hold one non-negative number per traced step ({trace.steps})"
    for kind, records, texts, numbers in (
        ("ops", trace.ops, ("device", "node", "op"), ("start_us", "duration_us")),
        (
            "transfers",
            trace.transfers,
            ("edge", "tensor", "src", "dst"),
            ("start_us", "duration_us", "bytes"),
        ),
    ):
        for i, r in enumerate(records):
            if not (isinstance(r.step, int) and 0 <= r.step < trace.steps):
                return f"{kind}[{i}].step {r.step!r} is not a traced step (0 to {trace.steps - 1})"
            for f in texts:
                if not isinstance(getattr(r, f), str):
                    return f"{kind}[{i}].{f} must be text"
            for f in numbers:
                if not _number(getattr(r, f)):
                    return f"{kind}[{i}].{f} must be a non-negative number, got {getattr(r, f)!r}"
            if kind == "transfers" and not all(isinstance(c, str) for c in r.consumers):
                return f"transfers[{i}].consumers must be a list of op names"
    return None


@dataclass
class Trace:
    steps: int
    ops: list[OpRecord] = field(default_factory=list)
    transfers: list[TransferRecord] = field(default_factory=list)
    step_times_us: list[float] = field(default_factory=list)  # wall time of each traced step
    # when each traced step began, us since the epoch (a trace written before the fiftieth
    # session, or of TensorFlow 2 function calls, has none)
    step_starts_us: list[float] = field(default_factory=list)
    partition_graphs: list[str] = field(default_factory=list)  # base64 of serialized GraphDefs
    meta: dict = field(default_factory=dict)  # model, fetches, cluster...
    source: str = field(default="<trace>", compare=False, repr=False)  # the file it came from, for errors

    def missing(self) -> dict[int, list[str]]:
        """Per traced step that did not record every transfer: those it lacks, as the tracer
        found them (``meta``; ``tracing.collector.missing_transfers`` also checks a trace
        written before the tracer did)."""
        return {int(k): list(v) for k, v in self.meta.get(MISSING, {}).items()}

    def complete_steps(self, missing: dict[int, list[str]] | None = None) -> Trace:
        """The trace of its steps that recorded every transfer, where some did and some did not
        (``missing``: as ``missing()`` gives it, the default).

        A step TensorFlow's asynchronous logging request reached late misses the transfers at
        its start (``tracing.rpclog``): fitted with the others, it makes a link look idle where
        it was not and the bytes a step moves too few. A trace whose steps all miss some, or
        none, is kept whole.
        """
        missing = self.missing() if missing is None else missing
        if not missing or len(missing) >= self.steps:
            return self
        return self.only_steps(k for k in range(self.steps) if k not in missing)

    def only_steps(self, steps) -> Trace:
        """The trace of the given steps alone, numbered from 0 in the order given.

        >>> t = Trace(steps=3, ops=[OpRecord(s, "/job:ps", "a", "Add", 0.0, 1.0) for s in range(3)],
        ...           step_times_us=[10.0, 20.0, 30.0])
        >>> kept = t.only_steps([2, 0])
        >>> kept.steps, kept.step_times_us, [o.step for o in kept.ops]
        (2, [30.0, 10.0], [1, 0])
        """
        new = {old: k for k, old in enumerate(steps)}
        meta = dict(self.meta)
        if MISSING in meta:
            meta[MISSING] = {str(new[int(k)]): v for k, v in meta[MISSING].items() if int(k) in new}
        return Trace(
            steps=len(new),
            ops=[replace(o, step=new[o.step]) for o in self.ops if o.step in new],
            transfers=[replace(t, step=new[t.step]) for t in self.transfers if t.step in new],
            step_times_us=[self.step_times_us[old] for old in new] if self.step_times_us else [],
            step_starts_us=[self.step_starts_us[old] for old in new] if self.step_starts_us else [],
            partition_graphs=self.partition_graphs,
            meta=meta,
            source=self.source,
        )

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "steps": self.steps,
            "step_times_us": self.step_times_us,
            "step_starts_us": self.step_starts_us,
            "meta": self.meta,
            "ops": [asdict(o) for o in self.ops],
            "transfers": [asdict(t) for t in self.transfers],
            "partition_graphs": self.partition_graphs,
        }

    def save(self, path: str) -> None:
        write_atomic(path, lambda f: json.dump(self.to_json(), f))

    @classmethod
    def load(cls, path: str) -> Trace:
        data = read_json(path, "trace", SCHEMA)
        try:
            trace = cls(
                steps=int(data["steps"]),
                ops=[OpRecord(**o) for o in data["ops"]],
                transfers=[
                    TransferRecord(**{**t, "consumers": _listed(t.get("consumers", []))})
                    for t in data["transfers"]
                ],
                step_times_us=[float(x) for x in data["step_times_us"]],
                step_starts_us=[float(x) for x in data.get("step_starts_us", [])],
                partition_graphs=list(data.get("partition_graphs", [])),
                meta=dict(data.get("meta", {})),
                source=path,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise TfschedError(f"{path}: malformed {SCHEMA} file ({type(e).__name__}: {e})") from None
        for i, g in enumerate(trace.partition_graphs):
            try:
                base64.b64decode(g, validate=True)
            except (TypeError, ValueError):  # binascii.Error is a ValueError
                raise TfschedError(
                    f"{path}: malformed {SCHEMA} file (partition graph {i} is not base64)"
                ) from None
        if trace.steps <= 0 or not trace.ops:
            raise TfschedError(f"{path}: the trace is empty (no traced step)")
        problem = _record_problem(trace)
        if problem:
            raise TfschedError(f"{path}: malformed {SCHEMA} file ({problem})")
        missing = trace.meta.get(MISSING, {})
        if not isinstance(missing, dict) or not all(
            isinstance(k, str)
            and k.isdigit()
            and int(k) < trace.steps
            and isinstance(v, list)
            and all(isinstance(e, str) for e in v)
            for k, v in missing.items()
        ):
            raise TfschedError(
                f"{path}: malformed {SCHEMA} file (meta.{MISSING} must map traced steps, 0 to "
                f"{trace.steps - 1}, to lists of edge names)"
            )
        return trace
