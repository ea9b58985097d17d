"""The ``Schedule``: per-channel transfer priorities, the contract between ``analyze`` and the pass.

A channel is (sender task, receiver task). Priorities are normalized per channel to
``0..n-1`` the way TicTac's enforcement reads them (§5.1): a transfer's priority is the number of
transfers on its channel that must be released before it, so tied transfers share a number and
the next one skips ahead (``0, 0, 2, 3``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.graph.model import CommGraph, Transfer
from tfsched.io import read_json, write_atomic
from tfsched.units import is_count

SCHEMA = "tfsched.schedule/1"
ALGORITHMS = ("tio", "tao", "layer", "fifo")
# How the gates enforce the order: TicTac's per-step counters, ByteScheduler's priority queue of
# ready transfers (needed when high priorities become ready last, as layer-order pushes do), or nothing.
MODES = ("counter", "queue", "none")


def normalize(values: dict) -> dict[Transfer, int]:
    """Competition ranks per channel: priority = transfers on the channel with a smaller value.

    >>> from tfsched.graph.model import Transfer
    >>> a, b, c = (Transfer(f"{x}:0", "/job:ps/replica:0/task:0/device:CPU:0",
    ...            "/job:worker/replica:0/task:0/device:CPU:0", "pull", 4, None) for x in "abc")
    >>> sorted(normalize({a: 2.0, b: 2.0, c: 0.5}).values())
    [0, 1, 1]
    """
    by_channel: dict[tuple[str, str], list[Transfer]] = defaultdict(list)
    for t in values:
        by_channel[t.channel].append(t)
    out: dict[Transfer, int] = {}
    for ts in by_channel.values():
        ts.sort(key=lambda t: values[t])
        rank = 0
        for i, t in enumerate(ts):
            if i and values[t] != values[ts[i - 1]]:
                rank = i
            out[t] = rank
    return out


@dataclass
class Schedule:
    """Priorities for every transfer of a step, grouped by channel."""

    algorithm: str
    priorities: dict[Transfer, int]
    mode: str = "counter"
    partition: int | None = None  # parameters per slice (ByteScheduler's unit); None: no partitioning
    credit: int | None = None  # parameters in flight per channel; None: unlimited
    source: str = ""
    fetches: list[str] = field(default_factory=list)
    # of ``priorities``, the transfers the pass leaves ungated (``CommGraph.ungated``): each
    # channel's last, their order not enforced
    ungated: frozenset[Transfer] = frozenset()

    def channels(self) -> dict[tuple[str, str], list[Transfer]]:
        """(sender task, receiver task) -> transfers in priority order (ties in graph order)."""
        out: dict[tuple[str, str], list[Transfer]] = defaultdict(list)
        for t in sorted(self.priorities, key=lambda t: (self.priorities[t], t.tensor)):
            out[t.channel].append(t)
        return dict(sorted(out.items()))

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "algorithm": self.algorithm,
            "mode": self.mode,
            "partition": self.partition,
            "credit": self.credit,
            "graph": {"source": self.source, "fetches": self.fetches, "transfers": len(self.priorities)},
            "channels": [
                {
                    "sender": s,
                    "receiver": r,
                    "transfers": [
                        {"key": t.key, **t.record(self.priorities[t], t not in self.ungated)} for t in ts
                    ],
                }
                for (s, r), ts in self.channels().items()
            ],
        }

    def save(self, path: str) -> None:
        """Write atomically: a failed write leaves no half-written file behind."""
        write_atomic(path, lambda f: json.dump(self.to_json(), f, indent=1))


# the fields of a transfer record that must be non-empty text, and the kinds a transfer can be
_TEXT_FIELDS = ("key", "tensor", "src", "dst")
_KINDS = ("pull", "push", "control")


def load_schedule(path: str) -> dict:
    """Read and validate a schedule file; returns its JSON (matching to a graph is the caller's).
    Every field the pass and ``viz`` read is checked here, so that a hand-edited or truncated
    file is one error naming the file, the channel and the field, not a traceback later."""
    data = read_json(path, "schedule", SCHEMA)
    if data.get("algorithm") not in ALGORITHMS or data.get("mode") not in MODES:
        raise TfschedError(
            f"{path}: unknown algorithm or mode ({data.get('algorithm')!r}, {data.get('mode')!r})"
        )
    graph = data.get("graph", {})
    fetches = graph.get("fetches", []) if isinstance(graph, dict) else None
    if not isinstance(fetches, list) or not all(isinstance(f, str) for f in fetches):
        raise TfschedError(f"{path}: graph must be an object whose fetches are a list of op names")
    for knob in ("partition", "credit"):
        v = data.get(knob)
        if v is not None and not is_count(v):
            raise TfschedError(f"{path}: {knob} must be null or a number of parameters, got {v!r}")
    channels = data.get("channels", [])
    if not isinstance(channels, list) or not all(isinstance(ch, dict) for ch in channels):
        raise TfschedError(f"{path}: channels must be a list of channel objects")
    for i, ch in enumerate(channels):
        sender, receiver, transfers = ch.get("sender"), ch.get("receiver"), ch.get("transfers")
        where = f"{path}: channel {i} ({sender} -> {receiver})"
        if not (isinstance(sender, str) and sender.startswith("/job:")) or not (
            isinstance(receiver, str) and receiver.startswith("/job:")
        ):
            raise TfschedError(f"{where}: sender and receiver must be task names (/job:...)")
        if not isinstance(transfers, list) or not all(isinstance(t, dict) for t in transfers):
            raise TfschedError(f"{where}: transfers must be a list of transfer objects")
        for j, t in enumerate(transfers):
            bad = [f for f in _TEXT_FIELDS if not isinstance(t.get(f), str) or not t.get(f)]
            if t.get("kind") not in _KINDS:
                bad.append("kind")
            nbytes = t.get("bytes")
            if nbytes is not None and not is_count(nbytes):
                bad.append("bytes")
            if not isinstance(t.get("gated", True), bool):
                bad.append("gated")
            if bad:
                raise TfschedError(f"{where}: transfer {j}: bad or missing {', '.join(bad)}")
        ps = [t.get("priority") for t in transfers]
        if not all(is_count(p) and p < len(ps) for p in ps):
            raise TfschedError(f"{where}: priorities must be 0..n-1")
    return data


def schedule_for(graph: CommGraph, algorithm: str, values: dict, mode: str) -> Schedule:
    return Schedule(
        algorithm=algorithm,
        priorities=normalize(values),
        mode=mode,
        source=graph.source,
        fetches=list(graph.fetches),
        ungated=frozenset(t for t in values if t in graph.ungated),
    )
