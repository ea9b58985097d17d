"""Which limit a thread that could not start met: a cgroup's ``pids.max``, ``ulimit -u`` or the
kernel's.

A cluster task that cannot start a thread aborts with TensorFlow's ``Check failed: ret == 0 (11
vs. 0) Thread GrpcWorkerEnvPool creation via pthread_create() failed.``, and a process of
Python's raises ``RuntimeError: can't start new thread``. Neither says which limit it met, and a
cluster takes many threads: measured on this machine (2 cores; 113th session), the bench process
of ``tfsched bench --model seq32 --shaped-loopback --workers 16`` had 919 threads at most (its
306 relays, one thread each to accept and two for each connection), and the machine 2,717 with
its 17 tasks (about 100 threads each on two cores; TensorFlow sizes its pools by the cores).
Run in a cgroup whose ``pids.max`` was 1,500, worker 9 aborted as it started, and the run said
only ``cluster task /job:worker/task:9 did not start (killed by SIGABRT): @ 0x7fd57fda6ce3
cfunction_call``: a frame of the abort's stack trace (``bench.local.task_log`` now skips them).

Linux counts threads as processes against four limits: the pids controller's ``pids.max`` of the
process's cgroup and of each one above it (a container's, a systemd unit's ``TasksMax``),
``ulimit -u`` (``RLIMIT_NPROC``, a user's processes and threads; root's are not counted),
``kernel.threads-max`` and ``kernel.pid_max``. ``explain`` adds the one that was met to a line
that tells of a thread that did not start; the pids controller counts each fork it refused
(``pids.events``), so a cgroup's is named only where it refused one.
"""

from __future__ import annotations

import os

BASE = "/sys/fs/cgroup"
# what a line says where a thread could not start: TensorFlow's (tsl's PosixEnv), Python's
THREAD_FAILURES = ("pthread_create", "can't start new thread")


def pids_groups(proc_cgroup: str = "/proc/self/cgroup", base: str = BASE) -> list[str]:
    """The directories of this process's pids cgroups: its own first, then each above it (cgroup
    v1's ``pids`` hierarchy, or v2's); [] where there is no pids controller.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     os.makedirs(os.path.join(d, "pids", "a", "b"))
    ...     for g in ("pids/a", "pids/a/b"):
    ...         _ = open(os.path.join(d, g, "pids.max"), "w").write("max\\n")
    ...     _ = open(os.path.join(d, "cgroup"), "w").write("8:pids:/a/b\\n1:cpu:/\\n0::/\\n")
    ...     [g[len(d) :] for g in pids_groups(os.path.join(d, "cgroup"), d)]
    ['/pids/a/b', '/pids/a']
    """
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    groups = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "pids" in controllers.split(","):
            root = os.path.join(base, "pids")
        elif hierarchy == "0" and not controllers:  # cgroup v2 (unified)
            root = base
        else:
            continue
        group = os.path.normpath(root + path)
        while group.startswith(root):
            if os.path.isfile(os.path.join(group, "pids.max")) and group not in groups:
                groups.append(group)
            if group == root:
                break
            group = os.path.dirname(group)
    return groups


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _refused(group: str) -> int:
    """How many forks the pids controller refused in ``group`` (``pids.events``' max)."""
    for line in _read(os.path.join(group, "pids.events")).splitlines():
        key, _, value = line.partition(" ")
        if key == "max" and value.strip().isdigit():
            return int(value)
    return 0


def limit_met(proc_cgroup: str = "/proc/self/cgroup", base: str = BASE) -> str:
    """The limit on processes and threads that this process and its children met, in words;
    where no cgroup refused a fork, every limit that could have been met.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     os.makedirs(os.path.join(d, "pids", "ci"))
    ...     _ = open(os.path.join(d, "pids", "ci", "pids.max"), "w").write("1500\\n")
    ...     _ = open(os.path.join(d, "pids", "ci", "pids.events"), "w").write("max 6\\n")
    ...     _ = open(os.path.join(d, "cgroup"), "w").write("8:pids:/ci\\n")
    ...     limit_met(os.path.join(d, "cgroup"), d).replace(d, "")
    'the cgroup /pids/ci allows 1,500 processes and threads (its pids.max), and refused 6'
    """
    groups = pids_groups(proc_cgroup, base)
    refused = _refused(groups[0]) if groups else 0
    if refused:
        # the limit met is the tightest of the group's and those above it (the kernel charges each)
        limits = [(int(m), g) for g in groups if (m := _read(os.path.join(g, "pids.max")).strip()).isdigit()]
        if limits:
            limit, group = min(limits)
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


def explain(line: str) -> str:
    """``line``, and where it tells of a thread that did not start, the limit met (``limit_met``)
    and what to do.

    >>> explain("Check failed: something else")
    'Check failed: something else'
    """
    if not any(failure in line for failure in THREAD_FAILURES):
        return line
    return f"{line} ({limit_met()}: raise it, or run fewer tasks)"
