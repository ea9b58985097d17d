"""Cluster tasks forked from one process that has imported TensorFlow: a zygote, as Android and
Chrome call theirs.

Every task of the bench's clusters (``bench.local``, ``bench.netns``) is a process running
``python -m tfsched.bench.server``. Until the eighty-eighth session each was started as such and
imported TensorFlow afresh: 5.2 s of CPU a task on this two-core Intel Xeon, 15 to 16 s for a PS
and two workers, 7 to 8 s of wall time before the cluster served. The test suite started 188 of
them, 980 s of CPU (``benchmarks/results/test-times-s88.md``); forked, a cluster of one process
after its first served after 0.5 s (``results/task-starts-s88.md``).

``Zygote(env)`` starts ``python -m tfsched.bench.zygote`` in the environment a task has
(``bench.local.task_env``), which imports TensorFlow and waits. For each task ``start`` hands
it the task's arguments, environment and working directory, and the task's three ends of its
stdin, stdout and stderr (``SCM_RIGHTS`` over a Unix socket). The zygote forks; the child forks
the task and exits at once, so the task goes to the nearest subreaper above it: the process
that made the zygote, which made itself one (``PR_SET_CHILD_SUBREAPER``). The task is that
process's child, as a ``Popen``'s was: ``ForkedTask`` waits for it, reads its exit status (a
signal's too), and signals it with no fear of a pid reused, since only its parent reaps it; the
CPU sampler finds it among its children (``bench.profile.task_processes``). Its command line,
the zygote's at the fork, is set to the one a process of its own has (``setproctitle``), where
``ps`` and ``pgrep -f`` look, and its name (``PR_SET_NAME``) to ``job:index``.

The task then goes to its host (``TaskHost.enter``: its network namespace, its capped CPU group,
its niceness), what the commands ``TaskHost.prefix`` gives did for a process of its own, and
runs ``python -m tfsched.bench.server`` in itself (``run_python``). It holds the
only read end of its stdin, so it ends with the process that started it, however that ends, as
before. The zygote never made an eager context or a server: it has no thread of TensorFlow's
when it forks, and ``OPENBLAS_NUM_THREADS=1`` in its environment leaves out numpy's idle BLAS
threads (the tasks' kernels are TensorFlow's own).

The zygote is kept for the process's life (``zygote``), and replaced by a new one when a task
asks for an environment that differs in more than pytest's per-test marker and what the import
sets. A failed or interrupted exchange with it kills it, so that a late answer is never read as
another start's; every wait on it is bounded. Side effect: a process that starts forked tasks is a
subreaper from then on, so a process orphaned below it (a task of a cluster started by a
program it ran, whose launcher was killed) comes to it, and stays a zombie until it exits.

Programs run to their end are forked the same way (``Forks``): TensorFlow 2's coordinators, one
a round of ``tfsched bench --api tf2`` and ``tfsched tune --api tf2`` (``bench.tf2.run_round``),
and the tests' clients, each from a zygote that imported what they import (7 to 9 s of CPU a
round on two cores, imported afresh: ``benchmarks/results/tf2-rounds-s87.md``). Their stdout and
stderr go to files, read as ``subprocess.run``'s were, and their stdin is ``/dev/null``; in its
place the zygote hands each the read end of a lifeline, a pipe whose writer (this process)
closing kills it. From the eighty-seventh session to the hundredth they had a forking process of
their own (``bench.forks``), which forked each as its own child, waited for it and said its
exit code; that process's death took its children with it (``PR_SET_PDEATHSIG``). One mechanism
now serves both: the same start, environment, title and error path, and a program is this
process's child, as a task is, whose end it reads itself. Forked this way, a round of Seq-32's
test run took 10.87 s against 13.77 s in a process of its own (``benchmarks/tf2_rounds.py``,
``results/tf2-rounds-s101.md``, a two-core Intel Xeon).

``TFSCHED_FORKED_TASKS=0`` in the environment starts every task and coordinator as a process
of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from tfsched.errors import TfschedError

ZYGOTE_MODULE = "tfsched.bench.zygote"
ENV_FLAG = "TFSCHED_FORKED_TASKS"  # "0": every task a process of its own
PRELOAD = ("tensorflow",)
READY = b"ready "  # then the variables its imports set in its environment (JSON)
START_TIMEOUT_S = 600.0  # the import, at most
REPLY_TIMEOUT_S = 60.0  # a fork, at most
CLOSE_TIMEOUT_S = 10.0
# the environment's variables nothing reads at start-up: a zygote serves whatever their values
VOLATILE_ENV = ("PYTEST_CURRENT_TEST",)
PR_SET_NAME = 15  # linux/prctl.h
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNET = 0x40000000  # linux/sched.h
NETNS_DIR = "/var/run/netns"  # where ``ip netns add`` binds a namespace
FORKS_PREFIX = "tfsched-forks-"  # a ``Forks``' directory in the temp directory, then its run's tag


def _libc():
    return ctypes.CDLL(None, use_errno=True)


@dataclasses.dataclass(frozen=True)
class TaskHost:
    """Where a task runs on this machine: its network namespace (``ip netns``), the CPU group
    whose ``cgroup.procs`` it joins (``bench.hostcpu``), and how much nicer it runs than its
    launcher."""

    netns: str | None = None
    cgroup_procs: str | None = None
    nice: int = 0

    def prefix(self) -> list[str]:
        """The command a task's own process runs under to get there.

        >>> TaskHost(netns="t0", nice=5).prefix()
        ['ip', 'netns', 'exec', 't0', 'nice', '-n', '5']
        """
        cmd = []
        if self.cgroup_procs:  # a shell that enters the group, then runs the rest in its place
            cmd += ["sh", "-c", 'echo $$ > "$0" && exec "$@"', self.cgroup_procs]
        if self.netns:
            cmd += ["ip", "netns", "exec", self.netns]
        if self.nice:
            cmd += ["nice", "-n", str(self.nice)]
        return cmd

    def enter(self) -> None:
        """Get there from inside the task's process, as ``prefix``'s commands do; raises
        ``OSError``. Its namespace by ``setns``: the process has one thread, so all of it moves
        (``ip netns exec`` also mounts the namespace's ``/sys``, which a task never reads)."""
        if self.cgroup_procs:
            with open(self.cgroup_procs, "w") as f:
                f.write(str(os.getpid()))
        if self.netns:
            path = os.path.join(NETNS_DIR, self.netns)
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc().setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err), path)
            finally:
                os.close(fd)
        if self.nice:
            os.nice(self.nice)


STOP_POLL_S = 0.5  # how often ``wait_for`` asks whether to stop a program


def wait_for(program, timeout_s: float, stop: Callable[[], bool] | None = None) -> None:
    """Wait until ``program`` (a ``Popen`` or a ``ForkedTask``) ends. One that outlives
    ``timeout_s`` is killed and raises ``subprocess.TimeoutExpired``; one that runs when
    ``stop()`` says so (asked every ``STOP_POLL_S``) is killed, and this returns once it has
    gone: a program that waits on a task of the cluster that died (a coordinator of TensorFlow
    2 waits for a worker to come back) need not hold its caller until its timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            program.wait(max(0.0, left if stop is None else min(left, STOP_POLL_S)))
            return
        except subprocess.TimeoutExpired:
            pass
        except BaseException:  # Ctrl-C: the program goes too, as ``subprocess.run``'s does
            program.kill()
            program.wait()
            raise
        timed_out = time.monotonic() >= deadline
        if timed_out or (stop is not None and stop()):
            program.kill()
            program.wait()
            if timed_out:
                raise subprocess.TimeoutExpired(program.args, timeout_s) from None
            return


class ForkedTask:
    """A task the zygote forked, this process's child: what the launcher uses of ``Popen``."""

    def __init__(self, pid: int, args: list[str], stdin, stdout) -> None:
        self.pid, self.args = pid, args
        self.stdin, self.stdout = stdin, stdout  # text files: the ends this process holds
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped by another: its status is lost, as Popen says
                    pid, status = self.pid, 0
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code (``Popen``'s: minus the signal that ended it); raises
        ``subprocess.TimeoutExpired`` after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            delay = min(delay * 2, 0.05, *([left] if left is not None else []))
            time.sleep(delay)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # not yet reaped: the pid is still its own, whatever it has done since
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The forking process for tasks of environment ``env`` (started at once, importing
    ``preload``): ``start`` a task, ``close`` it (its tasks are this process's and go on)."""

    def __init__(
        self, env: dict, preload: tuple[str, ...] = PRELOAD, what: str = "the tasks' zygote"
    ) -> None:
        # before any task is forked below it: an orphan goes to the nearest subreaper
        if _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot become a subreaper")
        self.env, self.what = env, what  # ``what``: how its errors name it
        self.imports_set: dict = {}  # what its imports set in its environment, once it is ready
        self._lock = threading.Lock()
        self._ready = False
        self._log = tempfile.TemporaryFile()  # its own stderr: what it said before it failed
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE, *preload],
                env=dict(env, OPENBLAS_NUM_THREADS="1"),
                stdin=theirs,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
            )
        finally:
            theirs.close()

    def _said(self, timeout_s: float) -> bytes | None:
        """Its next message (b"" once it has ended), None after ``timeout_s``."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1 << 16)
        except TimeoutError:
            return None
        except OSError:
            return b""

    def _fail(self, why: str) -> TfschedError:
        """The error to raise; the zygote is killed, since what it says next could answer
        another request (a later cluster gets a new one)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        self._log.seek(0)
        tail = self._log.read().decode("utf-8", "replace").strip().splitlines()[-1:]
        return TfschedError(f"{self.what} {why}: {tail[0] if tail else '(nothing on its stderr)'}")

    def start(self, argv: list[str], *, name: str, host: TaskHost, env: dict, stderr) -> ForkedTask:
        """``python ARGV`` (``["-m", MODULE, ...]`` or ``[SCRIPT, ...]``) forked as task
        ``name`` ("job:index") on ``host``, in ``env`` and this process's working directory,
        ``stderr`` (a file) its stderr and a pipe to and from this process its stdin and stdout,
        as a ``Popen``'s with ``text=True``. Raises ``TfschedError`` if the zygote fails."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            pid = self._spawn(argv, name, host, env, (stdin_r, stdout_w, stderr.fileno()))
        except BaseException:
            for fd in (stdin_w, stdout_r):
                os.close(fd)
            raise
        finally:
            for fd in (stdin_r, stdout_w):  # the task's ends: it holds the only copies now
                os.close(fd)
        return ForkedTask(pid, argv, os.fdopen(stdin_w, "w"), os.fdopen(stdout_r, "r"))

    def _spawn(
        self,
        argv: list[str],
        name: str,
        host: TaskHost,
        env: dict,
        fds: tuple[int, int, int],
        lifeline: bool = False,
    ) -> int:
        """Fork task ``name`` with ``fds`` as its stdin, stdout and stderr (this process keeps
        its own copies); its pid, this process's child. With ``lifeline`` the first is no stdin
        (the task's is ``/dev/null``) but a pipe's read end whose writer's end closing kills
        it."""
        request = {
            "argv": argv,
            "name": name,
            "host": dataclasses.asdict(host),
            "env": env,
            "cwd": os.getcwd(),
            "lifeline": lifeline,
        }
        with self._lock:
            if not self._ready:
                said = self._said(START_TIMEOUT_S)
                if not said or not said.startswith(READY):
                    raise self._fail("did not start")
                self.imports_set = json.loads(said[len(READY) :])
                self._ready = True
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], list(fds))
            except OSError:
                raise self._fail("has ended") from None
            try:
                said = self._said(REPLY_TIMEOUT_S)
            except BaseException:  # Ctrl-C: its answer, unread, would answer the next request
                self._fail("was interrupted")
                raise
            if not said or not said.isdigit():
                raise self._fail(
                    f"did not fork {name} ({said.decode(errors='replace') if said else 'no answer'})"
                )
            return int(said)

    def serves(self, env: dict) -> bool:
        """Whether it is alive and its tasks would start as processes of their own in ``env``
        would: the same environment but for ``VOLATILE_ENV`` and what importing TensorFlow sets
        (``TF2_BEHAVIOR``, ``KMP_INIT_AT_FORK``, ...; a process that has imported it has them)."""

        def key(e: dict) -> dict:
            return {k: v for k, v in e.items() if k not in VOLATILE_ENV and self.imports_set.get(k) != v}

        return self.proc.poll() is None and key(self.env) == key(env)

    def close(self) -> None:
        """End it (its socket closed, it returns) and wait for it."""
        self.sock.close()
        try:
            self.proc.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def start_python(forks: Zygote | None, argv: list[str], *, name: str, host: TaskHost, env: dict, stderr):
    """``python ARGV`` as task ``name`` on ``host`` in ``env``, ``stderr`` (a file) its stderr
    and pipes to and from this process (text) its stdin and stdout: forked by ``forks`` (a
    ``ForkedTask``), or with None a process of its own under ``host.prefix()`` (a ``Popen``)."""
    if forks is None:
        return subprocess.Popen(
            [*host.prefix(), sys.executable, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )
    return forks.start(argv, name=name, host=host, env=env, stderr=stderr)


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def zygote(env: dict) -> Zygote | None:
    """This process's zygote for tasks of environment ``env`` (a new one if that differs from
    the last one's, or it has ended), or None: ``TFSCHED_FORKED_TASKS=0``, or not on Linux."""
    global _ZYGOTE
    if os.environ.get(ENV_FLAG, "1") == "0" or not sys.platform.startswith("linux"):
        return None
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None and not _ZYGOTE.serves(env):
            _ZYGOTE.close()
            _ZYGOTE = None
        if _ZYGOTE is None:
            try:
                _ZYGOTE = Zygote(env)
            except OSError:  # no prctl or subreaper here: tasks of their own
                return None
            atexit.unregister(close_zygote)  # once, however many it has made
            atexit.register(close_zygote)
        return _ZYGOTE


def close_zygote() -> None:
    """End this process's zygote, if it has one (its tasks go on)."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None:
            _ZYGOTE.close()
            _ZYGOTE = None


class Forks:
    """Programs run to their end (``subprocess.run``'s way), each forked by a zygote of its own
    that imported ``preload`` (module names) in ``env`` (``bench.local.task_env()`` if None):
    TensorFlow 2's coordinators (``bench.tf2.forked_coordinators``) and the tests' clients.
    ``run(argv, timeout_s)``; ``close()`` (or leaving a ``with``) ends the zygote and kills a
    program still running.

    A program's stdout and stderr go to files of its own, read when it ends; its stdin is
    ``/dev/null``. It is this process's child, and the write end of its lifeline (``_die_with``)
    is this process's alone: it is killed when its run lets it go (past its timeout, or closed)
    or this process ends, however that ends. The zygote ending does not end it. It exits as a
    task does, its stdout and stderr flushed and no ``atexit`` handler run (a process of its own,
    and the forking process's child until the hundredth session, ran them). So its ``TMPDIR`` is
    a directory of its run's, removed when it ends, killed or not: what it leaves there, as
    AutoGraph's ``__autograph_generated_file*.py`` (removed by an ``atexit`` handler), goes with
    it. Until the hundred-and-fifteenth session they piled up in ``/tmp``, about ten a round of
    ``tfsched bench --api tf2``."""

    def __init__(self, preload: tuple[str, ...] | list[str], env: dict | None = None) -> None:
        from tfsched.bench.local import fresh_temp_dir, task_env

        # numpy's idle BLAS threads left out in the programs too, as they were in the zygote
        self.env = dict(task_env() if env is None else env, OPENBLAS_NUM_THREADS="1")
        self.zygote = Zygote(self.env, tuple(preload), what="the forking process")
        self.proc = self.zygote.proc
        self.dir = fresh_temp_dir(FORKS_PREFIX)  # (a killed run's: removed here)
        self._lock = threading.Lock()
        self._runs = 0
        self._lifelines: set = set()  # the write ends of the running programs' lifelines
        self._closed = False

    def run(
        self, argv: list[str], timeout_s: float, stop: Callable[[], bool] | None = None
    ) -> subprocess.CompletedProcess:
        """``python ARGV`` (``["-m", MODULE, ...]`` or ``[SCRIPT, ...]``) forked: its exit code,
        stdout and stderr. A program that outlives ``timeout_s`` is killed and raises
        ``subprocess.TimeoutExpired`` (its ``cmd``: ``"pid N"``); one that runs when ``stop()``
        says so is killed and returns as killed (``wait_for``); a zygote that ended or never got
        ready gives a failed run whose stderr says so with the zygote's last line of stderr."""
        argv = list(argv)
        closed = subprocess.CompletedProcess(argv, 1, "", "the forking process was closed")
        with self._lock:
            if self._closed:
                return closed
            self._runs += 1
            out, err, tmp = (os.path.join(self.dir, f"{self._runs}.{s}") for s in ("out", "err", "tmp"))
        # its name (``comm``): no "job:index", which the CPU sampler would take for a task's
        name = os.path.basename(argv[1] if argv[0] == "-m" else argv[0]).replace(":", "_")
        with contextlib.ExitStack() as files:
            try:
                os.mkdir(tmp)
                stdout, stderr = (files.enter_context(open(path, "wb")) for path in (out, err))
            except OSError:
                if self._closed:  # closed meanwhile: its directory removed (a traceback before)
                    return closed
                raise
            lifeline_r, lifeline_w = os.pipe()
            try:
                pid = self.zygote._spawn(
                    argv,
                    name,
                    TaskHost(),
                    dict(self.env, TMPDIR=tmp),
                    (lifeline_r, stdout.fileno(), stderr.fileno()),
                    lifeline=True,
                )
            except TfschedError as e:
                os.close(lifeline_w)
                return subprocess.CompletedProcess(argv, 1, "", str(e))
            except BaseException:  # Ctrl-C: a program forked meanwhile dies with its lifeline
                os.close(lifeline_w)
                raise
            finally:
                os.close(lifeline_r)
        program = ForkedTask(pid, argv, os.fdopen(lifeline_w, "wb"), None)
        with self._lock:
            if self._closed:  # closed while it was forked: let it go at once
                program.stdin.close()
            else:
                self._lifelines.add(program.stdin)
        try:
            wait_for(program, timeout_s, stop)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(f"pid {pid}", timeout_s) from None
        finally:
            with self._lock:
                self._lifelines.discard(program.stdin)
                program.stdin.close()
        outputs = {}
        for path in (out, err):
            outputs[path] = ""
            # either may be gone, closed meanwhile: ``close`` removes the run's directory. Until
            # the hundred-and-nineteenth session a file read and then removed by ``close`` before
            # this removed it was given twice, its text and "", and the run raised a TypeError.
            with contextlib.suppress(OSError):
                with open(path, encoding="utf-8", errors="replace") as f:
                    outputs[path] = f.read()
            with contextlib.suppress(OSError):
                os.unlink(path)
        shutil.rmtree(tmp, ignore_errors=True)
        return subprocess.CompletedProcess(argv, program.returncode, outputs[out], outputs[err])

    def close(self) -> None:
        """End the zygote, kill a program still running, and remove the files once it has
        gone (its run returns it as killed)."""
        with self._lock:
            self._closed = True
            for lifeline in self._lifelines:
                lifeline.close()
            self._lifelines.clear()
        self.zygote.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Forks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _task(request: dict, fds: list[int], ctl: socket.socket, imports_set: dict) -> None:
    """In the forked task: its files, environment, name and host, then ``python ARGV``
    (``run_python``); exits with its code, as the interpreter would, and never returns."""
    code = 1
    try:
        ctl.close()
        lifeline = None
        if request.get("lifeline"):  # a program run to its end: its stdin is /dev/null
            lifeline, fds[0] = fds[0], os.open(os.devnull, os.O_RDONLY)
        for fd, target in zip(fds, (0, 1, 2), strict=True):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        if lifeline is not None:
            threading.Thread(target=_die_with, args=(lifeline,), name="tfsched-lifeline", daemon=True).start()
        # first: the title takes the room of the zygote's environment, which is still where it began
        _set_title([sys.executable, *request["argv"]], request["name"])
        os.environ.clear()  # as a process of its own has it once it has imported TensorFlow
        os.environ.update({**request["env"], **imports_set})
        tempfile.tempdir = None  # the zygote's, if it asked: this task's TMPDIR, read afresh
        with contextlib.suppress(OSError):  # a directory gone: a process of its own runs in it too
            os.chdir(request["cwd"])
        signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C ends it, as before
        try:
            TaskHost(**request["host"]).enter()
        except OSError as e:
            print(f"tfsched task: cannot enter its host: {e}", file=sys.stderr)
            return
        code = run_python(request["argv"])
    except BaseException:  # in its own start: said as an uncaught error is
        import traceback

        traceback.print_exc()
    finally:
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
        os._exit(code or 0)


def _die_with(lifeline: int) -> None:
    """On a thread of the forked program's: read ``lifeline`` to its end, then kill the process.
    Its writer's end is the launcher's alone, so the program ends when the launcher lets it go
    or ends, however it ends (a coordinator whose cluster has gone would wait for it)."""
    with contextlib.suppress(OSError):
        while os.read(lifeline, 4096):
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def run_python(argv: list[str]) -> int:
    """``python ARGV`` (``["-m", MODULE, ...]`` or ``[SCRIPT, ...]``) in this process, a fork's
    child, as the interpreter runs it: its exit code, and an uncaught error's traceback on stderr
    from the program's own first frame. numpy's random state is reseeded first, as a fresh
    process has its own (``random`` reseeds itself at a fork)."""
    import runpy
    import traceback

    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()

    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:  # as the interpreter reads it
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException as e:  # its traceback from the program's first frame, as the interpreter's
        tb = e.__traceback__
        while tb and (
            tb.tb_frame.f_code.co_filename == __file__ or "runpy" in tb.tb_frame.f_code.co_filename
        ):
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        return 1
    return 0


def _set_title(argv: list[str], name: str) -> None:
    """Show a forked task as a process of its own shows: ``/proc/PID/cmdline`` (what ``ps`` and
    ``pgrep -f`` read, the zygote's until now) reads its command, as ``ps`` prints one, and
    ``/proc/PID/comm`` its name."""
    import setproctitle

    setproctitle.setproctitle(" ".join(argv))
    _libc().prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)  # after: the title sets it too


def _fork(request: dict, fds: list[int], ctl: socket.socket, imports_set: dict) -> int:
    """Fork the task through a child that leaves it at once, so that the subreaper above (the
    process that made this one) takes it; its pid, once the child has gone."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(r)
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _task(request, fds, ctl, imports_set)
            os.write(w, str(pid).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        said = f.read()  # to its end: the middle child has exited
    os.waitpid(middle, 0)  # and with it gone, the task is the subreaper's
    if not said.isdigit():
        raise OSError("the task's fork failed")
    return int(said)


def serve(preload: list[str]) -> int:
    """The zygote: import ``preload``, say READY and what the imports set in its environment,
    then fork a task per request (its pid, or "error: ..."); ends when the socket on its stdin
    does."""
    import gc
    import importlib
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C ends the tasks; the launcher ends this
    ctl = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # the tasks' stdin is theirs; this one's is the socket above
    os.close(devnull)
    before = dict(os.environ)
    for name in preload:
        importlib.import_module(name)
    imports_set = {k: v for k, v in os.environ.items() if before.get(k) != v}
    # runpy runs a module that is imported already (here, by ``preload``) as a fresh __main__, as
    # ``python -m`` would: nothing to warn of
    warnings.filterwarnings(
        "ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning
    )
    gc.freeze()  # the tasks' collections leave the imported objects' pages shared
    ctl.send(READY + json.dumps(imports_set).encode())
    while True:
        msg, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 3)
        if not msg:
            return 0
        try:
            reply = str(_fork(json.loads(msg), fds, ctl, imports_set))
        except Exception as e:  # noqa: BLE001 - said to the launcher, which fails the start
            reply = f"error: {e}"
        finally:
            for fd in fds:
                os.close(fd)
        ctl.send(reply.encode())


if __name__ == "__main__":  # python -m tfsched.bench.zygote MODULE...
    sys.exit(serve(sys.argv[1:]))
