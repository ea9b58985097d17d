"""A thread that cannot start, for real: processes in a cgroup whose ``pids.max`` is too low for
a cluster (``bench.threadlimit``). A task that aborts names the line that says why and the limit
it met, not a frame of its stack trace; a relay that has no thread for a connection ends it and
says so, and carries the next once threads are there."""

import ast
import os
import subprocess
import sys
import textwrap

import pytest

from tfsched.bench.threadlimit import pids_groups

ROOT = "/sys/fs/cgroup/pids"  # cgroup v1's pids hierarchy, as on this machine and CI's


@pytest.fixture
def pids_group():
    """A pids cgroup of its own below this process's (cgroup v1), removed afterwards."""
    if os.geteuid() != 0 or not os.path.isfile(os.path.join(ROOT, "cgroup.procs")):
        pytest.skip("needs root and cgroup v1's pids controller")
    own = next((g for g in pids_groups() if g.startswith(ROOT)), ROOT)
    group = os.path.join(own, f"tfsched-test-pids-{os.getpid()}")
    os.mkdir(group)
    try:
        yield group
    finally:
        with open(os.path.join(group, "cgroup.procs")) as f:
            left = f.read().split()
        os.rmdir(group)
        assert not left, f"processes left in {group}: {left}"


def _run_in(group: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``argv`` run in ``group`` (a shell that enters it, then execs)."""
    enter = f'echo $$ > {group}/cgroup.procs && exec "$@"'
    return subprocess.run(
        ["sh", "-c", enter, "sh", *argv], capture_output=True, text=True, timeout=timeout, env=os.environ
    )


def _set_max(group: str, value) -> None:
    with open(os.path.join(group, "pids.max"), "w") as f:
        f.write(str(value))


@pytest.mark.tf
@pytest.mark.cluster
def test_a_task_without_threads_names_why_and_the_cgroup_limit_it_met(pids_group, tmp_path):
    _set_max(pids_group, 150)  # 2,717 threads ran a 16-worker cluster here; a task takes about 100
    p = _run_in(
        pids_group,
        [sys.executable, "-m", "tfsched.cli", "trace", "--model", "seq32", "--workers", "2", "--steps", "1"]
        + ["-o", str(tmp_path / "trace.json")],
        timeout=300,
    )
    assert p.returncode == 1, p.stderr[-2000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    # the line the abort said why with (before: the last frame of its stack trace, "@ 0x...")
    assert "cluster task /job:" in errors[0] and "killed by SIGABRT" in errors[0], errors[0]
    assert "Check failed: ret == 0 (11 vs. 0)" in errors[0] and "pthread_create() failed" in errors[0]
    assert "@ " not in errors[0] and not errors[0].count("F0000")
    assert f"the cgroup {pids_group} allows 150 processes and threads (its pids.max)" in errors[0]
    assert errors[0].endswith(": raise it, or run fewer tasks)")
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
    p = _run_in(
        pids_group,
        [
            sys.executable,
            "-m",
            "tfsched.cli",
            "bench",
            "--model",
            "seq32",
            "--shaped-loopback",
            "--workers",
            "16",
        ]
        + ["--steps", "1", "--rounds", "1", "--modes", "baseline,tio", "--batch-size", "8", "-o", str(out)],
        timeout=300,
    )
    assert p.returncode == 1, p.stderr[-2000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert errors[0].startswith("Error: the relay from /job:"), errors[0]
    assert " could not start: can't start new thread (the cgroup " in errors[0]
    assert f"{pids_group} allows 200 processes and threads (its pids.max)" in errors[0]
    assert not list(tmp_path.iterdir())  # nothing written half-way
