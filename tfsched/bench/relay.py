"""Shaped host links on loopback without root: user-space relays between a local cluster's tasks.

Where network namespaces cannot be made (no root, no iproute2: ``netns.available``), a
``LocalCluster(bandwidth_bps=...)`` still gives every task a host link of its own, full duplex,
as ``netns.EmulatedCluster`` does with ``tc``. Each task gets a cluster spec of its own in which
every other task's address is a relay on loopback. The relay forwards the connection both ways
and paces its bytes through the two hosts' links: what task A sends to task B takes its time on
A's uplink and on B's downlink, one chunk at a time, once both are free, and is handed on when it
has passed. Concurrent connections therefore share a link chunk by chunk, and a host's sending
and receiving do not share bandwidth. The driver reaches each task through a relay too, across
the task's link only (``CLIENT``), as it reaches the emulated cluster's hosts from the bridge.

TensorFlow 2's coordinator hands every task one cluster spec of its own, so relays for each pair
of tasks would be passed by. For it every task also has one relay for every host
(``RelayedSpec.shared_spec``), which asks Linux which process opened each connection it accepts
(``/proc/net/tcp`` for the socket, the tasks' ``/proc/<pid>/fd`` for its holder) and paces it
through that task's links; any other process is the driver.

The issue behind the bench asked for "loopback with a single shaped link" as the fallback; a link
per host is the same topology as the emulated cluster, so the fallback's results read like its.
With ``latency_s`` each link also delays what crosses it, as ``netem`` does on each of the
emulated cluster's links: a chunk is handed on ``2 * latency_s`` after it has passed the sender's
uplink and the receiver's downlink, by a writer of its own, so that a link's bandwidth-delay
product is in flight as on a wire. What the relays do not do is the kernel's queueing
(``--queue``): the relay's queue is the sockets' buffers.

The pacing runs in this process, on the cores the tasks use, so ``LocalCluster`` runs the tasks
at a lower priority, as a kernel's shaper runs before any process. A relay reads a chunk sized
to its link (``chunk_bytes``: about 2 ms of the link's time), which costs 0.31 ms of a core per
MB relayed at 1 Gbit/s against 0.86 ms with the 64 KiB of the twenty-fifth session
(``benchmarks/relay_throughput.py``). A link idle for a while lets ``BURST_S`` of its time go at
once (tbf's burst in ``bench.netns``), which also makes up for a relay that woke late. Measured
(``benchmarks/relay_vs_netns.py``, VGG16 training on 1 PS x 2 workers at 1 Gbit/s, with
64 KiB chunks): the baseline's step 4.34 s on the relays and 4.48 s on namespaces, TAO with
partitioning and a window per task 1.27x and 1.24x, the simulator within 4% on both. One flow
through a relay reaches a 10 Gbit/s link here, but a cluster on such links is compute-bound
and the relays' CPU counts: on ResNet-50 at 10 Gbit/s the relays read TAO with partitioning
5% lower against the baseline than the namespaces did (0.941x against 0.987x, one run;
``results/relay_vs_netns-resnet50-10g.md``), so the 10 Gbit/s rows are the namespaces'.
"""

from __future__ import annotations

import fcntl
import math
import os
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable

from tfsched.errors import TfschedError
from tfsched.limits import counters, explain

# A relay reads and paces about CHUNK_S of its link's time at a time, from MIN_CHUNK to
# MAX_CHUNK bytes: 64 KiB below about 370 Mbit/s, 256 KiB at 1 Gbit/s, 1 MiB from about
# 3 Gbit/s. Each chunk costs the relay a few system calls and a wake-up whatever its size, so
# the relays' CPU and the fastest link they can pace follow the chunk's size
# (``benchmarks/relay_throughput.py``). CHUNK_S is half of tbf's burst (BURST_S), so the chunks
# interleave concurrent flows no coarser than the namespaces' shaper lets them go.
CHUNK_S = 0.002
MIN_CHUNK = 64 * 1024
MAX_CHUNK = 1024 * 1024
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux
# a link idle since longer ago lets this much of its time go at once (tbf's burst in bench.netns),
# which also makes up for a relay that woke late
BURST_S = 0.004


# the driver (this process, the client of the tasks' sessions): its own side of the network is
# not shaped, as the namespaces' bridge is not, so what it sends and receives crosses only the
# task's link
CLIENT = ("client", 0)

# Open files a relay takes: its listener, and each connection's two sockets and two pipes. Measured
# on Seq-32: 5.75 a relay with 2 workers and 5.97 with 4 (two steps from each worker), and the bench
# process's most, sampled every 0.2 s, 2,096 for 16 workers' 306 relays (6.8 a relay, the
# driver's own beside them); yet at a soft limit of 2,398 (7 a relay and 256 more) that run ran
# out between samples, and at 4,490 (room for two connections a relay, and 512 more) it ran.
# Measured again in the 113th session, every 0.2 s: the 16 workers' run 2,095 files at most (943
# with --latency 1ms, whose relays use no pipes), VGG16 on 1 PS and 4 workers (30 relays) 199.
FILES_PER_RELAY = 13
FILES_BESIDE = 512


def open_files_for(relays: int) -> None:
    """Lets this process open the files ``relays`` relays take (``FILES_PER_RELAY``), raising its
    soft limit (``ulimit -n``) where it must; one error, before any relay starts, where the hard
    limit is lower. At the common soft limit of 1,024, 16 workers' 306 relays started, then each
    relay that ran out when connections came failed a thread, and the bench a step, with a gRPC
    timeout.

    >>> open_files_for(10)
    >>> open_files_for(10**12)
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: the relays on loopback need about 13,000,000,000,512 open files, more than this process may open (...): raise the limit, or run fewer tasks (each pair of tasks is a relay)
    """
    import resource

    need = FILES_PER_RELAY * relays + FILES_BESIDE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    try:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise ValueError(f"the hard limit, ulimit -Hn, is {hard:,}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    except (ValueError, OSError) as e:  # past the hard limit, or the kernel's (fs.nr_open)
        raise TfschedError(
            f"the relays on loopback need about {need:,} open files, more than this process may "
            f"open ({e}): raise the limit, or run fewer tasks (each pair of tasks is a relay)"
        ) from None


def chunk_bytes(bandwidth_bps: float) -> int:
    """What a relay on links of ``bandwidth_bps`` reads at a time: the power of two nearest
    ``CHUNK_S`` of the link's time, within ``MIN_CHUNK`` and ``MAX_CHUNK``."""
    nearest = 2 ** round(math.log2(max(bandwidth_bps / 8 * CHUNK_S, 1)))
    return int(min(MAX_CHUNK, max(MIN_CHUNK, nearest)))


class Links:
    """Every host's uplink and downlink, as the time each is next free (one lock for all); the
    hosts in ``unshaped`` have links without limit or latency. ``delay(src, dst)``: what the
    links a chunk crosses add to its way (``latency_s`` each)."""

    def __init__(self, bandwidth_bps: float, latency_s: float = 0.0, unshaped=()):
        if not bandwidth_bps > 0:
            raise ValueError(f"bandwidth must be positive, got {bandwidth_bps!r}")
        if not latency_s >= 0:
            raise ValueError(f"latency must not be negative, got {latency_s!r}")
        self.bytes_per_s = bandwidth_bps / 8
        self.latency_s = latency_s
        self.unshaped = frozenset(unshaped)
        self.chunk = chunk_bytes(bandwidth_bps)
        self._lock = threading.Lock()
        self._up: dict = defaultdict(float)
        self._down: dict = defaultdict(float)

    def delay(self, src, dst) -> float:
        return self.latency_s * ((src not in self.unshaped) + (dst not in self.unshaped))

    def reserve(self, src, dst, nbytes: int) -> float:
        """``time.monotonic()`` at which ``nbytes`` from host ``src`` to ``dst`` have passed both
        links: from when both are free (at most ``BURST_S`` ago), for the chunk's time at the
        links' rate."""
        with self._lock:
            links = [(free, h) for free, h in ((self._up, src), (self._down, dst)) if h not in self.unshaped]
            start = max([time.monotonic() - BURST_S] + [free[h] for free, h in links])
            end = start + nbytes / self.bytes_per_s
            for free, h in links:
                free[h] = end
            return end


def loopback_socket_inode(port: int, peer_port: int) -> int | None:
    """The inode of the loopback TCP socket whose own port is ``port`` and whose peer's is
    ``peer_port`` (``/proc/net/tcp`` and ``tcp6``); None where there is none or Linux's tables
    cannot be read."""
    want = (f"{port:04X}", f"{peer_port:04X}")
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # sl, local_address, rem_address, st, tx:rx, tr:when, retrnsmt, uid, timeout, inode
            if len(fields) > 9 and (fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]) == want:
                return int(fields[9])
    return None


def socket_owner(inode: int, pids) -> int | None:
    """Which of ``pids`` holds the socket ``inode`` open (``/proc/<pid>/fd``); None: none of them."""
    link = f"socket:[{inode}]"
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") == link:
                    return pid
            except OSError:
                continue
    return None


class Relay:
    """Listens on a loopback port for host ``src``'s connections to task ``dst`` at ``target``
    ("host:port"), and forwards each, paced by ``links``.

    With ``src`` None the relay is every host's way to ``dst``, and ``source_of(conn)`` says
    which host an accepted connection comes from: a cluster spec every task shares can then
    name the relays (``RelayedSpec.shared_spec``)."""

    def __init__(
        self,
        links: Links,
        src,
        dst,
        target: str,
        source_of: Callable | None = None,
        since: dict | None = None,
    ):
        if src is None and source_of is None:
            raise ValueError("a relay for every host needs source_of")
        self.links, self.src, self.dst = links, src, dst
        self.source_of = source_of
        self._since = counters() if since is None else since  # what a failure met counts from here
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        # per connection: (the accepted socket, the one to the task, its two pumps)
        self._conns: list[tuple[socket.socket, socket.socket, list[threading.Thread]]] = []
        self._lock = threading.Lock()
        self._closed = False
        # the first connection it could not carry, in words to follow "cluster task " (as
        # ``TaskHandles.dead_tasks``' do)
        self.failures: list[str] = []
        self._acceptor = threading.Thread(target=self._accept, name=f"tfsched-relay-{self.port}", daemon=True)
        try:
            self._acceptor.start()
        except RuntimeError as e:  # no thread to be had (limits)
            self._listener.close()
            raise TfschedError(f"{self._name()} could not start: {explain(str(e), self._since)}") from None

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            # whose it is, at once: /proc shows it while its peer holds it open (gRPC's stay open)
            src = self.src if self.src is not None else self.source_of(conn)
            try:
                out = socket.create_connection(self.target, timeout=30)
                out.settimeout(None)
            except OSError:
                conn.close()  # the task is not there (yet, or any more): its peer retries
                continue
            for s in (conn, out):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # requests go from src to dst, answers from dst to src
            pumps = [
                threading.Thread(target=f, args=args, name=f"tfsched-relay-{self.port}-pump", daemon=True)
                for a, b, frm, to in ((conn, out, src, self.dst), (out, conn, self.dst, src))
                for f, args in self._pumps(a, b, frm, to)
            ]
            with self._lock:
                if self._closed:
                    conn.close()
                    out.close()
                    return
                self._conns = [c for c in self._conns if not _ended(c)] + [(conn, out, pumps)]
            try:
                for t in pumps:
                    t.start()
            except RuntimeError as e:  # no thread to be had: end the connection, its peer retries
                with self._lock:  # said before the peer sees the end; its retries would say it again
                    self._conns = [c for c in self._conns if c[0] is not conn]
                    if not self.failures:
                        self.failures.append(
                            f"{_host_name(self.dst)} unreachable from {_host_name(src)}: its relay could not "
                            f"carry a connection: {explain(str(e), self._since)}"
                        )
                _shutdown(conn, out)  # a pump that started sees it and ends
                for t in pumps:
                    if t.ident is not None:  # started
                        t.join(timeout=5)
                conn.close()
                out.close()

    def _name(self) -> str:
        """The relay in words: "the relay from /job:worker/task:0 to /job:ps/task:0"."""
        src = "every host" if self.src is None else _host_name(self.src)
        return f"the relay from {src} to {_host_name(self.dst)}"

    def _pumps(self, a: socket.socket, b: socket.socket, frm, to) -> list:
        """The threads' (target, args) that move ``a``'s bytes to ``b``."""
        delay_s = self.links.delay(frm, to)  # the same both ways
        if not delay_s:
            return [(self._pump, (a, b, frm, to))]
        # what a link holds on the way: its bandwidth-delay product, a burst and a few chunks
        chunks = _InFlight(self.links.bytes_per_s * (delay_s + BURST_S) + 4 * self.links.chunk)
        return [
            (self._read_delayed, (a, b, frm, to, delay_s, chunks)),
            (self._write_delayed, (a, b, chunks)),
        ]

    def _pump(self, a: socket.socket, b: socket.socket, frm, to) -> None:
        # the bytes go socket -> pipe -> socket in the kernel (splice), never through Python
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, self.links.chunk)
        except OSError:
            pass  # the default pipe (64 KiB on Linux): each splice moves what fits
        try:
            while True:
                n = os.splice(a.fileno(), w, self.links.chunk)
                if n == 0:
                    break
                delay = self.links.reserve(frm, to, n) - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                while n:
                    n -= os.splice(r, b.fileno(), n)
        except OSError:
            pass
        finally:  # either side gone: end the connection both ways (the other pump sees it)
            os.close(r)
            os.close(w)
            _shutdown(a, b)

    def _read_delayed(
        self, a: socket.socket, b: socket.socket, frm, to, delay_s: float, chunks: _InFlight
    ) -> None:
        """Paces ``a``'s chunks through the links as ``_pump`` does and queues each for
        ``_write_delayed`` with the time it is due at the far end; None when ``a`` has ended."""
        try:
            while True:
                data = a.recv(self.links.chunk)
                if not data:
                    break
                now = time.monotonic()
                passed = self.links.reserve(frm, to, len(data))  # may be past: a burst goes at once
                chunks.put(max(passed, now) + delay_s, data)
                delay = passed - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        except OSError:
            pass
        finally:
            chunks.put(0.0, None)

    def _write_delayed(self, a: socket.socket, b: socket.socket, chunks: _InFlight) -> None:
        """Hands each queued chunk to ``b`` when it is due; once ``a`` has ended and all it sent
        has been handed on, or ``b`` is gone, ends the connection both ways."""
        try:
            while (item := chunks.get())[1] is not None:
                due, data = item
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                b.sendall(data)
        except OSError:
            pass
        finally:
            chunks.close()  # the reader must not wait for room any more
            _shutdown(a, b)

    def close(self) -> None:
        """Stop listening and end every connection; returns once their pumps have ended."""
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        _shutdown(self._listener)
        self._listener.close()
        self._acceptor.join(timeout=5)
        for conn, out, _ in conns:
            _shutdown(conn, out)
        for conn, out, pumps in conns:
            for t in pumps:
                t.join(timeout=5)
            conn.close()
            out.close()


class _InFlight:
    """The chunks between a delayed relay's reader and writer, in order: ``put`` waits while
    ``limit`` bytes are queued (so the sender feels the link's back pressure, as through a
    shaper), unless ``close`` has been called."""

    def __init__(self, limit: float):
        self.limit = limit
        self._items: deque = deque()
        self._bytes = 0
        self._closed = False
        self._cond = threading.Condition()

    def put(self, due: float, data: bytes | None) -> None:
        with self._cond:
            while self._bytes >= self.limit and not self._closed:
                self._cond.wait()
            self._items.append((due, data))
            self._bytes += len(data or b"")
            self._cond.notify_all()

    def get(self) -> tuple[float, bytes | None]:
        with self._cond:
            while not self._items:
                self._cond.wait()
            due, data = self._items.popleft()
            self._bytes -= len(data or b"")
            self._cond.notify_all()
            return due, data

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _host_name(host) -> str:
    """A host in words.

    >>> _host_name(("ps", 0)), _host_name(CLIENT)
    ('/job:ps/task:0', 'the driver')
    """
    return "the driver" if host == CLIENT else f"/job:{host[0]}/task:{host[1]}"


def _shutdown(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _ended(conn) -> bool:
    """A connection whose pumps have both ended: its sockets are closed here."""
    a, b, pumps = conn
    if any(t.is_alive() for t in pumps):
        return False
    a.close()
    b.close()
    return True


class RelayedSpec:
    """A relay for every ordered pair of tasks of ``spec`` ({job: ["host:port", ...]}), each task
    its own host with links of ``bandwidth_bps`` that add ``latency_s`` each; ``spec_of(job,
    index)`` is the cluster spec that task runs with, ``client_address(job, index)`` where the
    driver reaches that task (across the task's link only). The tasks in ``unshaped`` have links
    without limit or latency. ``close()`` ends every relay and connection.

    ``shared_spec``, for a client that hands every task one cluster spec of its own (TensorFlow
    2's coordinator does: its ``CreateContext`` request carries the spec each task then reaches
    the others by), names one more relay per task, every host's way to it. Such a relay asks
    which process opened each connection it accepts (``/proc/net/tcp`` and each task's
    ``/proc/<pid>/fd``, once per connection: gRPC keeps its connections) and paces it through
    that task's links; a process that is no task is the driver (``CLIENT``). ``pids()``: the
    tasks' processes as they are at the time, {pid: (job, index)} (none until they start)."""

    def __init__(
        self,
        spec: dict,
        bandwidth_bps: float,
        latency_s: float = 0.0,
        pids: Callable[[], dict] = dict,
        unshaped=(),
    ):
        self.spec = spec
        self.links = Links(bandwidth_bps, latency_s, unshaped=(CLIENT, *unshaped))
        tasks = [(job, i) for job, addrs in spec.items() for i in range(len(addrs))]
        # a relay to each task from the driver, from each other task and from all (shared_spec)
        open_files_for(len(tasks) * (len(tasks) + 1))
        self.relays: dict = {}
        self.pids = pids
        since = counters()
        try:
            for dst in tasks:
                for src in [CLIENT, *tasks, None]:  # None: the shared relay, every host's
                    if src != dst:
                        source_of = self.host_of if src is None else None
                        self.relays[(src, dst)] = Relay(
                            self.links, src, dst, spec[dst[0]][dst[1]], source_of, since
                        )
        except BaseException:
            self.close()
            raise

    def host_of(self, conn: socket.socket) -> tuple:
        """The host an accepted loopback connection comes from: the task whose process holds its
        other end, else the driver."""
        tasks = self.pids()
        try:
            inode = loopback_socket_inode(conn.getpeername()[1], conn.getsockname()[1])
        except OSError:  # gone already: whatever it carried, nothing more will cross
            return CLIENT
        pid = socket_owner(inode, list(tasks)) if inode is not None else None
        return tasks.get(pid, CLIENT)

    @property
    def shared_spec(self) -> dict:
        """One cluster spec for every task and the driver: each task's shared relay."""
        return {
            job: [f"127.0.0.1:{self.relays[(None, (job, i))].port}" for i in range(len(addrs))]
            for job, addrs in self.spec.items()
        }

    def spec_of(self, job: str, index: int) -> dict:
        me = (job, index)
        return {
            j: [
                addr if (j, i) == me else f"127.0.0.1:{self.relays[(me, (j, i))].port}"
                for i, addr in enumerate(addrs)
            ]
            for j, addrs in self.spec.items()
        }

    def client_address(self, job: str, index: int) -> str:
        return f"127.0.0.1:{self.relays[(CLIENT, (job, index))].port}"

    def failures(self) -> list[str]:
        """What each relay could not carry (a connection it had no thread for), in words."""
        return [failure for r in self.relays.values() for failure in list(r.failures)]

    def close(self) -> None:
        for r in self.relays.values():
            r.close()
