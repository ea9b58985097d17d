"""Asking a cluster's tasks, on real gRPC tasks: tfsched.check_cluster and ``tfsched check``
(every task asked, through its own address, which build of tfsched's library it loaded), and
the side sessions of ``stats`` and ``set_credit`` while a task is down."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from tfsched.bench.local import LocalCluster
from tfsched.enforce.api import STAT_NAMES
from tfsched.enforce.check import NOT_LOADED, load_cluster, task_builds, wait_answers
from tfsched.errors import TfschedError

pytestmark = [pytest.mark.tf, pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]


def this_build() -> str:
    from tfsched.enforce._loader import load_ops

    return load_ops().tfsched_build().numpy().decode()


def test_the_compiled_build_is_the_one_the_librarys_name_says():
    from tfsched.enforce.build import build, build_id

    assert this_build() == build_id(build())
    assert this_build().startswith("tf") and len(this_build().rsplit("-", 1)[1]) == 16


def test_a_cluster_started_with_tfsched_is_ready_and_says_its_build_and_its_gates_counters():
    import tensorflow as tf

    import tfsched
    from tfsched.models import build_graph

    with LocalCluster(ps=2, workers=2) as c:
        builds = tfsched.check_cluster(c.spec, timeout_s=20)
        assert all(b.stats is None for b in task_builds(c.spec))
        b = build_graph("seq32", mode="train", worker_task=0, ps_tasks=2, batch_size=4)
        with tf.compat.v1.Session(c.target(), graph=b.graph, config=tfsched.enable()) as sess:
            sess.run(b.init_op)
            sess.run(b.train_op)
        deadline = time.monotonic() + 20  # a step's state is freed just after its run returns
        found = task_builds(c.spec, counters=True)
        while any(t.stats["live_steps"] for t in found):
            assert time.monotonic() < deadline, found
            found = task_builds(c.spec, counters=True)
        released = {t.task: t.stats["released"] for t in found}
        assert all(released[f"/job:ps/replica:0/task:{i}"] > 0 for i in range(2)), released  # pulls
        assert released["/job:worker/replica:0/task:0"] > 0, released  # pushes
        assert released["/job:worker/replica:0/task:1"] == 0, released  # it ran no step
        assert all(t.stats["timeouts"] == t.stats["cancelled"] == 0 for t in found)
        assert builds == {
            f"/job:{job}/replica:0/task:{i}": this_build() for job in ("ps", "worker") for i in range(2)
        }
        # TensorFlow 2's cluster resolver, its coordinator's chief (not serving) left out
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec({**c.spec, "chief": ["127.0.0.1:1"]}), rpc_layer="grpc"
        )
        assert tfsched.check_cluster(resolver) == builds
        # a job's tasks alone, and the chief left out unless asked for
        assert list(tfsched.check_cluster({**c.spec, "chief": ["127.0.0.1:1"]}, jobs=["ps"])) == [
            "/job:ps/replica:0/task:0",
            "/job:ps/replica:0/task:1",
        ]


def test_a_task_without_tfsched_and_one_that_does_not_answer_are_named_and_the_wait_is_bounded():
    import tensorflow as tf

    import tfsched
    from tfsched.models import build_graph

    with LocalCluster(ps=1, workers=1) as c:
        c.vanilla = True
        c.restart("ps", 0)  # the PS at its address again, a plain tf.distribute.Server
        dead = f"127.0.0.1:{free_port()}"
        spec = {"ps": c.spec["ps"], "worker": [c.spec["worker"][0], dead]}
        started = time.monotonic()
        found = task_builds(spec, timeout_s=3)
        took = time.monotonic() - started
        assert [(b.task, b.address, b.build, b.problem) for b in found] == [
            ("/job:ps/replica:0/task:0", c.spec["ps"][0], None, NOT_LOADED),
            ("/job:worker/replica:0/task:0", c.spec["worker"][0], this_build(), None),
            ("/job:worker/replica:0/task:1", dead, None, "did not answer within 3 s"),
        ]
        assert took < 3 + 10, took  # the tasks asked at once, each within its deadline
        with pytest.raises(TfschedError) as e:
            tfsched.check_cluster(spec, timeout_s=3)
        line = str(e.value)
        assert "\n" not in line and line.startswith("2 of 3 tasks not ready for tfsched: ")
        assert f"/job:ps/replica:0/task:0 ({c.spec['ps'][0]}) {NOT_LOADED}" in line
        assert f"/job:worker/replica:0/task:1 ({dead}) did not answer within 3 s" in line

        # what the check foretells: the step the pass gates fails on the plain PS
        b = build_graph("seq32", mode="train", worker_task=0, ps_tasks=1, batch_size=4)
        with tf.compat.v1.Session(c.target(), graph=b.graph, config=tfsched.enable()) as sess:
            sess.run(b.init_op)
            with pytest.raises(tf.errors.NotFoundError, match="TfschedGate"):
                sess.run(b.train_op, options=tf.compat.v1.RunOptions(timeout_in_ms=60_000))


def serve(spec: dict, job: str, index: int, cwd, env=None) -> subprocess.Popen:
    """Task ``job:index`` of ``spec`` started with tfsched (``env``: its environment's changes), in
    a process of its own, its output in ``cwd/<job><index>.log`` (``answering`` waits for it)."""
    code = f"import tfsched; tfsched.start_server({spec!r}, {job!r}, {index}).join()"
    with open(os.path.join(cwd, f"{job}{index}.log"), "wb") as log:
        # cwd: not this checkout, whose tfsched python -c would import first (its directory on sys.path)
        return subprocess.Popen(
            [sys.executable, "-c", code], env={**os.environ, **(env or {})}, cwd=cwd, stdout=log, stderr=log
        )


def answering(spec: dict, tasks: list[subprocess.Popen], seconds: float):
    """What the tasks of ``spec`` answer (``task_builds``) once each answers, or after
    ``seconds``, or once a process of ``tasks`` ended (a task may build the library first)."""
    deadline = time.monotonic() + seconds
    while True:
        found = task_builds(spec, timeout_s=5)
        if (
            not any((b.problem or "").startswith("did not answer") for b in found)
            or time.monotonic() > deadline
            or any(t.poll() is not None for t in tasks)
        ):
            return found


def test_a_task_that_cannot_start_is_one_error_line_naming_it(tmp_path):
    """``start_server``: a job or a task the cluster has not, a port another process holds, a
    cluster of another kind: TensorFlow's error as one line naming the task (an InternalError's
    or UnknownError's traceback before the hundred-and-nineteenth session)."""
    import socket

    code = (
        "import json, sys, tfsched\n"
        "said = []\n"
        "for args in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        tfsched.start_server(*args)\n"
        "        said.append('started')\n"
        "    except tfsched.TfschedError as e:\n"
        "        said.append(str(e))\n"
        "print(json.dumps(said))\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        cases = [
            ({"ps": [address]}, "worker", 0),
            ({"ps": [address]}, "ps", 1),
            ({"ps": [address]}, "ps", 0),
            ("ps", "ps", 0),
        ]
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(cases)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [
        'cannot start task worker:0: Job "worker" was not defined in cluster',
        'cannot start task ps:1: Task 1 was not defined in job "ps"',
        "cannot start task ps:0: Could not start gRPC server",
        "cannot start task ps:0: Could not convert `server_or_cluster_def` to a `tf.train.ServerDef` or "
        "`tf.train.ClusterSpec`.",
    ]


def test_a_check_with_a_wait_waits_for_tasks_that_start_later(tmp_path):
    import threading

    import tfsched

    spec = {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]}
    tasks = []
    later = threading.Timer(
        6, lambda: tasks.extend(serve(spec, job, 0, tmp_path) for job in ("ps", "worker"))
    )
    later.start()
    try:
        said = []
        found = wait_answers(spec, timeout_s=2, wait_s=120, progress=said.append)
        assert [b.problem for b in found] == [None, None], found
        assert said and said[0] == "waiting for 2 of 2 tasks to answer: ps:0, worker:0", said
        assert tfsched.check_cluster(spec) == {b.task: this_build() for b in found}
    finally:
        later.join()
        for t in tasks:
            t.kill()
            t.wait(timeout=30)
    for bad in (-1, float("inf"), float("nan"), "5", True):
        with pytest.raises(TfschedError, match="wait_s must be a number of seconds, 0 or more"):
            wait_answers(spec, wait_s=bad)
    with pytest.raises(TfschedError, match="timeout_s must be a number of seconds, above 0"):
        wait_answers(spec, timeout_s=float("inf"))  # TensorFlow's deadlines are whole milliseconds


def test_stats_and_set_credit_answer_while_another_task_is_down(tmp_path):
    """A task killed in a LocalCluster has a stand-in at its address that fails every call to it
    at once: a side session that saw every task failed to be made (``... is gone``)."""
    from tfsched.enforce import set_credit, stats

    with LocalCluster(ps=1, workers=2) as c:
        c.kill("worker", 1)
        started = time.monotonic()
        assert stats(c.target(), "/job:ps/task:0", timeout_s=10)["live_credit"] == -1
        set_credit(c.target(), 1000, ["/job:ps/task:0"])
        assert stats(c.target(), "/job:ps/replica:0/task:0/device:CPU:0", timeout_s=10)["live_credit"] == 1000
        assert stats(c.target(), "/job:worker/task:0", timeout_s=10)["live_steps"] == 0
        assert time.monotonic() - started < 10
        with pytest.raises(TfschedError, match="timeout_s must be a number of seconds, above 0"):
            stats(c.target(), "/job:ps/task:0", timeout_s=0)
        # a task the cluster has not, a device or session of another kind: one line each (a
        # TensorFlow error and traceback, or an AttributeError, before the 119th session)
        import tensorflow as tf

        target = c.target()
        with tf.compat.v1.Session(target) as session:  # a session is taken as its target
            assert stats(session, "/job:ps/task:0", timeout_s=10)["live_credit"] == 1000
            for call, message in (
                (
                    lambda: stats(session, "/job:ps/task:7", timeout_s=10),
                    f"stats: /job:ps/task:7 (through {target})",
                ),
                (
                    lambda: set_credit(session, 1, ["/job:nope/task:0"]),
                    f"set_credit: /job:nope/task:0 (through {target})",
                ),
            ):
                with pytest.raises(TfschedError) as e:
                    call()
                assert str(e.value) == f"{message}: the cluster has no such task"
        for call, message in (
            (
                lambda: stats(target),
                "stats: device must be a task's device such as '/job:ps/task:0' (with a session), got None",
            ),
            (
                lambda: stats(3, "/job:ps/task:0"),
                "stats: the session must be a tf.compat.v1.Session or its target string, got 3",
            ),
            (
                lambda: set_credit(None, 1, ["/job:ps/task:0"]),
                "set_credit: the session must be a tf.compat.v1.Session or its target string, got None",
            ),
            (
                lambda: stats("x", "/job:ps/task:0"),
                "stats: /job:ps/task:0 (through x): 'x' is not a session target such as 'grpc://host:port'",
            ),
        ):
            with pytest.raises(TfschedError) as e:
                call()
            assert str(e.value) == message


def test_stats_of_a_task_that_never_answers_is_an_error_in_time_and_of_the_others_answers(tmp_path):
    """Without a stand-in, the master of a side session that saw every task waited at its
    creation for a task that does not answer (``CreateSession still waiting for response from
    worker``): before the session saw only its task, the PS's counters failed here after 33 s
    (the session's deadline; a probe on ea4cd1f's code)."""
    from tfsched.enforce import stats

    spec = {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}" for _ in range(2)]}
    tasks = [serve(spec, "ps", 0, tmp_path), serve(spec, "worker", 0, tmp_path)]
    try:
        target = f"grpc://{spec['worker'][0]}"
        up = answering({"ps": spec["ps"], "worker": spec["worker"][:1]}, tasks, 120)
        assert [b.problem for b in up] == [None, None], up
        started = time.monotonic()
        assert stats(target, "/job:ps/task:0", timeout_s=10)["live_steps"] == 0
        assert time.monotonic() - started < 10
        started = time.monotonic()
        with pytest.raises(TfschedError) as e:
            stats(target, "/job:worker/task:1", timeout_s=3)
        assert time.monotonic() - started < 3 + 5
        assert str(e.value) == f"stats: /job:worker/task:1 (through {target}) gave no answer within 3 s"
    finally:
        for t in tasks:
            t.kill()
            t.wait(timeout=30)


def copy_of_tfsched(where: Path, change) -> Path:
    """A copy of this checkout's ``tfsched`` and ``cc`` at ``where``, ``change(path of its
    cc/gate_ops.cc)`` made to it: another build of the library, made by the first task that
    loads it."""
    shutil.copytree(ROOT / "tfsched", where / "tfsched", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "cc", where / "cc")
    change(where / "cc" / "gate_ops.cc")
    return where


@pytest.mark.alone  # compiles the library twice more (about 50 s of both cores)
def test_a_task_with_another_build_or_one_from_before_the_build_op_is_named(tmp_path):
    """A host upgraded before the others: a task whose tfsched has other sources (a copy of this
    checkout with one more comment line) has another build, and one whose tfsched has no
    ``TfschedBuild`` (a copy without it, as the sessions before the hundred-and-seventeenth built
    it) is told apart from a task without tfsched."""

    def comment(path):
        with open(path, "a") as f:
            f.write("// another build\n")

    def without_build_op(path):
        text = path.read_text()
        assert text.count('"TfschedBuild"') == 2  # its op and its kernel
        path.write_text(text.replace('"TfschedBuild"', '"TfschedBuildNotYet"'))

    spec = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(2)]}
    tasks = []
    try:
        for i, change in enumerate((comment, without_build_op)):
            copy = copy_of_tfsched(tmp_path / f"copy{i}", change)
            env = {"PYTHONPATH": str(copy), "TFSCHED_CACHE_DIR": str(tmp_path / f"cache{i}")}
            tasks.append(serve(spec, "worker", i, tmp_path, env))
        other, older = answering(spec, tasks, 400)  # their builds, then their servers
        logs = [(tmp_path / f"worker{i}.log").read_text()[-2000:] for i in range(2)]
        assert other.build is not None, (other, logs[0])
        assert other.build != this_build()
        assert other.build.split("-")[0] == this_build().split("-")[0]  # the same TensorFlow
        assert other.problem == (
            f"runs tfsched build {other.build}, this process {this_build()}: start every task with "
            "the same tfsched and TensorFlow"
        )
        assert (older.build, older.problem) == (
            None,
            "runs a tfsched built before TfschedBuild: start every task with the same tfsched and TensorFlow",
        ), logs[1]
    finally:
        for task in tasks:
            task.kill()
            task.wait(timeout=30)


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "tfsched.cli", "check", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_the_check_command_reads_tf_config_prints_each_task_and_fails_on_one_not_ready(tmp_path):
    with LocalCluster(ps=1, workers=1) as c:
        tf_config = json.dumps({"cluster": c.spec, "task": {"type": "worker", "index": 0}})
        r = run_cli(env={"TF_CONFIG": tf_config})
        assert r.returncode == 0, r.stderr
        assert "tfsched on the tasks of TF_CONFIG" in r.stdout
        for task in ("ps:0", "worker:0"):
            row = next(line for line in r.stdout.splitlines() if f" {task} " in line)
            assert "ready" in row
        assert this_build()[:20] in r.stdout
        r = run_cli("--stats", "--json", env={"TF_CONFIG": tf_config})
        assert r.returncode == 0, r.stderr
        tasks = json.loads(r.stdout)
        assert [t["task"] for t in tasks] == ["/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"]
        assert all(t["build"] == this_build() and t["problem"] is None for t in tasks)
        assert all(set(t["stats"]) == set(STAT_NAMES) and t["stats"]["timeouts"] == 0 for t in tasks)

        dead = f"127.0.0.1:{free_port()}"
        spec_file = tmp_path / "cluster.json"
        spec_file.write_text(json.dumps({**c.spec, "worker": [*c.spec["worker"], dead]}))
        started = time.monotonic()
        r = run_cli("--cluster", str(spec_file), "--timeout", "2", "--wait", "3")
        assert 3 <= time.monotonic() - started < 3 + 30  # asked again for 3 s (and a Python's start)
        assert r.returncode == 1
        assert "Traceback" not in r.stderr
        (error,) = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
        assert error == (
            f"Error: 1 of 3 tasks not ready for tfsched: /job:worker/replica:0/task:1 ({dead}) "
            "did not answer within 2 s"
        )


def test_ctrl_c_ends_a_check_at_once_while_a_task_is_being_asked():
    """A listener that accepts and never answers holds an ask for its whole deadline: Ctrl-C
    ends the command at once (with a ThreadPoolExecutor it waited 52 s of a 60 s deadline)."""
    import signal
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfsched.cli",
                "check",
                "--timeout",
                "60",
                "--cluster",
                json.dumps({"ps": [address]}),
            ],
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's Ctrl-C
        )
        try:
            listener.settimeout(60)
            held, _ = listener.accept()  # the ask is on its way (past TensorFlow's import)
            time.sleep(2)
            assert p.poll() is None
            sent = time.monotonic()
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=60)
            assert time.monotonic() - sent < 10
            held.close()
        finally:
            p.kill()
            p.wait(timeout=30)
    assert p.returncode == 130 and err.strip().splitlines()[-1] == "Aborted.", err


@pytest.mark.parametrize(
    "args, env, error",
    [
        ((), {"TF_CONFIG": ""}, "Error: no cluster to check: give --cluster, or set TF_CONFIG"),
        (("--cluster", "{not json"), {}, "Error: --cluster: not JSON ("),
        (("--cluster", "clustr.json"), {}, "Error: clustr.json: no such file, and not a cluster in JSON"),
        (("--cluster", '{"ps": []}'), {}, "Error: --cluster: not a cluster spec: expected"),
        (
            ("--cluster", '{"ps": ["h:1"]}', "--job", "worker"),
            {},
            "Error: --cluster: cluster has no task of the jobs worker to check",
        ),
        (("--cluster", '{"ps": ["h:1"]}', "--timeout", "0"), {}, "Error: Invalid value for '--timeout'"),
        # NaN and infinity passed click's FloatRange, and were then blamed on --cluster
        (("--cluster", '{"ps": ["h:1"]}', "--timeout", "inf"), {}, "Error: Invalid value for '--timeout'"),
        (("--cluster", '{"ps": ["h:1"]}', "--wait", "nan"), {}, "Error: Invalid value for '--wait'"),
        (("--cluster", '{"ps": ["h:1"]}', "--wait", "2d"), {}, "Error: Invalid value for '--wait'"),
    ],
)
def test_the_check_commands_bad_input_is_one_error_line(args, env, error):
    r = run_cli(*args, env=env)
    assert r.returncode != 0 and r.stdout == ""
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(error), r.stderr
    assert "Traceback" not in r.stderr


def test_a_cluster_file_that_is_not_a_cluster_is_named(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text('{"cluster": {"worker": "h:1"}}')
    with pytest.raises(TfschedError, match=f"^{re.escape(str(bad))}: not a cluster spec"):
        load_cluster(str(bad))
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(TfschedError, match=f"^{re.escape(str(bad))}: cannot read it"):
        load_cluster(str(bad))
