"""Where the machine's CPU goes in a synchronized step of the bench, task by task.

Every task of the emulated cluster is a process on this one machine, so a mode can only be as
fast as the cores let it: the bench's CPU column says how busy they were over the rounds, not
when. ``TaskCpuSampler`` reads each task process's CPU time (``/proc/<pid>/stat``) every few
milliseconds while the bench runs; ``profile_by_rank`` lines the samples up with the steps
(``run_side_by_side(step_log=...)``) and gives, bin by bin from each step's start, the cores each
process used, its workers ranked by when they finished the step (so a mode that serves the
workers one after another, like one window per task, shows its first-served worker apart from
its last). ``start_delays`` reads from traced steps when each task ran its first op and when
the first large pull began. ``benchmarks/cpu_profile.py`` runs all three on a model.

The kernel counts a process's CPU in clock ticks (10 ms here): one step's bins are coarse, and
the mean over many steps is what to read.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from tfsched.bench.run import StepRecord
from tfsched.errors import TfschedError
from tfsched.sim import mean_by_rank

SERVER_MODULE = b"tfsched.bench.server"  # the command a task runs (bench.local)
DRIVER = "driver"  # this process: the bench's sessions (the sampler's own CPU taken out)
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int | str) -> float | None:
    """User and system CPU seconds of process ``pid`` (all its threads), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # utime, stime (fields 14 and 15)


def task_cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds of processes ``pids`` together (one that is gone counts 0)."""
    return sum(_cpu_s(pid) or 0.0 for pid in pids)


def tasks_cpu_s(procs: dict[int, str]) -> dict[str, float]:
    """Each of ``procs``' (pid -> name) user and system CPU seconds by name; one that is gone is
    left out."""
    return {name: cpu for pid, name in procs.items() if (cpu := _cpu_s(pid)) is not None}


def task_processes(parent: int | None = None) -> dict[int, str]:
    """The bench's task processes started by ``parent`` (this process by default): pid ->
    ``job:index``, from the command ``bench.local`` starts one with, or for a task forked by
    ``bench.zygote`` (whose command line is its command as one string, a title) from its name."""
    parent = os.getpid() if parent is None else parent
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid != parent:
            continue
        if SERVER_MODULE in argv:
            k = argv.index(SERVER_MODULE)
            if len(argv) > k + 3:
                found[int(entry)] = f"{argv[k + 2].decode()}:{argv[k + 3].decode()}"
        elif len(argv) <= 2:  # one string, a title: a forked task's, whose name says which
            try:
                with open(f"/proc/{entry}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            if ":" in name:
                found[int(entry)] = name
    return found


@dataclass
class TaskCpuSampler:
    """``with TaskCpuSampler() as s: <run the bench>``; then ``s.samples``: (``time.monotonic()``,
    {process: CPU seconds so far}) every ``interval_s``, for this process (``DRIVER``, less the
    sampler's own thread) and every task process it started (looked for again every
    ``rescan_s`` until the run ends)."""

    interval_s: float = 0.005
    rescan_s: float = 0.5
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    own_cpu_s: float = 0.0  # what the sampler's thread itself took
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if not self.interval_s > 0 or not self.rescan_s > 0:
            raise TfschedError("the sampler's interval and rescan period must be positive")

    def __enter__(self) -> TaskCpuSampler:
        if not os.path.exists(f"/proc/{os.getpid()}/stat"):
            raise TfschedError("cannot sample the tasks' CPU: no /proc here")
        self._thread = threading.Thread(target=self._run, name="tfsched-cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        procs: dict[int, str] = {}
        scanned = -float("inf")
        driver = 0.0
        me = os.getpid()
        while not self._stop.is_set():
            now = time.monotonic()
            if now - scanned >= self.rescan_s:
                procs.update(task_processes(me))
                scanned = now
            row = tasks_cpu_s(procs)
            # this process's own clocks are exact (the others' are in ticks); read one after the
            # other, they can step back by the microseconds between: kept from going back
            driver = max(driver, time.process_time() - time.thread_time())
            row[DRIVER] = driver
            self.samples.append((now, row))
            self.own_cpu_s = time.thread_time()
            self._stop.wait(self.interval_s)


def _cumulative(samples: list[tuple[float, dict[str, float]]]):
    """A function (process, time) -> its CPU seconds then, linear between its samples; None
    outside them."""
    lists: dict[str, tuple[list[float], list[float]]] = {}
    for t, row in samples:
        for name, cpu in row.items():
            times, values = lists.setdefault(name, ([], []))
            times.append(t)
            values.append(cpu)
    series = {name: (np.asarray(times), np.asarray(values)) for name, (times, values) in lists.items()}

    def at(name: str, t: float) -> float | None:
        if name not in series:
            return None
        times, values = series[name]
        v = np.interp(t, times, values, left=np.nan, right=np.nan)
        return None if np.isnan(v) else float(v)

    return at


def profile_by_rank(
    samples: list[tuple[float, dict[str, float]]],
    records: list[StepRecord],
    mode: str,
    *,
    bin_s: float = 0.025,
) -> dict:
    """The cores each process used, bin by bin from the start of each synchronized step of
    ``mode``, averaged over the steps still running in that bin.

    Rows: ``worker rank K`` (the worker that finished the step K-th, whichever it was), every
    other sampled process by name (the PS tasks, ``DRIVER``), and ``total``. A step starts when
    its first worker's ``sess.run`` began and runs until its last returned; a bin counts for it
    if it began before then. Returns {"mode", "bin_s", "rows": {row: [cores per bin]},
    "steps_in_bin": [...], "finish_by_rank_s": [mean step time of each rank], "steps"}.
    """
    if not bin_s > 0:
        raise TfschedError(f"the profile's bins must be a positive time, got {bin_s!r}")
    steps: dict[tuple[int, int], list[StepRecord]] = {}
    for r in records:
        if r.mode == mode:
            steps.setdefault((r.round, r.step), []).append(r)
    if not steps:
        raise TfschedError(f"no timed step of mode {mode!r} in the step log")
    workers = max(len(v) for v in steps.values())
    at = _cumulative(samples)
    names = sorted({n for _, row in samples for n in row if not n.startswith("worker:")})
    rows: dict[str, list[float]] = {}
    counts: list[int] = []
    finishes: list[list[float]] = []
    for recs in steps.values():
        if len(recs) < workers:
            continue
        t0 = min(r.start for r in recs)
        ranked = sorted(recs, key=lambda r: r.end)
        finishes.append([r.end - t0 for r in ranked])
        who = [(f"worker rank {k}", f"worker:{r.worker}") for k, r in enumerate(ranked)]
        who += [(n, n) for n in names]
        b = 0
        while t0 + b * bin_s < ranked[-1].end:
            lo, hi = t0 + b * bin_s, t0 + (b + 1) * bin_s
            got = {label: (at(name, lo), at(name, hi)) for label, name in who}
            if any(x is None or y is None for x, y in got.values()):
                break  # past the samples (or a process not sampled yet): the rest of this step
            while len(counts) <= b:
                counts.append(0)
            counts[b] += 1
            for label, (x, y) in got.items():
                row = rows.setdefault(label, [])
                row.extend([0.0] * (b + 1 - len(row)))
                row[b] += (y - x) / bin_s
            b += 1
    if not counts:
        raise TfschedError(f"no CPU samples during the steps of mode {mode!r}")
    order = sorted(rows, key=lambda k: (not k.startswith("worker rank"), k))
    out_rows = {}
    for k in order:
        padded = rows[k] + [0.0] * (len(counts) - len(rows[k]))
        out_rows[k] = [v / c for v, c in zip(padded, counts, strict=True)]
    out_rows["total"] = [sum(col) for col in zip(*out_rows.values(), strict=True)]
    return {
        "mode": mode,
        "bin_s": bin_s,
        "rows": out_rows,
        "steps_in_bin": counts,
        "finish_by_rank_s": mean_by_rank(finishes),
        "steps": len(finishes),
    }


def start_delays(trace, min_pull_bytes: int = 200_000) -> dict[str, list[float]]:
    """Per traced step, seconds from the step's first op until each task ran its first op, and
    (``"first large pull"``) until the first pull of at least ``min_pull_bytes`` began."""
    out: dict[str, list[float]] = {}
    for step in range(trace.steps):
        ops = [o for o in trace.ops if o.step == step]
        if not ops:
            continue
        t0 = min(o.start_us for o in ops)
        first: dict[str, float] = {}
        for o in ops:
            task = o.device.split("/device:")[0]
            first[task] = min(first.get(task, float("inf")), o.start_us)
        for task, t in first.items():
            out.setdefault(task, []).append((t - t0) / 1e6)
        pulls = [
            x.start_us
            for x in trace.transfers
            if x.step == step and "/job:ps/" in x.src and x.bytes >= min_pull_bytes
        ]
        if pulls:
            out.setdefault("first large pull", []).append((min(pulls) - t0) / 1e6)
    return out
