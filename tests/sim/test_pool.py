"""Simulations side by side in worker processes (``sim.pool``): the same runs as in the caller,
a failure named, and no worker left behind."""

import os
import pickle
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import random_training_case, small_simulation_processes
from tfsched.errors import OutOfMemory, TfschedError
from tfsched.ordering import order
from tfsched.sim import build_sim_graph, simulate
from tfsched.sim.pool import MIN_SIDE_BY_SIDE_NODES, Simulations, default_jobs


def _cases():
    """Three random training chains simulated by ``Simulations`` as ``analysis.predict`` asks:
    their schedule with a credit window (racing), and vanilla TensorFlow's random ties."""
    graphs = []
    for seed in (1, 2, 3):
        g, o, workers = random_training_case(seed)
        graphs.append(build_sim_graph(g, o, order(g, "tio"), workers=workers))
    return graphs


def _ask(sims: Simulations, graphs) -> list:
    asked = []
    for sg in graphs:
        asked.append(sims.seeded(sg, "counter", "simulating the order", race=True, credit_bytes=40_000))
        asked.append(sims.seeded(sg, "random", "simulating vanilla TensorFlow", seeds=2))
    return asked


def _worker_pids() -> set[int]:
    me = str(os.getpid())
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    return {
        int(pid)
        for pid, ppid, *args in (line.split(None, 2) for line in out.splitlines())
        if ppid == me and args and "tfsched.sim.pool" in args[0]
    }


class TestSimulations:
    def test_runs_in_workers_are_the_callers_to_the_last_bit(self):
        graphs = _cases()
        said = []
        with Simulations(jobs=3, say=said.append) as sims:
            asked = _ask(sims, graphs)
            sims.start()
            assert len({w.proc.pid for w in sims._workers}) == 3  # started beside this process
            apart = [[(r.makespan, r.run_finish) for r in p.runs()] for p in asked]
        assert said == [
            "simulating the order and vanilla TensorFlow: 15 runs in 3 processes",
            "waiting for the simulations",
        ]
        here = []
        for sg in graphs:
            here.append([simulate(sg, "counter", seed=s, race=True, credit_bytes=40_000) for s in range(3)])
            here.append([simulate(sg, "random", seed=s) for s in range(2)])
        assert apart == [[(r.makespan, r.run_finish) for r in runs] for runs in here]
        assert not _worker_pids()

    def test_one_job_runs_them_here_saying_each_group(self):
        graphs = _cases()[:1]
        said = []
        with Simulations(jobs=1, say=said.append) as sims:
            asked = _ask(sims, graphs)
            sims.start()
            assert not _worker_pids()
            assert [len(p.runs()) for p in asked] == [3, 2]
        assert said == ["simulating the order", "simulating vanilla TensorFlow"]

    def test_a_failing_worker_is_an_error_naming_why(self):
        sg = _cases()[0]
        with Simulations(jobs=2) as sims:
            asked = sims.seeded(sg, "nosuch", "simulating the order")
            sims.start()
            with pytest.raises(TfschedError, match="a simulation process failed: .*nosuch"):
                asked.runs()
        assert not _worker_pids()

    @pytest.mark.parametrize("workers", [1, 200])  # its graph in the pipe's buffer, or not
    def test_a_worker_that_ends_at_once_is_an_error(self, monkeypatch, workers):
        g, o, _ = random_training_case(1)
        sg = build_sim_graph(g, o, order(g, "tio"), workers=workers)
        monkeypatch.setattr(sys, "executable", "/bin/false")
        with Simulations(jobs=2) as sims:
            asked = sims.seeded(sg, "random", "simulating")
            with pytest.raises(TfschedError, match="a simulation process failed: exit code 1"):
                sims.start()
                asked.runs()
        assert not _worker_pids()

    def test_a_worker_out_of_memory_is_a_memory_error_in_the_caller(self, tmp_path, monkeypatch):
        # its graph of 42,000 nodes does not fit in 16 MiB more than the worker has mapped
        g, o, _ = random_training_case(1)
        sg = build_sim_graph(g, o, order(g, "tio"), workers=2000)
        small_simulation_processes(tmp_path, monkeypatch, room_mib=16)
        with Simulations(jobs=2) as sims:
            asked = sims.seeded(sg, "random", "simulating")
            with pytest.raises(MemoryError) as raised:  # was "a simulation process failed: MemoryError"
                sims.start()
                asked.runs()
        assert isinstance(raised.value, OutOfMemory) and raised.value.where == "a simulation process"
        assert not _worker_pids()

    def test_a_killed_worker_is_named_by_its_signal(self):
        sg = _cases()[0]
        with Simulations(jobs=2) as sims:
            asked = sims.seeded(sg, "random", "simulating", seeds=20_000)  # minutes of runs
            sims.start()
            sims._workers[1].proc.send_signal(signal.SIGKILL)  # not the out-of-memory killer
            with pytest.raises(TfschedError, match=r"^a simulation process failed: killed by SIGKILL$"):
                asked.runs()  # was "exit code -9"
        assert not _worker_pids()

    def test_closing_early_ends_the_workers(self):
        sg = _cases()[0]
        sims = Simulations(jobs=2)
        sims.seeded(sg, "random", "simulating", seeds=20_000)  # minutes of runs
        sims.start()
        assert len(_worker_pids()) == 2
        t = time.monotonic()
        sims.close()
        assert not _worker_pids() and time.monotonic() - t < 10

    def test_a_worker_whose_caller_is_gone_ends_at_once(self):
        # Its stdin ends with the caller, however the caller ends (here: closed by hand).
        sg = _cases()[0]
        back, theirs = os.pipe()
        p = subprocess.Popen(
            [sys.executable, "-m", "tfsched.sim.pool", str(theirs)],
            stdin=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(theirs,),
        )
        os.close(theirs)
        with os.fdopen(back, "rb") as results:
            pickle.dump(([sg], [(0, "random", s, {}) for s in range(20_000)]), p.stdin)
            p.stdin.flush()
            time.sleep(1.0)
            assert p.poll() is None  # still simulating
            p.stdin.close()
            try:
                assert p.wait(timeout=10) == 1
            finally:
                p.kill()
            assert results.read() == b""  # no results

    def test_what_a_worker_prints_is_not_taken_for_its_results(self, tmp_path, monkeypatch):
        (tmp_path / "sitecustomize.py").write_text("print('hello from a site of its own' * 100)\n")
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))
        sg = _cases()[0]
        with Simulations(jobs=2) as sims:
            asked = sims.seeded(sg, "random", "simulating")
            sims.start()
            got = [r.run_finish for r in asked.runs()]
        assert got == [simulate(sg, "random", seed=s).run_finish for s in range(3)]

    def test_without_an_interpreter_to_start_they_run_here(self, monkeypatch):
        monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
        sg = _cases()[0]
        said = []
        with Simulations(jobs=2, say=said.append) as sims:
            asked = sims.seeded(sg, "random", "simulating vanilla TensorFlow")
            sims.start()
            got = [r.run_finish for r in asked.runs()]
        assert got == [simulate(sg, "random", seed=s).run_finish for s in range(3)]
        assert said == [
            "simulating vanilla TensorFlow: 3 runs in 2 processes",
            "simulating vanilla TensorFlow",
        ]

    def test_seeded_after_start_is_refused(self):
        sims = Simulations(jobs=1)
        sims.seeded(_cases()[0], "fifo", "simulating")
        sims.start()
        with pytest.raises(RuntimeError):
            sims.seeded(_cases()[0], "fifo", "simulating")


def test_default_jobs_are_one_a_core_for_large_graphs_only(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    assert default_jobs(MIN_SIDE_BY_SIDE_NODES - 1, 6) == 1
    assert default_jobs(MIN_SIDE_BY_SIDE_NODES, 6) == min(6, cores)
    assert default_jobs(10 * MIN_SIDE_BY_SIDE_NODES, 1) == 1
    # where the system cannot say which cores a process may use (macOS): all of them
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert default_jobs(MIN_SIDE_BY_SIDE_NODES, 6) == 6
