"""Time estimates from traces: per-op statistics and per-link transfer models.

TicTac §5 takes the minimum over steps as an op's time; median, mean and percentiles (``p90``)
are offered too. A link's model (duration = overhead + bytes / bandwidth) is fitted to its
observed transfers, so that transfers never observed, or slices of partitioned ones, get a
time; a host's link capacity is measured over its channels together (``host_rates``).

A RecvTensor's recorded duration runs from the request to the last byte, so it includes the
time spent queued behind earlier tensors of the same connection, and gRPC runs a connection's
RPCs at once: with every pull requested at the start of a step, the late ones look slow
whatever their size. ``link_fits`` therefore fits the channel's busy periods, not messages.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from tfsched.errors import TfschedError
from tfsched.graph.devices import task_of
from tfsched.oracle.oracle import DEFAULT_OVERHEAD_S, LinkModel
from tfsched.tracing.trace import Trace, send_node


def statistic_fn(name: str):
    """``min`` (TicTac), ``median``, ``mean``, ``max`` or a percentile ``pNN``."""
    if name == "min":
        return min
    if name == "max":
        return max
    if name == "mean":
        return lambda xs: float(np.mean(xs))
    if name == "median":
        return lambda xs: float(np.median(xs))
    m = re.fullmatch(r"p([0-9]{1,2}(?:\.[0-9]+)?)", name)
    if m:
        q = float(m.group(1))
        return lambda xs: float(np.percentile(xs, q))
    raise TfschedError(f"unknown statistic {name!r}; use min, median, mean, max or pNN (e.g. p90)")


@dataclass(frozen=True)
class LinkFit:
    """A fitted link: the model and how well it explains the observations."""

    model: LinkModel
    samples: int
    rmse_s: float
    r2: float
    # where the per-message overhead came from (``link_fits``): the link's busy periods, every
    # link's, a line through its service times, or ``DEFAULT`` when the trace cannot tell
    overhead_from: str = "periods"


DEFAULT = "default"


def fit_link(nbytes: list[float], seconds: list[float]) -> LinkFit:
    """Least squares of seconds = overhead + 8 * bytes / bandwidth (both kept physical)."""
    if not nbytes:
        raise TfschedError("cannot fit a link without observed transfers")
    x = np.asarray(nbytes, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if len(x) >= 2 and np.ptp(x) > 0:
        slope, intercept = np.polyfit(x, y, 1)
    else:
        slope, intercept = (float(np.mean(y)) / max(float(np.mean(x)), 1.0), 0.0)
    if slope <= 0:  # sizes do not explain times (tiny tensors only): all overhead
        slope, intercept = 1e-12, float(np.mean(y))
    if intercept < 0:  # refit through the origin
        intercept, slope = 0.0, float(np.dot(x, y) / max(np.dot(x, x), 1e-30))
    pred = intercept + slope * x
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - np.mean(y)) ** 2))
    return LinkFit(
        model=LinkModel(bandwidth_bps=float(8.0 / slope), overhead_s=float(intercept)),
        samples=len(x),
        rmse_s=math.sqrt(ss_res / len(x)),
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
    )


def op_times(trace: Trace, statistic: str = "min") -> dict[str, float]:
    """Seconds per op name, ``statistic`` over the traced steps. tfsched's gates are left out:
    their duration is waiting for their turn, not compute (``compute_parallelism`` leaves them
    out alike), and the graph that ran a scheduled trace has them as Identities
    (``tracing.replay._without_the_pass``)."""
    f = statistic_fn(statistic)
    per: dict[str, list[float]] = defaultdict(list)
    for o in trace.ops:
        if o.op.startswith("Tfsched"):
            continue
        per[o.node].append(o.duration_us / 1e6)
    return {name: f(xs) for name, xs in per.items()}


# The op of tfsched's crossing's gates that does not wait: an arrival at a count
# (cc/crossing.cc; a wait's time is mostly its wait). What one of the gates' ops costs, where a
# trace ran them.
GATE_OPS = ("TfschedCrossArrive",)


def gate_op_time(trace: Trace, statistic: str = "min") -> float | None:
    """Seconds one op of the crossing's gates costs its PS (``TimeOracle.gate_op_s``): the
    median over the PS tasks' gate ops (``GATE_OPS``) of each one's ``statistic`` over the
    traced steps; None where the trace ran none (a step behind the barrier).

    >>> from tfsched.tracing.trace import OpRecord
    >>> ps, w = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"
    >>> ops = [OpRecord(0, ps, "a", "TfschedCrossArrive", 0, 3), OpRecord(1, ps, "a", "TfschedCrossArrive", 0, 2),
    ...        OpRecord(0, ps, "b", "TfschedCrossArrive", 0, 4), OpRecord(0, ps, "c", "TfschedCrossArrive", 0, 6),
    ...        OpRecord(0, ps, "d", "TfschedCrossWait", 0, 900), OpRecord(0, w, "y", "TfschedCrossArrive", 0, 1)]
    >>> round(gate_op_time(Trace(steps=2, ops=ops)) * 1e6, 3)
    4.0
    >>> gate_op_time(Trace(steps=1, ops=ops[-1:])) is None
    True
    """
    f = statistic_fn(statistic)
    per: dict[str, list[float]] = defaultdict(list)
    for o in trace.ops:
        if o.op in GATE_OPS and "/job:ps/" in o.device:
            per[o.node].append(o.duration_us / 1e6)
    return statistics.median(f(xs) for xs in per.values()) if per else None


MAX_SLOTS = 8


def compute_parallelism(trace: Trace) -> dict[str, float]:
    """Ops' worth of work each task does at once, from a trace: op time over computing time.

    TensorFlow runs ready ops of a partition on several inter-op threads; summing op times
    one after another (TicTac's one-op-at-a-time model) then overstates a step, by this factor.
    Per task: the median over steps of (sum of op durations) / (length of the union of op
    intervals), to a tenth, at least 1. Gates are left out: their duration is mostly waiting.
    The simulator shares a fractional capacity among the ops running (engine); rounding it to
    whole threads, as an earlier version did, made a prediction jump when the ratio crossed a
    half (VGG16's worker measures about 1.5).
    """
    per: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for o in trace.ops:
        if o.op.startswith("Tfsched") or o.duration_us <= 0:
            continue
        per[(o.step, task_of(o.device))].append((o.start_us, o.start_us + o.duration_us))
    ratios: dict[str, list[float]] = defaultdict(list)
    for (_step, task), spans in per.items():
        union = _union_length(spans)
        if union > 0:
            ratios[task].append(sum(b - a for a, b in spans) / union)
    return {task: max(1.0, min(MAX_SLOTS, round(statistics.median(r), 1))) for task, r in ratios.items()}


def task_starts(trace: Trace, statistic: str = "min") -> dict[str, float]:
    """Seconds from the start of a step until each task runs its first op, ``statistic`` over steps.

    A step starts when the master hands every task its partition (a RunGraph call each); a task
    begins only when its call arrives and its executor is up, milliseconds after the first
    task on a busy machine (a PS after the worker that is its client, say). Ops with no inputs
    are ready at once, so a task's first op marks its start. Step times in a trace are relative
    to the earliest op of the step, so the earliest task starts at about 0.
    """
    f = statistic_fn(statistic)
    first: dict[tuple[int, str], float] = {}
    for o in trace.ops:
        key = (o.step, task_of(o.device))
        first[key] = min(first.get(key, math.inf), o.start_us)
    per: dict[str, list[float]] = defaultdict(list)
    for (_step, task), t in first.items():
        per[task].append(max(t, 0.0) / 1e6)
    return {task: f(xs) for task, xs in per.items()}


def _union_length(spans: list[tuple[float, float]]) -> float:
    """Length of the union of intervals (start, end)."""
    total, last = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > last:
            total += b - max(a, last)
            last = b
    return total


def _producer_ends(trace: Trace) -> dict[tuple[int, str, str], float]:
    """(step, task, op) -> when the op ended: a transfer's bytes can flow only after it; for a
    ``_Send``, when it started (it hands its tensor over as it runs)."""
    return {
        (o.step, task_of(o.device), o.node): o.start_us + (0.0 if o.op == "_Send" else o.duration_us)
        for o in trace.ops
    }


def _flow_start(t, produced: dict[tuple[int, str, str], float]) -> float:
    """When a transfer's bytes could start to flow: its request or its producer's end, the later.

    Where its producer was not traced, its send's start stands for it, if the trace names the
    send (``trace.send_node``: TensorFlow 2's calls, whose profiler leaves out the inexpensive
    ops a session's step stats keep). A call's ``GroupCrossDeviceControlEdges`` identity on a PS
    (an empty tensor to the worker once the PS's part of the call is done, its Identity not
    traced) was taken to flow from its request at the call's start: on TensorFlow 2's VGG16
    training (1 PS x 4 workers, worker 0 alone, ``bench.tf2.solo_round``) it made each step's
    pulls one busy period of 7.6 s for 1.3 s of bytes, the fit put 149 ms on every pull, and the
    credit windows' acknowledged slices waited for it: one window per task was predicted 28%
    slow (``benchmarks/results/tf2-vgg16-train-hosts-s66.md``), +1% with this
    (``tf2-vgg16-train-hosts-s66-repredicted.md``)."""
    src = task_of(t.src)
    ready = produced.get((t.step, src, t.tensor.rsplit(":", 1)[0]))
    if ready is None:
        named = send_node(t.edge)
        ready = produced.get((t.step, src, named[0])) if named else None
    return min(max(t.start_us, -math.inf if ready is None else ready), t.start_us + t.duration_us)


def _by_channel_step(trace: Trace) -> dict[tuple[int, str, str], list]:
    out: dict[tuple[int, str, str], list] = defaultdict(list)
    for t in trace.transfers:
        out[(t.step, task_of(t.src), task_of(t.dst))].append(t)
    return out


# A busy-period fit is used only when the periods' (messages, bytes) are far from collinear:
# the smallest singular value of the column-normalized design over the largest.
MIN_PERIOD_CONDITION = 0.05

# A link traced with fewer messages a step than this gets the fit of every link together: its
# own busy time, split over so few messages, says little about the next message. par32
# training pushes 2 tensors a step in the graph that ran (Grappler merges its 32 identical
# weight gradients into one MatMul); the saved graph the bench predicts on has 33, and the 2
# messages' busy time put 0.40 ms on each of the 33 in the simulator, 13 ms of a 22 ms step.
MIN_LINK_MESSAGES_PER_STEP = 3

# A line through per-message service times is trusted for the overhead where it explains them
# this well: messages that ran one after another (a queue), each taking overhead + bytes /
# bandwidth. Messages that ran at once have services that are gaps between completions,
# unrelated to their sizes: in a one-step trace of VGG16 inference under TAO gates (every gate
# released at once, the pulls in flight together) the line had R^2 0.03 and put 121 ms on each of
# 32 messages, and `analyze --trace` of it predicted the steps 32% longer than the vanilla trace of
# the same run did; the vanilla trace's pulls, queued, had R^2 0.86.
MIN_SERVICE_R2 = 0.5
# ... and a line that does not is still taken unless the channel's messages would spend more than
# this share of its busy time on its overhead: on a busy machine a message can cost milliseconds
# (ResNet-50 inference's 320 pulls, vanilla, one step: R^2 0.16, 5.98 ms each, 62% of the busy
# time, and the step predicted within 1% of the one measured; with 300 us, 8% short). The lines
# it catches in the thirty-second session's runs took 86% (VGG16's gated pulls above) and 88%
# (Seq-32's pulls, all 256 KB).
MAX_UNEXPLAINED_OVERHEAD = 0.75


@dataclass(frozen=True)
class _Period:
    """A busy period of a channel in one step: time from the first byte that could flow to the
    last byte of the messages in flight together, with how many messages and bytes it carried."""

    step: int
    seconds: float
    messages: int
    bytes: int


def _busy_periods(trace: Trace) -> dict[tuple[str, str], list[_Period]]:
    """Per (sender task, receiver task): the channel's busy periods, every step.

    A message can flow from its request or its producer's end, whichever is later, until it
    arrives; overlapping messages (gRPC runs a connection's RPCs at once) form one period.
    """
    produced = _producer_ends(trace)
    out: dict[tuple[str, str], list[_Period]] = defaultdict(list)
    for (step, src, dst), ts in _by_channel_step(trace).items():
        spans = sorted((_flow_start(t, produced), t.start_us + t.duration_us, t.bytes) for t in ts)
        first, last, n, nbytes = spans[0][0], spans[0][1], 0, 0
        for a, b, size in spans:
            if a > last:
                out[(src, dst)].append(_Period(step, (last - first) / 1e6, n, nbytes))
                first, last, n, nbytes = a, b, 0, 0
            last = max(last, b)
            n += 1
            nbytes += size
        out[(src, dst)].append(_Period(step, (last - first) / 1e6, n, nbytes))
    return out


def _fit_periods(periods: list[_Period]) -> LinkModel | None:
    """Non-negative least squares of period = messages * overhead + 8 * bytes / bandwidth.

    None when the periods cannot tell the two apart: fewer than three, or (messages, bytes)
    nearly proportional, as when every pull of a step is requested at once and each step is
    one period of the same messages.
    """
    if len(periods) < 3:
        return None
    a = np.array([[p.messages, p.bytes] for p in periods], dtype=float)
    y = np.array([p.seconds for p in periods], dtype=float)
    norms = np.linalg.norm(a, axis=0)
    if not np.all(norms > 0):
        return None
    sv = np.linalg.svd(a / norms, compute_uv=False)
    if sv[-1] < MIN_PERIOD_CONDITION * sv[0]:
        return None
    (overhead, per_byte), _ = nnls(a, y)
    if per_byte <= 0:
        return None
    return LinkModel(bandwidth_bps=8.0 / per_byte, overhead_s=float(overhead))


def _period_error(model: LinkModel, periods: list[_Period]) -> tuple[float, float]:
    """RMSE (s) and R^2 of the model's prediction of each busy period."""
    y = np.array([p.seconds for p in periods], dtype=float)
    pred = np.array([p.messages * model.overhead_s + 8.0 * p.bytes / model.bandwidth_bps for p in periods])
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - np.mean(y)) ** 2))
    return math.sqrt(ss_res / len(y)), (1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0)


def link_fits(trace: Trace, statistic: str = "min") -> tuple[dict[tuple[str, str], LinkFit], LinkFit]:
    """Per (sender task, receiver task) fits, and one over every link (for links never seen).

    Two questions, answered from different data:

    - The split between per-message overhead and bandwidth comes from the channel's busy
      periods (``_busy_periods``): each period takes, under the simulator's channel model,
      ``messages * overhead + bytes / bandwidth``, whatever order its messages ran in.
      Non-negative least squares over the periods of the link gives both; when they cannot
      tell them apart (pulls: one period per step, always the same messages) the periods of
      every link together give the overhead, and when those cannot either, a line through
      per-message service times does (``service = end - max(start, producer's end, end of the
      previous message on the channel)``, ``statistic`` over steps), unless it explains them
      little and puts most of the busy time on the overhead: then ByteScheduler's 300 us
      (``_service_fit``). A link traced with fewer
      than ``MIN_LINK_MESSAGES_PER_STEP`` messages a step gets the fit of every link together.
    - The bandwidth is then set so that each channel's messages take, in total, the channel's
      measured busy time (``statistic`` over steps): a per-message statistic (the minimum above
      all) would otherwise credit the link with more speed than it has.

    Improvement over TicTac (§5 fits per-transfer times) and over this module's earlier
    per-message fit: gRPC runs a connection's RPCs concurrently, so which message finishes
    next, and so each message's service time, is nearly unrelated to its size. On AlexNet a
    line through those times put 4.8 ms on each message and left the gradients' 99 MB about
    9 ms of link time in a step whose pushes took 91 ms; simulated steps came out 11% short
    (``benchmarks/results/sim_accuracy.md``, which has the numbers after the change).
    """
    if not trace.transfers:
        raise TfschedError("the trace has no transfers to fit links to")
    f = statistic_fn(statistic)
    produced = _producer_ends(trace)
    per_edge: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    size: dict[tuple[str, str, str], int] = {}
    for (_step, src, dst), ts in _by_channel_step(trace).items():
        prev_end = -math.inf
        for t in sorted(ts, key=lambda t: t.start_us + t.duration_us):
            end = t.start_us + t.duration_us
            service = max(end - max(_flow_start(t, produced), prev_end), 0.0)
            prev_end = end
            key = (src, dst, t.tensor)
            per_edge[key].append(service / 1e6)
            size[key] = t.bytes
    by_link: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for key, xs in per_edge.items():
        b, s = by_link[(key[0], key[1])]
        b.append(size[key])
        s.append(f(xs))
    periods = _busy_periods(trace)
    everything = [p for ps in periods.values() for p in ps]
    pooled = _fit_periods(everything)

    def fit(link_periods: list[_Period], sizes: list[float], services: list[float]) -> LinkFit:
        own = _fit_periods(link_periods)
        if own is not None:
            split, source = own, "periods"
        elif pooled is not None:
            split, source = pooled, "every link's periods"
        else:
            split, source = _service_fit(sizes, services, link_periods, f)
        model = _to_busy_time(split, link_periods, f)
        rmse, r2 = _period_error(model, link_periods)
        return LinkFit(model=model, samples=len(link_periods), rmse_s=rmse, r2=r2, overhead_from=source)

    all_b = [b for bs, _ in by_link.values() for b in bs]
    all_s = [s for _, ss in by_link.values() for s in ss]
    overall = fit(everything, all_b, all_s)

    def messages_per_step(link_periods: list[_Period]) -> float:
        return sum(p.messages for p in link_periods) / max(trace.steps, 1)

    fits = {
        link: fit(periods[link], b, s)
        if messages_per_step(periods[link]) >= MIN_LINK_MESSAGES_PER_STEP
        else overall
        for link, (b, s) in by_link.items()
    }
    return fits, overall


def _service_fit(
    sizes: list[float], services: list[float], periods: list[_Period], f
) -> tuple[LinkModel, str]:
    """A line through per-message service times, with where its overhead came from
    (``LinkFit.overhead_from``). Where the line does not explain them (``MIN_SERVICE_R2``) and
    its overhead would take most of the channel's busy time (``MAX_UNEXPLAINED_OVERHEAD``), the
    trace cannot tell overhead from bandwidth: the services are gaps between messages in flight
    together, or sizes too alike for a slope (Seq-32's 256 KB pulls: 88% of their time put on the
    overhead, on an 8 Gbit/s link shaped to 1). The overhead is then ``DEFAULT_OVERHEAD_S``
    (ByteScheduler's measure, about what the bench measures a message to cost this machine's
    CPU), and the busy time (``_to_busy_time``) sets the bandwidth."""
    line = fit_link(sizes, services)
    seconds, n, _ = _busy_per_step(periods, f)
    if (
        line.r2 >= MIN_SERVICE_R2
        or line.model.overhead_s <= DEFAULT_OVERHEAD_S
        or line.model.overhead_s * n <= MAX_UNEXPLAINED_OVERHEAD * seconds
    ):
        return line.model, "service times"
    return LinkModel(bandwidth_bps=line.model.bandwidth_bps, overhead_s=DEFAULT_OVERHEAD_S), DEFAULT


def host_rates(
    trace: Trace, fits: dict[tuple[str, str], LinkFit], statistic: str = "min"
) -> dict[tuple[str, str], float]:
    """Bits per second each task's host link carried, per (task, "up" | "down").

    The channels of a task run at once (two workers pulling from one PS, say): each channel's
    fit already has the rate it got beside the others. A host link that carried them together
    carried their bytes in the union of their busy periods (``statistic`` over steps); the
    simulator must not share it again at a channel's rate, as it does a shaped NIC's. Never
    below the fastest channel on the link, which then runs alone at its own rate.
    """
    f = statistic_fn(statistic)
    produced = _producer_ends(trace)
    spans: dict[tuple[str, str, int], list[tuple[float, float]]] = defaultdict(list)
    nbytes_of: dict[tuple[str, str, int], int] = defaultdict(int)
    for t in trace.transfers:
        span = (_flow_start(t, produced), t.start_us + t.duration_us)
        for key in ((task_of(t.src), "up", t.step), (task_of(t.dst), "down", t.step)):
            spans[key].append(span)
            nbytes_of[key] += t.bytes
    union: dict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for (task, direction, step), ss in spans.items():
        union[(task, direction)].append((_union_length(ss) / 1e6, nbytes_of[(task, direction, step)]))
    out: dict[tuple[str, str], float] = {}
    for (task, direction), per_step in union.items():
        fastest = max(
            (
                fit.model.bandwidth_bps
                for (src, dst), fit in fits.items()
                if (src if direction == "up" else dst) == task
            ),
            default=0.0,
        )
        seconds = f([s for s, _ in per_step])
        nbytes = statistics.fmean(n for _, n in per_step)
        out[(task, direction)] = max(8.0 * nbytes / seconds if seconds > 0 else 0.0, fastest)
    return out


def _busy_per_step(periods: list[_Period], f) -> tuple[float, float, float]:
    """A channel's busy seconds a step (``f`` over steps of the sum of the step's periods), and
    its messages and bytes a step (means); zeros without periods."""
    per_step: dict[int, list[_Period]] = defaultdict(list)
    for p in periods:
        per_step[p.step].append(p)
    if not per_step:
        return 0.0, 0.0, 0.0
    seconds = f([sum(p.seconds for p in ps) for ps in per_step.values()])
    n = statistics.fmean(sum(p.messages for p in ps) for ps in per_step.values())
    nbytes = statistics.fmean(sum(p.bytes for p in ps) for ps in per_step.values())
    return seconds, n, nbytes


def _to_busy_time(split: LinkModel, periods: list[_Period], f) -> LinkModel:
    """The split's overhead, with the bandwidth set so that a step's messages take the measured
    busy time (``f`` over steps of the sum of the step's periods)."""
    if not periods:
        return split
    seconds, n, nbytes = _busy_per_step(periods, f)
    overhead = min(split.overhead_s, 0.9 * seconds / n) if n else split.overhead_s
    wire = seconds - n * overhead
    if nbytes <= 0 or wire <= 0:
        return split
    return LinkModel(bandwidth_bps=8.0 * nbytes / wire, overhead_s=overhead)
