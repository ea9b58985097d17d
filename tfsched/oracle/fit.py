"""Time estimates from traces: per-op statistics and per-link transfer models.

TicTac §5 takes the minimum over steps as an op's time; median, mean and percentiles (``p90``)
are offered too. A link's model is fitted by least squares to its observed transfers
(duration = overhead + bytes / bandwidth, each transfer's time taken with the same statistic
over steps), so that transfers never observed, or slices of partitioned ones, get a time.

A RecvTensor's recorded duration runs from the request to the last byte, so it includes the
time spent queued behind earlier tensors of the same connection: with every pull requested at
the start of a step, the late ones look slow whatever their size. The fit therefore uses
service times, under the simulator's channel model (one FIFO byte stream per channel):
``service = end - max(start, end of the previous transfer on the channel in that step)``.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from tfsched.errors import TfschedError
from tfsched.graph.devices import task_of
from tfsched.oracle.oracle import LinkModel
from tfsched.tracing.trace import Trace


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
    """Seconds per op name, ``statistic`` over the traced steps."""
    f = statistic_fn(statistic)
    per: dict[str, list[float]] = defaultdict(list)
    for o in trace.ops:
        per[o.node].append(o.duration_us / 1e6)
    return {name: f(xs) for name, xs in per.items()}


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
        spans.sort()
        union, end = 0.0, -math.inf
        for a, b in spans:
            if b > end:
                union += b - max(a, end)
                end = b
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


def _by_channel_step(trace: Trace) -> dict[tuple[int, str, str], list]:
    out: dict[tuple[int, str, str], list] = defaultdict(list)
    for t in trace.transfers:
        out[(t.step, task_of(t.src), task_of(t.dst))].append(t)
    return out


def link_fits(trace: Trace, statistic: str = "min") -> tuple[dict[tuple[str, str], LinkFit], LinkFit]:
    """Per (sender task, receiver task) fits, and one over every link (for links never seen).

    A transfer's service time is from when its bytes could start to flow (the request, the op
    that produced the tensor, or the end of the channel's previous transfer, whichever is last)
    to its arrival: waiting for the producer or behind other transfers is not link time. The
    line through the services (per tensor, ``statistic`` over steps) gives the split between
    per-message overhead and bandwidth; the bandwidth is then set so that each channel's
    messages take, in total, the channel's measured busy time (``statistic`` over steps):
    transfers of one channel overlap on gRPC's connection, and a per-message statistic (the
    minimum above all) would otherwise credit the link with more speed than it has.
    """
    if not trace.transfers:
        raise TfschedError("the trace has no transfers to fit links to")
    f = statistic_fn(statistic)
    produced = {(o.step, task_of(o.device), o.node): o.start_us + o.duration_us for o in trace.ops}
    per_edge: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    size: dict[tuple[str, str, str], int] = {}
    busy: dict[tuple[str, str], list[tuple[float, int, float]]] = defaultdict(list)  # per step: (s, n, bytes)
    for (step, src, dst), ts in _by_channel_step(trace).items():
        prev_end = -math.inf
        total = 0.0
        for t in sorted(ts, key=lambda t: t.start_us + t.duration_us):
            end = t.start_us + t.duration_us
            ready = produced.get((step, src, t.tensor.rsplit(":", 1)[0]), -math.inf)
            service = max(end - max(t.start_us, ready, prev_end), 0.0)
            prev_end = end
            total += service
            key = (src, dst, t.tensor)
            per_edge[key].append(service / 1e6)
            size[key] = t.bytes
        busy[(src, dst)].append((total / 1e6, len(ts), sum(t.bytes for t in ts)))
    by_link: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for key, xs in per_edge.items():
        b, s = by_link[(key[0], key[1])]
        b.append(size[key])
        s.append(f(xs))
    fits = {link: _to_busy_time(fit_link(b, s), busy[link], f) for link, (b, s) in by_link.items()}
    all_b = [b for bs, _ in by_link.values() for b in bs]
    all_s = [s for _, ss in by_link.values() for s in ss]
    overall = _to_busy_time(fit_link(all_b, all_s), [x for v in busy.values() for x in v], f)
    return fits, overall


def _to_busy_time(fit: LinkFit, steps: list[tuple[float, int, int]], f) -> LinkFit:
    """The fit with its bandwidth set so that a step's messages take the measured busy time."""
    if not steps:
        return fit
    seconds = f([s for s, _, _ in steps])
    n = statistics.fmean(k for _, k, _ in steps)
    nbytes = statistics.fmean(b for _, _, b in steps)
    overhead = min(fit.model.overhead_s, 0.9 * seconds / n) if n else fit.model.overhead_s
    wire = seconds - n * overhead
    if nbytes <= 0 or wire <= 0:
        return fit
    model = LinkModel(bandwidth_bps=8.0 * nbytes / wire, overhead_s=overhead)
    return LinkFit(model=model, samples=fit.samples, rmse_s=fit.rmse_s, r2=fit.r2)
