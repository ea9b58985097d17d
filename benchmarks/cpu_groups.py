"""A bench run whose emulated hosts share the cores by process, not by thread.

The tasks of an emulated cluster share this machine's two cores. The kernel shares them by
thread (all the tasks are in the session's one autogroup), so a task with more threads ready
at once gets more of them. This runs a ``tfsched bench`` command with every task's process
in a ``cpu`` cgroup of its own, of equal shares (cgroup v1, 1024 each): as hosts of equal
processors would, each task gets the same share whenever all want the cores (work-conserving:
what one leaves idle the others take). It was made to check whether the workers' stagger in
computing comes from the per-thread sharing. (That stagger was mostly a measuring error, fixed
in the fiftieth session: ``bench.stagger.computes``; the training stagger is in the pushes.)

    python benchmarks/cpu_groups.py -- --model vgg16 --mode train --workers 4 ... -o out.json

Everything after ``--`` goes to ``tfsched bench``; its results are its own (``-o``). The groups
are removed when the run ends. Root and the cgroup v1 ``cpu`` controller are needed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from tfsched.bench.profile import task_processes
from tfsched.errors import TfschedError

CPU = "/sys/fs/cgroup/cpu"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- then tfsched bench's arguments")
    args = ap.parse_args()
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not os.path.isdir(CPU) or not os.access(CPU, os.W_OK):
        raise TfschedError(f"{CPU}: no writable cgroup v1 cpu controller here (root needed)")
    prefix = os.path.join(CPU, f"tfsched-{os.getpid()}-")
    run = subprocess.Popen([sys.executable, "-m", "tfsched.cli", "bench", *bench])
    made: set[str] = set()
    try:
        while run.poll() is None:
            for pid, name in task_processes(run.pid).items():  # "ps:0" -> group "...-ps0"
                group = prefix + name.replace(":", "")
                if group not in made:
                    os.mkdir(group)
                    made.add(group)
                try:
                    with open(os.path.join(group, "cgroup.procs"), "w") as f:
                        f.write(str(pid))  # its threads, and those it starts, follow
                except OSError:
                    pass  # it ended meanwhile
            time.sleep(1.0)
    finally:
        if run.poll() is None:
            run.terminate()  # the bench removes its cluster on SIGTERM
            try:
                run.wait(timeout=120)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait(timeout=10)
        for group in made:
            for _ in range(50):  # its tasks are gone once the bench has reaped them
                try:
                    os.rmdir(group)
                    break
                except OSError:
                    time.sleep(0.1)
    print(f"each task in its own cpu cgroup: {', '.join(sorted(g[len(prefix) :] for g in made))}")
    return run.returncode


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TfschedError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
