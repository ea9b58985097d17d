"""A stand-in for a cluster task that died: a gRPC server at its address that fails every call.

A session whose master task died does not fail its calls: TensorFlow's client calls its master
waiting for it to be ready (gRPC's ``wait_for_ready``), until the call's deadline. A bench step's
first runs keep 600 s, so ``tfsched demo --model seq32 --loopback --steps 2 --rounds 1`` with
worker 1 killed as its first round began failed only after 632 s (session 111). Once a
cluster sees a task gone (``bench.local.TaskHandles``), it starts this at the task's address,
in the task's network namespace: the calls waiting there connect to it and fail at once with
``FAILED_PRECONDITION`` and ``message`` (TensorFlow's ``FailedPreconditionError``, which no
client retries; it retries ``UNAVAILABLE``), and so does every later call, a session's close
too. The run's error then names the task that died (``TaskHandles.dead_tasks``).

``python -m tfsched.bench.standin ADDRESS MESSAGE``: says "ready" once it serves, and ends when
its stdin closes (when the cluster, or the process that started it, ends).
"""

from __future__ import annotations

import sys
from concurrent import futures


def refusing_server(address: str, message: str):
    """A started ``grpc.server`` at ``address`` whose every method, unary or streaming, ends with
    ``FAILED_PRECONDITION`` and ``message``; raises ``RuntimeError`` if it cannot bind there."""
    import grpc

    def refuse(requests, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)

    class Refuse(grpc.GenericRpcHandler):
        def service(self, handler_call_details):
            # streamed both ways, without decoding: it answers any call, unread
            return grpc.stream_stream_rpc_method_handler(refuse)

    # never beside a process that listens there (gRPC shares a port by default, SO_REUSEPORT)
    options = [("grpc.so_reuseport", 0)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[Refuse()], options=options)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:  # grpcio's "Failed to bind"; older ones returned 0
        port = 0
    if not port:
        raise RuntimeError(f"cannot listen at {address}")
    server.start()
    return server


def main(argv: list[str]) -> int:
    address, message = argv
    try:
        server = refusing_server(address, message)
    except RuntimeError as e:
        print(f"tfsched stand-in: {e}", file=sys.stderr)
        return 1
    print("ready", flush=True)  # what ``bench.local.wait_ready`` reads, as from a task
    sys.stdin.read()  # until the cluster's end closes it
    server.stop(grace=None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
