"""One cluster task in its own process:
``python -m tfsched.bench.server CLUSTER_JSON JOB INDEX [--vanilla] [--with-stdin]
[--inter-op-threads=N] [--no-thread-spinning]``.

Loads tfsched (so the task can run gates), starts a ``tf.distribute.Server`` and serves until
killed. Prints ``ready`` on stdout once the server is up, and ``SERVING`` on stderr (the task's
log), so that a task which dies later is reported by what it said after it. With
``--with-stdin`` it serves until its stdin ends instead: the launcher holds the other end of
that pipe, so a task never outlives the process that started it, even one killed by SIGKILL,
which runs no cleanup (before, its tasks served on forever, ports and memory held). With
``--inter-op-threads=N`` the task's executor runs N kernels at a time
(``inter_op_parallelism_threads``; TensorFlow's default is the number of cores). With
``--no-thread-spinning`` its thread pools' idle threads sleep at once instead of spinning first
(``experimental.disable_thread_spinning``), which would leave what they spun to the other tasks
of shared cores; on VGG16 it changed the step less than runs drift (README, "Idle threads that
sleep at once").
"""

from __future__ import annotations

import json
import os
import signal
import sys

from tfsched.limits import offer_to_the_killer

SERVING = "tfsched task: serving"
INTER_OP_FLAG = "--inter-op-threads="
NO_SPIN_FLAG = "--no-thread-spinning"
CONFIG_LINE = "tfsched task: config "  # what the task says of a config not TensorFlow's default


def task_config(tf, flags: set[str]):
    """The ``ConfigProto`` a task's server starts with for ``flags`` (None: TensorFlow's defaults).
    Its thread pools, the devices' and the executor's, are the server's, made as it starts: a
    session's config cannot change them later.

    >>> import tensorflow as tf
    >>> task_config(tf, {"--with-stdin"}) is None
    True
    >>> c = task_config(tf, {NO_SPIN_FLAG, INTER_OP_FLAG + "3"})
    >>> c.inter_op_parallelism_threads, c.experimental.disable_thread_spinning
    (3, True)
    """
    inter_op = [int(f[len(INTER_OP_FLAG) :]) for f in flags if f.startswith(INTER_OP_FLAG)]
    if not inter_op and NO_SPIN_FLAG not in flags:
        return None
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=inter_op[0] if inter_op else 0)
    config.experimental.disable_thread_spinning = NO_SPIN_FLAG in flags
    return config


def main(argv: list[str]) -> int:
    spec, job, index = json.loads(argv[0]), argv[1], int(argv[2])
    flags = set(argv[3:])
    scheduled = "--vanilla" not in flags
    offer_to_the_killer()  # before the process that runs the cluster (``limits.OOM_SCORE_ADJ``)
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    cluster = tf.train.ClusterSpec(spec)
    config = task_config(tf, flags)
    if config is not None:
        from google.protobuf import text_format

        print(
            CONFIG_LINE + text_format.MessageToString(config, as_one_line=True), file=sys.stderr, flush=True
        )
    if scheduled:
        from tfsched.enforce.api import start_server

        server = start_server(cluster, job, index, config=config)
    else:
        server = tf.distribute.Server(cluster, job_name=job, task_index=index, config=config)
    # SIGTERM keeps its default action: server.join() blocks in C++, where a Python handler would
    # never run, and a task holds nothing that needs a graceful exit.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print("ready", flush=True)
    # What the task logs from here on is what it said while serving (local.task_log).
    print(SERVING, file=sys.stderr, flush=True)
    if "--with-stdin" in flags:
        sys.stdin.buffer.read()  # the server's threads serve meanwhile; EOF: the launcher is gone
        os._exit(0)  # TensorFlow's teardown of a live server can hang; nothing here needs it
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
