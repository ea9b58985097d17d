"""Do simultaneous flows share an emulated host's link evenly? The simulator assumes they do.

One sending host (the PS) and four receivers on the bench's emulated cluster (``tc`` shaped
links, ``EmulatedCluster``). Each round, after a second of idle (as between training steps),
the sender writes the same number of bytes to every receiver at once over its own TCP
connection, and each receiver notes when its last byte came. With the link shared max-min
fairly (the simulator's model, ``sim.engine``), every flow would end at once, at
receivers x bytes / bandwidth; the spread between the first and the last to end is what the
real link does instead.

    python benchmarks/link_sharing.py                 # 400 ms queues, as the bench's links
    python benchmarks/link_sharing.py --queue 5ms     # shallow queues

Writes ``benchmarks/results/link_sharing[-queueQ].{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, write  # noqa: E402

from tfsched.errors import TfschedError  # noqa: E402
from tfsched.sim import mean_by_rank  # noqa: E402

PORT = 6000

RECEIVER = """
import socket, sys, time
addr, nbytes, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, {port}))
s.listen(1)
s.settimeout(60)
c, _ = s.accept()
c.settimeout(60)
buf = bytearray(1 << 20)
for _ in range(rounds):
    c.sendall(b"g")  # ready for the round's bytes
    got = 0
    while got < nbytes:
        k = c.recv_into(buf)
        if not k:
            sys.exit("the sender closed the connection")
        got += k
    print(time.time(), flush=True)
""".replace("{port}", str(PORT))

SENDER = """
import socket, sys, threading, time
addrs, nbytes, rounds, idle = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks = [socket.create_connection((a, {port}), timeout=60) for a in addrs]
data = b"x" * nbytes
for _ in range(rounds):
    for s in socks:
        s.recv(1)
    time.sleep(idle)
    go = threading.Barrier(len(socks) + 1)

    def send(s):
        go.wait()
        s.sendall(data)

    threads = [threading.Thread(target=send, args=(s,)) for s in socks]
    for t in threads:
        t.start()
    go.wait()
    print(time.time(), flush=True)
    for t in threads:
        t.join()
""".replace("{port}", str(PORT))


def measure(receivers: int, nbytes: int, rounds: int, bandwidth_bps: float, queue_s: float, idle_s: float):
    """Per round, the seconds from the sender's start until each receiver had all its bytes,
    sorted (the clocks are this machine's: every host is a namespace on it)."""
    from tfsched.bench.netns import EmulatedCluster

    with EmulatedCluster(
        ps=1, workers=receivers, bandwidth_bps=bandwidth_bps, queue_s=queue_s, start_tasks=False
    ) as c:
        sender_ns = c.hosts[("ps", 0)][0]
        addrs = [c.hosts[("worker", w)][1] for w in range(receivers)]
        procs = [
            subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    c.hosts[("worker", w)][0],
                    sys.executable,
                    "-c",
                    RECEIVER,
                    addrs[w],
                    str(nbytes),
                    str(rounds),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for w in range(receivers)
        ]
        try:
            sender = None
            for _ in range(50):  # until the receivers listen
                sender = subprocess.run(
                    [
                        "ip",
                        "netns",
                        "exec",
                        sender_ns,
                        sys.executable,
                        "-c",
                        SENDER,
                        ",".join(addrs),
                        str(nbytes),
                        str(rounds),
                        str(idle_s),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=60 + rounds * (idle_s + 30),
                )
                if "Connection refused" not in sender.stderr:
                    break
                time.sleep(0.2)
            if sender is None or sender.returncode != 0:
                raise TfschedError(
                    f"link sharing: the sender failed: {(sender.stderr if sender else '').strip()[-200:]}"
                )
            outs = [p.communicate(timeout=60) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        bad = [err.strip()[-200:] for p, (_, err) in zip(procs, outs, strict=True) if p.returncode != 0]
        if bad:
            raise TfschedError(f"link sharing: a receiver failed: {bad[0]}")
    starts = [float(x) for x in sender.stdout.split()]
    ends = [[float(x) for x in out.split()] for out, _ in outs]
    return [sorted(ends[w][r] - starts[r] for w in range(receivers)) for r in range(rounds)]


def main() -> None:
    from tfsched.units import parse_bandwidth, parse_duration

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--receivers", type=int, default=4)
    ap.add_argument(
        "--megabytes", type=float, default=13.0, help="per receiver and round (MobileNet's pulls: 13)"
    )
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--bandwidth", default="1Gbit")
    ap.add_argument("--queue", default="400ms")
    ap.add_argument("--idle", default="1s", help="between rounds")
    args = ap.parse_args()
    try:
        if args.receivers < 2 or args.rounds < 1 or not args.megabytes > 0:
            raise TfschedError("need 2 or more receivers, 1 or more rounds and a positive size")
        bandwidth, queue, idle = (
            parse_bandwidth(args.bandwidth),
            parse_duration(args.queue),
            parse_duration(args.idle),
        )
        nbytes = int(args.megabytes * 1e6)
        rounds = measure(args.receivers, nbytes, args.rounds, bandwidth, queue, idle)
    except TfschedError as e:
        raise SystemExit(f"Error: {e}") from None
    fair = args.receivers * nbytes * 8 / bandwidth
    by_rank = mean_by_rank(rounds)
    spread = [(r[-1] - r[0]) / r[-1] for r in rounds]
    name = "link_sharing" + ("" if args.queue == "400ms" else f"-queue{args.queue}")
    md = [
        f"{args.receivers} TCP flows of {args.megabytes:g} MB from one emulated host at once, "
        f"{args.bandwidth} links queueing {args.queue}, {args.rounds} rounds after {args.idle} idle "
        f"each. Shared max-min fairly (the simulator's link), every flow would end at {fair:.3f} s.",
        "",
        "| | first to end | " + " | ".join(f"#{k + 1}" for k in range(1, args.receivers)) + " |",
        "|---|" + "---|" * args.receivers,
        "| mean (s) | " + " | ".join(f"{t:.3f}" for t in by_rank) + " |",
        "| earliest (s) | " + " | ".join(f"{min(col):.3f}" for col in zip(*rounds, strict=True)) + " |",
        "",
        f"The first flow ended before the last by {statistics.fmean(spread):.0%} of the last's time on "
        f"average (at most {max(spread):.0%}).",
    ]
    write(
        name,
        {
            "config": vars(args),
            "machine": machine(),
            "fair_end_s": fair,
            "rounds": rounds,
            "mean_by_rank_s": by_rank,
            "spread": spread,
        },
        md,
    )


if __name__ == "__main__":
    main()
