"""TicTac's op properties (§4.1, Algorithm 1) over a worker partition, vectorized.

Ops with the same communication dependency behave identically in Algorithm 1, so they are
merged into one group whose time is the sum of theirs. A row of ``dep`` is a group, a column a
recv; the recv set R shrinks as TAO assigns priorities and the arrays shrink with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfsched.graph.model import WorkerView
from tfsched.oracle.oracle import TimeOracle


def _ns(seconds: list[float]) -> np.ndarray:
    """Times as integer nanoseconds: sums stay exact, so ties are ties whatever the summation order."""
    return np.round(np.asarray(seconds, dtype=float) * 1e9).astype(np.int64)


def _bits(mask: int, n: int) -> np.ndarray:
    raw = np.frombuffer(mask.to_bytes((n + 7) // 8, "little"), dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little")[:n].astype(bool)


@dataclass
class Properties:
    """Arrays over the outstanding recvs R (columns) and the dependency groups (rows)."""

    ids: np.ndarray  # column -> index into view.recvs
    dep: np.ndarray  # (groups, |R|) bool: group depends on recv
    group_time: np.ndarray  # (groups,) compute nanoseconds (int64)
    recv_time: np.ndarray  # (|R|,) transfer nanoseconds (int64)
    channel: np.ndarray  # (|R|,) channel number of each recv
    n_channels: int
    dead: np.ndarray = None  # (|R|,) bool: column already taken out of R, awaiting compaction
    assembly: np.ndarray = None  # (groups,) bool: ops that only assemble recvs, no M+ taken there

    def __post_init__(self) -> None:
        if self.dead is None:
            self.dead = np.zeros(self.ids.size, dtype=bool)
        if self.assembly is None:
            self.assembly = np.zeros(self.dep.shape[0], dtype=bool)

    @classmethod
    def of(cls, view: WorkerView, oracle: TimeOracle, assembly: frozenset[str] = frozenset()) -> Properties:
        """The arrays of ``view`` with every recv outstanding. The ops in ``assembly``
        (``tio.assembly_ops``) are groups of their own that give ``P`` but take no ``M+``."""
        n = len(view.recvs)
        groups: dict[tuple[int, bool], float] = {}
        for op in view.ops:
            key = (view.dep[op], op in assembly)
            if key[0]:
                groups[key] = groups.get(key, 0.0) + oracle.compute(op)
        dep = np.array([_bits(d, n) for d, _ in groups], dtype=bool).reshape(len(groups), n)
        senders = sorted({t.src_task for t in view.recvs})
        return cls(
            ids=np.arange(n),
            dep=dep,
            group_time=_ns(list(groups.values())),
            recv_time=_ns([oracle.transfer(t) for t in view.recvs]),
            channel=np.array([senders.index(t.src_task) for t in view.recvs], dtype=np.int64),
            n_channels=max(len(senders), 1),
            assembly=np.array([a for _, a in groups], dtype=bool),
        )

    def op_m(self) -> np.ndarray:
        """op.M per group: outstanding dependent transfer time, max over channels (§4.1)."""
        per_channel = np.zeros((self.dep.shape[1], self.n_channels), dtype=np.int64)
        per_channel[np.arange(self.dep.shape[1]), self.channel] = self.recv_time
        if not self.dep.size:
            return np.zeros(self.dep.shape[0], dtype=np.int64)
        return (self.dep.astype(np.int64) @ per_channel).max(axis=1)

    def update(self) -> tuple[np.ndarray, np.ndarray]:
        """Algorithm 1: (P, M+) for every outstanding recv."""
        n = self.dep.shape[1]
        count = self.dep.sum(axis=1)
        one = count == 1
        # P: compute that only this recv blocks.
        p = np.zeros(n, dtype=np.int64)
        if one.any():
            np.add.at(p, self.dep[one].argmax(axis=1), self.group_time[one])
        # M+: the cheapest op.M among ops that need this recv and another outstanding one, an op
        # that only assembles recvs aside (tio.assembly_ops).
        m_plus = np.full(n, np.inf)  # float: +inf marks "no multi-recv op needs it"
        multi = (count > 1) & ~self.assembly
        if multi.any():
            m = self.op_m()[multi]
            order = np.argsort(m, kind="stable")
            rows = self.dep[multi][order]
            has = rows.any(axis=0)
            first = rows.argmax(axis=0)
            m_plus[has] = m[order][first[has]]
        return p, m_plus

    def remove(self, col: int) -> None:
        """Take a recv out of R. Columns are cleared in place and dropped in batches (copying the
        array on every removal cost more than all of Algorithm 1)."""
        self.dep[:, col] = False
        self.recv_time[col] = 0
        self.dead[col] = True
        if self.dead.sum() >= 32 or self.dead.all():
            keep = ~self.dead
            self.ids, self.recv_time, self.channel = self.ids[keep], self.recv_time[keep], self.channel[keep]
            self.dep, self.dead = self.dep[:, keep], self.dead[keep]
            alive = self.dep.any(axis=1)  # a group with no outstanding recv plays no further part
            if not alive.all():
                self.dep, self.group_time, self.assembly = (
                    self.dep[alive],
                    self.group_time[alive],
                    self.assembly[alive],
                )

    @property
    def outstanding(self) -> list[int]:
        """Columns still in R."""
        return np.flatnonzero(~self.dead).tolist()
