"""A PS cluster on this machine: every task a separate process on loopback.

Used by ``tfsched demo``, the tests and as the fallback of the emulated multi-host cluster.
Every process is killed on exit, on Ctrl-C and on failure.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from tfsched.errors import TfschedError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@dataclass
class LocalCluster:
    """``with LocalCluster(ps=1, workers=2) as c: c.target("worker", 0)``."""

    ps: int = 1
    workers: int = 1
    vanilla: bool = False  # plain tf.distribute.Server tasks, without tfsched loaded
    start_timeout_s: float = 180.0
    spec: dict = field(default_factory=dict)
    procs: dict = field(default_factory=dict)  # (job, index) -> Popen

    def __enter__(self) -> LocalCluster:
        self.spec = {
            "ps": [f"127.0.0.1:{free_port()}" for _ in range(self.ps)],
            "worker": [f"127.0.0.1:{free_port()}" for _ in range(self.workers)],
        }
        try:
            for job, addrs in self.spec.items():
                for i in range(len(addrs)):
                    self._start(job, i)
            deadline = time.monotonic() + self.start_timeout_s
            for (job, i), p in self.procs.items():
                self._wait_ready(job, i, p, deadline)
        except BaseException:
            self.close()
            raise
        return self

    def _start(self, job: str, index: int) -> None:
        cmd = [sys.executable, "-m", "tfsched.bench.server", json.dumps(self.spec), job, str(index)]
        if self.vanilla:
            cmd.append("--vanilla")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        self.procs[(job, index)] = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )

    @staticmethod
    def _wait_ready(job: str, index: int, p: subprocess.Popen, deadline: float) -> None:
        """Wait for the task's "ready" line, never past ``deadline``."""
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([p.stdout], [], [], max(remaining, 0.0)) if p.stdout else ([], [], [])
        line = p.stdout.readline() if ready else ""
        if line.strip() != "ready":
            why = "timed out" if not ready else f"exit code {p.poll()}"
            raise TfschedError(f"cluster task /job:{job}/task:{index} did not start ({why})")

    def target(self, job: str = "worker", index: int = 0) -> str:
        return f"grpc://{self.spec[job][index]}"

    def cluster_spec(self):
        import tensorflow as tf

        return tf.train.ClusterSpec(self.spec)

    def kill(self, job: str, index: int) -> None:
        p = self.procs[(job, index)]
        p.kill()
        p.wait(timeout=30)

    def close(self) -> None:
        stop_processes(self.procs.values())

    def __exit__(self, *exc) -> None:
        self.close()
