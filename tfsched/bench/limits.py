"""Which limit a cluster task or relay that failed met: threads (a cgroup's ``pids.max``, ``ulimit
-u``, the kernel's) or memory (the out-of-memory killer, a cgroup's or the machine's).

Threads. A cluster task that cannot start a thread aborts with TensorFlow's ``Check failed: ret ==
0 (11 vs. 0) Thread GrpcWorkerEnvPool creation via pthread_create() failed.``, and a process of
Python's raises ``RuntimeError: can't start new thread``. Neither says which limit it met, and a
cluster takes many threads: measured on this machine (2 cores; 113th session), the bench process
of ``tfsched bench --model seq32 --shaped-loopback --workers 16`` had 919 threads at most (its
306 relays, one thread each to accept and two for each connection), and the machine 2,717 with
its 17 tasks (about 100 threads each on two cores; TensorFlow sizes its pools by the cores).
Run in a cgroup whose ``pids.max`` was 1,500, worker 9 aborted as it started, and the run said
only ``cluster task /job:worker/task:9 did not start (killed by SIGABRT): @ 0x7fd57fda6ce3
cfunction_call``: a frame of the abort's stack trace (``bench.local.task_log`` now skips them).
Linux counts threads as processes against four limits: the pids controller's ``pids.max`` of the
process's cgroup and of each one above it (a container's, a systemd unit's ``TasksMax``), ``ulimit
-u`` (``RLIMIT_NPROC``, a user's processes and threads; root's are not counted),
``kernel.threads-max`` and ``kernel.pid_max``. ``explain`` adds the one that was met to a line
that tells of a thread that did not start; the pids controller counts each fork it refused
(``pids.events``), so a cgroup's is named where it refused one since the cluster started.

Memory. A task the kernel's out-of-memory killer ends is "killed by SIGKILL", as one a user
killed, and says nothing. The memory controller counts its kills (cgroup v1's
``memory.oom_control``, v2's ``memory.events``), and so does the kernel for the machine
(``/proc/vmstat``'s ``oom_kill``): ``explain_death`` says so where one of them rose since the
cluster started (``counters``).
"""

from __future__ import annotations

import os

BASE = "/sys/fs/cgroup"
# what a line says where a thread could not start: TensorFlow's (tsl's PosixEnv), Python's
THREAD_FAILURES = ("pthread_create", "can't start new thread")
# cgroup v1's "no limit" for memory (the largest page-aligned int64); v2 writes "max"
_NO_MEMORY_LIMIT = 2**63 - 4096


def groups(
    controller: str, limit_file: str, proc_cgroup: str = "/proc/self/cgroup", base: str = BASE
) -> list[str]:
    """The directories of this process's cgroups of ``controller`` that have ``limit_file``: its
    own first, then each above it (cgroup v1's hierarchy of that controller, or v2's); [] where
    there is none.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     os.makedirs(os.path.join(d, "pids", "a", "b"))
    ...     for g in ("pids/a", "pids/a/b"):
    ...         _ = open(os.path.join(d, g, "pids.max"), "w").write("max\\n")
    ...     _ = open(os.path.join(d, "cgroup"), "w").write("8:pids:/a/b\\n1:cpu:/\\n0::/\\n")
    ...     [g[len(d) :] for g in groups("pids", "pids.max", os.path.join(d, "cgroup"), d)]
    ['/pids/a/b', '/pids/a']
    """
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controller in controllers.split(","):
            root = os.path.join(base, controller)
        elif hierarchy == "0" and not controllers:  # cgroup v2 (unified)
            root = base
        else:
            continue
        group = os.path.normpath(root + path)
        while group.startswith(root):
            if os.path.isfile(os.path.join(group, limit_file)) and group not in found:
                found.append(group)
            if group == root:
                break
            group = os.path.dirname(group)
    return found


def pids_groups(proc_cgroup: str = "/proc/self/cgroup", base: str = BASE) -> list[str]:
    """This process's pids cgroups, its own first (``groups``)."""
    return groups("pids", "pids.max", proc_cgroup, base)


def _memory_groups() -> list[tuple[str, str]]:
    """This process's memory cgroups, its own first, each with its limit's file (v1's or v2's)."""
    v1 = [(g, "memory.limit_in_bytes") for g in groups("memory", "memory.limit_in_bytes")]
    return v1 or [(g, "memory.max") for g in groups("memory", "memory.max")]


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _count(path: str, key: str) -> int:
    """The value of ``key`` in a flat-keyed file ("key value" lines), 0 if none."""
    for line in _read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def counters() -> dict[str, int]:
    """What the limits have refused or killed so far, for ``explain`` and ``explain_death`` to
    tell what a failure met from what came before it: forks the pids controller refused in this
    process's group, the out-of-memory killer's kills in its memory group and on the machine."""
    pids = pids_groups()
    memory = _memory_groups()
    own_memory = memory[0][0] if memory else ""
    return {
        "pids_refused": _count(os.path.join(pids[0], "pids.events"), "max") if pids else 0,
        "group_oom_kills": (
            _count(os.path.join(own_memory, "memory.oom_control"), "oom_kill")
            or _count(os.path.join(own_memory, "memory.events"), "oom_kill")
        )
        if own_memory
        else 0,
        "machine_oom_kills": _count("/proc/vmstat", "oom_kill"),
    }


def _rose(since: dict | None, now: dict, key: str) -> int:
    return now[key] - (since or {}).get(key, 0)


def _tightest(found: list[tuple[str, str]], no_limit: int | None = None) -> tuple[int, str] | None:
    """The lowest limit of ``found`` (group, its limit's file), as (limit, group); None if none."""
    limits = []
    for group, name in found:
        value = _read(os.path.join(group, name)).strip()
        if value.isdigit() and (no_limit is None or int(value) < no_limit):
            limits.append((int(value), group))
    return min(limits) if limits else None


def thread_limit_met(since: dict | None = None) -> str:
    """The limit on processes and threads that this process and its children met, in words:
    the tightest ``pids.max`` of its groups where its own refused a fork since ``since``
    (``counters``); else every limit that could have been met."""
    refused = _rose(since, counters(), "pids_refused")
    tightest = _tightest([(g, "pids.max") for g in pids_groups()]) if refused > 0 else None
    if tightest:
        limit, group = tightest
        return f"the cgroup {group} allows {limit:,} processes and threads (its pids.max), and refused {refused:,}"
    import resource

    said = []
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if os.geteuid() != 0 and soft != resource.RLIM_INFINITY:
        said.append(f"ulimit -u is {soft:,}")
    for name in ("threads-max", "pid_max"):
        if (value := _read(f"/proc/sys/kernel/{name}").strip()).isdigit():
            said.append(f"kernel.{name} is {int(value):,}")
    return "a limit on processes and threads was met, or memory ran out (" + ", ".join(said) + ")"


def explain(line: str, since: dict | None = None) -> str:
    """``line``, and where it tells of a thread that did not start, the limit met
    (``thread_limit_met``) and what to do.

    >>> explain("Check failed: something else")
    'Check failed: something else'
    """
    if not any(failure in line for failure in THREAD_FAILURES):
        return line
    return f"{line} ({thread_limit_met(since)}: raise it, or run fewer tasks)"


def _gib(nbytes: int) -> str:
    """Bytes in GiB, to three digits.

    >>> _gib(3 * 2**30 // 2)
    '1.5 GiB'
    """
    return f"{nbytes / 2**30:.3g} GiB"


def explain_death(how: str, since: dict | None) -> str:
    """``how`` a task ended ("killed by SIGKILL"), and where the out-of-memory killer killed a
    process since ``since`` (``counters``), that it did, with the memory it had: its cgroup's
    tightest limit, or the machine's.

    >>> explain_death("exit code 1", None)
    'exit code 1'
    """
    if "killed by SIGKILL" not in how or since is None:
        return how
    now = counters()
    if (kills := _rose(since, now, "group_oom_kills")) > 0:
        tightest = _tightest(_memory_groups(), no_limit=_NO_MEMORY_LIMIT)
        if tightest:
            limit, group = tightest
            return (
                f"{how}, by the out-of-memory killer: the cgroup {group} allows {_gib(limit)} of memory, "
                f"and it killed {kills:,} process{'es' if kills > 1 else ''} there"
            )
    if _rose(since, now, "machine_oom_kills") > 0 or kills > 0:
        mem = _read("/proc/meminfo").split("MemTotal:")[-1].split()[:1]
        total = int(mem[0]) * 1024 if mem and mem[0].isdigit() else 0
        return f"{how}, by the out-of-memory killer: this machine's {_gib(total)} of memory ran out"
    return how
