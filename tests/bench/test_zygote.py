"""``bench.zygote``: a cluster's tasks forked from one process that imported TensorFlow, each a
child of the process that starts it, in the environment, directory, name and host it asks for,
and ending, failing and dying as a process of its own does."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import cgroups_unavailable
from tfsched.bench import zygote as zygote_module
from tfsched.bench.local import task_env
from tfsched.bench.profile import task_processes
from tfsched.bench.zygote import TaskHost, Zygote, zygote
from tfsched.errors import TfschedError

PROGRAM = """
import json, os, sys

def read(path):
    with open(path) as f:
        return f.read().strip()

print(json.dumps({"argv": sys.argv, "name": __name__, "pid": os.getpid(), "ppid": os.getppid(),
                  "env": os.environ.get("ZYGOTE_TEST"), "cwd": os.getcwd(),
                  "comm": read("/proc/self/comm"), "net": os.readlink("/proc/self/ns/net"),
                  "cgroup": read("/proc/self/cgroup"), "nice": os.nice(0),
                  "preloaded": "email.mime.text" in sys.modules}), flush=True)
what = sys.argv[1]
if what == "serve":  # until its launcher's end of its stdin closes, as a task does
    sys.stdin.read()
    sys.exit(0)
if what == "raise":
    raise ValueError("as asked")
sys.exit(int(what))
"""


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "program.py"
    path.write_text(PROGRAM)
    return str(path)


@pytest.fixture
def forks():
    """A zygote that preloads a module nothing else here imports (no TensorFlow: fast)."""
    z = Zygote(task_env(), preload=("email.mime.text",))
    yield z
    z.close()


def start(forks, program, what, tmp_path, host=None, **env):
    with open(tmp_path / "err.log", "wb") as err:
        return forks.start(
            [program, what], name="worker:3", host=host or TaskHost(), env=dict(task_env(), **env), stderr=err
        )


def test_a_forked_task_is_this_processs_child_in_its_environment_directory_and_name(
    forks, program, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # after the zygote started elsewhere
    task = start(forks, program, "serve", tmp_path, ZYGOTE_TEST="asked")
    said = json.loads(task.stdout.readline())
    assert said["pid"] == task.pid and said["ppid"] == os.getpid()
    assert said["argv"] == [program, "serve"] and said["name"] == "__main__"
    assert said["env"] == "asked"  # set after the zygote started
    assert said["cwd"] == str(tmp_path)
    assert said["comm"] == "worker:3"
    with open(f"/proc/{task.pid}/cmdline", "rb") as f:  # what ps and pgrep -f read
        assert f.read().rstrip(b"\0") == f"{sys.executable} {program} serve".encode()
    assert said["preloaded"]
    # the CPU sampler finds it by its name; the zygote, also this process's child, is no task
    found = task_processes()
    assert found[task.pid] == "worker:3" and forks.proc.pid not in found
    assert task.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        task.wait(0.2)
    task.stdin.close()  # as its launcher's ending does
    assert task.wait(10) == 0


def test_exit_codes_signals_and_errors_read_as_a_process_of_its_owns(forks, program, tmp_path):
    assert start(forks, program, "3", tmp_path).wait(10) == 3
    task = start(forks, program, "raise", tmp_path)
    assert task.wait(10) == 1
    own = subprocess.run([sys.executable, program, "raise"], capture_output=True, text=True)
    assert (tmp_path / "err.log").read_text() == own.stderr  # its traceback from its own frame
    assert own.stderr.strip().splitlines()[-1] == "ValueError: as asked"
    task = start(forks, program, "serve", tmp_path)
    task.kill()
    assert task.wait(10) == -9
    task.kill()  # reaped: nothing is signalled, whatever holds its pid now
    assert task.returncode == -9


def test_a_host_that_cannot_be_entered_fails_its_task_in_one_line(forks, program, tmp_path):
    task = start(forks, program, "0", tmp_path, host=TaskHost(netns="tfsched-no-such-host"))
    assert task.wait(10) == 1
    assert task.stdout.read() == ""  # the program never ran
    path = os.path.join(zygote_module.NETNS_DIR, "tfsched-no-such-host")
    assert (tmp_path / "err.log").read_text() == (
        f"tfsched task: cannot enter its host: [Errno 2] No such file or directory: '{path}'\n"
    )


@pytest.mark.cluster
def test_a_task_enters_its_namespace_cpu_group_and_niceness_as_the_commands_put_one(forks, program, tmp_path):
    """``TaskHost.enter`` in a forked task and ``TaskHost.prefix``'s commands for a process of
    its own land in the same place."""
    from tfsched.bench import hostcpu, netns

    why = netns.available() or cgroups_unavailable()
    if why:
        pytest.skip(why)
    with netns.EmulatedCluster(ps=1, workers=1, start_tasks=False) as c, hostcpu.HostCpu(0.5) as caps:
        host = TaskHost(netns=c.hosts[("ps", 0)][0], cgroup_procs=caps.procs("ps", 0), nice=5)
        task = start(forks, program, "0", tmp_path, host=host)
        forked = json.loads(task.stdout.readline())
        assert task.wait(10) == 0
        own = json.loads(
            subprocess.run(
                [*host.prefix(), sys.executable, program, "0"], capture_output=True, text=True, check=True
            ).stdout
        )
        ns_inode = os.stat(os.path.join(zygote_module.NETNS_DIR, host.netns)).st_ino
        assert forked["net"] == own["net"] == f"net:[{ns_inode}]" != os.readlink("/proc/self/ns/net")
        group = os.path.basename(caps.group("ps", 0))
        assert forked["cgroup"] == own["cgroup"]
        assert any(line.endswith(f":/{group}") for line in forked["cgroup"].splitlines())
        assert forked["nice"] == own["nice"] == os.nice(0) + 5


def test_a_zygote_gone_fails_the_next_start_in_one_line_and_leaves_its_tasks(forks, program, tmp_path):
    task = start(forks, program, "serve", tmp_path)
    assert json.loads(task.stdout.readline())["pid"] == task.pid
    forks.proc.kill()
    forks.proc.wait(10)
    with pytest.raises(TfschedError) as e:
        start(forks, program, "0", tmp_path)
    assert str(e.value).startswith("the tasks' zygote ")
    assert "\n" not in str(e.value)
    assert task.poll() is None  # this process's child, not the zygote's
    task.stdin.close()
    assert task.wait(10) == 0


def test_a_start_interrupted_ends_its_zygote_so_that_no_late_answer_is_read_as_anothers(
    forks, program, tmp_path, monkeypatch
):
    task = start(forks, program, "serve", tmp_path)  # the zygote is ready

    def interrupted(timeout_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(forks, "_said", interrupted)
    with pytest.raises(KeyboardInterrupt):
        start(forks, program, "serve", tmp_path)
    assert forks.proc.wait(10) == -9 and not forks.serves(task_env())
    task.stdin.close()
    assert task.wait(10) == 0


def test_one_zygote_serves_an_environment_until_it_changes(monkeypatch):
    """Apart from pytest's per-test marker, a changed environment is another zygote's: the
    imports' start-up reads it. ``TFSCHED_FORKED_TASKS=0`` asks for none."""
    env = task_env()
    first = zygote(env)
    assert first is not None and first.serves(env)
    assert zygote(dict(env, PYTEST_CURRENT_TEST="another test")) is first
    other = zygote(dict(env, ZYGOTE_TEST="another value"))
    assert other is not first and not first.serves(env)  # the old one is closed
    assert first.proc.returncode is not None
    monkeypatch.setenv(zygote_module.ENV_FLAG, "0")
    assert zygote(env) is None
