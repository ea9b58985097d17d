"""A PS cluster on this machine: every task a separate process on loopback.

Used by ``tfsched demo``, the tests and as the fallback of the emulated multi-host cluster: with
``bandwidth_bps`` every task has a host link of its own, shaped in user space (``bench.relay``).
Every process is killed on exit, on Ctrl-C and on failure, and ends by itself with a launcher killed
outright (SIGKILL): it serves until its stdin, held here, ends (``bench.server``). Each is forked
from a process that imported TensorFlow once (``bench.zygote``), and is this process's child.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tfsched.bench.server import INTER_OP_FLAG, NO_SPIN_FLAG
from tfsched.bench.zygote import TaskHost, start_python, zygote
from tfsched.errors import TfschedError
from tfsched.limits import counters, exit_status, explain, explain_death
from tfsched.units import check_link_bandwidth

# how much lower than this process the tasks of a relayed LocalCluster run (nice)
RELAYED_TASKS_NICE = 5
# How often a cluster asks whether a task has died, to start its stand-in (``TaskHandles``), and
# how long that may take to serve.
WATCH_S = 0.5
STANDIN_START_S = 10.0
# A stand-in that could not start (its port held a while, by a process on its way out or another
# run's) is tried again after 1 s, then twice as long each time, up to STANDIN_RETRY_MAX_S: a
# stand-in's try costs a Python start, about 0.15 s of a core.
STANDIN_RETRY_MAX_S = 30.0
# Set (unless the environment sets it) in every process tfsched starts, and in the ``tfsched``
# command: ``import tensorflow`` with Keras 3 installed loads it, and with it scikit-learn and
# IPython where they are installed (the tuner's Bayesian optimization needs scikit-learn). tfsched's
# models are tf_keras's, so its processes need none of it.
LEGACY_KERAS = ("TF_USE_LEGACY_KERAS", "1")


_HANDED_OUT: set[int] = set()  # ports this process gave a task, not given twice


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range where one is readable.

    A port the kernel hands out for binding to 0 comes from the range it also picks the local
    ports of outgoing connections from, so between this check and the task's bind a gRPC
    connection of another test's session could take it ("Could not start gRPC server", seen
    once in a CI rehearsal). Below that range no connection takes it. The candidates come from
    the system's randomness, not the random module's shared state: building a built-in model
    seeds that (``tf_keras.utils.set_random_seed``), so two test processes that had each built
    one drew the same ports and one's cluster could not bind them."""
    import random

    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    candidates = (
        random.SystemRandom().sample(range(10_000, low), min(64, low - 10_000)) if low > 11_000 else []
    )
    for port in [*candidates, 0]:
        if port and port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _HANDED_OUT.add(port)
        return port
    raise TfschedError("no free loopback port")  # unreachable: port 0 always binds


def task_env(*, legacy_keras: bool = True) -> dict:
    """The environment of a task process: this one's, TensorFlow's C++ logs at warnings unless
    set, and the tfsched this process runs first on the path, the working directory not on it.
    With ``legacy_keras`` (unless the environment sets it) ``LEGACY_KERAS``: tfsched's processes
    use tf_keras, never Keras 3, and ``import tensorflow`` then leaves Keras 3 unloaded;
    ``legacy_keras=False`` for a process that stands for a user's program (the tests' TensorFlow 2
    client), which gets TensorFlow's keras as the user has it.

    ``python -m`` puts the working directory first on ``sys.path``, so a user's file there named
    as a module TensorFlow imports shadowed it in every task: a ``concurrent.py`` that starts a
    cluster did so again in each task's ``import concurrent.futures``, until the machine ran out
    of memory (thirty-third session). ``PYTHONSAFEPATH`` (Python 3.11) leaves it off; the
    directory this tfsched was imported from goes on instead, so a task runs the same code as
    the driver, also from a checkout that is not installed."""
    import site

    import tfsched

    here = os.path.dirname(os.path.dirname(os.path.abspath(tfsched.__file__)))
    path = os.environ.get("PYTHONPATH", "")
    # an installed tfsched's site-packages is on the task's path anyway, and first on
    # PYTHONPATH it would overrule the user's entries there
    if here not in {os.path.abspath(p) for p in (*site.getsitepackages(), site.getusersitepackages())}:
        path = os.pathsep.join(p for p in (here, path) if p)
    env = dict(
        os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"), PYTHONSAFEPATH="1"
    )
    if legacy_keras:
        env.setdefault(*LEGACY_KERAS)
    if path:
        env["PYTHONPATH"] = path
    return env


def start_tasks(
    spec: dict,
    *,
    vanilla: bool,
    log_dir: str,
    host=lambda job, index: TaskHost(),
    spec_of=None,
    only=None,
    inter_op_threads: int = 0,
    thread_spinning: bool = True,
) -> dict:
    """Start every task of ``spec`` (or the one ``only`` names, as (job, index)), each serving
    ``bench.server``; (job, index) -> its process (a ``Popen`` or a ``bench.zygote.ForkedTask``).

    ``host`` gives where a task runs (a ``bench.zygote.TaskHost``: its network namespace, CPU
    group, niceness), ``spec_of`` the cluster spec it runs with (``spec`` itself by default).
    Each task's stderr goes to ``log_dir/<job><index>.log`` (``task_log``): what a task that
    dies said last. ``inter_op_threads``: how many kernels each task's executor runs at a time
    (0: TensorFlow's default, the number of cores); ``thread_spinning=False``: its thread pools'
    idle threads sleep at once (``bench.server``'s ``--no-thread-spinning``).

    Each task is forked from this process's zygote (``bench.zygote``), which imported
    TensorFlow once; with ``TFSCHED_FORKED_TASKS=0`` it is ``python -m tfsched.bench.server``
    of its own, under the commands ``TaskHost.prefix`` gives.

    A task runs with ``GRPC_FAIL_FAST=true`` unless the environment sets it: an RPC to a task
    that is gone then fails at once, whatever the RPC. Under TensorFlow's default
    (``use_caller``) some wait for the task to come back: a session whose PS was killed did
    not close in 90 s (0.1 s with it), and a run across the barrier started as its PS died
    waited out its deadline (the CI failure of stop 73; seventy-seventh session). Every task
    serves before any session starts (``wait_ready``), so only a dead task is ever waited for.
    """
    env = task_env()
    env.setdefault("GRPC_FAIL_FAST", "true")
    forks = zygote(env)
    procs = {}
    try:
        for job, addrs in spec.items():
            for i in range(len(addrs)):
                if only is not None and only != (job, i):
                    continue
                argv = [
                    "-m",
                    "tfsched.bench.server",
                    json.dumps(spec_of(job, i) if spec_of else spec),
                    job,
                    str(i),
                ]
                if vanilla:
                    argv.append("--vanilla")
                if inter_op_threads:
                    argv.append(f"{INTER_OP_FLAG}{inter_op_threads}")
                if not thread_spinning:
                    argv.append(NO_SPIN_FLAG)
                argv.append("--with-stdin")  # the task ends when this process does, however it ends
                with open(os.path.join(log_dir, f"{job}{i}.log"), "wb") as log:
                    procs[(job, i)] = start_python(
                        forks, argv, name=f"{job}:{i}", host=host(job, i), env=env, stderr=log
                    )
    except BaseException:
        stop_processes(procs.values())
        raise
    return procs


# what TensorFlow logs of a machine without a GPU, also once a task serves: a TensorFlow 2
# coordinator's first function on a worker logged "failed call to cuInit" there, which then
# stood for the cause of the worker's death (``task_log``)
NO_GPU_LINES = ("failed call to cuInit", "Could not find cuda drivers")
# The lines of the stack trace a task prints as it aborts (absl's, after a failed check or on a
# signal), which ``task_log`` passes over for the line that says why; and the prefix of
# TensorFlow's log lines (severity, time, thread), which says nothing of it.
_STACK_LINE = re.compile(r"@ +0x[0-9a-f]+|\*\*\* .* \*\*\*$|PC: @ ")
_LOG_PREFIX = re.compile(r"^[FEWI]\d{4} [\d:.]+ +\d+ ")


def task_log(log_dir: str, job: str, index: int) -> str:
    """The last line a task wrote to its stderr ("" if none): once it serves, the last since then
    (what TensorFlow logs while starting, e.g. that it found no GPU, says nothing of a crash),
    none of ``NO_GPU_LINES``, and none of an abort's stack trace, without the log line's prefix.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with open(os.path.join(d, "worker0.log"), "w") as f:
    ...         _ = f.write("tfsched task: serving\\nE0000 cuda_platform.cc:52] failed call to cuInit: (303)\\n")
    ...     task_log(d, "worker", 0)
    ...     with open(os.path.join(d, "worker1.log"), "w") as f:
    ...         _ = f.write(
    ...             "F0000 00:00:1796503981.176784    4627 env.cc:84] Check failed: ret == 0 (11 vs. 0)\\n"
    ...             "*** Check failure stack trace: ***\\n"
    ...             "    @     0x7f5f8791d314  absl::log_internal::LogMessage::SendToLog()\\n"
    ...             "    @     0x7f5f88da6ce3  cfunction_call"
    ...         )
    ...     task_log(d, "worker", 1)
    ''
    'env.cc:84] Check failed: ret == 0 (11 vs. 0)'
    """
    from tfsched.bench.server import SERVING

    try:
        with open(os.path.join(log_dir, f"{job}{index}.log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = [x.strip() for x in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    if SERVING in lines:
        lines = lines[len(lines) - lines[::-1].index(SERVING) :]
    said = (
        x for x in reversed(lines) if x and not _STACK_LINE.match(x) and not any(n in x for n in NO_GPU_LINES)
    )
    return _LOG_PREFIX.sub("", next(said, ""))


def task_said(
    log_dir: str, job: str, index: int, how: str, since: dict | None = None, pid: int | None = None
) -> str:
    """ "/job:ps/task:0 <how>: <the last line it logged>" (without the colon part if none), with
    the limit it met since ``since`` (``limits.counters``): the out-of-memory killer's
    (``limits.explain_death``), or one on threads if that line tells of a thread it could not
    start (``limits.explain``); ``pid``: its process."""
    said = explain(task_log(log_dir, job, index)[:300], since)
    return f"/job:{job}/task:{index} {explain_death(how, since, pid)}" + (f": {said}" if said else "")


def wait_ready(procs: dict, timeout_s: float, log_dir: str, since: dict | None = None) -> None:
    """Wait for every task's "ready" line, never longer than ``timeout_s`` in all (a task that
    did not start named with the limit it met since ``since``, ``task_said``)."""
    deadline = time.monotonic() + timeout_s
    for (job, index), p in procs.items():
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([p.stdout], [], [], max(remaining, 0.0)) if p.stdout else ([], [], [])
        line = p.stdout.readline() if ready else ""
        if line.strip() != "ready":
            if not ready:
                why = "timed out"
            elif not line:  # its stdout closed: it exited
                try:
                    why = exit_status(p.wait(timeout=10))
                except subprocess.TimeoutExpired:
                    why = "closed its stdout"
            else:
                why = f"said {line.strip()[:100]!r}"
            raise TfschedError(
                f"cluster task {task_said(log_dir, job, index, f'did not start ({why})', since, p.pid)}"
            )


def stop_processes(procs) -> None:
    """Stop cluster tasks: SIGTERM, then SIGKILL what is still there after 5 s."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
        if p.stdin is not None:
            p.stdin.close()


# A cluster's task logs: a directory ``LOG_PREFIX<run tag>-*`` in the temp directory.
LOG_PREFIX = "tfsched-tasks-"


def fresh_temp_dir(prefix: str) -> str:
    """A new directory ``prefix<run tag>-*`` in the temp directory, named with this run's tag
    (``netns.run_tag``). First removes those of ``prefix`` of runs whose process is gone: a run
    killed by SIGKILL, or by the out-of-memory killer, cleans up nothing, and left these in the
    temp directory until the hundred-and-fifteenth session, as it leaves its namespaces for the
    next run to reap."""
    from tfsched.bench.netns import live_tags, run_tag

    live = live_tags()
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{prefix}{'[0-9]' * 5}-*")):
        if os.path.basename(path)[len(prefix) :][:5] not in live:
            shutil.rmtree(path, ignore_errors=True)  # (another user's: not ours to remove)
    return tempfile.mkdtemp(prefix=f"{prefix}{run_tag()}-")


def fresh_log_dir() -> str:
    """A new directory for a cluster's task logs (``fresh_temp_dir``)."""
    return fresh_temp_dir(LOG_PREFIX)


def dead_tasks_named(dead_tasks: Callable[[], list[str]] | None, grace_s: float = 2.0) -> list[str]:
    """``dead_tasks()``, asked again for up to ``grace_s``: a step can fail on a peer's closed
    connection a moment before the peer's process can be reaped."""
    deadline = time.monotonic() + grace_s
    while dead_tasks is not None:
        dead = dead_tasks()
        if dead or time.monotonic() >= deadline:
            return dead
        time.sleep(0.1)
    return []


class TaskHandles:
    """What both cluster kinds offer once their tasks run (``spec``, ``procs`` and ``log_dir``
    set; ``vanilla``, ``inter_op_threads``, ``thread_spinning`` and ``start_timeout_s`` are their
    settings)."""

    # This process's address on the cluster's network (where a driver-side service listens).
    driver_host = "127.0.0.1"
    # cores of its own each task's host has (a CPU quota, ``bench.hostcpu``); 0: all share them
    host_cores: float = 0.0
    host_cpu = None  # its bench.hostcpu.HostCpu while the tasks run
    _since: dict | None = None  # the limits' counts as the tasks started (``limits.counters``)

    def start_all(self, host=lambda job, index: TaskHost(), spec_of=None) -> None:
        """Start every task of ``spec`` (its stderr in a fresh ``log_dir``; ``start_tasks``'
        ``host`` and ``spec_of``), each in a group capped at ``host_cores`` if set, and wait
        until each serves."""
        self.log_dir = fresh_log_dir()
        self._netns = lambda job, index, place=host: place(job, index).netns  # a stand-in's
        if self.host_cores:
            from tfsched.bench.hostcpu import HostCpu

            self.host_cpu = HostCpu(self.host_cores).__enter__()
            inner = host
            host = lambda job, index: dataclasses.replace(  # noqa: E731
                inner(job, index), cgroup_procs=self.host_cpu.procs(job, index)
            )
        # to start a task again (restart)
        self._launch = {
            "host": host,
            "spec_of": spec_of,
            "inter_op_threads": self.inter_op_threads,
            "thread_spinning": self.thread_spinning,
        }
        self._since = counters()  # what a task that dies met is what the limits count from here
        self.procs = start_tasks(self.spec, vanilla=self.vanilla, log_dir=self.log_dir, **self._launch)
        wait_ready(self.procs, self.start_timeout_s, self.log_dir, self._since)
        self._watch_lock, self._watch_stop = threading.Lock(), threading.Event()
        self._standins, self._restarting, self._retries = {}, set(), {}
        self._watcher = threading.Thread(target=self._watch, name="tfsched-task-watch", daemon=True)
        self._watcher.start()

    # what watches the tasks once they serve (``_watch``)
    _watcher: threading.Thread | None = None
    _standins: dict | None = None  # (job, index) -> its stand-in's Popen (None: it did not start)
    _retries: dict | None = None  # (job, index) -> (when its stand-in is tried again, the wait after)

    def _watch(self) -> None:
        """Every ``WATCH_S`` until ``stop_all``: a task that died, and is not being restarted,
        gets a stand-in at its address (``bench.standin``), which fails at once the calls that
        would wait for the task until their deadlines: a session's whose master it was (up to a
        bench step's 600 s) and its close (``deadlines.SESSION_CALL_TIMEOUT_S``). A stand-in
        that could not start, or that ended, is tried again (``STANDIN_RETRY_MAX_S``)."""
        while not self._watch_stop.wait(WATCH_S):
            with self._watch_lock:
                if self._watch_stop.is_set():
                    return
                for task, p in list(self.procs.items()):
                    if task in self._restarting or p.poll() is None:
                        continue
                    standin = self._standins.get(task)
                    if standin is not None and standin.poll() is None:
                        continue  # it serves
                    again_at, wait_s = self._retries.get(task, (0.0, 1.0))
                    if time.monotonic() < again_at:
                        continue
                    self._standins[task] = self._stand_in(*task, exit_status(p.returncode))
                    if self._standins[task] is None:
                        self._retries[task] = (
                            time.monotonic() + wait_s,
                            min(2 * wait_s, STANDIN_RETRY_MAX_S),
                        )
                    else:
                        self._retries.pop(task, None)

    def _stand_in(self, job: str, index: int, how: str):
        """Task ``job:index``'s stand-in, serving in its network namespace (a ``Popen``), or
        None if it did not serve within ``STANDIN_START_S`` (its port taken): the calls then wait
        for their deadlines, as without it, unless a later try starts it (``_watch``)."""
        address = self.spec[job][index]
        message = f"cluster task /job:{job}/task:{index} at {address} is gone ({how})"
        argv = [sys.executable, "-m", "tfsched.bench.standin", address, message]
        try:
            p = subprocess.Popen(
                [*TaskHost(netns=self._netns(job, index)).prefix(), *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:  # no process to start (too many open files, no ``ip``): no stand-in
            return None
        try:
            wait_ready({(job, index): p}, STANDIN_START_S, self.log_dir)  # its "ready", as a task's
        except TfschedError:
            stop_processes([p])
            return None
        return p

    def standing_in(self) -> list[tuple[str, int]]:
        """The tasks that died whose stand-in serves at their address (``_watch``)."""
        if self._watcher is None:  # never started, or stopped with the tasks
            return []
        with self._watch_lock:
            return sorted(task for task, p in self._standins.items() if p is not None and p.poll() is None)

    def stop_all(self) -> None:
        """Stop every task and their stand-ins, and remove their logs (and their capped
        groups)."""
        if self._watcher is not None:  # the tasks it stops now are no deaths
            with self._watch_lock:
                self._watch_stop.set()
            self._watcher.join()
            self._watcher = None
        stop_processes(self.procs.values())
        stop_processes(p for p in (self._standins or {}).values() if p is not None)
        self._standins = None
        if self.host_cpu is not None:
            self.host_cpu.close()
            self.host_cpu = None
        if self.log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def dead_tasks(self) -> list[str]:
        """Every task that exited, each as "/job:ps/task:0 killed by SIGABRT: <its last log
        line>": what a failed step reports, since a step only sees that a peer went away."""
        return [
            task_said(self.log_dir, job, index, exit_status(p.returncode), self._since, p.pid)
            for (job, index), p in self.procs.items()
            if p.poll() is not None
        ]

    def task_pids(self) -> dict[int, str]:
        """Every task's process: pid -> "job:index", as ``bench.profile.task_processes`` finds
        them by name among this process's children, but this cluster's only."""
        return {p.pid: f"{job}:{index}" for (job, index), p in self.procs.items()}

    def target(self, job: str = "worker", index: int = 0) -> str:
        return f"grpc://{self.spec[job][index]}"

    @property
    def client_spec(self) -> dict:
        """The cluster spec for a client that hands one to every task (TensorFlow 2's coordinator)."""
        return self.spec

    def cluster_spec(self):
        import tensorflow as tf

        return tf.train.ClusterSpec(self.spec)

    def kill(self, job: str, index: int) -> None:
        p = self.procs[(job, index)]
        p.kill()
        p.wait(timeout=30)

    def restart(self, job: str, index: int) -> None:
        """Kill one task and start it again at its address, as a cluster manager brings back a
        failed task (a PS's variables are lost: a client recreates its session and restores
        them)."""
        with self._watch_lock:  # its address is its own again, not a stand-in's
            self._restarting.add((job, index))
            standin = self._standins.pop((job, index), None)
            self._retries.pop((job, index), None)
        if standin is not None:
            stop_processes([standin])
        self.kill(job, index)
        fresh = start_tasks(
            self.spec, vanilla=self.vanilla, log_dir=self.log_dir, only=(job, index), **self._launch
        )
        with self._watch_lock:
            self.procs.update(fresh)
            self._restarting.discard((job, index))
        wait_ready(fresh, self.start_timeout_s, self.log_dir, self._since)


@dataclass
class LocalCluster(TaskHandles):
    """``with LocalCluster(ps=1, workers=2) as c: c.target("worker", 0)``.

    With ``bandwidth_bps`` each task is a host with a link of that bandwidth each way, shaped by
    relays in this process (``bench.relay``: no root needed), which adds ``latency_s`` to what
    crosses it; the client's own side is unshaped, as the emulated cluster's bridge is. With
    ``shaped`` only those tasks' links are (``[("ps", 1)]``: one slow PS), the others' are not."""

    ps: int = 1
    workers: int = 1
    vanilla: bool = False  # plain tf.distribute.Server tasks, without tfsched loaded
    inter_op_threads: int = 0  # kernels each task runs at a time (0: TensorFlow's default)
    thread_spinning: bool = True  # False: the tasks' idle pool threads sleep at once (bench.server)
    host_cores: float = 0.0  # each task's own cores (bench.hostcpu); 0: they share the machine's
    bandwidth_bps: float | None = None  # None: loopback as it is
    latency_s: float = 0.0  # per link, with bandwidth_bps
    shaped: tuple | None = None  # the (job, index) whose links are shaped; None: every task's
    start_timeout_s: float = 180.0
    spec: dict = field(default_factory=dict)
    procs: dict = field(default_factory=dict)  # (job, index) -> Popen
    log_dir: str = ""  # the tasks' stderr (``task_log``), removed on exit
    relays: object | None = None  # bench.relay.RelayedSpec, with bandwidth_bps

    def __enter__(self) -> LocalCluster:
        if self.bandwidth_bps is not None:
            check_link_bandwidth(self.bandwidth_bps)  # what the relays shape (units.LINK_BPS_RANGE)
        if self.latency_s and (self.bandwidth_bps is None or not self.latency_s > 0):
            raise TfschedError(f"latency is a positive time on shaped links, got {self.latency_s!r} s")
        tasks = {("ps", i) for i in range(self.ps)} | {("worker", i) for i in range(self.workers)}
        if self.shaped is not None and (self.bandwidth_bps is None or not set(self.shaped) <= tasks):
            raise TfschedError(
                f"shaped must name tasks of the cluster, with a bandwidth, got {self.shaped!r}"
            )
        self.spec = {
            "ps": [f"127.0.0.1:{free_port()}" for _ in range(self.ps)],
            "worker": [f"127.0.0.1:{free_port()}" for _ in range(self.workers)],
        }
        try:
            if self.bandwidth_bps is not None:
                from tfsched.bench.relay import RelayedSpec

                self.relays = RelayedSpec(
                    self.spec,
                    self.bandwidth_bps,
                    self.latency_s,
                    pids=lambda: {p.pid: task for task, p in self.procs.items()},
                    unshaped=() if self.shaped is None else tasks - set(self.shaped),
                )
            if self.relays is None:
                self.start_all()
            else:
                # the tasks below this process, whose relays must wake on time when the tasks keep
                # every core busy, as a kernel's shaper (bench.netns) runs before any of them
                self.start_all(
                    host=lambda job, i: TaskHost(nice=RELAYED_TASKS_NICE), spec_of=self.relays.spec_of
                )
        except BaseException:
            self.close()
            raise
        return self

    def target(self, job: str = "worker", index: int = 0) -> str:
        if self.relays is None:
            return super().target(job, index)
        return f"grpc://{self.relays.client_address(job, index)}"  # across the task's link

    @property
    def client_spec(self) -> dict:
        """The cluster spec for a client that hands one to every task (TensorFlow 2's coordinator):
        with relays, each task's relay for every host (``RelayedSpec.shared_spec``)."""
        return self.spec if self.relays is None else self.relays.shared_spec

    def dead_tasks(self) -> list[str]:
        """``TaskHandles.dead_tasks``, and each task a relay could not carry a connection to
        (``RelayedSpec.failures``): a step fails on either as on a peer gone."""
        return super().dead_tasks() + (self.relays.failures() if self.relays is not None else [])

    def close(self) -> None:
        self.stop_all()
        if self.relays is not None:
            self.relays.close()
            self.relays = None

    def __exit__(self, *exc) -> None:
        self.close()
