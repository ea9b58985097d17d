"""Which limit a process of ours that failed met (a cluster task, a relay, a simulation process): threads (a cgroup's ``pids.max``, ``ulimit
-u``, the kernel's) or memory (the out-of-memory killer, a cgroup's or the machine's).

Threads. A cluster task that cannot start a thread aborts with TensorFlow's ``Check failed: ret ==
0 (11 vs. 0) Thread GrpcWorkerEnvPool creation via pthread_create() failed.``, and a process of
Python's raises ``RuntimeError: can't start new thread``. Neither says which limit it met, and a
cluster takes many threads: measured on this machine (2 cores; 113th session), the bench process
of ``tfsched bench --model seq32 --shaped-loopback --workers 16`` had 919 threads at most (its
306 relays, one thread each to accept and two for each connection), and the machine 2,717 with
its 17 tasks (about 100 threads each on two cores; TensorFlow sizes its pools by the cores);
with ``--latency 1ms``, whose relays take two threads each way of a connection, 1,492 and 3,292.
VGG16 on 1 PS and 4 workers had 100 in the bench process and 933 on the machine.
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
killed, and says nothing. The kernel logs each kill (``/dev/kmsg``: an ``oom-kill:`` record with
the process's pid and the cgroup whose memory ran out, ``oom_memcg``), and ``explain_death``
says so of a task the log names since the cluster started (``counters``). Where the log cannot
be read (it needs root, or ``kernel.dmesg_restrict`` 0) it goes by the killer's counts, which
do not say whom it killed: the memory controller's (cgroup v1's ``memory.oom_control``, v2's
``memory.events``) and the machine's (``/proc/vmstat``'s ``oom_kill``).
"""

from __future__ import annotations

import errno
import os
import signal

BASE = "/sys/fs/cgroup"  # where the cgroup hierarchies are mounted
# Where memory runs out, the kernel's out-of-memory killer takes a process of ours that raised its
# score (``offer_to_the_killer``: a cluster task, a simulation process) before the process that
# started it (0 by default): that one holds the run's state and its cleanup, and names the process
# and the limit it met (``explain_death``). Raising one's own score needs no privilege.
OOM_SCORE_ADJ = 500

# what a line says where a thread could not start: TensorFlow's (tsl's PosixEnv), Python's, and
# gRPC's server thread manager's (``thread_manager.cc:144] Check failed: worker->created()``: a
# task that met a cgroup's pids.max there, in a CI rehearsal of the 117th session, was said
# without the limit)
THREAD_FAILURES = ("pthread_create", "can't start new thread", "Check failed: worker->created()")
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


def pids_groups() -> list[str]:
    """This process's pids cgroups, its own first (``groups``)."""
    return groups("pids", "pids.max")


def offer_to_the_killer() -> None:
    """Make this process the out-of-memory killer's choice before its parent (``OOM_SCORE_ADJ``)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(OOM_SCORE_ADJ))
    except OSError:  # not Linux, or a kernel without it: the killer chooses by size alone
        pass


def exit_status(code: int | None) -> str:
    """``Popen.returncode`` in words: "exit code 1", "killed by SIGABRT".

    >>> exit_status(-9), exit_status(2), exit_status(-200)
    ('killed by SIGKILL', 'exit code 2', 'killed by signal 200')
    """
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


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
    process's group, the out-of-memory killer's kills in its memory group and on the machine,
    and the kernel's log's last record (-1: the log cannot be read)."""
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
        "kernel_log_seq": _kernel_log(None)[0],
    }


def _kernel_log(after: int | None) -> tuple[int, list[bytes]]:
    """The kernel's log (``/dev/kmsg``): the last record's sequence number, and the messages of
    the records after sequence number ``after`` (None: none); (-1, []) where it cannot be read (it
    needs root, or ``kernel.dmesg_restrict`` 0)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return -1, []
    last, messages = -1, []
    try:
        while True:
            try:
                record = os.read(fd, 8192)  # one record a read: "prio,seq,time,flags;message"
            except BlockingIOError:  # read to the end
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # the record was overwritten meanwhile; the next follows
                    continue
                break
            head, _, message = record.partition(b";")
            fields = head.split(b",")
            if len(fields) > 1 and fields[1].isdigit():
                last = int(fields[1])
                if after is not None and last > after:
                    messages.append(message)
    finally:
        os.close(fd)
    return last, messages


def _oom_kills(since: dict) -> list[dict[str, str]] | None:
    """The out-of-memory killer's kills since ``since`` (``counters``), from the kernel's log: each
    its ``oom-kill:`` record's fields ("constraint", "oom_memcg", "pid", ...); None where the log
    cannot be read."""
    after = since.get("kernel_log_seq", -1)
    last, messages = _kernel_log(after) if after >= 0 else (-1, [])
    if last < 0:
        return None
    kills = []
    for message in messages:
        if message.startswith(b"oom-kill:"):
            text = message[len(b"oom-kill:") :].decode("utf-8", "replace").strip()
            kills.append(dict(field.partition("=")[::2] for field in text.split(",")))
    return kills


def _memory_limit(memcg: str) -> tuple[int, str] | None:
    """The memory limit of the cgroup the kernel names ``memcg`` (v1 or v2), with its directory."""
    for group, name in ((BASE + "/memory" + memcg, "memory.limit_in_bytes"), (BASE + memcg, "memory.max")):
        tightest = _tightest([(os.path.normpath(group), name)], no_limit=_NO_MEMORY_LIMIT)
        if tightest:
            return tightest
    return None


def _machine_ran_out(how: str) -> str:
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return f"{how}, by the out-of-memory killer: this machine's {_gib(total)} of memory ran out"


def _group_ran_out(how: str, limit: int, group: str, kills: int) -> str:
    return (
        f"{how}, by the out-of-memory killer: the cgroup {group} allows {_gib(limit)} of memory, "
        f"and it killed {kills:,} process{'es' if kills > 1 else ''} there"
    )


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
    >>> explain("thread_manager.cc:144] Check failed: worker->created()").endswith(": raise it, or run fewer tasks)")
    True
    """
    if not any(failure in line for failure in THREAD_FAILURES):
        return line
    return f"{line} ({thread_limit_met(since)}: raise it, or run fewer tasks)"


def _gib(nbytes: int) -> str:
    """Bytes in GiB, or in MiB under one GiB, to three digits.

    >>> _gib(3 * 2**30 // 2), _gib(100 * 2**20)
    ('1.5 GiB', '100 MiB')
    """
    if nbytes < 2**30:
        return f"{nbytes / 2**20:.3g} MiB"
    return f"{nbytes / 2**30:.3g} GiB"


def explain_death(how: str, since: dict | None, pid: int | None = None) -> str:
    """``how`` a task ended ("killed by SIGKILL"), and where the out-of-memory killer killed it
    since ``since`` (``counters``), that it did, with the memory it had: its cgroup's limit, or
    the machine's. The kernel's log says whom the killer killed (``pid``) and in which cgroup;
    where it cannot be read, a kill counted since in this process's group or on the machine is
    taken for the task's.

    >>> explain_death("exit code 1", None)
    'exit code 1'
    """
    if "killed by SIGKILL" not in how or since is None:
        return how
    kills = _oom_kills(since) if pid is not None else None
    if kills is not None:
        mine = [k for k in kills if k.get("pid") == str(pid)]
        if not mine:
            return how  # someone else's SIGKILL
        if mine[-1].get("constraint") == "CONSTRAINT_MEMCG" and (memcg := mine[-1].get("oom_memcg")):
            there = sum(k.get("oom_memcg") == memcg for k in kills)
            found = _memory_limit(memcg)
            if found:
                return _group_ran_out(how, *found, there)
        return _machine_ran_out(how)
    now = counters()
    if (count := _rose(since, now, "group_oom_kills")) > 0:
        tightest = _tightest(_memory_groups(), no_limit=_NO_MEMORY_LIMIT)
        if tightest:
            return _group_ran_out(how, *tightest, count)
    if _rose(since, now, "machine_oom_kills") > 0 or count > 0:
        return _machine_ran_out(how)
    return how
