"""A Python process that imports TensorFlow once and forks a child for each program to run.

``tfsched bench --api tf2`` and ``tfsched tune --api tf2`` run every round in a coordinator of
its own, since the pass goes into a process's eager context (``bench.tf2.run_round``). Until the
eighty-seventh session each was ``python -m tfsched.bench.tf2 ARGS``, and importing TensorFlow
and tf_keras again took 7 to 9 s of CPU on this two-core Intel Xeon: a timed round of the tests'
Seq-32 run took 12.2 s that way, 8.1 s forked (``benchmarks/tf2_rounds.py``,
``results/tf2-rounds-s87.md``).

``Forks(preload)`` starts one process, ``python -m tfsched.bench.forks MODULE...``, with the
environment such a program had (``bench.local.task_env`` by default); it imports ``preload`` and
then, per ``run(argv)``, forks a child that runs ``python ARGV`` as the interpreter would
(``runpy``: ``-m MODULE ARGS`` or ``SCRIPT ARGS``) and exits through the interpreter's own exit.
A child starts from a process that has imported TensorFlow but never made its eager context, so
it has no thread of TensorFlow's (``OPENBLAS_NUM_THREADS=1`` leaves out numpy's idle BLAS threads
too): what a fresh process has once its imports are done. Whatever a program times, it times
inside the child, as before; the forking process waits on the child and is idle meanwhile.

Why not ``multiprocessing``'s forkserver: its server takes the environment of whichever process
first starts it and keeps it for the life of that process, sends its children's output to the
terminal (a coordinator's TensorFlow logs stayed off it), and runs a function of the caller's,
re-importing the caller's main module in each child. Here each child's stdout and stderr go to
files of its own, read as ``subprocess.run``'s were, and ``run`` returns a ``CompletedProcess``
or raises ``TimeoutExpired`` as it did.

Nothing outlives the run: closing the forking process's stdin (``close``, or the caller's
process ending) ends it, killing a child still running; a child is killed when the forking
process ends (Linux's ``PR_SET_PDEATHSIG``), and when it outlives its ``run``'s timeout.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

READY = "ready"
START_TIMEOUT_S = 600.0  # the imports, at most
FORK_TIMEOUT_S = 60.0
CLOSE_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Forks:
    """The forking process, started at once importing ``preload`` (module names) in ``env``
    (``bench.local.task_env()`` if None), and the files its children write. ``run(argv,
    timeout_s)``: ``python ARGV``, ``subprocess.run``'s way; ``close()`` (or leaving a ``with``)
    ends it."""

    def __init__(self, preload: tuple[str, ...] | list[str], env: dict | None = None) -> None:
        from tfsched.bench.local import task_env

        self.dir = tempfile.mkdtemp(prefix="tfsched-forks-")
        self._log = open(os.path.join(self.dir, "forks.log"), "w")  # closed in close()
        self._ready = False
        self._runs = 0
        self._read = b""  # read from its stdout, not yet a whole line
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tfsched.bench.forks", *preload],
            env=dict(task_env() if env is None else env, OPENBLAS_NUM_THREADS="1"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )

    def _line(self, deadline: float) -> str | None:
        """The forking process's next line ("" once it has ended), or None once ``deadline``
        (``time.monotonic()``) has passed. Read from the pipe itself, never its buffered file: a
        child's pid and exit code can come in one read, and the file would keep the second line
        from ``select``."""
        while b"\n" not in self._read:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if select.select([self.proc.stdout], [], [], left)[0]:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    return ""
                self._read += chunk
        line, self._read = self._read.split(b"\n", 1)
        return line.decode().strip()

    def _failed(self, argv: list[str], why: str) -> subprocess.CompletedProcess:
        """A failed run whose stderr is ``why`` and the forking process's last line of stderr.
        The process is killed (if it has not ended): what it says next could answer another
        request, so every later run fails at once, as ended."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        self._log.flush()
        with open(self._log.name) as f:
            tail = f.read().strip().splitlines()[-1:] or ["(nothing on stderr)"]
        return subprocess.CompletedProcess(argv, 1, "", f"{why}: {tail[0]}")

    def run(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
        """``python ARGV`` (``["-m", MODULE, ...]`` or ``[SCRIPT, ...]``) in a child of its own:
        its exit code, stdout and stderr. A child that outlives ``timeout_s`` is killed and
        raises ``subprocess.TimeoutExpired`` (its ``cmd``: ``"pid N"``); a forking process that
        ended or never got ready gives a failed run whose stderr ends with its own last line."""
        argv = list(argv)
        if not self._ready:
            if self._line(time.monotonic() + START_TIMEOUT_S) != READY:
                return self._failed(argv, "the forking process did not start")
            self._ready = True
        self._runs += 1
        out, err = (os.path.join(self.dir, f"{self._runs}.{s}") for s in ("out", "err"))
        try:
            self.proc.stdin.write(json.dumps({"argv": argv, "out": out, "err": err}).encode() + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):  # its end of the pipe closed, or ours
            return self._failed(argv, "the forking process ended")
        start = time.monotonic()
        pid = self._line(start + FORK_TIMEOUT_S)
        if not pid or not pid.isdigit():
            return self._failed(argv, "the forking process did not fork")
        code = self._line(start + timeout_s)
        if code is None:  # past its timeout: the child is killed, the process reports its end
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
            if self._line(time.monotonic() + FORK_TIMEOUT_S) is None:  # no word of its end
                self._failed(argv, "the forking process did not reap its child")
            raise subprocess.TimeoutExpired(f"pid {pid}", timeout_s)
        if not code.lstrip("-").isdigit():  # "": it ended before the child did (which ends with it)
            return self._failed(argv, f"the forking process {'said ' + repr(code) if code else 'ended'}")
        outputs = []
        for path in (out, err):
            try:
                with open(path) as f:
                    outputs.append(f.read())
                os.unlink(path)
            except OSError:
                outputs.append("")
        return subprocess.CompletedProcess(argv, int(code), *outputs)

    def close(self) -> None:
        """End the forking process (a child still running is killed) and remove the files."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Forks:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _child(request: dict, parent: int) -> int:
    """In the forked child: its output to the request's files, then ``python ARGV`` as the
    interpreter runs it. Its exit code. It is killed if the forking process (``parent``) ends
    first: a coordinator whose cluster has gone waits for it."""
    with contextlib.suppress(OSError, AttributeError):  # Linux only
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the call: nothing would kill this one
        return 1
    for fd, path in ((1, request["out"]), (2, request["err"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C ends it, as a process of its own
    return run_python(request["argv"])


def run_python(argv: list[str]) -> int:
    """``python ARGV`` (``["-m", MODULE, ...]`` or ``[SCRIPT, ...]``) in this process, a fork's
    child, as the interpreter runs it: its exit code, and an uncaught error's traceback on stderr
    from the program's own first frame. numpy's random state is reseeded first, as a fresh
    process has its own (``random`` reseeds itself at a fork). Also ``bench.zygote``'s tasks'."""
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


def serve(preload: list[str]) -> int:
    """The forking process: import ``preload``, say READY, then per request line (its ``argv``
    and where its output goes) a child; its pid, then its exit code (a negative signal number
    where a signal ended it). Ends when stdin does, killing a child still running."""
    import gc
    import importlib
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C ends the children; the caller ends this
    for name in preload:
        importlib.import_module(name)
    # runpy runs a module that is imported already (here, by ``preload``) as a fresh __main__, as
    # ``python -m`` would: nothing to warn of
    warnings.filterwarnings(
        "ignore", message=".*found in sys.modules after import of package", category=RuntimeWarning
    )
    gc.freeze()  # the children's collections leave the imported objects' pages shared
    out, me = sys.stdout, os.getpid()
    print(READY, file=out, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request, me)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            raise SystemExit(code)  # the interpreter's own exit, as a process of its own
        print(pid, file=out, flush=True)
        print(_wait(pid), file=out, flush=True)
    return 0


def _wait(pid: int) -> int:
    """The child's exit code; it is killed if stdin ends first (the caller has gone)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here: wait as the caller waits
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    try:
        while True:
            ready, _, _ = select.select([pidfd, sys.stdin], [], [])
            if pidfd in ready:
                break
            if sys.stdin in ready:
                if not sys.stdin.buffer.peek(1):  # EOF: the caller has gone
                    os.kill(pid, signal.SIGKILL)
                break  # (a request before the last one's end: none is sent) waited for below
    finally:
        os.close(pidfd)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


if __name__ == "__main__":  # python -m tfsched.bench.forks MODULE...
    sys.exit(serve(sys.argv[1:]))
