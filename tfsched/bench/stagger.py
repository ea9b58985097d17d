"""Where the workers of a synchronized step part: the straggler effect by phase.

The straggler effect (``ModeResult.straggler``) says how far apart the workers end a step, not
why. Every worker's traced step (its ``RunMetadata``, the PS's part of it included) says when it
got its last parameter, finished computing, had its last gradient received and ended, on the
machine's one wall clock: every task of an emulated cluster runs on this machine. How far apart
the workers are at each of these points, over the step's time, shows which phase staggers them:

- ``pulled``: the end of the last transfer into the worker (its parameters);
- ``computed``: the end of its last op of the model's that computes (``computes``);
- ``pushed``: the end of the last transfer out of it (its gradients; None in inference);
- ``ended``: the end of the last op of its step on any task (the PS's updates included).

What the pass adds (acknowledgements, credit) is no tensor of the step and is left out. The bench
reads each worker's ``RunMetadata`` (``traced_spreads``); ``trace_spreads`` reads the same from
saved traces of the workers' same steps (``tfsched viz W0 W1 ...``, a training's ``TraceHook``
on every worker), which record when each step began.

>>> spreads = phase_spreads({
...     0: {"started": 0.0, "pulled": 4.0, "computed": 8.0, "pushed": 8.5, "ended": 8.6},
...     1: {"started": 0.1, "pulled": 4.1, "computed": 8.4, "pushed": 9.9, "ended": 10.0},
... })
>>> {p: round(s, 3) for p, s in spreads.items()}
{'pulled': 0.01, 'computed': 0.04, 'pushed': 0.14, 'ended': 0.14}
"""

from __future__ import annotations

import statistics

from tfsched.errors import TfschedError
from tfsched.graph.devices import task_of
from tfsched.tracing.collector import parse_run_metadata, step_start_micros
from tfsched.tracing.replay import scheduled_tensor
from tfsched.tracing.trace import WAIT_OPS

PHASES = ("pulled", "computed", "pushed", "ended")
# each phase as a table heads it
PHASE_NAMES = {
    "pulled": "last parameter in",
    "computed": "computed",
    "pushed": "last gradient out",
    "ended": "step ended",
}


def computes(op) -> bool:
    """Whether an op record is of the model's computing: not one that waits (``WAIT_OPS``:
    gates, sends, no-ops), not a constant, and not one the pass added (``tfsched_*``: slices and
    their concatenation, the credit's sink). The constant that carries a control edge to another
    task (the partitioner's, e.g. ``tfsched_credit_sink_worker_0/ctrl_S454``) runs when the edge's
    source has: after the last gradient's credit came back. Until the fiftieth session it counted
    as computing, which put the pushes' stagger in ``computed``.

    >>> from tfsched.tracing.trace import OpRecord
    >>> [computes(OpRecord(0, "/job:worker", n, op, 0.0, 1.0)) for n, op in (
    ...     ("conv", "Conv2D"), ("w/tfsched_gate_to_ps_0", "TfschedGate"),
    ...     ("tfsched_credit_sink_worker_0/ctrl_S454", "Const"), ("w/tfsched_concat", "TfschedConcat"))]
    [True, False, False, False]
    """
    return bool(op.op) and op.op not in WAIT_OPS and op.op != "Const" and "tfsched_" not in op.node


def worker_phases(run_metadata, task: str) -> dict[str, float | None]:
    """When worker ``task``'s traced step (``"/job:worker/replica:0/task:1"``) started and
    reached each of ``PHASES``, in seconds of the machine's wall clock; a phase it has no
    record of (no gradient sent in inference) is None.

    One error line if the step has no op on ``task`` (the metadata of another worker's step).
    """
    ops, transfers, wall_us = parse_run_metadata(run_metadata, 0)
    # what the records' times are relative to
    return _phases(ops, transfers, step_start_micros(run_metadata), wall_us, task, "the traced step")


def _phases(ops, transfers, t0: float, wall_us: float, task: str, what: str) -> dict[str, float | None]:
    """``worker_phases`` of one step's op and transfer records, relative to ``t0`` (us of the
    wall clock); ``what``: the step, as an error names it."""
    mine = [o for o in ops if task_of(o.device) == task]
    if not mine:
        raise TfschedError(f"{what} has no op on {task}")
    computing = [o.start_us + o.duration_us for o in mine if computes(o)]
    carried = [t for t in transfers if scheduled_tensor(t.tensor) is not None]
    into = [t.start_us + t.duration_us for t in carried if task_of(t.dst) == task != task_of(t.src)]
    out = [t.start_us + t.duration_us for t in carried if task_of(t.src) == task != task_of(t.dst)]

    def at(times: list[float]) -> float | None:
        return (t0 + max(times)) / 1e6 if times else None

    return {
        "started": t0 / 1e6,
        "pulled": at(into),
        "computed": at(computing),
        "pushed": at(out),
        "ended": (t0 + wall_us) / 1e6,
    }


def phase_spreads(step: dict[int, dict[str, float | None]]) -> dict[str, float | None]:
    """Per phase, how far apart the workers of one synchronized step reached it (latest minus
    earliest) over the step's time (the first start to the last end); None where a worker has
    no record of it."""
    span = max(p["ended"] for p in step.values()) - min(p["started"] for p in step.values())
    spreads = {}
    for phase in PHASES:
        times = [p[phase] for p in step.values()]
        spreads[phase] = (max(times) - min(times)) / span if span > 0 and None not in times else None
    return spreads


def mean_spreads(steps: list[dict[int, dict[str, float | None]]]) -> dict[str, float | None]:
    """``phase_spreads`` of each synchronized step (of two workers or more), the mean over them."""
    each = [phase_spreads(step) for step in steps if len(step) > 1]
    return {
        phase: statistics.fmean(s[phase] for s in each)
        if each and all(s[phase] is not None for s in each)
        else None
        for phase in PHASES
    }


def spreads_line(spreads: dict[str, float | None]) -> str:
    """The spreads as one line, each phase by its name (``PHASE_NAMES``); a phase no worker
    reached (no push in inference) left out.

    >>> spreads_line({"pulled": 0.0104, "computed": 0.071, "pushed": None, "ended": 0.07})
    'last parameter in 0.010, computed 0.071, step ended 0.070'
    """
    return ", ".join(f"{PHASE_NAMES[p]} {spreads[p]:.3f}" for p in PHASES if spreads.get(p) is not None)


def trace_spreads(traces: list, tasks: list[str]) -> dict[str, float | None]:
    """``mean_spreads`` of saved traces (``tracing.Trace``) of the same steps, one per worker:
    ``tasks[k]`` is the worker whose steps ``traces[k]`` traced. Step ``i`` of every trace is
    one synchronized step; each trace says when its steps began (``Trace.step_starts_us``)."""
    steps = min(t.steps for t in traces)
    each = []
    for i in range(steps):
        step = {}
        for k, (t, task) in enumerate(zip(traces, tasks, strict=True)):
            ops = [o for o in t.ops if o.step == i]
            moved = [x for x in t.transfers if x.step == i]
            what = f"{t.source}: traced step {i}"
            step[k] = _phases(ops, moved, t.step_starts_us[i], t.step_times_us[i], task, what)
        each.append(step)
    return mean_spreads(each)


def traced_spreads(steps: dict[int, dict[int, object]], job: str = "worker") -> dict[str, float | None]:
    """``mean_spreads`` of traced synchronized steps: step -> worker index (task ``index`` of
    ``job``) -> the ``RunMetadata`` of its part."""
    return mean_spreads(
        [
            {w: worker_phases(md, f"/job:{job}/replica:0/task:{w}") for w, md in step.items()}
            for _, step in sorted(steps.items())
        ]
    )
