"""Chrome trace event format, with what TensorFlow's timeline drops (edge names, bytes).

One process per task; in it a compute track per device and one track per link direction
(``recv from <task>`` on the receiving task). Transfer slices carry tensor, bytes, sender,
receiver and, given a schedule, their priority; flow arrows go from a transfer to the op that
consumes it. Follows the shape of TensorFlow's ``timeline.py`` (typed emitters, one formatter).
"""

from __future__ import annotations

from tfsched.graph.devices import task_of
from tfsched.tracing.trace import Trace


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
    op_at: dict[tuple[int, str, str], tuple[int, int, float]] = {}  # (step, task, node) -> where it starts
    for o in trace.ops:
        pid = fmt.pid(task_of(o.device))
        tid = fmt.tid(pid, f"compute {o.device.split('/device:')[-1]}")
        ts = offset.get(o.step, 0.0) + o.start_us
        fmt.slice(pid, tid, o.node, ts, o.duration_us, "op", {"op": o.op, "device": o.device, "step": o.step})
        op_at[(o.step, task_of(o.device), o.node)] = (pid, tid, ts)
    for x in trace.transfers:
        src_task, dst_task = task_of(x.src), task_of(x.dst)
        pid = fmt.pid(dst_task)
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
    return {
        "traceEvents": fmt.events,
        "displayTimeUnit": "ms",
        "otherData": {"source": "tfsched", **trace.meta},
    }
