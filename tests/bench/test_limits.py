"""Limits met for real (``tfsched.limits``): processes in a cgroup whose ``pids.max`` is too low
for a cluster, or whose memory is too low for a cluster or for the simulations. A task that
aborts names the line that says why and the limit it met, not a frame of its stack trace; a relay
that has no thread for a connection ends it and says so, and carries the next once threads are
there; a task or a simulation process the out-of-memory killer ends is said to be, with its
group's memory."""

import ast
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tfsched.limits import groups


def _group_of_own(controller: str, limit_file: str):
    """A cgroup v1 group of ``controller`` below this process's, removed afterwards."""
    root = f"/sys/fs/cgroup/{controller}"  # cgroup v1's hierarchy, as on this machine and CI's
    if os.geteuid() != 0 or not os.path.isfile(os.path.join(root, "cgroup.procs")):
        pytest.skip(f"needs root and cgroup v1's {controller} controller")
    own = next((g for g in groups(controller, limit_file) if g.startswith(root)), root)
    group = os.path.join(own, f"tfsched-test-{controller}-{os.getpid()}")
    os.mkdir(group)
    try:
        yield group
    finally:
        with open(os.path.join(group, "cgroup.procs")) as f:
            left = f.read().split()
        os.rmdir(group)
        assert not left, f"processes left in {group}: {left}"


@pytest.fixture
def pids_group():
    yield from _group_of_own("pids", "pids.max")


@pytest.fixture
def memory_group():
    yield from _group_of_own("memory", "memory.limit_in_bytes")


def _in(group: str, argv: list[str]) -> list[str]:
    """``argv`` to run in ``group``: a shell that enters it, then execs it (its pid)."""
    return ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *argv]


def _run_in(group: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``argv`` run in ``group``."""
    return subprocess.run(_in(group, argv), capture_output=True, text=True, timeout=timeout, env=os.environ)


def _error_line(group: str, args: list[str], timeout: float) -> str:
    """``tfsched ARGS`` run in ``group``: it fails with one ``Error:`` line and no traceback,
    which is returned."""
    p = _run_in(group, [sys.executable, "-m", "tfsched.cli", *args], timeout=timeout)
    assert p.returncode == 1, p.stderr[-2000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    return errors[0]


def _set_max(group: str, value, name: str = "pids.max") -> None:
    with open(os.path.join(group, name), "w") as f:
        f.write(str(value))


@pytest.mark.tf
@pytest.mark.cluster
def test_a_task_without_threads_names_why_and_the_cgroup_limit_it_met(pids_group, tmp_path):
    _set_max(pids_group, 150)  # 2,717 threads ran a 16-worker cluster here; a task takes about 100
    error = _error_line(
        pids_group,
        ["trace", "--model", "seq32", "--workers", "2", "--steps", "1"]
        + ["-o", str(tmp_path / "trace.json")],
        300,
    )
    # the line the abort said why with (before: the last frame of its stack trace, "@ 0x...")
    assert "cluster task /job:" in error and "killed by SIGABRT" in error, error
    # the thread that could not start: one of TensorFlow's, or (once in CI) one of gRPC's server's
    assert ("Check failed: ret == 0 (11 vs. 0)" in error and "pthread_create() failed" in error) or (
        "thread_manager.cc" in error and "Check failed: worker->created()" in error
    ), error
    assert "@ " not in error and not error.count("F0000")
    assert f"the cgroup {pids_group} allows 150 processes and threads (its pids.max)" in error
    assert error.endswith(": raise it, or run fewer tasks)")
    assert not (tmp_path / "trace.json").exists()  # nothing written half-way


RELAY_PROBE = textwrap.dedent(
    """
    import socket, sys, threading
    from tfsched.bench.relay import Links, Relay

    group = sys.argv[1]
    target = socket.create_server(("127.0.0.1", 0))
    relay = Relay(Links(1e9), ("worker", 1), ("ps", 0), "127.0.0.1:%d" % target.getsockname()[1])

    def set_max(value):
        with open(group + "/pids.max", "w") as f:
            f.write(str(value))

    def carried(word):
        with socket.create_connection(("127.0.0.1", relay.port)) as c:
            c.settimeout(10)
            served, _ = target.accept()
            with served:
                c.sendall(word)
                served.settimeout(10)
                got = served.recv(100)
                served.sendall(got.upper())
                return c.recv(100)

    with open(group + "/pids.current") as f:
        set_max(int(f.read()))  # no thread more, for anyone in the group
    with socket.create_connection(("127.0.0.1", relay.port)) as c:
        c.settimeout(10)
        ended = c.recv(100)  # the relay ends what it cannot carry (before: nothing came, ever)
    served, _ = target.accept()  # it had connected on to the task
    served.close()
    print("ended:", ended == b"", flush=True)
    print("failures:", relay.failures, flush=True)
    set_max("max")
    print("carried:", carried(b"hello"), flush=True)  # its acceptor still accepts
    relay.close()
    print("threads:", threading.active_count(), flush=True)
    """
)


def test_a_relay_without_a_thread_for_a_connection_ends_it_says_so_and_carries_the_next(pids_group):
    p = _run_in(pids_group, [sys.executable, "-c", RELAY_PROBE, pids_group], timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "Exception in thread" not in p.stderr, p.stderr
    out = dict(line.split(": ", 1) for line in p.stdout.splitlines())
    assert out["ended"] == "True"
    failures = ast.literal_eval(out["failures"])
    assert len(failures) == 1, failures
    assert failures[0].startswith(
        "/job:ps/task:0 unreachable from /job:worker/task:1: its relay could not carry a connection: "
        "can't start new thread ("
    ), failures[0]
    assert f"the cgroup {pids_group} allows " in failures[0] and "refused 1" in failures[0]
    assert out["carried"] == "b'HELLO'"
    assert out["threads"] == "1"  # the relay's acceptor and pumps all ended with it


@pytest.mark.tf
def test_relays_without_threads_to_start_are_one_line_naming_the_relay_and_the_limit(pids_group, tmp_path):
    # 1 PS and 16 workers on loopback are 306 relays, a thread each before any task starts
    _set_max(pids_group, 200)
    out = tmp_path / "bench.json"
    error = _error_line(
        pids_group,
        ["bench", "--model", "seq32", "--shaped-loopback", "--workers", "16", "--steps", "1", "--rounds", "1"]
        + ["--modes", "baseline,tio", "--batch-size", "8", "-o", str(out)],
        300,
    )
    assert error.startswith("Error: the relay from /job:"), error
    assert " could not start: can't start new thread (the cgroup " in error
    assert f"{pids_group} allows 200 processes and threads (its pids.max)" in error
    assert not list(tmp_path.iterdir())  # nothing written half-way


@pytest.mark.tf
@pytest.mark.cluster
def test_a_task_the_out_of_memory_killer_ended_is_named_so_with_its_cgroups_memory(memory_group, tmp_path):
    # VGG16's 553 MB of variables on the PS, pulled by the worker and its gradients pushed back
    _set_max(memory_group, 2**30, "memory.limit_in_bytes")  # the PS's first run takes more
    error = _error_line(
        memory_group,
        ["trace", "--model", "vgg16", "--workers", "1", "--steps", "1"]
        + ["-o", str(tmp_path / "trace.json")],
        600,
    )
    # a task, not the run's own process (the tasks' oom_score_adj, limits.OOM_SCORE_ADJ)
    assert "cluster task /job:" in error, error
    said = re.escape(
        f"killed by SIGKILL, by the out-of-memory killer: the cgroup {memory_group} allows 1 GiB"
    )
    assert re.search(said + r" of memory, and it killed (1 process|\d+ processes) there", error), error
    assert not (tmp_path / "trace.json").exists()  # nothing written half-way


SIMULATIONS_PROBE = textwrap.dedent(
    """
    import sys
    from tests.helpers import random_training_case
    from tfsched.errors import TfschedError
    from tfsched.ordering import order
    from tfsched.sim import build_sim_graph
    from tfsched.sim.pool import Simulations

    g, o, _ = random_training_case(1)
    sg = build_sim_graph(g, o, order(g, "tio"), workers=2000)  # 42,000 nodes
    with Simulations(jobs=2) as sims:
        asked = sims.seeded(sg, "random", "simulating", seeds=2)
        try:
            sims.start()
            asked.runs()
        except TfschedError as e:
            print(e, flush=True)
    """
)


def test_a_simulation_process_the_out_of_memory_killer_ended_is_named_so(memory_group):
    # The caller with its graph fits in 150 MiB; with two workers each holding it, it does not.
    # The killer takes a worker (its oom_score_adj, limits.OOM_SCORE_ADJ), not the caller, which
    # says so (before: "exit code -9"; and without the adj, the killer took the caller, which
    # died without a word, in 2 of 6 runs here, against 0 of 6 with it).
    _set_max(memory_group, 150 * 2**20, "memory.limit_in_bytes")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run(
        _in(memory_group, [sys.executable, "-c", SIMULATIONS_PROBE]),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env=os.environ,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    said = re.escape(
        "a simulation process failed: killed by SIGKILL, by the out-of-memory killer: the cgroup "
        f"{memory_group} allows 150 MiB of memory, and it killed "
    )
    assert re.fullmatch(said + r"(1 process|\d+ processes) there\n", p.stdout), p.stdout + p.stderr[-2000:]


def test_the_kernel_log_tells_whom_the_out_of_memory_killer_killed(memory_group):
    from tfsched.limits import counters, explain_death

    if counters()["kernel_log_seq"] < 0:
        pytest.skip("the kernel's log (/dev/kmsg) cannot be read here")
    _set_max(memory_group, 100 * 2**20, "memory.limit_in_bytes")
    since = counters()
    hog = subprocess.Popen(
        _in(
            memory_group,
            [sys.executable, "-c", "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"],
        )
    )
    assert hog.wait(timeout=60) == -9  # SIGKILL, from the killer
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    bystander.kill()
    bystander.wait()
    said = explain_death("killed by SIGKILL", since, hog.pid)
    assert said.startswith("killed by SIGKILL, by the out-of-memory killer: the cgroup "), said
    assert f"{memory_group} allows 100 MiB of memory, and it killed 1 process there" in said, said
    # a process killed by SIGKILL that the killer did not kill is not said to be, though it killed
    assert explain_death("killed by SIGKILL", since, bystander.pid) == "killed by SIGKILL"
