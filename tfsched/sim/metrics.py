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

from tfsched.sim.model import COMPUTE, MESSAGE, SimGraph


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


def step_bounds(sg: SimGraph, steps: int = 1) -> Bounds:
    """Bounds per step of a simulated graph; a message loads its sender's uplink and receiver's downlink."""
    load: dict[str, float] = defaultdict(float)
    total = 0.0
    for i, kind in enumerate(sg.kind):
        if kind == COMPUTE:
            load["compute:" + sg.resource[i]] += sg.duration[i]
            total += sg.duration[i]
        elif kind == MESSAGE:
            t = sg.overhead[i] + (sg.nbytes[i] / sg.bandwidth[i] if math.isfinite(sg.bandwidth[i]) else 0.0)
            src, dst = sg.resource[i].split("->")
            load["up:" + src] += t
            load["down:" + dst] += t
            total += t
    return Bounds(upper=total / steps, lower=max(load.values(), default=0.0) / steps)
