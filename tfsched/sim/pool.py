"""Seeded simulations run side by side, each worker a process of its own.

``tfsched analyze`` simulates a step six times or more (the schedule and the baseline, each over
``SEEDS`` seeds) and then bounds it. With many workers the simulations are the bulk of its time:
Inception-v3's training graph with 64 workers (317,504 nodes) took 12.7 s a simulation and
35 s to bound, 115 s in all on one core of two (13 s to bound since the floor's sums look up
only the bytes that can weigh, ``sim.metrics._weighed``). ``Simulations`` hands its runs to ``jobs``
processes (``python -m tfsched.sim.pool``) while the caller bounds the step, and collects them
afterwards, each run the same as in the caller (the same graph, unpickled, and the same seed),
so the prediction is the same to the last bit.

A worker is started with a fresh interpreter, not forked: the caller has imported TensorFlow,
whose threads a fork would copy the locks of, and ``multiprocessing``'s spawn re-runs the main
script (the ``tfsched`` console script runs the command again). It imports the simulator only,
reads its graphs and runs from its stdin, writes its results to a pipe of their own (what else
it prints goes with its stderr), and then ends; its
stdin stays open until the caller has read them, and its end at any other time (the caller
killed, or closing early) ends the worker at once. A worker that fails is an error naming its
last line of stderr. One that ran out of memory raises a ``MemoryError`` in the caller
(``errors.OutOfMemory``, which the CLI's one line says with what to do). The workers raise their
``oom_score_adj`` (``limits.offer_to_the_killer``), so that where memory runs out the kernel's
killer takes a worker before the caller, and the error says so, with the cgroup's limit or the
machine's memory (``limits.explain_death``).
"""

from __future__ import annotations

import os
import pickle
import re
import site
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from tfsched.errors import OutOfMemory, TfschedError
from tfsched.limits import counters, exit_status, explain_death, offer_to_the_killer
from tfsched.sim import SEEDS
from tfsched.sim.engine import SimResult, simulate
from tfsched.sim.model import SimGraph
from tfsched.units import is_count

# Below this many nodes in all, a worker's start (0.4 s) and the graphs' passage cost about
# what running the simulations side by side saves, and they run in the caller: on two cores,
# Inception-v3's `tfsched analyze --algorithm tao` took 3.3 to 3.5 s either way with 4 workers
# (19,900 nodes), 4.9 to 5.1 s side by side against 5.8 to 5.9 s with 8 (39,688 nodes).
MIN_SIDE_BY_SIDE_NODES = 30_000
END_TIMEOUT_S = 10.0  # a worker's exit once it has sent its results or closed its pipe
# a traceback's last line where memory ran out: Python's "MemoryError", numpy's
# "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 125. MiB for an array ..."
_OUT_OF_MEMORY = re.compile(r"(?:[\w.]+\.)?\w*MemoryError(?::\s*(?P<detail>.*))?")


def check_jobs(jobs: int | None) -> None:
    """``jobs`` is None or a positive number of processes."""
    if jobs is not None and not is_count(jobs, least=1):
        raise TfschedError(f"jobs must be a positive number of processes, got {jobs!r}")


def default_jobs(nodes: int, runs: int) -> int:
    """Processes to simulate ``runs`` runs of graphs of ``nodes`` nodes in all: one a core this
    process may run on, at most one a run; 1 (the caller itself) for small graphs."""
    if nodes < MIN_SIDE_BY_SIDE_NODES:
        return 1
    return max(1, min(runs, _cores()))


def _cores() -> int:
    """The cores this process may run on (all of them where the system cannot say: macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass
class Pending:
    """Runs asked for from ``Simulations.seeded``: ``runs()`` once they are done."""

    owner: Simulations
    indices: list[int]

    def runs(self) -> list[SimResult]:
        results = self.owner.results()
        return [results[i] for i in self.indices]


@dataclass
class Simulations:
    """Seeded runs of ``simulate``, asked for one group at a time (``seeded``), started together
    (``start``) and collected (``Pending.runs``). ``jobs``: the processes that run them; None:
    ``default_jobs``; 1: the caller runs them itself, at ``start``. ``say(text)``: told what
    runs next."""

    jobs: int | None = None
    say: Callable[[str], None] | None = None
    _asked: list[tuple[SimGraph, str, int, dict, str]] = field(default_factory=list, init=False)
    _results: list[SimResult] | None = field(default=None, init=False)
    _workers: list[_Worker] = field(default_factory=list, init=False)
    _since: dict | None = field(default=None, init=False)  # the limits' counts at start

    def seeded(self, sg: SimGraph, policy: str, text: str, seeds: int = SEEDS, **kwargs) -> Pending:
        """``seeds`` runs of ``sg`` under ``policy``, seeds 0 to ``seeds - 1`` (as
        ``sim.seeded_runs``); ``text``: what they are, for ``say``."""
        if self._results is not None or self._workers:
            raise RuntimeError("Simulations.seeded after start")
        first = len(self._asked)
        self._asked += [(sg, policy, s, kwargs, text) for s in range(seeds)]
        return Pending(self, list(range(first, len(self._asked))))

    def processes(self) -> int:
        if self.jobs is not None:
            return max(1, min(self.jobs, len(self._asked)))
        graphs = {id(a[0]): len(a[0]) for a in self._asked}
        return default_jobs(sum(graphs.values()), len(self._asked))

    def start(self) -> None:
        """Run them here (one process) or start the workers that run them."""
        say = self.say or (lambda text: None)
        n = self.processes()
        if n > 1:
            texts = list(dict.fromkeys(a[4] for a in self._asked))
            say(f"{_joined(texts)}: {len(self._asked)} runs in {n} processes")
            self._since = counters()
            try:
                for k in range(n):
                    indices = list(range(k, len(self._asked), n))
                    self._workers.append(_Worker.start(indices, self._asked, self._since))
            except _Unstarted:  # no interpreter to start (an embedded Python): run them here
                self.close()
                n = 1
            except BaseException:
                self.close()
                raise
        if n == 1:
            results, last = [], None
            for sg, policy, seed, kwargs, text in self._asked:
                if text != last:
                    say(text)
                    last = text
                results.append(simulate(sg, policy, seed=seed, **kwargs))
            self._results = results

    def results(self) -> list[SimResult]:
        """Every run's result, in the order asked for; waits for the workers."""
        if self._results is None:
            if not self._workers:
                raise RuntimeError("Simulations.results before start")
            if self.say:
                self.say("waiting for the simulations")
            results: list[SimResult | None] = [None] * len(self._asked)
            try:
                for w in self._workers:
                    for i, r in zip(w.indices, w.collect(), strict=True):
                        results[i] = r
            finally:
                self.close()
            self._results = results
        return self._results

    def close(self) -> None:
        """End the workers still running."""
        for w in self._workers:
            w.kill()
        self._workers.clear()

    def __enter__(self) -> Simulations:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _joined(texts: list[str]) -> str:
    """What the runs of each text simulate, in one line.

    >>> _joined(["simulating a", "simulating b", "simulating c"])
    'simulating a, b and c'
    """
    parts = [texts[0]] + [t.removeprefix("simulating ") for t in texts[1:]]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _worker_env(here: str, environ: dict[str, str]) -> dict[str, str]:
    """A worker's environment: this process's, with the directory this ``tfsched`` was imported
    from (``here``) first on its path, so that it imports the same one (a checkout on
    ``sys.path``, pytest's root), unless that is a site directory, which the worker has anyway and
    which ahead of the standard library could hide its modules.

    >>> _worker_env("/src", {"PYTHONPATH": "/lib"})["PYTHONPATH"] == os.pathsep.join(["/src", "/lib"])
    True
    >>> import site
    >>> _worker_env(site.getsitepackages()[0], {"PYTHONPATH": "/lib"})["PYTHONPATH"]
    '/lib'
    """
    sites = {os.path.realpath(d) for d in [*site.getsitepackages(), site.getusersitepackages()]}
    if os.path.realpath(here) in sites:
        return environ
    path = environ.get("PYTHONPATH")
    return {**environ, "PYTHONPATH": here + (os.pathsep + path if path else "")}


class _Unstarted(Exception):
    """A worker's interpreter could not be started."""


@dataclass
class _Worker:
    """One ``python -m tfsched.sim.pool`` and the runs (indices into the asked) it does."""

    proc: subprocess.Popen
    indices: list[int]
    stderr: IO[bytes]  # its stdout and stderr
    back: IO[bytes]  # its results
    since: dict | None = None  # the limits' counts before it started (``limits.counters``)

    @classmethod
    def start(cls, indices: list[int], asked: list, since: dict | None = None) -> _Worker:
        graphs: dict[int, tuple[int, SimGraph]] = {}  # id -> (its place in the list sent, graph)
        runs = []
        for i in indices:
            sg, policy, seed, kwargs, _ = asked[i]
            place = graphs.setdefault(id(sg), (len(graphs), sg))[0]
            runs.append((place, policy, seed, kwargs))
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = _worker_env(here, dict(os.environ))
        stderr = tempfile.TemporaryFile()
        back, theirs = os.pipe()  # its results (its stdout is whatever else it prints)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tfsched.sim.pool", str(theirs)],
                stdin=subprocess.PIPE,
                stdout=stderr,
                stderr=stderr,
                env=env,
                pass_fds=(theirs,),
            )
        except OSError as e:
            stderr.close()
            os.close(back)
            raise _Unstarted(e) from None
        finally:
            os.close(theirs)
        worker = cls(proc, indices, stderr, os.fdopen(back, "rb"), since)
        try:
            pickle.dump(([g for _, g in graphs.values()], runs), proc.stdin, pickle.HIGHEST_PROTOCOL)
            proc.stdin.flush()
        except OSError:  # it ended before it read them all
            error = worker.failed()
            worker.kill()
            raise error from None
        except BaseException:
            worker.kill()
            raise
        return worker

    def collect(self) -> list[SimResult]:
        """Its results, once it has sent them all (as long as its runs take) and ended."""
        try:
            results = pickle.load(self.back)
        except (EOFError, pickle.UnpicklingError):
            raise self.failed() from None
        try:
            returncode = self.proc.wait(timeout=END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            returncode = None
        if returncode != 0:
            raise self.failed()
        return results

    def failed(self) -> Exception:
        """Why it failed, once it has ended (killed if it has not within ``END_TIMEOUT_S``): the
        signal that killed it, and whether it was the out-of-memory killer; else its last line of
        stderr, an ``OutOfMemory`` where that is a ``MemoryError``; else its exit code."""
        try:
            self.proc.wait(timeout=END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        how = exit_status(self.proc.returncode)
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        if self.proc.returncode < 0:
            why = explain_death(how, self.since, self.proc.pid)
        elif lines and (memory := _OUT_OF_MEMORY.fullmatch(lines[-1].strip())):
            return OutOfMemory(memory["detail"] or "", "a simulation process")
        else:
            why = lines[-1] if lines else how
        return TfschedError(f"a simulation process failed: {why}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.back, self.stderr):
            try:
                f.close()
            except OSError:  # a pipe the worker left unread
                pass


def _orphaned(fd: int) -> None:
    """Ends this worker once its stdin ends: the caller closed it or is gone. (It reads the file
    descriptor, not ``sys.stdin``, whose lock a daemon thread must not hold at the exit.)"""
    while os.read(fd, 65536):
        pass
    os._exit(1)


def main() -> None:
    offer_to_the_killer()  # before the caller, which says so (``Simulations``)
    stdin, back = sys.stdin.buffer, os.fdopen(int(sys.argv[1]), "wb")
    graphs, runs = pickle.load(stdin)
    threading.Thread(target=_orphaned, args=(stdin.fileno(),), daemon=True).start()
    results = [simulate(graphs[g], policy, seed=seed, **kwargs) for g, policy, seed, kwargs in runs]
    pickle.dump(results, back, pickle.HIGHEST_PROTOCOL)
    back.close()


if __name__ == "__main__":
    main()
