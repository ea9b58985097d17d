"""``bench.zygote.Forks``: programs run to their end, forked by a zygote that imported what they
import (the TensorFlow 2 bench's coordinators, ``bench.tf2.forked_coordinators``, and the tests'
clients), each this process's child, ending with it or with its run."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import shadow_module
from tfsched.bench.local import task_env
from tfsched.bench.zygote import Forks

PROGRAM = """
import json, os, sys
import random
import numpy
print(json.dumps({"argv": sys.argv, "name": __name__, "pid": os.getpid(), "ppid": os.getppid(),
                  "env": os.environ.get("FORKS_TEST"), "stdin": os.readlink("/proc/self/fd/0"),
                  "preloaded": "email.mime.text" in sys.modules,
                  "random": [random.random(), numpy.random.random()]}))
print("to stderr", file=sys.stderr)
what = sys.argv[1]
if what.startswith("temp"):  # a file that an atexit handler removes, as AutoGraph's loader makes
    import atexit, tempfile
    made = tempfile.NamedTemporaryFile(prefix="__autograph_generated_file", suffix=".py", delete=False)
    atexit.register(os.unlink, made.name)
    print(made.name, flush=True)
    what = what.removeprefix("temp") or "0"
if what in ("sleep", "nap"):
    import time
    time.sleep(600 if what == "sleep" else 2)
    sys.exit(4)
if what == "raise":
    raise ValueError("as asked")
sys.exit("said and failed" if what == "say" else int(what))
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return str(path)


def _alive(pid: int) -> bool:
    """Running: neither gone nor dead and not yet reaped (by whatever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


def _running(program: str, parent: int | None = None) -> list[int]:
    """The processes running ``program`` below ``parent`` (this process by default): their
    command line is the title ``python PROGRAM ARGS``, as ``ps`` prints a command. The whole
    title: a child the parent forks to start another program reads the parent's command line
    until it has started it, and a caller's names the program too (``python -c
    "...Forks([]).run([PROGRAM, ...])"``). Until the hundred-and-nineteenth session the caller's
    zygote, caught so, was taken for the program: no run's directory was there yet (a flake in
    full runs, and 6 in 30 with both cores busy)."""
    title = f"{sys.executable} {program} ".encode()
    found = []
    for pid in _children(os.getpid() if parent is None else parent):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(title):
                    found.append(pid)
        except OSError:
            pass
    return found


def _running_child(forks: Forks, argv: list[str]) -> tuple[threading.Thread, dict, int]:
    """``argv`` run on a thread of its own; the thread, where its result goes, and the child."""
    ran = {}
    waiting = threading.Thread(target=lambda: ran.update(r=forks.run(argv, 300)))
    waiting.start()
    deadline = time.monotonic() + 60
    while not _running(argv[0]) and time.monotonic() < deadline:
        time.sleep(0.02)
    (child,) = _running(argv[0])
    return waiting, ran, child


def test_a_forked_program_runs_as_python_runs_it(program):
    """``SCRIPT ARGS`` and ``-m MODULE ARGS``: argv, __main__, the environment given, the imports
    done once, stdout and stderr apart, and the exit code as the interpreter makes it."""
    with Forks(["email.mime.text", "numpy.random"], env=dict(task_env(), FORKS_TEST="given")) as forks:
        done = forks.run([program, "3"], 60)
        said = json.loads(done.stdout)
        assert done.returncode == 3 and done.stderr == "to stderr\n"
        assert said["argv"] == [program, "3"] and said["name"] == "__main__" and said["env"] == "given"
        assert said["preloaded"] and said["pid"] not in (os.getpid(), forks.proc.pid)
        # this process's child, as a task is, with no stdin
        assert said["ppid"] == os.getpid() and said["stdin"] == os.devnull
        again = json.loads(forks.run([program, "0"], 60).stdout)
        # a child each, each with random states of its own (numpy's as Python's)
        assert again["pid"] != said["pid"] and all(
            a != b for a, b in zip(again["random"], said["random"], strict=True)
        )
        assert forks.run([program, "0"], 60).returncode == 0
        # an error, the program's own exit message, and a module: as a process of its own ends
        for argv in ([program, "raise"], [program, "say"], ["-m", "json.tool", "--compact", os.devnull]):
            forked = forks.run(argv, 60)
            plain = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=task_env())
            assert forked.returncode == plain.returncode == 1
            assert forked.stderr == plain.stderr  # (stdout says which process it is, as above)
            if argv[-1] == "raise":
                assert forked.stderr.splitlines()[-1] == "ValueError: as asked"
    assert forks.proc.returncode == 0 and not os.path.exists(forks.dir)


def test_a_child_past_its_timeout_is_killed_and_the_next_is_forked(program):
    with Forks([]) as forks:
        start = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired) as hung:
            forks.run([program, "sleep"], 1)
        assert 1 <= time.monotonic() - start < 30
        pid = int(str(hung.value.cmd).removeprefix("pid "))
        assert not os.path.exists(f"/proc/{pid}") and _running(program) == []  # reaped
        assert forks.run([program, "5"], 60).returncode == 5


def test_a_child_is_killed_once_its_caller_says_stop_and_returns_as_killed(program):
    """``stop``: asked every half second while the child runs (a TensorFlow 2 coordinator that
    waits for a dead worker, stopped when the bench sees the worker dead)."""
    with Forks([]) as forks:
        start = time.monotonic()
        asked = []

        def stop():
            asked.append(time.monotonic() - start)
            return asked[-1] > 1

        done = forks.run([program, "sleep"], 300, stop)
        assert done.returncode == -signal.SIGKILL
        assert 1 < time.monotonic() - start < 1 + 10 and len(asked) >= 2
        assert _running(program) == []  # reaped
        # a child that ends by itself is not stopped
        assert forks.run([program, "5"], 60, lambda: False).returncode == 5


def test_a_child_is_killed_when_its_caller_ends_however_it_ends(program, tmp_path, monkeypatch):
    """A coordinator whose cluster has gone would wait for it: killed with its caller, whose
    end of its lifeline is the only one. The files the caller left (its run's directory, the
    child's output and temporary files) are removed by the next ``Forks``."""
    import tempfile

    from tfsched.bench.zygote import FORKS_PREFIX

    caller = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from tfsched.bench.zygote import Forks; Forks([]).run([{program!r}, 'sleep'], 600)",
        ],
        env=dict(task_env(), TMPDIR=str(tmp_path)),  # its Forks' files, which its death leaves
    )
    orphans = []  # the caller's children: its zygote, and the program
    try:
        deadline = time.monotonic() + 60
        while not _running(program, caller.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        (child,) = _running(program, caller.pid)
        orphans = _children(caller.pid)
        caller.kill()
        caller.wait(30)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
        found = list(tmp_path.glob(FORKS_PREFIX + "*"))
        assert len(found) == 1, sorted(p.name for p in tmp_path.iterdir())
        (left,) = found
        assert sorted(f.name for f in left.iterdir()) == ["1.err", "1.out", "1.tmp"]
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        with Forks([]) as forks:
            assert not left.exists() and [str(d) for d in tmp_path.glob(FORKS_PREFIX + "*")] == [forks.dir]
    finally:
        caller.kill()
        caller.wait(30)
        for pid in orphans:  # reaped here if they came to this process (a subreaper), else by init
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def test_a_child_still_running_is_killed_on_close(program):
    forks = Forks([])
    try:
        waiting, ran, child = _running_child(forks, [program, "sleep"])
    finally:
        forks.close()
    waiting.join(60)
    assert ran["r"].returncode == -signal.SIGKILL and not _alive(child)
    assert forks.proc.returncode == 0 and not os.path.exists(forks.dir)
    late = forks.run([program, "0"], 60)  # one line, as a zygote that ended gives
    assert (late.returncode, late.stderr) == (1, "the forking process was closed")


def test_an_output_removed_by_close_as_it_is_read_is_given_once(program, monkeypatch):
    """``close`` removes the run's directory: a file read and removed by it before the run
    removed it was given twice, its text and "", a ``TypeError`` raised on the run's thread
    (a full run's CI, session 118). Here ``close`` wins that race every time."""
    unlink = os.unlink

    def closed_first(path, *args, **kwargs):
        unlink(path, *args, **kwargs)
        if str(path).endswith((".out", ".err")):
            raise FileNotFoundError(path)

    with Forks([]) as forks:
        monkeypatch.setattr(os, "unlink", closed_first)
        done = forks.run([program, "3"], 60)
        monkeypatch.undo()
        assert done.returncode == 3 and json.loads(done.stdout)["argv"] == [program, "3"]
        assert done.stderr == "to stderr\n" and os.listdir(forks.dir) == []


def test_a_run_closed_as_it_starts_returns_as_closed(program, monkeypatch):
    """``close`` between a run's check and its files: the run's directory gone, the run is the
    closed one's line, as a run after ``close`` is (a ``FileNotFoundError`` raised before)."""
    mkdir = os.mkdir
    forks = Forks([])
    try:

        def closed_first(path, *args, **kwargs):
            forks.close()
            mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", closed_first)
        done = forks.run([program, "0"], 60)
        monkeypatch.undo()
    finally:
        forks.close()
    assert (done.returncode, done.stderr) == (1, "the forking process was closed")
    assert _running(program) == [] and not os.path.exists(forks.dir)


def test_a_child_outlives_its_zygote_and_the_next_run_fails_in_one_line(program):
    with Forks([]) as forks:
        waiting, ran, child = _running_child(forks, [program, "nap"])
        forks.proc.kill()
        waiting.join(60)
        assert ran["r"].returncode == 4  # it ran to its end: this process's child, not the zygote's
        failed = forks.run([program, "0"], 60)
        assert failed.returncode == 1 and failed.stderr.startswith("the forking process has ended: ")
        assert "\n" not in failed.stderr


def test_a_forking_process_that_cannot_start_is_a_failed_run_saying_why(program):
    with Forks(["no_such_module_here"]) as forks:
        failed = forks.run([program, "0"], 60)
        start = time.monotonic()
        again = forks.run([program, "0"], 60)
        assert (again.returncode, again.stderr) == (1, failed.stderr) and time.monotonic() - start < 5
    assert failed.returncode == 1 and failed.stderr == (
        "the forking process did not start: ModuleNotFoundError: No module named 'no_such_module_here'"
    )


def test_a_forking_process_that_cannot_start_is_the_rounds_one_error(tmp_path, monkeypatch):
    """``bench.tf2.run_round``'s error names the mode, and the forking process's last line."""
    from tfsched.bench import tf2
    from tfsched.errors import TfschedError

    said = shadow_module(tmp_path, "tensorflow", monkeypatch)  # its import ends the process
    with tf2.forked_coordinators():
        forks = tf2._FORKS
        with pytest.raises(TfschedError) as failed:
            tf2.run_round({"spec": {}}, "tio", timeout_s=60)
    assert str(failed.value) == f"mode tio's coordinator failed: the forking process did not start: {said}"
    # ended (killed, if it had not yet when its socket closed), its files gone
    assert forks.proc.returncode is not None and not os.path.exists(forks.dir)


def test_a_childs_temporary_files_go_with_it_however_it_ends(program, tmp_path, monkeypatch):
    """A forked program runs no ``atexit`` handler: the files it leaves for one to remove (as
    AutoGraph's ``__autograph_generated_file*.py``) are in a ``TMPDIR`` of its run's, removed
    when it ends, and at ``close`` if it was killed; none is left in the caller's."""
    callers = tmp_path / "tmp"
    callers.mkdir()
    monkeypatch.setenv("TMPDIR", str(callers))
    with Forks([], env=task_env()) as forks:
        done = forks.run([program, "temp"], 60)
        assert done.returncode == 0, done.stderr
        made = done.stdout.splitlines()[1]
        assert made.startswith(forks.dir + os.sep), made  # not the caller's TMPDIR, nor /tmp
        assert not os.path.exists(os.path.dirname(made)), "removed once it ended"
        with pytest.raises(subprocess.TimeoutExpired):
            forks.run([program, "tempsleep"], 3)  # killed past its timeout
        (killed,) = [os.path.join(d, f) for d, _, fs in os.walk(forks.dir) for f in fs if f.endswith(".py")]
    assert not os.path.exists(killed) and not os.path.exists(forks.dir)
    assert list(callers.iterdir()) == []
