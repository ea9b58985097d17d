"""TicTac's makespan bounds, ordering efficiency E and speedup bound S (§3.1).

TicTac defines the bounds over one device's resources. On a PS cluster the devices share the
PS's links, so a worker's step can take longer than the sum of its own ops' times; tfsched
therefore takes the whole simulated step (every task's compute, every host's uplink and
downlink) as G. Then a work-conserving execution always lies between the bounds and E stays
in [0, 1]; with one worker and one PS it is TicTac's per-device definition plus the PS.

TicTac's lower bound ignores the dependencies: the PS's link may be the busiest resource, but
its last byte still has the rest of a step after it. ``Bounds.floor`` is tfsched's addition: a
dependency-aware bound over every order (the head-body-tail bound of job-shop scheduling,
Carlier's), which says how much any order can gain and whether a speedup target is within
reach (BENCHMARKS.md's reading, "What no order can beat").
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tfsched.errors import TfschedError
from tfsched.sim.model import COMPUTE, DELAY, MESSAGE, SimGraph


class FloorPart(NamedTuple):
    """A floor's three parts (seconds): the least time before the resource serves anything, its
    work, and the least time after the last thing it serves."""

    before: float
    work: float
    after: float

    @property
    def total(self) -> float:
        return self.before + self.work + self.after

    def scaled(self, k: float) -> FloorPart:
        return FloorPart(self.before * k, self.work * k, self.after * k)


def describe_floor(by: str, part: FloorPart) -> str:
    """What sets a floor, in words.

    >>> describe_floor("up:/job:ps/replica:0/task:0", FloorPart(0.0, 4.31, 3.28))
    'the uplink of /job:ps/replica:0/task:0: 4.31 s of work, 3.28 s after its last'
    >>> describe_floor("compute:/job:worker/replica:0/task:1", FloorPart(0.5, 2.0, 0.0))
    "/job:worker/replica:0/task:1's compute: 0.50 s before its first, 2.00 s of work"
    >>> describe_floor("path", FloorPart(0.0, 1.5, 0.0))
    'the longest path: 1.50 s'
    """
    if by == "path":
        return f"the longest path: {part.work:.2f} s"
    kind, _, name = by.partition(":")
    what = {
        "up": f"the uplink of {name}",
        "down": f"the downlink of {name}",
        "channel": f"the channel {name.replace('->', ' -> ')}",
        "compute": f"{name}'s compute",
        "cpu": "the machine's cores",
    }.get(kind, by)
    parts = [f"{part.before:.2f} s before its first"] if part.before >= 0.005 else []
    parts.append(f"{part.work:.2f} s of work")
    if part.after >= 0.005:
        parts.append(f"{part.after:.2f} s after its last")
    return f"{what}: " + ", ".join(parts)


@dataclass(frozen=True)
class Bounds:
    """Makespan bounds of one step (seconds)."""

    upper: float  # eq. 1: every op and transfer one after another
    lower: float  # eq. 2: the busiest resource, ignoring dependencies
    # tfsched's: no order is faster (``step_bounds``); at least ``lower``. 0: not computed
    floor: float = 0.0
    # what sets the floor: a resource (``step_bounds``' names: "up:TASK", "down:TASK",
    # "channel:SRC->DST", "compute:TASK", "cpu") or "path" (the longest path), and its parts
    floor_by: str = ""
    floor_part: FloorPart | None = None

    def efficiency(self, makespan: float) -> float:
        """Eq. 3: 1 for the best order, 0 for the worst."""
        span = self.upper - self.lower
        return (self.upper - makespan) / span if span > 0 else 1.0

    @property
    def speedup(self) -> float:
        """Eq. 4: how much faster the best order can be than the worst (0: ordering cannot help)."""
        return (self.upper - self.lower) / self.lower if self.lower > 0 else 0.0

    @property
    def floor_text(self) -> str:
        """What sets the floor, in words (``describe_floor``); empty where TicTac's bound does."""
        return describe_floor(self.floor_by, self.floor_part) if self.floor_part else ""

    def most_gain(self, step_s: float) -> float | None:
        """How many times faster than ``step_s`` the best order can be: ``step_s`` over ``floor``."""
        return step_s / self.floor if self.floor > 0 else None


def op_rate(sg: SimGraph) -> float:
    """The fastest an op of ``sg`` runs, as a share of its time alone: 1, or less on a machine
    that does less than one op's worth at once (``machine_slots``), or whose tasks each have
    less than that of their own (``host_slots``).

    >>> op_rate(SimGraph()), op_rate(SimGraph(machine_slots=1.2, host_slots=0.3))
    (1.0, 0.3)
    """
    if not sg.machine_slots:
        return 1.0
    return min(1.0, sg.machine_slots, sg.host_slots or 1.0)


def least_times(sg: SimGraph) -> list[float]:
    """Each node's shortest time in any run: an op's time at ``op_rate``, a message's overhead
    and its bytes at its channel's rate, a dispatch delay's time (a step barrier: none)."""
    rate = op_rate(sg)
    out = []
    for i, kind in enumerate(sg.kind):
        if kind == COMPUTE:
            out.append(sg.duration[i] / rate)
        elif kind == MESSAGE:
            wire = sg.nbytes[i] / sg.bandwidth[i] if math.isfinite(sg.bandwidth[i]) else 0.0
            out.append(sg.overhead[i] + wire)
        elif kind == DELAY:
            out.append(sg.duration[i])
        else:
            out.append(0.0)
    return out


def _topological(sg: SimGraph) -> list[int]:
    """The nodes in an order where each comes after its predecessors (Kahn's)."""
    npred = list(sg.npred)
    topo = [i for i in range(len(sg)) if npred[i] == 0]
    for i in topo:  # the list grows as it is walked
        for j in sg.succ[i]:
            npred[j] -= 1
            if npred[j] == 0:
                topo.append(j)
    if len(topo) != len(sg):
        raise TfschedError("the simulated step has a cycle: no order can run it")
    return topo


def heads_and_tails(sg: SimGraph, times: list[float], topo: list[int]) -> tuple[list[float], list[float]]:
    """The longest path (in ``times``) from the start of the run to each node's start (its head)
    and from its end to the end of the run (its tail): no run starts it earlier, or ends sooner
    after it. ``topo``: the nodes in ``_topological`` order."""
    n = len(sg)
    head, tail = [0.0] * n, [0.0] * n
    for i in topo:
        end = head[i] + times[i]
        for j in sg.succ[i]:
            head[j] = max(head[j], end)
    for i in reversed(topo):
        tail[i] = max((times[j] + tail[j] for j in sg.succ[i]), default=0.0)
    return head, tail


def work_around(sg: SimGraph, order: list[int]) -> tuple[dict[int, float], dict[int, float]]:
    """For each message: the work of its sender's ops that must end before it (its ancestors
    there) and of its receiver's ops that must run after it (its descendants there), each over
    what that task does at once (``_task_slots``, at ``op_rate``). A path counts one op after
    another; this counts every op, where the task runs fewer at once than the ops it could: on
    VGG16 training a worker's backward pass after its last pull is about 3.3 s of work on its
    half core, where its longest path is 2.7 s. ``order``: the nodes in ``_topological`` order."""
    n = len(sg)
    messages = [i for i in range(n) if sg.kind[i] == MESSAGE]
    if not messages:
        return {}, {}
    preds: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for j in sg.succ[i]:
            preds[j].append(i)
    before: dict[int, float] = {}
    after: dict[int, float] = {}
    tasks = {sg.resource[i] for i in range(n) if sg.kind[i] == COMPUTE}
    ends = {sg.resource[m].split("->")[k] for m in messages for k in (0, 1)}
    for task in tasks & ends:
        ops = [i for i in range(n) if sg.kind[i] == COMPUTE and sg.resource[i] == task]
        bit = {i: 1 << k for k, i in enumerate(ops)}
        per = _task_slots(sg, task)
        weight = np.array([sg.duration[i] / per for i in ops])
        up = [0] * n  # the task's ops each node needs done (bitset over ``ops``)
        for i in order:
            acc = 0
            for p in preds[i]:
                acc |= up[p] | bit.get(p, 0)
            up[i] = acc
        down = [0] * n  # the task's ops that need each node
        for i in reversed(order):
            acc = 0
            for j in sg.succ[i]:
                acc |= down[j] | bit.get(j, 0)
            down[i] = acc
        for m in messages:
            src, dst = sg.resource[m].split("->")
            if src == task:
                before[m] = max(before.get(m, 0.0), _weighed(up[m], weight))
            if dst == task:
                after[m] = max(after.get(m, 0.0), _weighed(down[m], weight))
    return before, after


def _weighed(bits: int, weight: np.ndarray) -> float:
    """The sum of ``weight[k]`` over the set bits k of ``bits``.

    >>> _weighed(0b101, np.array([1.0, 2.0, 4.0]))
    5.0
    """
    if not bits:
        return 0.0
    raw = np.frombuffer(bits.to_bytes((len(weight) + 7) // 8, "little"), dtype=np.uint8)
    return float(np.unpackbits(raw, bitorder="little")[: len(weight)] @ weight)


def resource_floor(items: list[tuple[float, float, float]]) -> FloorPart:
    """The head-body-tail bound of one resource that serves ``items`` (head, work, tail) one
    after another: for any of them, the least head, their work and the least tail. Tried on the
    subsets of the longest tails and of the latest heads (a transfer of no bytes whose tail is
    nothing leaves the others' bound as it is).

    >>> resource_floor([(0.0, 4.0, 3.0), (0.0, 0.0, 0.0)])  # the four of work, then three after
    FloorPart(before=0.0, work=4.0, after=3.0)
    >>> resource_floor([(0.0, 1.0, 0.0), (5.0, 1.0, 0.0)]).total  # the second cannot start before 5
    6.0
    """
    best = FloorPart(0.0, 0.0, 0.0)
    for key, other in ((2, 0), (0, 2)):  # the longest tails first, then the latest heads
        work, least = 0.0, math.inf
        for item in sorted(items, key=lambda x: -x[key]):
            work += item[1]
            least = min(least, item[other])
            if item[key] + work + least > best.total:
                best = FloorPart(least, work, item[key]) if key == 2 else FloorPart(item[key], work, least)
    return best


def step_bounds(sg: SimGraph, steps: int = 1, *, overlap: bool = True) -> Bounds:
    """Bounds per step of a simulated graph.

    Resources, as the simulator has them: each task's compute (op times over the ops it runs at
    once, or over its own cores' share: ``host_slots``), each channel (its messages' bytes one
    after another, after the first one's overhead; with ``overlap=False``, as ``simulate``'s, every
    message's overhead + bytes / bandwidth), each host link direction (its bytes over its
    capacity: measured, or the largest channel rate on it; overheads do not use the wire), and
    the machine when every task computes on it. The upper bound runs everything one after
    another, each op at the machine's rate where that is under one op's worth (``op_rate``;
    before the twenty-ninth session it ran them at full speed, and the measured steps of the
    bench's Seq-32 and Par-32 rows came out above it: E negative). A task's dispatch delay
    (``TimeOracle.task_start_s``) comes before its compute and its sends whatever the order: it
    is added to those resources' busy times, and the longest one to the upper bound.

    ``floor`` (tfsched's, not TicTac's) adds the dependencies: the longest path, and for each
    resource the head-body-tail bound (``resource_floor``): a channel or link cannot start a
    message before the longest path to it (and its overhead), nor before its sender's ops that
    it needs have run on the sender's cores, and after the last one it serves the longest path
    from that message remains, and the receiver's ops that need it (``work_around``). On VGG16
    training with 1 PS x 4 workers on hosts with half a core of their own, the PS's link is the
    busiest resource (4.3 s), and a worker's backward pass (3.3 s of work on its cores) comes
    after its last pull: TicTac's bound says 4.3 s, this one 7.6 s, where the fastest order
    measured 7.7 s and the baseline 9.3 s (BENCHMARKS.md's reading, "What no order can beat").
    """
    busy: dict[str, float] = defaultdict(float)
    link_bytes: dict[str, float] = defaultdict(float)
    link_rate: dict[str, float] = defaultdict(float)
    delay: dict[str, float] = defaultdict(float)  # task -> its dispatch delay in a step
    first: dict[str, float] = {}  # with overlap: channel -> the least overhead of its messages
    members: dict[str, list[int]] = defaultdict(list)  # resource -> its nodes, for the floor
    rate = op_rate(sg)
    total = 0.0
    for i, kind in enumerate(sg.kind):
        if kind == DELAY:
            delay[sg.resource[i]] = max(delay[sg.resource[i]], sg.duration[i])
        elif kind == COMPUTE:
            busy["compute:" + sg.resource[i]] += sg.duration[i] / _task_slots(sg, sg.resource[i])
            members["compute:" + sg.resource[i]].append(i)
            # one op at a time on a machine that does less than one op's worth at once (the
            # bench's tasks share two cores: Seq-32's and Par-32's steps are mostly the CPU
            # between ops) runs at its rate, as the simulator runs it
            total += sg.duration[i] / rate
        elif kind == MESSAGE:
            wire = sg.nbytes[i] / sg.bandwidth[i] if math.isfinite(sg.bandwidth[i]) else 0.0
            if overlap:  # the messages pay their overheads at once, before the channel
                busy["channel:" + sg.resource[i]] += wire
                first[sg.resource[i]] = min(first.get(sg.resource[i], math.inf), sg.overhead[i])
            else:
                busy["channel:" + sg.resource[i]] += sg.overhead[i] + wire
            total += sg.overhead[i] + wire
            src, dst = sg.resource[i].split("->")
            members["channel:" + sg.resource[i]].append(i)
            for link in ("up:" + src, "down:" + dst):
                link_bytes[link] += sg.nbytes[i]
                link_rate[link] = max(link_rate[link], sg.bandwidth[i])
                members[link].append(i)
    for ch, overhead in first.items():  # each step's first message pays one before any bytes
        busy["channel:" + ch] += overhead * steps
    if sg.machine_slots:  # every task computes on the same machine, which also moves the bytes
        work = sum(sg.duration[i] for i, k in enumerate(sg.kind) if k == COMPUTE)
        moved = sum(sg.nbytes[i] for i, k in enumerate(sg.kind) if k == MESSAGE)
        busy["cpu"] = (work + moved * sg.comm_slot_s_per_byte) / sg.machine_slots
        members["cpu"] = [i for i, k in enumerate(sg.kind) if k in (COMPUTE, MESSAGE)]
    rates: dict[str, float] = {}
    for link, nbytes in link_bytes.items():
        rates[link] = sg.link_capacity.get(link, link_rate[link])
        if math.isfinite(rates[link]) and rates[link] > 0:
            busy[link] = nbytes / rates[link]
    floor, by, part = _floor(sg, members, rates, overlap) if sg.kind else (0.0, "", None)
    if delay:
        for res in list(busy):
            kind, _, name = res.partition(":")
            task = name.split("->")[0] if kind in ("compute", "channel") else None
            if task in delay:
                busy[res] += delay[task] * steps
        total += max(delay.values()) * steps
    lower = max(busy.values(), default=0.0)
    if lower > floor:  # a busy time with a dispatch delay added (TicTac's bound, not the floor's)
        floor, by, part = lower, "", None
    return Bounds(
        upper=total / steps,
        lower=lower / steps,
        floor=floor / steps,
        floor_by=by,
        floor_part=part.scaled(1 / steps) if part else None,
    )


def _task_slots(sg: SimGraph, task: str) -> float:
    """The ops' worth of work ``task`` does at once: its capacity, or less on a shared machine
    that does less (``machine_slots``) or where it has cores of its own (``host_slots``)."""
    slots = sg.capacity.get(task, 1)
    if not sg.machine_slots:
        return slots
    return min(slots, sg.machine_slots, sg.host_slots or math.inf)


# of resources whose floors tie, the one that says most of why: a host's link, a task's compute,
# a channel (one worker's share of a link), the machine, the longest path
_SAYS_MORE = {"up": 0, "down": 0, "compute": 1, "channel": 2, "cpu": 3, "path": 4}


def _floor(
    sg: SimGraph, members: dict[str, list[int]], rates: dict[str, float], overlap: bool
) -> tuple[float, str, FloorPart]:
    """``Bounds.floor`` over the whole graph, what sets it and its parts: the longest path, and
    each compute resource's, channel's and link's ``resource_floor``. A message's head is at
    least the work its sender must do first and its tail the work its receiver must do after it
    (``work_around``)."""
    times = least_times(sg)
    topo = _topological(sg)
    head, tail = heads_and_tails(sg, times, topo)
    before, after = work_around(sg, topo)
    for m, w in before.items():
        head[m] = max(head[m], w)
    for m, w in after.items():
        tail[m] = max(tail[m], w)
    path = max(head[i] + times[i] + tail[i] for i in range(len(sg)))
    best, by = FloorPart(0.0, path, 0.0), "path"
    for res, nodes in members.items():
        kind, _, name = res.partition(":")
        if res == "cpu":  # the machine every task computes on, and the bytes' CPU on the wire
            items = [
                (head[i], sg.duration[i] / sg.machine_slots, tail[i])
                if sg.kind[i] == COMPUTE
                else (
                    head[i] + sg.overhead[i],
                    sg.nbytes[i] * sg.comm_slot_s_per_byte / sg.machine_slots,
                    tail[i],
                )
                for i in nodes
            ]
        elif kind == "compute":
            slots = _task_slots(sg, name)
            items = [(head[i], sg.duration[i] / slots, tail[i]) for i in nodes]
        elif kind == "channel":
            # with overlap a message pays its overhead before it waits for the channel
            items = [
                (head[i] + sg.overhead[i], times[i] - sg.overhead[i], tail[i])
                if overlap
                else (head[i], times[i], tail[i])
                for i in nodes
            ]
        else:  # a host's link: the bytes at its rate, after the message's overhead
            rate = rates.get(res, math.inf)
            if not (math.isfinite(rate) and rate > 0):
                continue
            items = [(head[i] + sg.overhead[i], sg.nbytes[i] / rate, tail[i]) for i in nodes]
        part = resource_floor(items)
        tie = abs(part.total - best.total) <= 1e-9 * max(1.0, best.total)
        if (part.total > best.total and not tie) or (
            tie and _SAYS_MORE[kind] < _SAYS_MORE[by.partition(":")[0]]
        ):
            best, by = part, res
    return best.total, by, best
