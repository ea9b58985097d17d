"""One cluster task in its own process: ``python -m tfsched.bench.server CLUSTER_JSON JOB INDEX``.

Loads tfsched (so the task can run gates), starts a ``tf.distribute.Server`` and serves until
killed. Prints ``ready`` on stdout once the server is up.
"""

from __future__ import annotations

import json
import signal
import sys


def main(argv: list[str]) -> int:
    spec, job, index = json.loads(argv[0]), argv[1], int(argv[2])
    scheduled = len(argv) < 4 or argv[3] != "--vanilla"
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    cluster = tf.train.ClusterSpec(spec)
    if scheduled:
        from tfsched.enforce.api import start_server

        server = start_server(cluster, job, index)
    else:
        server = tf.distribute.Server(cluster, job_name=job, task_index=index)
    # SIGTERM keeps its default action: server.join() blocks in C++, where a Python handler would
    # never run, and a task holds nothing that needs a graceful exit.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print("ready", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
