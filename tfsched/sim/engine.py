"""Discrete-event simulation of training steps on a PS cluster.

The model (what TicTac §3 and ByteScheduler §2 assume, and what TF-NOTES measured):

* a task starts its part of a step when its partition has been dispatched (a measured delay,
  ``TimeOracle.task_start_s``), and then
* each task has one compute resource running one op at a time (TicTac §3: ops are "tasks
  already assigned to machines"), or as many at once as a trace showed TensorFlow's inter-op
  threads running (``SimGraph.capacity``), ready ops in the order they became ready; when every
  task runs on one machine (``SimGraph.machine_slots``), their ops share it, and the bytes on
  the wire take their share of it too (``comm_slot_s_per_byte``: the CPU that moving a byte
  costs at both ends, measured: the flows keep their rates and the ops share what they leave,
  and only flows wanting more than the machine slow down). Where each task has cores of its
  own (``SimGraph.host_slots``, the bench's ``--host-cores``), each end of a flow spends its
  measured share of that in its own task's share, where its gRPC threads run (the rest is the
  kernel's, on the machine alone; ``host_byte_shares``): a task's ops get what its bytes
  leave of it, and a task whose flows want more than all but ``MIN_OPS_SHARE`` of it slows them
  (``_host_comm``). Until the sixty-third session the bytes took only the machine's, and a PS
  on half a core moving ResNet-50's 400 MB a step at 10 Gbit/s was simulated 29% to 32% fast
  (a traced run of 1 PS x 2 workers, tfsched's modes; 23% to 26% with this; ByteScheduler's
  fixed sizes 40% and 34%: ``benchmarks/results/resnet50-train-10g-hosts-traced2-repredicted.md``;
  in a run whose bytes' CPU was measured since the bench's fix of that session, 13% to 17%
  against 32% to 39%: ``resnet50-train-10g-hosts-traced3-repredicted.md``);
* each host has one full-duplex NIC: an uplink and a downlink of the link's bandwidth, or of
  what a trace measured the host's channels carrying together (``TimeOracle.host_bps``);
  concurrent flows share a link max-min fairly (TCP's steady state), or with ``worker_weight``
  the workers' flows unequally: the bench fits it to the stagger of its baseline's workers
  (``bench.predict.fit_worker_weight``; measured flows leaving an idle link do not end together,
  ``benchmarks/link_sharing.py``), which took the mean error over 34 modes of six traced runs
  from 7.6% to 5.7% (BENCHMARKS.md's reading);
* a channel (sender task, receiver task) is one HTTP/2 connection: a message handed to it
  pays its per-message overhead (its own RPC's cost, at once with the other messages'), then
  waits for the channel, whose messages' bytes go out one after another (a small tensor
  released behind a large one waits for it: TF-NOTES "What the wire does"). Until the
  forty-fourth session the overhead held the channel as the bytes do (TicTac's model of a
  transfer, ``overlap=False``): where one channel carries a host's link at a time (one window
  per sending task, which serves one worker after another), the link then idled for every
  4 MB slice's overhead (10.8 ms fitted on VGG16 training, against 32 ms of bytes), and the
  simulator put that mode 13% to 14% slow, where a traced step showed the channel near the
  link's rate (BENCHMARKS.md's reading); with several channels at once the others hid it.
  Re-predicted on seven kept traced runs (``benchmarks/repredict.py``): one window per task on
  VGG16 inference +13% became -6%, on VGG16 training with two PS +14% became -3%; the other
  modes moved by at most two points, but for Seq-32 on two PS (+1% to +5% became -3% to -4%); the
  mean error over the 33 modes 10.6% became 10.0%. TensorFlow 2's ResNet-50 training
  (``benchmarks/repredict_tf2.py``): -11% to -20% became -9% to +4%;
* a policy decides when a ready message is handed to its channel:
  ``fifo`` at once (ties in graph order), ``random`` at once with ties shuffled by a seed
  (the spread TicTac reports for unordered runs), ``counter`` when all messages of higher
  priority on its channel were released in this step (TicTac §5.1), ``queue`` as the
  enforcement pass does for ByteScheduler's schedules: a channel of pulls (all ready at the start
  of a step) by counters, a channel of pushes highest priority first among those ready (§4.2),
  ``ready`` every channel so, pulls too: ByteScheduler's Core, whose pulls become ready one
  layer at a time once a step crosses TensorFlow's barrier (a what-if for
  ``model.build_sim_graph``'s ``cross_barrier``, where a counter holds every pull behind the
  first layer's, updated last; the pass counts its pulls);
* with a credit window (``counter``, ``queue`` and ``ready``, as the gates): the head of a channel's queue
  goes only if the bytes released and not yet acknowledged leave room for it, or nothing is in
  flight; the acknowledgement comes back one per-message overhead (plus latency) after arrival.
  As the pass (cc/scheduler.cc), messages under ``min_acked_bytes`` or under ``1/ack_share`` of
  the credit (an eighth by default) are ordered but not acknowledged: they take no credit. With
  ``ack_group`` N > 1 (the pass's), up to N consecutive acknowledged messages on a channel of
  counters, slices of one transfer or of several, share one acknowledgement (``ack_groups``):
  the first takes the credit of them all, the others go in their turn without credit, and the
  last one's acknowledgement returns it;
* with ``race`` (what TensorFlow 2.21's gRPC does; ``tfsched analyze`` and the bench predict with
  it): the messages released on a channel and waiting for it go out in no fixed order (a seeded
  random one), not in the order of their release; the one on the wire finishes first. Each
  released tensor is its own RPC response, and the responses waiting together race for the
  connection. Measured on the emulated cluster (ResNet-50 inference, 1 PS x 4 workers, traced
  steps of worker 0): with TIO and TAO alone the PS's gates released all 320 pulls in priority
  order within 5 ms; they arrived in that order in one traced step (Kendall's tau 0.70 between
  arrival and need, over the 28 tensors above 1 MB) and in exactly the reverse order in another
  (-0.99). Kept in release order, the simulator predicted TIO and TAO alone 27% to 55% faster
  than measured on inference (in that run -32% and -30%; +3% and +7% with ``race``). A credit
  window keeps the order of what it acknowledges: those messages go in the order of their
  release, and the head of them races with the unacknowledged ones as one of them (the credit
  modes measured 1.30x to 1.40x on ResNet-50 inference, and with their acknowledged messages
  in order the simulator predicts them within -9% to -5%; with every waiting message in a
  random order, ``tao+pc`` +43% in the traced run). The messages the window does not
  acknowledge (under ``1/ack_share`` of it, an eighth by default) are released at once and
  race as without credit: 60% of Inception-v3's bytes at ByteScheduler's credit, against 18% of ResNet-50's and none of
  VGG16's; kept in order, ``tao+pc`` on Inception-v3 inference was predicted 33% faster than
  measured;
* with ``host_credit`` (the pass's ``host_credit``, cc/gate.h HostLink): the credit is one window
  per sending task; an acknowledged message that its channel let go waits there, and the window
  takes the oldest step's (then the first worker's) highest-priority message first, or with
  ``host_order="priority"`` the highest-priority message of every step first (ties: the oldest
  step's, then the first worker's), the steps in lockstep. Its channel's counter moves on only
  once the window took it;
* with ``credit_return="sent"`` (the pass's ``credit_return``, cc/gate_ops.cc SentBuffer): a
  message's credit comes back when its last byte leaves the sender, with no acknowledgement
  (the pass returns it a little earlier, once gRPC has written the bytes to the kernel: the
  socket buffer and the link's queue are not modelled);
  with ``"ack"`` (the default, ByteScheduler's) it comes back as above, and on one shared
  machine (``machine_slots``) each acknowledgement also takes ``ack_slot_s`` of the machine's
  work (in lone-worker op seconds) before its credit returns: the receiver's ``TfschedAck``, the
  RPC and the sender's ``TfschedCredit``, which run on the cores the ops use. Until the
  twenty-first session the simulator charged no CPU for them and returned the credit the same
  way in both cases, so it predicted ``+sent`` modes exactly as their acknowledged twins.
  ResNet-50 training at 10 Gbit/s (1 PS x 2 workers, ByteScheduler's sizes, a traced run
  re-predicted, benchmarks/results/resnet50-train-10g-sent-traced-repredicted.md): measured
  0.641 s with acknowledgements and 0.609 s without; predicted 0.606 s for both before (-6% and
  -0%), 0.648 s and 0.606 s now (+1% and -0%). ``handoff_s`` (a what-if, 0 by default): where
  ops hold every core the sender's threads could run on (the machine's, or its task's own share
  of it) when the last byte leaves, such a credit reaches the gate it lets go that much later:
  the threads the hand-over takes (gRPC's, which lets go of the buffer, and the one that puts
  the next tensor out) wait for a core. Measured with one tensor in flight
  (``benchmarks/handoff.py``, ResNet-50 training at 10 Gbit/s, 1 PS x 2 workers, the machine's
  cores 97% busy): a held pull's gate let go a median 2.8 ms after the pull before it had
  arrived (102 hand-offs, 52 pulls a step on each channel); the channels' pulls took 273 and 290
  ms from the first release to the last arrival, for 75 ms of bytes each. Without it that mode
  was predicted 17% fast and 4% faster than TIO, where it measured 2% slower; with it 10% fast
  (TIO 12%) and 4% slower than TIO (``benchmarks/results/handoff-resnet50-train-10g.md``).
  Charged at every hand-off, busy cores or not, it put the mode 5% fast and 11% slower than TIO
  (``handoff-resnet50-train-10g-every-handoff.md``). A second run (``...-run2.md``): a median
  1.8 ms over 408 hand-offs; held TIO and TAO measured 2% and 1% slower than TIO, predicted at
  -15% and -14% with it (TIO -13%), -17% without. At 1 Gbit/s the credit comes back long before
  the bytes arrive (the socket buffer and the shaper's queue hold them), and nothing there
  measures it;
* with ``push_credit_bytes`` (``enable(push_credit=N)``, or a live credit on the workers,
  ``tfsched.set_credit``, the bench's ``+wN``): the tasks that push (the workers) have that window instead of ``credit_bytes``;
  which messages are acknowledged stays as ``credit_bytes`` has it, as the pass decided when
  it rewrote the graph;
* with ``executor_threads`` (each task's inter-op threads; the bench gives its tasks', one per
  core by default): an acknowledgement runs an op at each end, the receiver's ``TfschedAck`` and
  the sender's ``TfschedCredit``, and each waits for a thread of its task's executor. Where the
  task's ops can take every thread (its capacity rounded up is at least its threads) the op
  waits in the task's ready queue behind the ops ready before it, until one of them ends; it
  then takes no time. With more threads a spare one takes it at once, as before. Measured
  (``benchmarks/credit_latency.py``, VGG16 training, 1 PS x 4 workers): with a thread per core
  the workers' ``TfschedCredit`` started up to 345 ms after its acknowledgement arrived (90th
  percentile 109 to 233 ms), behind the backward pass's convolutions; with 4 threads at most
  12 ms. Until the fifty-second session the simulator had the credit back at once, and put a
  small window on the workers 12% fast: re-predicted (``benchmarks/repredict.py``), TAO with
  partition and credit 1,000,000 went from -12.2% to -3.1% and lockstep with a window of
  1,000,000 on the pushes from -12.2% to -3.5%, one window per task -11.3% and -9.4% to -10.2%
  and -8.2%; the runs with 4 threads did not move, nor did any mode of inference more than 0.3
  points (the mean error over 48 modes of 10 traced runs 6.0% to 5.6%).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from operator import itemgetter

from tfsched.errors import TfschedError
from tfsched.sim.model import BARRIER, COMPUTE, DELAY, MESSAGE, SimGraph
from tfsched.units import is_count

POLICIES = ("fifo", "random", "counter", "queue", "ready")
# when a message's credit comes back (the pass's credit_return, enforce.api.enable)
CREDIT_RETURNS = ("ack", "sent")
# what a window per sending task serves first (the pass's host_order, enforce.api.enable): the
# oldest step's messages, or every step's highest priority (the steps in lockstep)
HOST_ORDERS = ("steps", "priority")
# the pseudo-resource that runs the acknowledgements' CPU on a shared machine, and how many at once
ACKS = "acks"
_ACKS_AT_ONCE = 1 << 30
# an acknowledgement's op in a task's ready queue (start_ops): id code * n + message
_ACK_OP, _CREDIT_OP = 2, 3
# the credit acknowledges messages of at least credit / this (the pass's ack_share, cc/scheduler.cc)
DEFAULT_ACK_SHARE = 8
_EPS = 1e-12
# with one shared machine: the least share of it the ops keep while the flows want it all
MIN_OPS_SHARE = 0.05


def check_credit_return(credit_return) -> str:
    """``credit_return`` if it is one of ``CREDIT_RETURNS``, else one TfschedError line."""
    if credit_return not in CREDIT_RETURNS:
        raise TfschedError(f"credit_return must be one of {', '.join(CREDIT_RETURNS)}, got {credit_return!r}")
    return credit_return


def check_host_order(host_order, host_credit: bool) -> str:
    """``host_order`` if it is one of ``HOST_ORDERS`` and, other than "steps", has the window per
    sending task (``host_credit``) it orders; else one TfschedError line."""
    if host_order not in HOST_ORDERS:
        raise TfschedError(f"host_order must be one of {', '.join(HOST_ORDERS)}, got {host_order!r}")
    if host_order != "steps" and not host_credit:
        raise TfschedError(
            f"host_order {host_order!r} orders the window per sending task: it needs host_credit"
        )
    return host_order


def check_ack_share(ack_share) -> int:
    """``ack_share`` if it is a positive integer (not a bool), else one TfschedError line."""
    if not is_count(ack_share, least=1):
        raise TfschedError(f"ack_share must be a whole number from 1 to 2**63-1, got {ack_share!r}")
    return ack_share


def pushing_gates(sg: SimGraph) -> set[tuple]:
    """The gates (channels) that push, to a PS."""
    return {
        sg.gate[i]
        for i in range(len(sg))
        if sg.kind[i] == MESSAGE and sg.transfer[i] is not None and sg.transfer[i].kind == "push"
    }


def release_policies(sg: SimGraph, policy: str, pushing: set[tuple]) -> list[str]:
    """Per node: how its message is released under ``policy`` (the module docstring), the
    channels of ``pushing`` (``pushing_gates``) being the pushes'. A transfer the pass leaves
    ungated (``SimGraph.ungated``) goes when ready under any policy (``fifo``): it takes no
    place in its channel's counter, and no credit."""
    n = len(sg)
    how = [policy] * n
    if policy == "ready":
        how = ["queue"] * n
    elif policy == "queue":
        # By channel, as the pass's gates go: a channel that pushes (to a PS) is a queue, any
        # other counts. Per message, a control edge on a channel of pulls (TensorFlow 2's
        # GroupCrossDeviceControlEdges) was a queue's among counters, and their keys and ranks
        # do not compare (a TypeError on VGG16's step function under the layer order).
        for i in range(n):
            if sg.kind[i] == MESSAGE:
                queued = sg.gate[i] in pushing or sg.transfer[i] is None
                how[i] = "queue" if queued else "counter"
    if policy in ("counter", "queue", "ready") and sg.ungated:
        for i in range(n):
            if sg.kind[i] == MESSAGE and sg.transfer[i] in sg.ungated:
                how[i] = "fifo"
    return how


def ack_groups(
    sg: SimGraph, acked: list[bool], how: list[str], group: int, window_of, within_transfers: bool = False
) -> tuple[list[bool], list[int], list[bool], list[int]]:
    """The acknowledgement groups of ``group`` messages at most (the pass's ``ack_group``,
    cc/scheduler.cc): per message, whether it takes credit, how many bytes, whether it is
    acknowledged, and how many bytes its acknowledgement returns. A group is made of consecutive
    acknowledged messages of a gate channel of counters, in its order, of one transfer's slices
    or of several transfers' (``within_transfers``: only of one, as under one window per sending
    task), that together fit the channel's window (``window_of(gate)``: its bytes). A message
    whose key it shares with another on its channel (its slices go in any order) stands alone and
    ends the group before it; one not acknowledged, which takes no credit, goes in its turn and
    ends none. Ungrouped (``group`` 1, or a group of one): each acknowledged message takes and
    returns its own bytes.

    >>> sg = SimGraph()
    >>> for s, size in enumerate((4, 4, 4, 2)):
    ...     _ = sg.add(MESSAGE, "t", "ps->w", "w", 0, nbytes=size, key=(0, s), gate=("ps", "w", "w", 0))
    >>> ack_groups(sg, [True, True, True, False], ["counter"] * 4, 2, lambda gate: 16)
    ([True, False, True, False], [8, 0, 4, 0], [False, True, True, False], [0, 8, 4, 0])

    Across transfers: a transfer after them joins the group its window holds, and two that tie
    (key (7, 0) twice) stand alone:

    >>> for p in (4, 7, 7):
    ...     _ = sg.add(MESSAGE, "u", "ps->w", "w", 0, nbytes=4, key=(p, 0), gate=("ps", "w", "w", 0))
    >>> ack_groups(sg, [True] * 7, ["counter"] * 7, 4, lambda gate: 12)[3]
    [0, 0, 12, 0, 6, 4, 4]
    """
    n = len(sg)
    taken = [sg.nbytes[i] if acked[i] else 0 for i in range(n)]
    credited, acks, back = list(acked), list(acked), list(taken)
    if group <= 1:
        return credited, taken, acks, back
    on_gate: dict[tuple, list[int]] = defaultdict(list)  # gate -> its messages released by counters
    for i in range(n):
        if sg.kind[i] == MESSAGE and how[i] == "counter":
            on_gate[sg.gate[i]].append(i)
    groups: list[list[int]] = []  # per gate channel in turn; the last one is being made
    for gate, ids in on_gate.items():
        ids.sort(key=lambda i: sg.key[i])
        sharing = Counter(sg.key[i] for i in ids)
        window = window_of(gate)
        groups.append([])
        for i in ids:
            members = groups[-1]
            if not acked[i]:
                continue
            if sharing[sg.key[i]] > 1:
                groups.append([])
            elif members and (
                len(members) == group
                or sum(sg.nbytes[j] for j in members) + sg.nbytes[i] > window
                or (within_transfers and sg.transfer[i] is not sg.transfer[members[-1]])
            ):
                groups.append([i])
            else:
                members.append(i)
    for members in groups:
        if len(members) > 1:
            total = sum(sg.nbytes[i] for i in members)
            for i in members:
                credited[i] = acks[i] = False
                taken[i] = back[i] = 0
            credited[members[0]], taken[members[0]] = True, total
            acks[members[-1]], back[members[-1]] = True, total
    return credited, taken, acks, back


@dataclass
class SimResult:
    """Finish times of every worker run and, if asked for, a record of every node."""

    makespan: float
    run_finish: dict[tuple[str, int], float]  # (worker run, step) -> when its last op finished
    run_start: dict[tuple[str, int], float]
    starts: list[float] = field(default_factory=list)  # per node: compute start / message release
    sends: list[float] = field(default_factory=list)  # per message: when its bytes started to flow
    ends: list[float] = field(default_factory=list)

    def step_times(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = defaultdict(list)
        for (run, step), end in sorted(self.run_finish.items(), key=lambda kv: kv[0][1]):
            out[run].append(end - self.run_start[(run, step)])
        return dict(out)

    @property
    def step_time(self) -> float:
        """Mean step time of the slowest worker."""
        times = self.step_times()
        return max(sum(v) / len(v) for v in times.values()) if times else 0.0


def _worker_index(channel: str) -> int:
    """The task index of the worker at either end of a channel ("src->dst"; 0 if none).

    >>> _worker_index("/job:ps/replica:0/task:1->/job:worker/replica:0/task:3")
    3
    >>> _worker_index("/job:ps/replica:0/task:0->/job:ps/replica:0/task:1")
    0
    """
    for task in channel.split("->"):
        job, _, index = task.rpartition("/task:")
        if "/job:worker" in job and index.isdigit():
            return int(index)
    return 0


def _max_min_rates(
    flows: list[tuple[int, str, str, float]],
    link_capacity: dict[str, float] | None = None,
    weight: dict[int, float] | None = None,
) -> dict[int, float]:
    """Max-min fair rates for flows (id, uplink, downlink, channel rate in bytes/s); with
    ``weight`` (flow -> its weight, 1 if absent) weighted max-min: a link's share goes to its
    flows in proportion to their weights.

    Each flow is capped at its own channel's rate; a host link carries what ``link_capacity``
    says (measured over its channels together), or else at most the largest rate of the
    channels on it (the same as every channel's when the links are uniform). With
    per-channel models fitted to a trace, taking the smallest instead would throttle a fast
    channel below its own rate, and a step could then exceed TicTac's upper bound.
    """
    lc = link_capacity or {}
    cap: dict[str, float] = {}
    users: dict[str, set[int]] = {}
    links_of: dict[int, tuple[str, str]] = {}
    for fid, up, down, c in flows:
        links_of[fid] = (up, down)
        for link in (up, down):
            u = users.get(link)
            if u is None:
                users[link] = {fid}
                cap[link] = lc[link] if link in lc else max(0.0, c)
            else:
                u.add(fid)
                if link not in lc and c > cap[link]:
                    cap[link] = c
    w = (lambda fid: weight.get(fid, 1.0)) if weight else (lambda fid: 1.0)
    # a link's flows' weights in all: with none given, how many they are (the same sum, exactly)
    weighs = (lambda u: sum(map(w, u))) if weight else len
    # A flow's own link (its channel's rate) has it alone until it is rated: its share stays
    # the rate over the flow's weight. A round whose host link has a share below them all
    # looks at none of them; the others take the smallest share left, sorted once (as the
    # names of the links break ties). The same bottlenecks in the same order as with every
    # flow's link scanned with the host links in each round, and so the same rates, exactly.
    shares = (c / w(fid) for fid, _, _, c in flows) if weight else map(itemgetter(3), flows)
    least_own = min(shares, default=math.inf)  # without weights c / 1 is c, exactly
    own: list[tuple[float, str, int]] = []
    k = 0
    rate: dict[int, float] = {}
    while len(rate) < len(flows):
        best = host = min(((cap[link] / weighs(u), link) for link, u in users.items() if u), default=None)
        if host is None or host[0] >= least_own:  # a flow's own link may have the smallest share
            if not own:
                own = sorted((c / w(fid), f"flow:{fid}", fid) for fid, _, _, c in flows)
            while own[k][2] in rate:
                k += 1
            if host is None or own[k][:2] < host:
                best = own[k]
        share, bottleneck = best[:2]
        rated = list(users[bottleneck]) if bottleneck in users else [best[2]]
        for fid in rated:
            rate[fid] = share * w(fid)
            for link in links_of[fid]:
                cap[link] -= rate[fid]
                users[link].discard(fid)
    return rate


def _machine_shares(
    demand: dict[str, tuple[int, float]], slots: float, caps: dict[str, float] | None = None
) -> dict[str, float]:
    """Each resource's rate per op on a machine of ``slots``: ``demand`` gives each resource its
    running ops and the rate each would run at alone. The machine is shared in proportion to
    what each wants; with ``caps`` (resource -> the most its ops take in all: its host's own
    cores, less what its bytes take there) no resource gets more than its cap, and what a capped
    one cannot take goes to the others, as the kernel's CPU quota and fair share do
    (water-filling).

    >>> _machine_shares({"a": (2, 1.0), "b": (1, 1.0)}, 1.5)
    {'a': 0.5, 'b': 0.5}
    >>> _machine_shares({"a": (2, 1.0), "b": (1, 1.0)}, 2.0, {"a": 0.5, "b": 0.5})
    {'a': 0.25, 'b': 0.5}
    >>> _machine_shares({"a": (2, 1.0), "b": (2, 1.0)}, 1.0, {"a": 1.0, "b": 1.0})
    {'a': 0.25, 'b': 0.25}
    >>> _machine_shares({"a": (1, 1.0), "b": (1, 1.0)}, 2.0, {"a": 0.2, "b": 0.5})
    {'a': 0.2, 'b': 0.5}
    """
    caps = caps or {}
    want = {r: k * rate for r, (k, rate) in demand.items()}
    capped: set[str] = set()
    while True:
        free = [r for r in want if r not in capped]
        left = slots - sum(caps[r] for r in capped)
        total = sum(want[r] for r in free)
        factor = min(1.0, max(left, 0.0) / total) if total > 0 else 1.0
        over = {r for r in free if r in caps and want[r] * factor > caps[r]}
        if not over:
            break
        capped |= over
    return {r: caps[r] / k if r in capped else rate * factor for r, (k, rate) in demand.items()}


def _host_comm(
    spec: list[tuple[int, str, str, float]],
    rates: dict[int, float],
    per_byte: float,
    host_slots: float,
    shares: tuple[float, float] = (0.5, 0.5),
) -> tuple[dict[int, float], dict[str, float]]:
    """Where each task has cores of its own (``host_slots`` of the machine), the flows of ``spec``
    (id, uplink, downlink, channel rate) at ``rates``, the sender spending ``shares[0]`` of a
    byte's CPU (``per_byte`` slot-seconds, both ends and the kernel) in its own task's share and
    the receiver ``shares[1]`` in its: the rates each task's share allows (a task whose flows
    want more than all but ``MIN_OPS_SHARE`` of it slows them alike) and the slots each task's
    bytes take. The rest of a byte's CPU is the kernel's, charged to no task: the machine's alone.

    Until the sixty-fourth session each end took half and the kernel none. The bench measures
    the shares per process (``bench.run._comm_cpu_costs``): on ResNet-50's pulls at 10 Gbit/s on
    half-core hosts the sending PS 0.27 to 0.32 and the receiving worker 0.46 to 0.69
    (``benchmarks/results/comm-cost-shares.md``), the rest the kernel's. In training
    every task sends and receives alike, so each one's total differs from the even split only by
    the kernel's part; in inference (pulls alone) the PS sends and the workers receive.

    >>> spec = [(0, "up:ps", "down:w0", 10.0), (1, "up:ps", "down:w1", 10.0)]
    >>> rates, load = _host_comm(spec, {0: 10.0, 1: 10.0}, 0.2, 1.0)
    >>> rates, {task: round(x, 3) for task, x in load.items()}
    ({0: 4.75, 1: 4.75}, {'ps': 0.95, 'w0': 0.475, 'w1': 0.475})
    >>> rates, load = _host_comm(spec, {0: 10.0, 1: 10.0}, 0.2, 1.0, (0.25, 0.5))
    >>> rates, {task: round(x, 3) for task, x in load.items()}
    ({0: 9.5, 1: 9.5}, {'ps': 0.95, 'w0': 0.95, 'w1': 0.95})
    """
    send, recv = shares[0] * per_byte, shares[1] * per_byte
    most = (1 - MIN_OPS_SHARE) * host_slots
    want: dict[str, float] = defaultdict(float)
    for fid, up, down, _ in spec:
        want[up.partition(":")[2]] += rates[fid] * send
        want[down.partition(":")[2]] += rates[fid] * recv
    factor = {task: min(1.0, most / w) if w > 0 else 1.0 for task, w in want.items()}
    out: dict[int, float] = {}
    load: dict[str, float] = defaultdict(float)
    for fid, up, down, _ in spec:
        src, dst = up.partition(":")[2], down.partition(":")[2]
        out[fid] = rates[fid] * min(factor[src], factor[dst])
        load[src] += out[fid] * send
        load[dst] += out[fid] * recv
    return out, dict(load)


def simulate(
    sg: SimGraph,
    policy: str = "fifo",
    *,
    credit_bytes: int | None = None,
    min_acked_bytes: int = 0,
    latency_s: float = 0.0,
    seed: int = 0,
    record: bool = False,
    host_credit: bool = False,
    host_order: str = "steps",
    race: bool = False,
    ack_share: int = DEFAULT_ACK_SHARE,
    credit_return: str = "ack",
    ack_slot_s: float = 0.0,
    overlap: bool = True,
    ack_group: int = 1,
    worker_weight: float = 1.0,
    push_credit_bytes: int | None = None,
    executor_threads: int | None = None,
    stream_window_bytes: int | None = None,
    handoff_s: float = 0.0,
) -> SimResult:
    """Run the simulation; see the module docstring for the model. ``overlap=False``: a message's
    overhead holds its channel as its bytes do (TicTac's model of a transfer, and this one's
    until the forty-fourth session). ``worker_weight`` (1, evenly, by default): the links share
    their bytes unequally between the workers, the flows to and from worker k weighing
    ``worker_weight ** k`` (``_max_min_rates``), as TCP's flows need not share a link evenly.
    ``executor_threads``: each task's inter-op threads, for the acknowledgements' ops to wait for
    (the module docstring); None, as until the fifty-second session: they wait for none.
    ``stream_window_bytes`` (a what-if, off by default): a message that no credit window holds
    goes on the wire this many bytes at a time, and between them waits for its channel again
    behind the messages waiting there (at the back of the kept order, or of those racing).
    This models a large message's HTTP/2 stream yielding to the others between flow-control
    windows. ``benchmarks/arrival_order.py`` measured vanilla TensorFlow's largest pull arriving
    last in 20 of 26 traced steps, where a uniform order gives 1.8. ``handoff_s`` (a what-if, 0 by
    default): a credit returned when sent comes back this long after the last byte left where
    ops hold the sender's cores (the module docstring). ``ack_group``: slices an acknowledgement
    returns at most (``ack_groups``; with ``credit_return="ack"``)."""
    if not 0 < worker_weight <= 1:
        raise TfschedError(f"worker_weight must be in (0, 1], got {worker_weight!r}")
    check_credit_return(credit_return)
    lockstep = check_host_order(host_order, host_credit) == "priority"
    for name, seconds in (("ack_slot_s", ack_slot_s), ("handoff_s", handoff_s)):
        if not seconds >= 0:
            raise TfschedError(f"{name} must be a non-negative number of seconds, got {seconds!r}")
    if policy not in POLICIES:
        raise TfschedError(f"unknown simulation policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if credit_bytes is not None and credit_bytes <= 0:
        raise TfschedError(f"credit must be positive, got {credit_bytes}")
    if not is_count(ack_group, least=1):
        raise TfschedError(f"ack_group must be a positive integer (slices), got {ack_group!r}")
    if host_credit and credit_bytes is None:
        raise TfschedError("a window per sending task (host_credit) needs a credit")
    if executor_threads is not None and not (is_count(executor_threads) and executor_threads >= 1):
        raise TfschedError(f"executor_threads must be a whole number of threads, got {executor_threads!r}")
    if stream_window_bytes is not None and not (is_count(stream_window_bytes) and stream_window_bytes >= 1):
        raise TfschedError(
            f"stream_window_bytes must be a positive number of bytes, got {stream_window_bytes!r}"
        )
    if push_credit_bytes is not None and (credit_bytes is None or push_credit_bytes <= 0):
        raise TfschedError(
            f"a window for the pushes needs a credit and must be positive, got {push_credit_bytes}"
        )
    n = len(sg)
    ack_from = max(min_acked_bytes, credit_bytes // check_ack_share(ack_share)) if credit_bytes else 0
    rng = random.Random(seed)
    tiebreak = [rng.random() for _ in range(n)] if policy == "random" else list(range(n))
    race_rng = random.Random(f"race:{seed}")  # its own stream: the policy's ties stay as they were
    race_key = [race_rng.random() for _ in range(n)] if race else []
    npred = list(sg.npred)
    starts = [math.nan] * n if record else []
    sends = [math.nan] * n if record else []
    ends = [math.nan] * n if record else []

    pushing = pushing_gates(sg)
    how = release_policies(sg, policy, pushing)
    # Per message: whether it takes credit and is acknowledged.
    acked = [
        credit_bytes is not None and how[i] in ("counter", "queue") and sg.nbytes[i] >= ack_from
        for i in range(n)
    ]
    # Counter policy: a message's rank is the number of messages on its gate channel with a smaller key.
    rank = [0] * n
    if "counter" in how:
        by_gate: dict[tuple, list[int]] = defaultdict(list)
        for i in range(n):
            if sg.kind[i] == MESSAGE and how[i] == "counter":
                by_gate[sg.gate[i]].append(i)
        for ids in by_gate.values():
            ids.sort(key=lambda i: sg.key[i])
            r = 0
            for j, i in enumerate(ids):
                if j and sg.key[i] != sg.key[ids[j - 1]]:
                    r = j
                rank[i] = r
    released_count: dict[tuple, int] = defaultdict(int)
    waiting: dict[tuple, list] = defaultdict(list)  # gate -> heap of (rank or key, tiebreak, id)
    fifo_waiting: dict[tuple, list] = defaultdict(list)  # gate -> heap of (ready time, tiebreak, id)
    inflight: dict[tuple, int] = defaultdict(int)  # gate -> bytes released but not yet received
    # host_credit: sending task -> heap of ((step, worker), order, tiebreak, id) (with lockstep,
    # (order, (step, worker), tiebreak, id)), and its bytes in flight
    host_waiting: dict[str, list] = defaultdict(list)
    host_inflight: dict[str, int] = defaultdict(int)
    # sending task -> its window: the pushing tasks' is push_credit_bytes where given
    window = defaultdict(lambda: credit_bytes)
    if push_credit_bytes is not None:
        window.update(dict.fromkeys((gate[0] for gate in pushing), push_credit_bytes))
    # Per message: whether it takes credit and how much, whether it is acknowledged and what its
    # acknowledgement returns (ack_groups); ``acked`` stays what the credit counts (kept in order)
    credited, taken, acks, back = ack_groups(
        sg,
        acked,
        how,
        ack_group if credit_return == "ack" else 1,
        lambda gate: window[gate[0]],
        within_transfers=host_credit,
    )
    windowed = [host_credit and c for c in credited]  # messages the task's window takes

    ready_ops: dict[str, list] = defaultdict(list)  # resource -> heap of (ready time, tiebreak, id)
    # channel -> the released messages waiting for it: ``wire`` in the order of release (every
    # message, or with race those a credit window acknowledges), ``pool`` with race the others, a
    # heap of (random key, id)
    wire: dict[str, deque] = defaultdict(deque)
    pool: dict[str, list] = defaultdict(list)
    # channel -> the message it serves: its bytes (with overlap), or its overhead and then its bytes
    in_service: dict[str, int] = {}
    flows: dict[int, float] = {}  # message -> bytes left (data phase)
    # with stream_window_bytes: message -> its bytes not yet handed to the wire
    unsent: dict[int, int] = {}
    rates: dict[int, float] = {}
    events: list = []  # (time, seq, kind, id)
    seq = 0
    now = 0.0
    run_start: dict[tuple[str, int], float] = {}
    run_finish: dict[tuple[str, int], float] = {}

    def push_event(t: float, kind: str, i: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, i, version[i] if kind == "op" else 0))
        seq += 1

    # Compute: a resource of capacity c runs up to ceil(c) ops at once, sharing c among them
    # (each at min(1, c / running)); an op's duration is its time alone. When every task runs
    # on one machine (SimGraph.machine_slots: the ops' worth of work it does at once), they share
    # it with the flows' CPU (comm_load, in slots). The flows take theirs first, at most all but
    # MIN_OPS_SHARE of the machine (slowed alike beyond it), and the ops share what is left. A
    # change in the ops running, or in the flows' rates, reschedules the ops' ends (events of an
    # op's older schedule are ignored).
    running: dict[str, dict[int, float]] = defaultdict(dict)  # resource -> op -> work left (s)
    rate_of: dict[str, float] = defaultdict(lambda: 1.0)
    updated: dict[str, float] = defaultdict(float)
    version = [0] * n
    comm_load = 0.0  # machine slots the bytes on the wire take now
    host_load: dict[str, float] = {}  # with host_slots: task -> its share its bytes take now
    shared = sorted({sg.resource[i] for i in range(n) if sg.kind[i] == COMPUTE}) if sg.machine_slots else []
    # each acknowledgement's CPU: an op of its own on ACKS (id n + the message's), sharing the machine
    charge_acks = credit_return == "ack" and ack_slot_s > 0 and bool(shared) and any(acks)
    if charge_acks:
        shared.append(ACKS)
        version.extend([0] * n)

    def members(res: str) -> list[str]:
        """The compute resources whose ops' speed depends on ``res``'s."""
        return shared if sg.machine_slots and res in shared else [res]

    def own_rate(res: str) -> float:
        ops = running[res]
        at_once = _ACKS_AT_ONCE if res == ACKS else sg.capacity.get(res, 1)
        return min(1.0, at_once / len(ops)) if ops else 1.0

    def advance(res: str) -> None:
        """Work done by the ops running on ``res`` (and the resources sharing its cores) since
        they last changed."""
        for r in members(res):
            elapsed = now - updated[r]
            if elapsed > 0:
                ops = running[r]
                for j in ops:
                    ops[j] -= rate_of[r] * elapsed
            updated[r] = now

    def reschedule(res: str, new: list[int]) -> None:
        """Push the ends of the ``new`` ops, and of all ops whose rate changed."""
        group = members(res)
        rates = {r: own_rate(r) for r in group}
        if sg.machine_slots:
            # the flows first (as the kernel's network work); the ops share what they leave, at
            # least MIN_OPS_SHARE of the machine (comm_load is capped where the flows are rated)
            caps = None
            if sg.host_slots is not None:  # each task's own cores, less what its bytes take there
                caps = {r: sg.host_slots - host_load.get(r, 0.0) for r in group if r != ACKS}
            rates = _machine_shares(
                {r: (len(running[r]), rates[r]) for r in group}, sg.machine_slots - comm_load, caps
            )
        fresh = set(new)
        for r in group:
            ops = running[r]
            rate = rates[r]
            changed = rate != rate_of[r]
            rate_of[r] = rate
            for j in ops:
                if changed or j in fresh:
                    version[j] += 1
                    push_event(now + max(ops[j], 0.0) / rate, "op", j)

    def start_ops(res: str) -> None:
        advance(res)
        limit = math.ceil(sg.capacity.get(res, 1))
        new = []
        while len(running[res]) < limit and ready_ops[res]:
            _, _, i = heapq.heappop(ready_ops[res])
            if i >= _ACK_OP * n:  # an acknowledgement's op got a thread: it goes on at once
                push_event(now, "acked" if i < _CREDIT_OP * n else "credit", i % n)
                continue
            running[res][i] = sg.duration[i]
            new.append(i)
            if record:
                starts[i] = now
        if new:
            reschedule(res, new)

    def cores_taken(task: str) -> bool:
        """Whether ops (and bytes) now hold every core a thread of ``task`` could run on: the
        machine's, where the tasks share one, or the task's own share of it (``host_slots``);
        the task's own capacity where each task has a machine of its own."""
        if not sg.machine_slots:
            return len(running[task]) >= math.ceil(sg.capacity.get(task, 1))
        full = 1.0 - 1e-9
        if sum(len(running[r]) * own_rate(r) for r in shared) + comm_load >= sg.machine_slots * full:
            return True
        if sg.host_slots is None:
            return False
        return len(running[task]) * rate_of[task] + host_load.get(task, 0.0) >= sg.host_slots * full

    def sent(i: int) -> None:
        """Message ``i``'s last byte left the sender: it arrives one latency later, and a credit
        returned when sent comes back now (gRPC's callback, no op of the sender's), or
        ``handoff_s`` later where ops hold the sender's cores."""
        push_event(now + latency_s, "arrive", i)
        if acked[i] and credit_return == "sent":
            wait = handoff_s if handoff_s and cores_taken(sg.gate[i][0]) else 0.0
            push_event(now + wait, "credit", i)

    def on_executor(task: str, then, code: int, i: int) -> None:
        """Message ``i``'s acknowledgement runs an op of ``task`` (the receiver's ``TfschedAck``,
        the sender's ``TfschedCredit``), and ``then(i)`` once it has. With ``executor_threads``,
        where the task's ops can hold every thread, the op waits in the task's ready queue (the
        ops ready before it first) until one is free; it holds none for long: ``code`` names what
        goes on (start_ops)."""
        if executor_threads is None or executor_threads > math.ceil(sg.capacity.get(task, 1)):
            then(i)
        else:
            heapq.heappush(ready_ops[task], (now, tiebreak[i], code * n + i))
            start_ops(task)

    def acknowledge(i: int) -> None:
        """Message ``i`` arrived and its receiver acknowledged it: the acknowledgement's CPU runs
        (if charged), then the acknowledgement reaches the sender one per-message overhead (plus
        latency) later."""
        if charge_acks:
            advance(ACKS)
            running[ACKS][n + i] = ack_slot_s
            reschedule(ACKS, [n + i])
        else:
            push_event(now + sg.overhead[i] + latency_s, "ack", i)

    def give_back(i: int) -> None:
        """Message ``i``'s credit is back (its group's, ``back``): its window (the channel's, or
        its task's) lets more go."""
        if host_credit:  # every message a credit counts is its task window's then
            host_inflight[sg.gate[i][0]] -= back[i]
            try_release(*pump_host(sg.gate[i][0]))
        else:
            inflight[sg.gate[i]] -= back[i]
            try_release(sg.gate[i])

    def serve(ch: str) -> None:
        kept, raced = wire[ch], pool[ch]
        if ch in in_service or not (kept or raced):
            return
        # the head of the kept order is one more racer among the raced ones
        if kept and (not raced or race_rng.random() * (len(raced) + 1) < 1):
            i = kept.popleft()
        else:
            i = heapq.heappop(raced)[1]
        in_service[ch] = i
        # with overlap the message paid its overhead before it waited for the channel (and a
        # message's next window pays none)
        push_event(now + (0.0 if overlap or i in unsent else sg.overhead[i]), "overhead", i)

    def flow_weight(spec: list) -> dict[int, float] | None:
        """``worker_weight ** k`` for each flow to or from worker k, None when all weigh alike."""
        if worker_weight == 1.0:
            return None
        return {i: worker_weight ** _worker_index(sg.resource[i]) for i, *_ in spec}

    def enqueue(i: int) -> None:
        """Message ``i`` waits for its channel, in the order kept or racing (``race``)."""
        ch = sg.resource[i]
        if race and not acked[i]:
            # the rest of a message (stream_window_bytes) goes behind every message racing for
            # the first time (keys under 1), in a new draw among the other rests
            heapq.heappush(pool[ch], (1 + race_rng.random() if i in unsent else race_key[i], i))
        else:
            wire[ch].append(i)
        serve(ch)

    def release(i: int) -> None:
        gate = sg.gate[i]
        if how[i] == "counter":  # counters count gated transfers only, as the gates do
            released_count[gate] += 1
        if windowed[i]:
            host_inflight[gate[0]] += taken[i]
        elif credited[i]:
            inflight[gate] += taken[i]
        if record:
            starts[i] = now
        if overlap:
            push_event(now + sg.overhead[i], "prepared", i)
        else:
            enqueue(i)

    def pump_host(src: str) -> list[tuple]:
        """Release what the task's window takes, head first (cc/gate.cc HostLink::Pump); returns
        the gates whose counters moved."""
        heap, moved = host_waiting[src], []
        while heap:
            i = heap[0][-1]
            if host_inflight[src] > 0 and host_inflight[src] + taken[i] > window[src]:
                break
            heapq.heappop(heap)
            release(i)
            moved.append(sg.gate[i])
        return moved

    def try_release(*gates: tuple) -> None:
        # The head goes first or nobody does (cc/gate.cc Channel::Pump). Iterative: a window's
        # release lets the next message of a channel through, which may reach the window again.
        todo = list(gates)
        while todo:
            gate = todo.pop()
            heap = waiting[gate]
            while heap:
                order, _, i = heap[0]
                if how[i] == "counter" and order > released_count[gate]:
                    break
                if windowed[i]:  # its turn on the channel; now the task's window decides
                    heapq.heappop(heap)
                    age = (sg.step[i], sg.worker[i])
                    key = (order, age) if lockstep else (age, order)
                    heapq.heappush(host_waiting[gate[0]], (*key, tiebreak[i], i))
                    todo.extend(pump_host(gate[0]))
                    continue
                if credited[i] and inflight[gate] > 0 and inflight[gate] + taken[i] > window[gate[0]]:
                    break
                heapq.heappop(heap)
                release(i)

    def became_ready(i: int) -> None:
        k = sg.kind[i]
        run = (sg.worker[i], sg.step[i])
        if run not in run_start:
            run_start[run] = now
        if k == COMPUTE:
            heapq.heappush(ready_ops[sg.resource[i]], (now, tiebreak[i], i))
            start_ops(sg.resource[i])
        elif k == MESSAGE:
            if how[i] in ("fifo", "random"):
                # Ties at one instant: graph order, or the seeded shuffle.
                heapq.heappush(fifo_waiting[sg.gate[i]], (now, tiebreak[i], i))
                push_event(now, "flush", i)
            elif how[i] == "counter":
                heapq.heappush(waiting[sg.gate[i]], (rank[i], tiebreak[i], i))
                try_release(sg.gate[i])
            else:
                heapq.heappush(waiting[sg.gate[i]], (sg.key[i], tiebreak[i], i))
                try_release(sg.gate[i])
        elif k == DELAY:
            push_event(now + sg.duration[i], "delay", i)
        else:
            done(i)

    def done(i: int) -> None:
        if record:
            ends[i] = now
        if sg.kind[i] != BARRIER:
            run = (sg.worker[i], sg.step[i])
            run_finish[run] = max(run_finish.get(run, 0.0), now)
        for s in sg.succ[i]:
            npred[s] -= 1
            if npred[s] == 0:
                became_ready(s)

    for i in range(n):
        if npred[i] == 0:
            became_ready(i)

    # per message: the bytes left at which its flow is done, and its channel's host links
    done_at = {i: _EPS * max(1.0, sg.nbytes[i]) for i in range(n) if sg.kind[i] == MESSAGE}
    links: dict[str, tuple[str, str]] = {}
    while True:
        t_event = events[0][0] if events else math.inf
        t_flow, f_first = math.inf, -1
        for i, left in flows.items():
            r = rates[i]
            t = now + left / r if r > 0 else math.inf
            if t < t_flow:
                t_flow, f_first = t, i
        t_next = min(t_event, t_flow)
        if t_next == math.inf:
            break
        dt = t_next - now
        now = t_next
        changed = False
        first = f_first if t_flow <= t_event else -1
        finished = []
        for i, left in flows.items():
            if dt > 0:
                left -= rates[i] * dt
                flows[i] = left
            if left <= done_at[i] or i == first:
                finished.append(i)
        for i in finished:
            del flows[i]
            changed = True
            ch = sg.resource[i]
            del in_service[ch]
            if unsent.get(i):  # a window of it went: the rest waits behind the others (enqueue)
                enqueue(i)
                continue
            unsent.pop(i, None)
            serve(ch)
            sent(i)
        while events and events[0][0] <= now:
            _, _, kind, i, ver = heapq.heappop(events)
            if kind == "op":
                res = ACKS if i >= n else sg.resource[i]
                if ver != version[i] or i not in running[res]:
                    continue  # rescheduled since
                advance(res)
                del running[res][i]
                reschedule(res, [])
                if i >= n:  # an acknowledgement's CPU is done: it goes back to the sender
                    push_event(now + sg.overhead[i - n] + latency_s, "ack", i - n)
                    continue
                start_ops(res)
                done(i)
            elif kind == "overhead":
                if record and i not in unsent:
                    sends[i] = now
                if sg.nbytes[i] > 0 and math.isfinite(sg.bandwidth[i]):
                    if stream_window_bytes and not acked[i]:
                        left = unsent.get(i, sg.nbytes[i])
                        flows[i] = float(min(left, stream_window_bytes))
                        unsent[i] = left - min(left, stream_window_bytes)
                    else:
                        flows[i] = float(sg.nbytes[i])
                    changed = True
                else:
                    del in_service[sg.resource[i]]
                    serve(sg.resource[i])
                    sent(i)
            elif kind == "prepared":
                enqueue(i)
            elif kind == "delay":
                done(i)
            elif kind == "arrive":
                done(i)
                if acks[i] and credit_return == "ack":
                    on_executor(sg.gate[i][1], acknowledge, _ACK_OP, i)
            elif kind == "acked":
                acknowledge(i)
            elif kind == "ack":  # the acknowledgement reached the sender, whose op gives the credit
                on_executor(sg.gate[i][0], give_back, _CREDIT_OP, i)
            elif kind == "credit":
                give_back(i)
            elif kind == "flush":
                gate = sg.gate[i]
                heap = fifo_waiting[gate]
                while heap and heap[0][0] <= now:
                    release(heapq.heappop(heap)[2])
        if changed:
            spec = []
            for i in flows:
                ch = sg.resource[i]
                if ch not in links:
                    src, dst = ch.split("->")
                    links[ch] = ("up:" + src, "down:" + dst)
                spec.append((i, *links[ch], sg.bandwidth[i]))
            rates = _max_min_rates(spec, sg.link_capacity, flow_weight(spec)) if spec else {}
            if shared and sg.comm_slot_s_per_byte:
                advance(shared[0])  # the ops ran at the old share until now
                if sg.host_slots and sg.host_bytes:  # each end's CPU within its own task's cores
                    rates, host_load = _host_comm(
                        spec, rates, sg.comm_slot_s_per_byte, sg.host_slots, sg.host_byte_shares
                    )
                wanted = sum(rates.values()) * sg.comm_slot_s_per_byte
                # more than the machine can move: every flow slows alike
                most = (1 - MIN_OPS_SHARE) * sg.machine_slots
                if wanted > most:
                    rates = {f: r * most / wanted for f, r in rates.items()}
                    host_load = {t: load * most / wanted for t, load in host_load.items()}
                comm_load = min(wanted, most)
                reschedule(shared[0], [])

    stuck = [
        e[-1] for heaps in (waiting, fifo_waiting, host_waiting) for heap in heaps.values() for e in heap
    ]
    unfinished = stuck + [i for i in range(n) if npred[i] > 0]
    if unfinished:
        raise TfschedError(
            f"simulation stalled with {len(unfinished)} ops never ready (first: {sg.name[unfinished[0]]})"
        )
    makespan = max(run_finish.values(), default=0.0)
    return SimResult(
        makespan=makespan, run_finish=run_finish, run_start=run_start, starts=starts, sends=sends, ends=ends
    )
