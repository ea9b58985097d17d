"""TicTac's makespan bounds, ordering efficiency E and speedup bound S (§3.1).

TicTac defines the bounds over one device's resources. On a PS cluster the devices share the
PS's links, so a worker's step can take longer than the sum of its own ops' times; tfsched
therefore takes the whole simulated step (every task's compute, every host's uplink and
downlink) as G. Then a work-conserving execution always lies between the bounds and E stays
in [0, 1]; with one worker and one PS it is TicTac's per-device definition plus the PS.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from tfsched.sim.model import COMPUTE, DELAY, MESSAGE, SimGraph


@dataclass(frozen=True)
class Bounds:
    """Makespan bounds of one step (seconds)."""

    upper: float  # eq. 1: every op and transfer one after another
    lower: float  # eq. 2: the busiest resource, ignoring dependencies

    def efficiency(self, makespan: float) -> float:
        """Eq. 3: 1 for the best order, 0 for the worst."""
        span = self.upper - self.lower
        return (self.upper - makespan) / span if span > 0 else 1.0

    @property
    def speedup(self) -> float:
        """Eq. 4: how much faster the best order can be than the worst (0: ordering cannot help)."""
        return (self.upper - self.lower) / self.lower if self.lower > 0 else 0.0


def step_bounds(sg: SimGraph, steps: int = 1, *, overlap: bool = True) -> Bounds:
    """Bounds per step of a simulated graph.

    Resources, as the simulator has them: each task's compute (op times over the ops it runs at
    once), each channel (its messages' bytes one after another, after the first one's overhead;
    with ``overlap=False``, as ``simulate``'s, every message's overhead + bytes / bandwidth), each host
    link direction (its bytes over its capacity: measured, or the largest channel rate on it;
    overheads do not use the wire), and the machine when every task computes on it. The upper
    bound runs everything one after another, each op at the machine's rate where that is under
    one op's worth (before the twenty-ninth session it ran them at full speed, and the measured
    steps of the bench's Seq-32 and Par-32 rows came out above it: E negative). A task's
    dispatch delay (``TimeOracle.task_start_s``) comes before its compute and its sends whatever
    the order: it is added to those resources' busy times, and the
    longest one to the upper bound.
    """
    busy: dict[str, float] = defaultdict(float)
    link_bytes: dict[str, float] = defaultdict(float)
    link_rate: dict[str, float] = defaultdict(float)
    delay: dict[str, float] = defaultdict(float)  # task -> its dispatch delay in a step
    first: dict[str, float] = {}  # with overlap: channel -> the least overhead of its messages
    total = 0.0
    for i, kind in enumerate(sg.kind):
        if kind == DELAY:
            delay[sg.resource[i]] = max(delay[sg.resource[i]], sg.duration[i])
        elif kind == COMPUTE:
            busy["compute:" + sg.resource[i]] += sg.duration[i] / sg.capacity.get(sg.resource[i], 1)
            # one op at a time on a machine that does less than one op's worth at once (the
            # bench's tasks share two cores: Seq-32's and Par-32's steps are mostly the CPU
            # between ops) runs at its rate, as the simulator runs it
            total += sg.duration[i] / min(1.0, sg.machine_slots or 1.0)
        elif kind == MESSAGE:
            wire = sg.nbytes[i] / sg.bandwidth[i] if math.isfinite(sg.bandwidth[i]) else 0.0
            if overlap:  # the messages pay their overheads at once, before the channel
                busy["channel:" + sg.resource[i]] += wire
                first[sg.resource[i]] = min(first.get(sg.resource[i], math.inf), sg.overhead[i])
            else:
                busy["channel:" + sg.resource[i]] += sg.overhead[i] + wire
            total += sg.overhead[i] + wire
            src, dst = sg.resource[i].split("->")
            for link in ("up:" + src, "down:" + dst):
                link_bytes[link] += sg.nbytes[i]
                link_rate[link] = max(link_rate[link], sg.bandwidth[i])
    for ch, overhead in first.items():  # each step's first message pays one before any bytes
        busy["channel:" + ch] += overhead * steps
    if sg.machine_slots:  # every task computes on the same machine, which also moves the bytes
        work = sum(sg.duration[i] for i, k in enumerate(sg.kind) if k == COMPUTE)
        moved = sum(sg.nbytes[i] for i, k in enumerate(sg.kind) if k == MESSAGE)
        busy["cpu"] = (work + moved * sg.comm_slot_s_per_byte) / sg.machine_slots
    for link, nbytes in link_bytes.items():
        rate = sg.link_capacity.get(link, link_rate[link])
        if math.isfinite(rate) and rate > 0:
            busy[link] = nbytes / rate
    if delay:
        for res in list(busy):
            kind, _, name = res.partition(":")
            task = name.split("->")[0] if kind in ("compute", "channel") else None
            if task in delay:
                busy[res] += delay[task] * steps
        total += max(delay.values()) * steps
    return Bounds(upper=total / steps, lower=max(busy.values(), default=0.0) / steps)
