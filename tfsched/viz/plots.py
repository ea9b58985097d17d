"""Pictures of a trace: a Gantt chart of one step and a step-time CDF (TicTac Figure 8).

The Gantt chart has a compute row per device and a row per incoming link of each task; given
the simulator's record of the same step, it is drawn beside the measurement with the same rows.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tfsched.graph.devices import short_task, task_of  # noqa: E402
from tfsched.tracing.trace import WAIT_OPS, Trace  # noqa: E402


def trace_rows(trace: Trace, step: int) -> dict[str, list[tuple[float, float, str]]]:
    """Row name -> (start s, duration s, kind) bars of one traced step; kind "op" computes,
    "wait" is an op that waits (``WAIT_OPS``: a gate held until its turn), "transfer"."""
    rows: dict[str, list[tuple[float, float, str]]] = {}
    for o in trace.ops:
        if o.step == step and o.duration_us > 0:
            rows.setdefault(f"{short_task(task_of(o.device))} compute", []).append(
                (o.start_us / 1e6, o.duration_us / 1e6, "wait" if o.op in WAIT_OPS else "op")
            )
    for t in trace.transfers:
        if t.step == step:
            row = f"{short_task(task_of(t.dst))} ← {short_task(task_of(t.src))}"
            rows.setdefault(row, []).append((t.start_us / 1e6, t.duration_us / 1e6, "transfer"))
    return rows


def sim_rows(sg, result) -> dict[str, list[tuple[float, float, str]]]:
    """The same rows from a simulation run with ``record=True``."""
    from tfsched.sim.model import COMPUTE, MESSAGE

    rows: dict[str, list[tuple[float, float, str]]] = {}
    for i, kind in enumerate(sg.kind):
        if kind == COMPUTE and sg.duration[i] > 0 and not math.isnan(result.starts[i]):
            # ends - starts: ops sharing a task's capacity take longer than alone
            rows.setdefault(f"{short_task(sg.resource[i])} compute", []).append(
                (result.starts[i], result.ends[i] - result.starts[i], "op")
            )
        elif kind == MESSAGE and not math.isnan(result.ends[i]):
            src, dst = sg.resource[i].split("->")
            start = result.sends[i] if not math.isnan(result.sends[i]) else result.starts[i]
            rows.setdefault(f"{short_task(dst)} ← {short_task(src)}", []).append(
                (start, result.ends[i] - start, "transfer")
            )
    return rows


def worker_rows(
    traces: list[Trace], labels: list[str], step: int
) -> dict[str, list[tuple[float, float, str]]]:
    """``trace_rows`` of the same step of several workers' traces (``labels``: their workers, as
    ``viz.workers.worker_labels`` names them), each where the machines' wall clock had it, 0 the
    earliest worker's start of the step. A row of a trace that names another task alone (the
    PS's computing for that worker's step) says whose step it is."""
    first = min(t.step_starts_us[step] for t in traces)
    rows: dict[str, list[tuple[float, float, str]]] = {}
    for t, label in zip(traces, labels, strict=True):
        shift = (t.step_starts_us[step] - first) / 1e6
        for name, bars in trace_rows(t, step).items():
            own = label in name.replace(" ← ", " ").split()
            rows.setdefault(name if own else f"{name} in {label}'s step", []).extend(
                (s + shift, d, kind) for s, d, kind in bars
            )
    return rows


_COLORS = {"wait": "#D0D0D0", "op": "#4C72B0", "transfer": "#DD8452"}  # drawn in this order
_KINDS = {"wait": "waiting (gates, sends, no-ops)", "op": "computing", "transfer": "transfer"}


def _gantt(ax, rows: dict, order: list[str], title: str) -> None:
    drawn = set()
    for y, name in enumerate(order):
        bars = rows.get(name, [])
        for kind, color in _COLORS.items():
            spans = [(s, d) for s, d, k in bars if k == kind]
            if spans:
                ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=color, linewidth=0)
                drawn.add(kind)
    if "wait" in drawn:  # a key only where a bar could be read for computing
        from matplotlib.patches import Patch

        ax.legend(
            handles=[Patch(color=c, label=_KINDS[k]) for k, c in _COLORS.items() if k in drawn],
            loc="lower right",
            fontsize="small",
        )
    ax.set_yticks(range(len(order)), order)
    ax.set_xlabel("seconds from the start of the step")
    ax.set_title(title)
    ax.invert_yaxis()


def step_cdf(ax, traces: dict[str, Trace]) -> None:
    """CDF of step times, one line per trace (e.g. baseline and scheduled)."""
    for label, tr in traces.items():
        xs = np.sort(np.asarray(tr.step_times_us) / 1e6)
        ys = np.arange(1, len(xs) + 1) / len(xs)
        ax.step(np.r_[xs[0], xs], np.r_[0.0, ys], where="post", label=f"{label} (p50 {np.median(xs):.3f} s)")
    ax.set_xlabel("step time (s)")
    ax.set_ylabel("fraction of steps")
    ax.set_title("Step-time distribution")
    ax.legend(loc="lower right")


def figure(
    trace: Trace, *, step: int = 0, predicted: dict | None = None, compare: dict[str, Trace] | None = None
):
    """The Gantt chart of ``step`` (beside ``predicted`` rows if given) and the step-time CDF."""
    measured = trace_rows(trace, step)
    order = sorted(set(measured) | set(predicted or {}), key=lambda r: (r.split()[0], "compute" not in r, r))
    ncols = 3 if predicted is not None else 2
    fig, axes = plt.subplots(1, ncols, figsize=(7 * ncols, max(3.0, 0.45 * len(order) + 1.5)))
    _gantt(axes[0], measured, order, f"Measured step {step} ({trace.step_times_us[step] / 1e6:.3f} s)")
    if predicted is not None:
        span = max((s + d for bars in predicted.values() for s, d, _ in bars), default=0.0)
        _gantt(axes[1], predicted, order, f"Simulated ({span:.3f} s)")
        axes[1].sharex(axes[0])
    step_cdf(axes[-1], compare or {"traced": trace})
    fig.tight_layout()
    return fig


def workers_figure(traces: list[Trace], labels: list[str], *, step: int = 0):
    """The Gantt chart of ``step`` of every worker on one time axis, and each one's step-time CDF."""
    rows = worker_rows(traces, labels, step)
    rank = {label: k for k, label in enumerate(labels)}

    def key(row: str):  # worker by worker: its computing, its links, then the PS's part of its step
        theirs = " in " in row
        names = row.replace(" ← ", " ").split()
        whose = next((w for w in labels if (f" in {w}'s step" in row if theirs else w in names)), None)
        return (rank.get(whose, len(rank)), theirs, "compute" not in row, row)

    order = sorted(rows, key=key)
    fig, axes = plt.subplots(1, 2, figsize=(16, max(3.0, 0.45 * len(order) + 1.5)))
    slowest = max(t.step_starts_us[step] + t.step_times_us[step] for t in traces)
    first = min(t.step_starts_us[step] for t in traces)
    _gantt(axes[0], rows, order, f"Step {step} of {len(traces)} workers ({(slowest - first) / 1e6:.3f} s)")
    axes[0].set_xlabel("seconds from the first worker's start of the step")
    step_cdf(axes[1], dict(zip(labels, traces, strict=True)))
    fig.tight_layout()
    return fig
