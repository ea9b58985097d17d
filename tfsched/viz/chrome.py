"""Chrome trace event format, with what TensorFlow's timeline drops (edge names, bytes).

One process per task; in it a compute track per device and one track per link direction
(``recv from <task>`` on the receiving task). An op that waits (``WAIT_OPS``: a gate held until
its turn, a send, a no-op) is of category ``wait``, one that computes ``op``. Transfer slices
carry tensor, bytes, sender, receiver and, given a schedule, their priority; flow arrows go from
a transfer to the op that consumes it. Several workers' traces of one run go on one timeline
(``chrome_traces``). Follows the shape of TensorFlow's ``timeline.py`` (typed emitters, one
formatter).
"""

from __future__ import annotations

from tfsched.graph.devices import short_task, task_of
from tfsched.tracing.trace import WAIT_OPS, Trace
from tfsched.viz.workers import span, worker_labels


class _Formatter:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self._pids: dict[str, int] = {}
        self._tids: dict[tuple[int, str], int] = {}
        self._flow = 0

    def pid(self, task: str) -> int:
        if task not in self._pids:
            self._pids[task] = len(self._pids) + 1
            self.events.append(
                {"ph": "M", "name": "process_name", "pid": self._pids[task], "args": {"name": task}}
            )
        return self._pids[task]

    def tid(self, pid: int, track: str) -> int:
        if (pid, track) not in self._tids:
            tid = len([k for k in self._tids if k[0] == pid]) + 1
            self._tids[(pid, track)] = tid
            self.events.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track}}
            )
        return self._tids[(pid, track)]

    def slice(self, pid: int, tid: int, name: str, ts: float, dur: float, cat: str, args: dict) -> None:
        self.events.append(
            {
                "ph": "X",
                "name": name,
                "cat": cat,
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": max(dur, 0.001),
                "args": args,
            }
        )

    def flow(self, src: tuple[int, int, float], dst: tuple[int, int, float]) -> None:
        self._flow += 1
        self.events.append(
            {
                "ph": "s",
                "id": self._flow,
                "name": "tensor",
                "cat": "flow",
                "pid": src[0],
                "tid": src[1],
                "ts": src[2],
            }
        )
        self.events.append(
            {
                "ph": "f",
                "bp": "e",
                "id": self._flow,
                "name": "tensor",
                "cat": "flow",
                "pid": dst[0],
                "tid": dst[1],
                "ts": dst[2],
            }
        )


def chrome_trace(
    trace: Trace, *, priorities: dict[str, int] | None = None, step_gap_us: float = 1000.0
) -> dict:
    """The trace as a Chrome trace event document; steps are laid out one after another.

    ``priorities`` maps "tensor -> receiver task" to the schedule's priority, shown on transfers.
    """
    fmt = _Formatter()
    offset: dict[int, float] = {}
    t = 0.0
    for step in range(trace.steps):
        offset[step] = t
        t += (trace.step_times_us[step] if step < len(trace.step_times_us) else 0.0) + step_gap_us
    _emit(fmt, trace, offset, fmt.pid, priorities)
    return _document(fmt, trace.meta)


def chrome_traces(traces: list[Trace], *, priorities: list[dict[str, int] | None] | None = None) -> dict:
    """Several workers' traces of the same run on one timeline: each event where the machines'
    wall clock had it (``Trace.step_starts_us``), so that how far apart the workers pull, compute
    and push is seen, as ``tfsched bench``'s "Where the workers part" measures it.

    Each worker is a process; the parameter servers' part of a worker's step (its step stats
    hold it) is a process of its own beside it ("ps:0 in worker:1's step"). Time 0 is the
    earliest traced step's start. Across hosts the picture is as true as their clocks agree
    (TensorFlow stamps a task's step stats with its own host's clock).

    The traces must be of one run (``viz.workers.worker_labels``).
    """
    labels = worker_labels(traces)
    fmt = _Formatter()
    for label in labels:
        fmt.pid(label)  # the workers first, in the order given
    origin = min(span(t)[0] for t in traces)
    for k, (t, label) in enumerate(zip(traces, labels, strict=True)):

        def pid(task: str, label=label) -> int:
            return fmt.pid(label if short_task(task) == label else f"{short_task(task)} in {label}'s step")

        offset = {step: start - origin for step, start in enumerate(t.step_starts_us)}
        _emit(fmt, t, offset, pid, priorities[k] if priorities else None)
    shared = {k: v for k, v in traces[0].meta.items() if all(t.meta.get(k) == v for t in traces[1:])}
    return _document(fmt, {"traces": [t.source for t in traces], **shared})  # what all are of


def _emit(fmt: _Formatter, trace: Trace, offset: dict[int, float], pid_of, priorities) -> None:
    """The trace's ops and transfers as slices, each step at ``offset[step]`` (us), each task's
    in process ``pid_of(task)``."""
    op_at: dict[tuple[int, str, str], tuple[int, int, float]] = {}  # (step, task, node) -> where it starts
    for o in trace.ops:
        pid = pid_of(task_of(o.device))
        tid = fmt.tid(pid, f"compute {o.device.split('/device:')[-1]}")
        ts = offset.get(o.step, 0.0) + o.start_us
        kind = "wait" if o.op in WAIT_OPS else "op"  # a gate held until its turn is not computing
        fmt.slice(pid, tid, o.node, ts, o.duration_us, kind, {"op": o.op, "device": o.device, "step": o.step})
        op_at[(o.step, task_of(o.device), o.node)] = (pid, tid, ts)
    for x in trace.transfers:
        src_task, dst_task = task_of(x.src), task_of(x.dst)
        pid = pid_of(dst_task)
        tid = fmt.tid(pid, f"recv from {src_task}")
        ts = offset.get(x.step, 0.0) + x.start_us
        args = {
            "tensor": x.tensor,
            "edge": x.edge,
            "bytes": x.bytes,
            "sender": x.src,
            "receiver": x.dst,
            "step": x.step,
        }
        if priorities is not None and f"{x.tensor} -> {dst_task}" in priorities:
            args["priority"] = priorities[f"{x.tensor} -> {dst_task}"]
        fmt.slice(pid, tid, x.tensor, ts, x.duration_us, "transfer", args)
        # Flow: from the end of the transfer to the first of its consumers to start.
        starts = [op_at[(x.step, dst_task, c)] for c in x.consumers if (x.step, dst_task, c) in op_at]
        if starts:
            fmt.flow((pid, tid, ts + x.duration_us), min(starts, key=lambda s: s[2]))


def _document(fmt: _Formatter, meta: dict) -> dict:
    return {
        "traceEvents": fmt.events,
        "displayTimeUnit": "ms",
        "otherData": {"source": "tfsched", **meta},
    }
