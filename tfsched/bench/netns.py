"""An emulated multi-host PS cluster: one network namespace per task, shaped full-duplex links.

Each task (PS or worker) runs in its own namespace with one interface, ``eth0``, a veth whose
peer sits on a bridge in the root namespace. Each host's link is shaped in both directions with
``tbf`` (egress of ``eth0`` is the host's uplink, egress of the bridge-side peer its downlink),
so sending and receiving do not share bandwidth; ``netem`` adds latency when asked. The client
(this process) reaches the tasks through the bridge's own address. Everything created is removed
on exit, on Ctrl-C, on SIGTERM and on failure; what a run killed by SIGKILL left (its tasks end
with it, ``bench.server``) is removed by the next run (``reap_orphans``), or by ``cleanup_stale()``.
Addresses are in 10.213.<n>.0/24, on this machine only (TF-NOTES: keep traffic to our own hosts).
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from tfsched.bench.local import TaskHandles
from tfsched.bench.zygote import TaskHost
from tfsched.errors import TfschedError
from tfsched.units import check_link_bandwidth

PREFIX = "tfs"  # every namespace, veth and bridge this module makes starts with it


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise TfschedError(f"network emulation: `{' '.join(cmd)}` failed: {p.stderr.strip()[:200]}")
    return p


def _shape_in_a_probe(latency_s: float) -> None:
    """Makes a namespace, shapes its loopback (with ``latency_s``) and removes it."""
    probe = f"{PREFIX}{run_tag()}probe"
    _ip("ip", "netns", "add", probe)
    try:
        shape("lo", 1e9, latency_s, ns=probe)
    finally:
        _ip("ip", "netns", "del", probe, check=False)


@functools.cache
def available() -> str | None:
    """None if namespaces can be used here, else why not: it makes one, shapes a link in it and
    removes it (a container can give root and iproute2 without the right to either)."""
    if os.geteuid() != 0:  # first: a user's PATH has no sbin, where ip and tc are
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2 (ip, tc) is not installed"
    try:
        _shape_in_a_probe(0.0)
    except TfschedError as e:
        return str(e).removeprefix("network emulation: ")
    return None


@functools.cache
def latency_unavailable() -> str | None:
    """None if a link in a namespace can be given latency here (``netem``), else why not. Some
    kernels have ``tbf`` without ``netem`` (this project's machine: CONFIG_NET_SCH_NETEM unset);
    the relays on loopback (``bench.relay``) add latency in user space there."""
    why = available()
    if why:
        return why
    try:
        _shape_in_a_probe(0.001)
    except TfschedError as e:
        return f"the kernel's netem is missing ({str(e).rsplit('failed: ', 1)[-1]})"
    return None


def check_latency(latency_s: float) -> None:
    """Raises the error a user sees when the emulated links cannot have ``latency_s`` here."""
    if latency_s and (why := latency_unavailable()):
        raise TfschedError(
            f"cannot add latency to the emulated hosts' links: {why}; the relays on loopback "
            "add it in user space (--shaped-loopback)"
        )


def _names(kind: str) -> list[str]:
    """The namespaces (``kind`` "netns") or links ("link") whose names start with ``PREFIX``."""
    if kind == "netns":
        lines = _ip("ip", "netns", "list", check=False).stdout.splitlines()
        names = [line.split()[0] for line in lines if line.strip()]
    else:
        lines = _ip("ip", "-o", "link", "show", check=False).stdout.splitlines()
        names = [line.split(":")[1].strip().split("@")[0] for line in lines if ":" in line]
    return [n for n in names if n.startswith(PREFIX)]


def run_tag(pid: int | None = None) -> str:
    """What a run names what it makes with: its pid (this process's by default) modulo 100,000,
    five digits."""
    return f"{(os.getpid() if pid is None else pid) % 100000:05d}"


def live_tags() -> set[str]:
    """The tags of every live process: a run's whose tag is not among them is gone."""
    return {run_tag(int(pid)) for pid in os.listdir("/proc") if pid.isdigit()}


def orphans(kind: str) -> list[str]:
    """The namespaces (``kind`` "netns") or links ("link") of runs whose process is gone.

    A run names what it makes with its tag (its pid modulo 100,000): a tag no live process has
    belongs to a run killed before it could clean up (SIGKILL, the OOM killer)."""
    live = live_tags()

    def orphan(name: str) -> bool:
        tag = name[len(PREFIX) : len(PREFIX) + 5]
        return tag.isdigit() and tag not in live

    return list(filter(orphan, _names(kind)))


def reap_orphans() -> int:
    """Remove the namespaces, bridges and veths of runs whose process is gone (``orphans``);
    returns how many. Those are not only clutter: a dead run's bridge keeps its subnet's address
    and route, so a later run on the same subnet would send its cluster's traffic to the dead
    bridge. A live run's are kept, a concurrent one's too.
    """
    removed = 0
    for name in orphans("netns"):
        _ip("ip", "netns", "del", name, check=False)  # takes its veth (and the peer) with it
        removed += 1
    for name in orphans("link"):  # the bridges, and a veth left half-made
        _ip("ip", "link", "del", name, check=False)
        removed += 1
    return removed


def _subnet(pid: int) -> str:
    """A run's subnet, 10.213.<n>: n is ``pid`` modulo 250, or the next n whose bridge address no
    interface holds (two runs at once whose pids agree modulo 250 would otherwise share one)."""
    shown = _ip("ip", "-o", "-4", "addr", "show", check=False).stdout
    held = {int(n) for n in re.findall(r"\binet 10\.213\.(\d+)\.254/", shown)}
    free = next((k % 250 for k in range(pid, pid + 250) if k % 250 not in held), None)
    if free is None:
        raise TfschedError("network emulation: every subnet 10.213.<n>.0/24 is in use")
    return f"10.213.{free}"


def cleanup_stale() -> int:
    """Remove every namespace, bridge and veth of every tfsched run, live ones' too; returns how
    many (``reap_orphans`` keeps the live runs')."""
    removed = 0
    for name in _names("netns"):
        _ip("ip", "netns", "del", name, check=False)
        removed += 1
    for name in _names("link"):
        _ip("ip", "link", "del", name, check=False)
        removed += 1
    return removed


# How long a packet may wait in a link's shaper before it is dropped (tbf's ``latency``): its queue
# holds that much of the link's time. The bench's links have always had 400 ms, far more than a
# switch port's buffer; ``queue_s`` sets another.
DEFAULT_QUEUE_S = 0.4


# The most bytes tbf's burst and queue (its ``limit``) hold: 32 bits each. tc takes a larger queue
# without a word and keeps what is left past 2**32: 100 Gbit/s with the 400 ms queue showed "lat
# 56.4ms", 1 Gbit/s with a 35 s queue "lat 640ms".
TBF_MAX_BYTES = 2**32 - 1


def _burst(rate_bps: float) -> int:
    return max(int(rate_bps / 8 / 250), 32 * 1024)  # 4 ms worth, never below two jumbo frames


# A run's hosts are 10.213.<n>.1 to .253 of its subnet (.254 is the bridge's): 253 tasks at most.
MAX_HOSTS = 253


def check_hosts(ps: int, workers: int) -> None:
    """One error unless ``ps`` PS and ``workers`` workers fit a run's subnet (``MAX_HOSTS``):
    before any namespace is made (a 254th host's address, 10.213.<n>.256, failed once 253
    namespaces had been made).

    >>> check_hosts(1, 252)
    >>> check_hosts(1, 253)
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: the emulated hosts share one /24 subnet: at most 253 tasks, got 254 (1 PS and 253 workers)
    """
    if ps + workers > MAX_HOSTS:
        raise TfschedError(
            f"the emulated hosts share one /24 subnet: at most {MAX_HOSTS} tasks, got {ps + workers} "
            f"({ps} PS and {workers} workers)"
        )


def check_shaping(rate_bps: float, queue_s: float = DEFAULT_QUEUE_S) -> None:
    """One error unless tc's tbf can shape a link to ``rate_bps`` with a queue of ``queue_s``
    (``units.LINK_BPS_RANGE``, and the queue's bytes within ``TBF_MAX_BYTES``): before any
    namespace is made, not a link other than the one asked for.

    >>> check_shaping(1e9), check_shaping(10e9)
    (None, None)
    >>> check_shaping(100e9)
    Traceback (most recent call last):
    ...
    tfsched.errors.TfschedError: a link's queue of 0.4 s at 1e+11 bit/s is 5.05e+09 bytes, more than tc's tbf holds (2**32-1); at this bandwidth it holds at most 0.339 s
    """
    check_link_bandwidth(rate_bps)
    burst = _burst(rate_bps)
    held = rate_bps / 8 * queue_s + burst
    if held > TBF_MAX_BYTES:
        most = (TBF_MAX_BYTES - burst) * 8 / rate_bps
        unit = 10 ** (math.floor(math.log10(most)) - 2)  # three figures, rounded down: it holds
        most = math.floor(most / unit) * unit
        raise TfschedError(
            f"a link's queue of {queue_s:g} s at {rate_bps:g} bit/s is {held:.3g} bytes, more than "
            f"tc's tbf holds (2**32-1); at this bandwidth it holds at most {most:.3g} s"
        )


def shape(
    dev: str, rate_bps: float, latency_s: float, ns: str | None = None, queue_s: float = DEFAULT_QUEUE_S
) -> None:
    """tbf at ``rate_bps`` (burst above the MTU: TF-NOTES) queueing at most ``queue_s`` of the
    link's time, behind netem when there is latency."""
    burst = _burst(rate_bps)
    tbf = ["tbf", "rate", f"{int(rate_bps)}bit", "burst", str(burst), "latency", f"{queue_s * 1e3:.3f}ms"]
    if latency_s > 0:
        delay = f"{latency_s * 1e3:.3f}ms"
        _ip("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", delay, ns=ns)
        _ip("tc", "qdisc", "add", "dev", dev, "parent", "1:", "handle", "2:", *tbf, ns=ns)
    else:
        _ip("tc", "qdisc", "add", "dev", dev, "root", *tbf, ns=ns)


@dataclass
class EmulatedCluster(TaskHandles):
    """``with EmulatedCluster(ps=1, workers=4, bandwidth_bps=1e9) as c: c.target("worker", 0)``."""

    ps: int = 1
    workers: int = 2
    bandwidth_bps: float = 1e9
    latency_s: float = 0.0
    queue_s: float = DEFAULT_QUEUE_S  # the most of the link's time each shaper queues
    vanilla: bool = False
    inter_op_threads: int = 0  # kernels each task runs at a time (0: TensorFlow's default)
    thread_spinning: bool = True  # False: the tasks' idle pool threads sleep at once (bench.server)
    host_cores: float = 0.0  # each task's own cores (bench.hostcpu); 0: they share the machine's
    start_tasks: bool = True  # False: only the hosts and links (for link measurements)
    start_timeout_s: float = 180.0
    spec: dict = field(default_factory=dict)
    hosts: dict = field(default_factory=dict)  # (job, index) -> (namespace, address)
    procs: dict = field(default_factory=dict)
    log_dir: str = ""  # the tasks' stderr (``local.task_log``), removed on exit
    _tag: str = ""
    _old_sigterm: object = None

    def __enter__(self) -> EmulatedCluster:
        why = available()
        if why:
            raise TfschedError(
                f"cannot emulate hosts: {why}; use loopback instead, its links shaped by relays in "
                "user space (--shaped-loopback) or unshaped (--loopback)"
            )
        if self.bandwidth_bps <= 0 or self.latency_s < 0:
            raise TfschedError("bandwidth must be positive and latency not negative")
        check_latency(self.latency_s)
        if not self.queue_s > 0:
            raise TfschedError(f"the links' queue must be a positive time, got {self.queue_s!r} s")
        check_shaping(self.bandwidth_bps, self.queue_s)
        check_hosts(self.ps, self.workers)
        reap_orphans()  # a dead run's bridge could hold this run's subnet
        self._tag = run_tag()
        subnet = _subnet(os.getpid())
        self.driver_host = f"{subnet}.254"  # the bridge's own address
        if threading.current_thread() is threading.main_thread():
            self._old_sigterm = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run __exit__
        try:
            self._build(subnet)
            if self.start_tasks:
                self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self, subnet: str) -> None:
        bridge = f"{PREFIX}{self._tag}br"
        _ip("ip", "link", "add", bridge, "type", "bridge")
        _ip("ip", "addr", "add", f"{subnet}.254/24", "dev", bridge)
        _ip("ip", "link", "set", bridge, "up")
        tasks = [("ps", i) for i in range(self.ps)] + [("worker", i) for i in range(self.workers)]
        for k, (job, i) in enumerate(tasks):
            ns, host, peer = (
                f"{PREFIX}{self._tag}t{k}",
                f"{PREFIX}{self._tag}h{k}",
                f"{PREFIX}{self._tag}n{k}",
            )
            addr = f"{subnet}.{k + 1}"
            _ip("ip", "netns", "add", ns)
            _ip("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            _ip("ip", "link", "set", peer, "netns", ns)
            _ip("ip", "link", "set", peer, "name", "eth0", ns=ns)
            _ip("ip", "addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
            _ip("ip", "link", "set", "eth0", "up", ns=ns)
            _ip("ip", "link", "set", "lo", "up", ns=ns)
            _ip("ip", "link", "set", host, "master", bridge)
            _ip("ip", "link", "set", host, "up")
            shape("eth0", self.bandwidth_bps, self.latency_s, ns=ns, queue_s=self.queue_s)  # uplink
            shape(host, self.bandwidth_bps, self.latency_s, queue_s=self.queue_s)  # its downlink
            self.hosts[(job, i)] = (ns, addr)
        self.spec = {
            "ps": [f"{self.hosts[('ps', i)][1]}:2222" for i in range(self.ps)],
            "worker": [f"{self.hosts[('worker', i)][1]}:2222" for i in range(self.workers)],
        }

    def _start(self) -> None:
        self.start_all(host=lambda job, i: TaskHost(netns=self.hosts[(job, i)][0]))

    def close(self) -> None:
        self.stop_all()
        for ns, _ in self.hosts.values():
            _ip("ip", "netns", "del", ns, check=False)  # takes its veth (and the peer) with it
        if self._tag:
            # and a host whose building failed half-way, before it was in self.hosts
            for name in _names("netns"):
                if name.startswith(f"{PREFIX}{self._tag}t"):
                    _ip("ip", "netns", "del", name, check=False)
            _ip("ip", "link", "del", f"{PREFIX}{self._tag}br", check=False)
            for name in _names("link"):
                if name.startswith(f"{PREFIX}{self._tag}"):
                    _ip("ip", "link", "del", name, check=False)
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def __exit__(self, *exc) -> None:
        self.close()
