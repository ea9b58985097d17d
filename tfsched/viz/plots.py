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

from tfsched.graph.devices import task_of  # noqa: E402
from tfsched.tracing.trace import Trace  # noqa: E402


def _short(task: str) -> str:
    parts = dict(p.split(":", 1) for p in task.strip("/").split("/") if ":" in p)
    return f"{parts.get('job', '?')}:{parts.get('task', '0')}"


def trace_rows(trace: Trace, step: int) -> dict[str, list[tuple[float, float, str]]]:
    """Row name -> (start s, duration s, kind) bars of one traced step."""
    rows: dict[str, list[tuple[float, float, str]]] = {}
    for o in trace.ops:
        if o.step == step and o.duration_us > 0:
            rows.setdefault(f"{_short(task_of(o.device))} compute", []).append(
                (o.start_us / 1e6, o.duration_us / 1e6, "op")
            )
    for t in trace.transfers:
        if t.step == step:
            row = f"{_short(task_of(t.dst))} ← {_short(task_of(t.src))}"
            rows.setdefault(row, []).append((t.start_us / 1e6, t.duration_us / 1e6, "transfer"))
    return rows


def sim_rows(sg, result) -> dict[str, list[tuple[float, float, str]]]:
    """The same rows from a simulation run with ``record=True``."""
    from tfsched.sim.model import COMPUTE, MESSAGE

    rows: dict[str, list[tuple[float, float, str]]] = {}
    for i, kind in enumerate(sg.kind):
        if kind == COMPUTE and sg.duration[i] > 0 and not math.isnan(result.starts[i]):
            # ends - starts: ops sharing a task's capacity take longer than alone
            rows.setdefault(f"{_short(sg.resource[i])} compute", []).append(
                (result.starts[i], result.ends[i] - result.starts[i], "op")
            )
        elif kind == MESSAGE and not math.isnan(result.ends[i]):
            src, dst = sg.resource[i].split("->")
            start = result.sends[i] if not math.isnan(result.sends[i]) else result.starts[i]
            rows.setdefault(f"{_short(dst)} ← {_short(src)}", []).append(
                (start, result.ends[i] - start, "transfer")
            )
    return rows


def _gantt(ax, rows: dict, order: list[str], title: str) -> None:
    colors = {"op": "#4C72B0", "transfer": "#DD8452"}
    for y, name in enumerate(order):
        bars = rows.get(name, [])
        for kind in ("op", "transfer"):
            spans = [(s, d) for s, d, k in bars if k == kind]
            if spans:
                ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colors[kind], linewidth=0)
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
