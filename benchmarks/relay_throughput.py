"""What a relay (``tfsched.bench.relay``) costs and how fast it can pace one flow.

One flow of ``--mb`` MiB goes from a client through a relay to a sink, all in this process, on
links of each bandwidth asked for; for each chunk size (the relays' own, sized to the link,
and fixed sizes to compare) it reports the rate the flow reached against the link's, and the
CPU the relay's threads used per MB (from ``/proc/self/task``). The relay's CPU runs on the
cores the tasks of a relayed cluster use, so it is what a relayed run takes from them.

    python benchmarks/relay_throughput.py
    python benchmarks/relay_throughput.py --bandwidths 1Gbit,10Gbit --chunks 65536,262144,1048576

Writes ``benchmarks/results/relay_throughput.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

from tfsched.bench import relay  # noqa: E402
from tfsched.bench.results import cpu_description  # noqa: E402
from tfsched.errors import TfschedError  # noqa: E402
from tfsched.units import parse_bandwidth  # noqa: E402

MIB = 1 << 20


def _relay_cpu_s() -> float:
    """CPU seconds the live relay threads of this process have used."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith("tfsched-relay") and t.native_id is not None:
            try:
                with open(f"/proc/self/task/{t.native_id}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # ended meanwhile
                continue
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def one_flow(bandwidth_bps: float, chunk: int | None, mib: int) -> dict:
    """``mib`` MiB through a relay on links of ``bandwidth_bps``, read ``chunk`` bytes at a
    time (None: the relays' own size for the link)."""
    received = [0]
    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    sink.listen(1)

    def drain():
        conn, _ = sink.accept()
        with conn:
            while data := conn.recv(MIB):
                received[0] += len(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    spec = {"ps": [f"127.0.0.1:{sink.getsockname()[1]}"], "worker": ["127.0.0.1:9"]}
    relays = relay.RelayedSpec(spec, bandwidth_bps)
    if chunk is not None:
        relays.links.chunk = chunk
    try:
        port = int(relays.spec_of("worker", 0)["ps"][0].rsplit(":", 1)[1])
        data = b"x" * MIB
        with socket.create_connection(("127.0.0.1", port)) as s:
            start = time.monotonic()
            for _ in range(mib):
                s.sendall(data)
            deadline = start + 60 + mib * MIB * 8 / bandwidth_bps * 3
            while received[0] < mib * MIB and time.monotonic() < deadline:
                time.sleep(0.0005)
            took = time.monotonic() - start
            cpu = _relay_cpu_s()  # before the connection ends and its pumps with it
        if received[0] != mib * MIB:
            raise TfschedError(f"the sink received {received[0]} of {mib * MIB} bytes")
    finally:
        relays.close()
        sink.close()
    return {
        "bandwidth_bps": bandwidth_bps,
        "chunk_bytes": relays.links.chunk,
        "chunk": "the relays' own" if chunk is None else "fixed",
        "mib": mib,
        "seconds": took,
        "rate_bps": mib * MIB * 8 / took,
        "relay_cpu_s": cpu,
        "relay_cpu_ms_per_mb": cpu / (mib * MIB / 1e6) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bandwidths", default="1Gbit,10Gbit")
    ap.add_argument("--chunks", default="65536", help="fixed chunk sizes (bytes) beside the relays' own")
    ap.add_argument("--mb", type=positive(int), default=400, help="MiB a flow carries")
    ap.add_argument("--repeats", type=positive(int), default=3)
    args = ap.parse_args()
    try:
        bandwidths = [parse_bandwidth(b) for b in args.bandwidths.split(",")]
        chunks = [int(c) for c in args.chunks.split(",") if c]
        if any(c <= 0 for c in chunks):
            raise TfschedError("every chunk must be positive")
        # (bandwidth, chunk: None for the relays' own) -> its repeated runs
        cases = {
            (bw, chunk): [one_flow(bw, chunk, args.mb) for _ in range(args.repeats)]
            for bw in bandwidths
            for chunk in [None, *chunks]
        }
    except (TfschedError, ValueError) as e:
        sys.exit(f"Error: {e}")
    lines = [
        f"One flow of {args.mb} MiB through a relay, {args.repeats} times each (medians). "
        f"Processor: {cpu_description()}.",
        "",
        "| link | chunk | rate reached | of the link | relay CPU per MB |",
        "|---|---|---|---|---|",
    ]
    summary = []
    for (bw, chunk), mine in cases.items():
        rate = statistics.median(r["rate_bps"] for r in mine)
        cpu = statistics.median(r["relay_cpu_ms_per_mb"] for r in mine)
        size = mine[0]["chunk_bytes"]
        name = f"{size // 1024} KiB" + (" (the relays' own)" if chunk is None else "")
        summary.append(
            {
                "bandwidth_bps": bw,
                "chunk_bytes": size,
                "own": chunk is None,
                "rate_bps": rate,
                "relay_cpu_ms_per_mb": cpu,
            }
        )
        lines.append(
            f"| {bw / 1e9:g} Gbit/s | {name} | {rate / 1e9:.2f} Gbit/s | {rate / bw:.0%} | {cpu:.2f} ms |"
        )
    lines += [
        "",
        "The client, the relay and the sink share this machine's cores; the relay's CPU is that "
        "of its threads alone.",
    ]
    write(
        "relay_throughput",
        {
            "benchmark": "relay_throughput",
            "machine": machine(),
            "cpu": cpu_description(),
            "config": vars(args),
            "runs": [r for mine in cases.values() for r in mine],
            "summary": summary,
        },
        lines,
    )


if __name__ == "__main__":
    main()
