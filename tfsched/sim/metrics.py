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
from tfsched.sim.engine import MIN_OPS_SHARE
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
        "host": f"{name}'s cores moving its bytes",
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
    # "channel:SRC->DST", "compute:TASK", "host:TASK", "cpu") or "path" (the longest path), and
    # its parts
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


def wire_times(sg: SimGraph) -> list[float]:
    """The shortest time each message's bytes take on the wire (0 for other nodes): alone, at the
    least of its channel's rate, its hosts' measured link rates (``link_capacity``: a link
    measured over its channels together can be slower than one channel's fit) and what the
    machine's CPU can move (``comm_slot_s_per_byte``, all but ``MIN_OPS_SHARE`` of it), as the
    simulator rates a lone flow. Before the sixty-third session the bounds took the channel's
    rate alone, and the busiest resource could come out above the upper bound (a CI run of the
    bench: lower 1.38 s, upper 1.35 s)."""
    cpu = math.inf
    if sg.machine_slots and sg.comm_slot_s_per_byte and COMPUTE in sg.kind:
        cpu = (1 - MIN_OPS_SHARE) * sg.machine_slots / sg.comm_slot_s_per_byte
    slowest = max(host_byte_s(sg))
    if slowest:  # and what each end's own cores can move
        cpu = min(cpu, 1 / slowest)
    out = [0.0] * len(sg)
    for i, kind in enumerate(sg.kind):
        if kind == MESSAGE:
            src, dst = sg.resource[i].split("->")
            rate = min(
                sg.bandwidth[i],
                sg.link_capacity.get("up:" + src, math.inf),
                sg.link_capacity.get("down:" + dst, math.inf),
                cpu,
            )
            out[i] = sg.nbytes[i] / rate if math.isfinite(rate) else 0.0
    return out


def host_byte_s(sg: SimGraph) -> tuple[float, float]:
    """Where each task has cores of its own (``host_slots``), the least seconds a byte takes of
    the sender's cores and of the receiver's: its share of the byte's CPU
    (``comm_slot_s_per_byte`` times ``host_byte_shares``) over all but ``MIN_OPS_SHARE`` of a
    task's share, as the simulator charges it (``engine._host_comm``); 0 and 0 where the tasks
    share the machine's cores or the bytes cost none.

    >>> sg = SimGraph(kind=[COMPUTE], machine_slots=2.0, host_slots=0.5, comm_slot_s_per_byte=1e-6)
    >>> [round(x * 1e6, 4) for x in host_byte_s(sg)]  # 0.5 us over 0.475 of a slot, each end
    [1.0526, 1.0526]
    >>> sg.host_byte_shares = (0.3, 0.55)
    >>> [round(x * 1e6, 4) for x in host_byte_s(sg)]
    [0.6316, 1.1579]
    """
    if not (sg.host_slots and sg.host_bytes and sg.machine_slots and sg.comm_slot_s_per_byte):
        return 0.0, 0.0
    if COMPUTE not in sg.kind:  # the simulator charges the bytes' CPU where ops share it
        return 0.0, 0.0
    most = (1 - MIN_OPS_SHARE) * sg.host_slots
    send, recv = sg.host_byte_shares
    return sg.comm_slot_s_per_byte * send / most, sg.comm_slot_s_per_byte * recv / most


def least_times(sg: SimGraph) -> list[float]:
    """Each node's shortest time in any run: an op's time at ``op_rate``, a message's overhead
    and its bytes on the wire (``wire_times``), a dispatch delay's time (a step barrier: none)."""
    rate = op_rate(sg)
    wires = wire_times(sg)
    out = []
    for i, kind in enumerate(sg.kind):
        if kind == COMPUTE:
            out.append(sg.duration[i] / rate)
        elif kind == MESSAGE:
            out.append(sg.overhead[i] + wires[i])
        elif kind == DELAY:
            out.append(sg.duration[i])
        else:
            out.append(0.0)
    return out


def _topological(sg: SimGraph) -> list[int]:
    """The nodes in an order where each comes after its predecessors: Kahn's, depth first (the
    node made ready last goes next), so that a walk along it has few nodes whose successors are
    still to come (``_carry``'s sets held at once). Breadth first, as until the
    hundred-and-fifteenth session, Inception-v3 with 32 workers had 49,088 at once in one
    walk; depth first, 1,068. Every sum and bound taken along it is the same in any such order."""
    npred = list(sg.npred)
    ready = [i for i in range(len(sg)) if npred[i] == 0][::-1]
    topo = []
    while ready:
        i = ready.pop()
        topo.append(i)
        for j in reversed(sg.succ[i]):
            npred[j] -= 1
            if npred[j] == 0:
                ready.append(j)
    if len(topo) != len(sg):
        raise TfschedError("the simulated step has a cycle: no order can run it")
    return topo


def heads_and_tails(
    sg: SimGraph,
    times: list[float],
    topo: list[int],
    *,
    least_head: np.ndarray | None = None,
    least_tail: np.ndarray | None = None,
) -> tuple[list[float], list[float]]:
    """The longest path (in ``times``) from the start of the run to each node's start (its head)
    and from its end to the end of the run (its tail): no run starts it earlier, or ends sooner
    after it. A node's head is at least ``least_head`` of it and its tail ``least_tail``, which
    carry along the paths from it. ``topo``: the nodes in ``_topological`` order."""
    n = len(sg)
    head = [0.0] * n if least_head is None else least_head.tolist()
    tail = [0.0] * n if least_tail is None else least_tail.tolist()
    for i in topo:
        end = head[i] + times[i]
        for j in sg.succ[i]:
            head[j] = max(head[j], end)
    for i in reversed(topo):
        tail[i] = max(tail[i], max((times[j] + tail[j] for j in sg.succ[i]), default=0.0))
    return head, tail


def work_around(
    sg: SimGraph, order: list[int], served: dict[str, tuple[list[int], np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """For each node: the most work any one resource of ``served`` must do before it starts (its
    ancestors there, one after another at the resource's rate) and after it ends (its
    descendants there). A path counts one op or message after another; this counts every one a
    resource serves, where it serves fewer at once than the graph allows. On VGG16 training a
    worker's backward pass after its last pull is about 3.3 s of work on its half core, where
    its longest path is 2.7 s; and no push starts before its worker's pulls have all crossed the
    PS's link. ``order``: the nodes in ``_topological`` order; ``served``: resource -> its
    nodes, their work and offsets (``_served``).

    Until the sixty-second session only a message's sender's and receiver's compute counted:
    every resource counts now (at the messages, and a link's or channel's at the ops beside
    them too, below), which raises the floor of
    VGG16 training on shared cores from 5.14 s to 5.45 s (no push starts before one worker's
    pulls have crossed the PS's uplink; ``benchmarks/floor.py``), and the floor of a one-worker
    chain from 7.25 s to 8.75 s, what TIO's order takes (``test_engine``).
    """
    n = len(sg)
    preds: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for j in sg.succ[i]:
            preds[j].append(i)
    before, after = np.zeros(n), np.zeros(n)
    # Where the sums are taken: a task's or the machine's ops are many, and their work is
    # weighed at the messages (every dependency between tasks is one); a channel's or link's
    # messages are few, and theirs is weighed at the messages and the ops next to them too, from
    # which it carries along the paths (on a chain the last forward op after all the pulls).
    # Taken at every node and over every node, the sums took Inception-v3 with four workers
    # (39,000 nodes) 2.8 s and grew with the cube of the workers, for the same floors; so taken,
    # and over the nodes each resource reaches, they add about 2 s to `tfsched analyze`'s 21 s
    # with sixteen workers (156,000 nodes).
    is_message = np.array([k == MESSAGE for k in sg.kind], dtype=bool)
    near = is_message.copy()
    for m in np.flatnonzero(is_message).tolist():
        near[sg.succ[m]] = True
        near[preds[m]] = True
    topo = np.array(order, dtype=int)
    for res, (nodes, work, _) in served.items():
        if len(nodes) < 2 or not work.any() or _dominated(res, work, served):
            continue
        at = is_message if res == "cpu" or res.startswith("compute:") else near
        bit = {i: k for k, i in enumerate(nodes)}  # node -> its bit's place in the sets
        # only the nodes that need one of the resource's (a worker's link: that worker's and
        # the PS's), each after its predecessors: the resource's nodes each needs done
        below = _reached(nodes, sg.succ, n)
        _carry(topo[below[topo]].tolist(), preds, sg.succ, bit, at, work, before)
        # and before its successors, the resource's nodes that need it
        above = _reached(nodes, preds, n)
        _carry(topo[above[topo]][::-1].tolist(), sg.succ, preds, bit, at, work, after)
    return before, after


def _carry(
    walk: list[int],
    inward: list[list[int]],
    outward: list[list[int]],
    bit: dict[int, int],
    at: np.ndarray,
    work: np.ndarray,
    out: np.ndarray,
    batch: int = 4096,
) -> int:
    """``work_around``'s sums along one direction: each node of ``walk`` (every node's
    ``inward`` neighbours before it, and its ``outward`` ones all in it) gets the resource's
    nodes among those it is reached from (a bitset over them, ``bit`` giving each its bit's
    place), and each where ``at`` says raises ``out`` there to their ``work`` (``_weighed``).
    Returns the most sets it held at once.

    A node's set is dropped once every node ``outward`` from it has taken it, and the sums are
    taken ``batch`` nodes at a time: until the hundred-and-fifteenth session every reached node's
    set was held to the end, and so was each node's bit, a number of as many bits as its place:
    both grow with the square of the workers, and `tfsched analyze` of Inception-v3 took
    2.07 GiB with 32 workers and 6.64 GiB with 64. With the sets dropped, the bits made as
    they are taken and a depth-first walk (``_topological``), 0.63 and 0.82 GiB. The sums are
    the same, each of the same bits.
    """
    held: dict[int, int] = {}
    left: dict[int, int] = {}  # node -> the nodes outward from it that have yet to take its set
    most = 0
    idx: list[int] = []
    sets: list[int] = []

    def flush() -> None:
        out[idx] = np.maximum(out[idx], _weighed(sets, work))
        idx.clear()
        sets.clear()

    for i in walk:
        acc = 0
        for p in inward[i]:
            if p in held:
                acc |= held[p]
                if p in bit:
                    acc |= 1 << bit[p]
                left[p] -= 1
                if not left[p]:
                    del held[p], left[p]
        if outward[i]:
            held[i], left[i] = acc, len(outward[i])
            most = max(most, len(held))
        if at[i]:
            idx.append(i)
            sets.append(acc)
            if len(idx) >= batch:
                flush()
    if idx:
        flush()
    return most


def _reached(nodes: list[int], edges: list[list[int]], n: int) -> np.ndarray:
    """Which of ``n`` nodes ``nodes`` and the nodes along ``edges`` from them are."""
    seen = np.zeros(n, dtype=bool)
    seen[nodes] = True
    stack = list(nodes)
    while stack:
        for j in edges[stack.pop()]:
            if not seen[j]:
                seen[j] = True
                stack.append(j)
    return seen


def _dominated(res: str, work: np.ndarray, served: dict) -> bool:
    """Whether a channel's sums can add nothing to its sender's uplink's or receiver's
    downlink's, which carry each of its messages with at least as much work."""
    kind, _, name = res.partition(":")
    if kind != "channel":
        return False
    src, dst = name.split("->")
    for link in ("up:" + src, "down:" + dst):
        if link in served:
            nodes, link_work, _ = served[link]
            # the channel's messages are among the link's, in the same order (``step_bounds``)
            mine = np.isin(nodes, served[res][0])
            if mine.sum() == len(work) and np.all(link_work[mine] >= work - 1e-15):
                return True
    return False


def _weighed(bitsets: list[int], weight: np.ndarray) -> np.ndarray:
    """For each bitset, the sum of ``weight[k]`` over its set bits k.

    >>> _weighed([0b101, 0, 0b010], np.array([1.0, 2.0, 4.0])).tolist()
    [5.0, 0.0, 2.0]
    >>> _weighed([1 << 20 | 1 << 9], np.arange(21.0)).tolist()
    [29.0]
    """
    m = len(weight)
    nbytes = (m + 7) // 8
    padded = np.zeros(nbytes * 8)
    padded[:m] = weight
    # each byte position's weight for each of the 256 bytes it can hold: a sum is then one
    # look-up a byte (table[k * 256 + byte k of the bitset])
    byte_bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
    table = (padded.reshape(nbytes, 8) @ byte_bits.T).ravel()
    out = np.zeros(len(bitsets))
    rows = max(1, (1 << 20) // max(nbytes, 1))  # a few MB of look-ups at a time
    for s in range(0, len(bitsets), rows):
        chunk = bitsets[s : s + rows]
        # A node's ancestors on a resource are a few runs of its nodes: each set's bytes from
        # its lowest set one to its highest (1% to 2% of them on Inception-v3 with 32 workers)
        # are looked up, the others weigh 0. Each row of look-ups is then summed whole, zeros
        # and all, as it was when every byte was looked up (until the hundred-and-sixteenth
        # session), so each sum is the same to the last bit.
        first = [((b & -b).bit_length() - 1) // 8 if b else 0 for b in chunk]
        ends = [(b.bit_length() + 7) // 8 for b in chunk]
        raw = np.frombuffer(
            b"".join(
                (b >> 8 * k).to_bytes(e - k, "little") for b, k, e in zip(chunk, first, ends, strict=True)
            ),
            dtype=np.uint8,
        )
        lo = np.array(first, dtype=np.int64)
        span = np.array(ends, dtype=np.int64) - lo
        starts = np.cumsum(span) - span
        place = np.arange(raw.size) - np.repeat(starts - lo, span)  # each byte's position
        at = np.repeat(np.arange(len(chunk)) * nbytes, span) + place
        looked = np.zeros(len(chunk) * nbytes)
        looked[at] = table[place * 256 + raw]
        out[s : s + len(chunk)] = looked.reshape(len(chunk), nbytes).sum(axis=1)
    return out


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
    after another, each at the fastest the simulator moves it: ``wire_times``, after the first
    one's overhead; with ``overlap=False``, as ``simulate``'s, every message's overhead and its
    bytes), each host link direction (its bytes over its
    capacity: measured, or the largest channel rate on it; overheads do not use the wire), the
    machine when every task computes on it, and where each task also has cores of its own, each
    task's cores moving its bytes (``host_byte_s``). The upper bound runs everything one after
    another, each op at the machine's rate where that is under one op's worth (``op_rate``;
    before the twenty-ninth session it ran them at full speed, and the measured steps of the
    bench's Seq-32 and Par-32 rows came out above it: E negative). A task's dispatch delay
    (``TimeOracle.task_start_s``) comes before its compute and its sends whatever the order: it
    is added to those resources' busy times, and the longest one to the upper bound.

    ``floor`` (tfsched's, not TicTac's) adds the dependencies: the longest path, and for each
    resource the head-body-tail bound (``resource_floor``): a resource cannot start a node
    before the longest path to it (and a message's overhead), nor before any one resource has
    served the node's ancestors there (a worker's ops on its cores, a worker's pulls on the
    PS's link), and after the last one it serves the longest path from that node remains, and
    any one resource's work on the node's descendants (``work_around``). On VGG16
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
    wires = wire_times(sg)
    send_byte_s, recv_byte_s = host_byte_s(sg)
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
            wire = wires[i]
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
            if send_byte_s or recv_byte_s:  # each end's cores move its bytes
                for task, per_byte in ((src, send_byte_s), (dst, recv_byte_s)):
                    busy["host:" + task] += sg.nbytes[i] * per_byte
                    members["host:" + task].append(i)
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
# a task's cores moving its bytes, a channel (one worker's share of a link), the machine, the
# longest path
_SAYS_MORE = {"up": 0, "down": 0, "compute": 1, "host": 2, "channel": 3, "cpu": 4, "path": 5}


def _served(
    sg: SimGraph, members: dict[str, list[int]], rates: dict[str, float], times: list[float], overlap: bool
) -> dict[str, tuple[list[int], np.ndarray, np.ndarray]]:
    """Each resource of the floor: its nodes, each one's work there, and how long after its head
    it can start there (a message's overhead, paid before it waits for the channel or link)."""
    served = {}
    send_byte_s, recv_byte_s = host_byte_s(sg)
    for res, nodes in members.items():
        kind, _, name = res.partition(":")
        if res == "cpu":  # the machine every task computes on, and the bytes' CPU on the wire
            work = [
                sg.duration[i] if sg.kind[i] == COMPUTE else sg.nbytes[i] * sg.comm_slot_s_per_byte
                for i in nodes
            ]
            served[res] = (
                nodes,
                np.array(work) / sg.machine_slots,
                np.array([sg.overhead[i] if sg.kind[i] == MESSAGE else 0.0 for i in nodes]),
            )
        elif kind == "compute":
            slots = _task_slots(sg, name)
            served[res] = (nodes, np.array([sg.duration[i] / slots for i in nodes]), np.zeros(len(nodes)))
        elif kind == "channel":
            if overlap:  # a message pays its overhead before it waits for the channel
                offset = np.array([sg.overhead[i] for i in nodes])
                served[res] = (nodes, np.array([times[i] for i in nodes]) - offset, offset)
            else:
                served[res] = (nodes, np.array([times[i] for i in nodes]), np.zeros(len(nodes)))
        elif kind == "host":  # a task's own cores moving its bytes, after each one's overhead
            served[res] = (  # its share as the sender of a message, else as the receiver
                nodes,
                np.array(
                    [
                        sg.nbytes[i]
                        * (send_byte_s if sg.resource[i].startswith(name + "->") else recv_byte_s)
                        for i in nodes
                    ]
                ),
                np.array([sg.overhead[i] for i in nodes]),
            )
        else:  # a host's link: the bytes at its rate, after the message's overhead
            rate = rates.get(res, math.inf)
            if math.isfinite(rate) and rate > 0:
                served[res] = (
                    nodes,
                    np.array([sg.nbytes[i] / rate for i in nodes]),
                    np.array([sg.overhead[i] for i in nodes]),
                )
    return served


def _floor(
    sg: SimGraph, members: dict[str, list[int]], rates: dict[str, float], overlap: bool
) -> tuple[float, str, FloorPart]:
    """``Bounds.floor`` over the whole graph, what sets it and its parts: the longest path, and
    each compute resource's, channel's and link's ``resource_floor``. A node's head is at least
    the work any resource must do before it and its tail the work one must do after it
    (``work_around``), and those carry along the paths from it."""
    times = least_times(sg)
    topo = _topological(sg)
    served = _served(sg, members, rates, times, overlap)
    before, after = work_around(sg, topo, served)
    head, tail = heads_and_tails(sg, times, topo, least_head=before, least_tail=after)
    path = max(head[i] + times[i] + tail[i] for i in range(len(sg)))
    best, by = FloorPart(0.0, path, 0.0), "path"
    for res, (nodes, work, offset) in served.items():
        items = zip(nodes, work.tolist(), offset.tolist(), strict=True)
        part = resource_floor([(head[i] + o, w, tail[i]) for i, w, o in items])
        kind = res.partition(":")[0]
        tie = abs(part.total - best.total) <= 1e-9 * max(1.0, best.total)
        if (part.total > best.total and not tie) or (
            tie and _SAYS_MORE[kind] < _SAYS_MORE[by.partition(":")[0]]
        ):
            best, by = part, res
    return best.total, by, best
