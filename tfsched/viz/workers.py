"""Several workers' traces of one run, drawn together: which worker each is, and whether they
are of the same steps."""

from __future__ import annotations

import os

from tfsched.errors import TfschedError
from tfsched.graph.devices import short_task, task_of
from tfsched.tracing.trace import Trace


def own_task(trace: Trace) -> str | None:
    """The one task of the trace that is not a parameter server (the worker whose steps it
    traced: a worker's step stats hold the PS's part of its step too), None if not one.

    >>> from tfsched.tracing.trace import OpRecord
    >>> devices = ("/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0")
    >>> own_task(Trace(steps=1, ops=[OpRecord(0, d, "a", "Add", 0.0, 1.0) for d in devices]))
    '/job:worker/replica:0/task:1'
    """
    devices = {o.device for o in trace.ops} | {x.dst for x in trace.transfers}
    workers = {task_of(d) for d in devices if not d.startswith("/job:ps/")}
    return workers.pop() if len(workers) == 1 else None


def span(trace: Trace) -> tuple[float, float]:
    """From the first traced step's start to the last one's end (us since the epoch)."""
    ends = [s + d for s, d in zip(trace.step_starts_us, trace.step_times_us, strict=True)]
    return min(trace.step_starts_us), max(ends)


def worker_labels(traces: list[Trace]) -> list[str]:
    """Each trace's name in a picture of them all: its worker ("worker:1"), else its file's name
    (its path where two files have one name).

    An error if a trace does not say when its steps began (``Trace.step_starts_us``), if two
    are of the same worker, or if two traces' steps do not overlap in time: they are not of one
    run, and laid side by side they would show a stagger that never was.
    """
    for t in traces:
        if len(t.step_starts_us) != t.steps:
            raise TfschedError(
                f"{t.source}: the trace does not say when its steps began (it was written before "
                "tfsched recorded that); trace again to draw it beside other workers'"
            )
    owners = [own_task(t) for t in traces]
    for i, t in enumerate(traces):
        for j in range(i):
            if owners[i] is not None and owners[i] == owners[j]:
                raise TfschedError(f"{t.source}: {owners[i]}'s steps, as {traces[j].source}'s are")
            (a0, a1), (b0, b1) = span(traces[j]), span(t)
            if a1 < b0 or b1 < a0:
                raise TfschedError(
                    f"{t.source}: its traced steps do not overlap {traces[j].source}'s in time; "
                    "they are not of one run"
                )
    names = [os.path.basename(t.source) for t in traces]
    return [
        short_task(w) if w else name if names.count(name) == 1 else t.source
        for t, w, name in zip(traces, owners, names, strict=True)
    ]
