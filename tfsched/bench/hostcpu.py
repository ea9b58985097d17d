"""Emulated hosts with processors of their own: every task's process capped at a share of cores.

The tasks of an emulated cluster share this machine's cores, and the kernel lends the cores one
task leaves idle to the others. Hosts of a real cluster cannot: a worker waiting for its
parameters leaves its own processor idle, whatever the other workers do. On shared cores the
baseline's waiting workers lend their cores to the ones computing, so an order that keeps
every worker busy can only win back the machine's idle share (``bench.results.cores_limit_lines``),
not each host's. ``HostCpu`` gives each task a cgroup of its own capped at ``cores`` (a CFS
bandwidth quota: ``cores`` x ``PERIOD_US`` of CPU every ``PERIOD_US``), so that what one task
leaves idle nobody else takes. Four workers at half a core each on two cores compute as fast as
four sharing them when all compute at once (the batch-size probe's setting,
``models.batch``), and no faster when some wait.

The task's own threads count against its quota: TensorFlow's kernels, its executor and gRPC's
threads, which copy the bytes it sends and receives. A real host of a cluster has cores to spare
for those; here they share the task's cap with its computing, which slows an order that
overlaps the two more than the vanilla baseline, whose transfers mostly come first.

cgroup v1 (a ``cpu`` hierarchy with ``cpu.cfs_quota_us``) and v2 (``cpu.max``, the ``cpu``
controller enabled for the groups made at the hierarchy's root) are both used; root is needed
either way. Each task enters its group before it runs anything (``prefix``: a shell that writes
its own pid to the group, then ``exec``s the task), and the groups are removed when the cluster
stops, or by the next cluster of any run if its process died first (``reap_orphans``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from tfsched.bench.zygote import TaskHost
from tfsched.errors import TfschedError
from tfsched.limits import BASE

PREFIX = "tfsched-"  # a group's name: tfsched-<tag>-<n>-<job><index>, tag the run's pid % 100,000
# CFS bandwidth period: within each, a group runs at most its quota. Shorter than the kernel's
# default 100 ms so that a task whose threads use up its quota at once waits less for the next
# period (two intra-op threads at half a core run 5 ms of every 20, not 25 of every 100).
PERIOD_US = 20_000
MIN_QUOTA_US = 1_000  # the kernel's least quota


@dataclass(frozen=True)
class Hierarchy:
    """Where groups are made (``root``) and how their quota is written (``version`` 1 or 2)."""

    root: str
    version: int

    def quota_files(self, cores: float, period_us: int = PERIOD_US) -> dict[str, str]:
        """The files a group's quota is written to, and what.

        >>> Hierarchy("/x", 1).quota_files(0.5)
        {'cpu.cfs_period_us': '20000', 'cpu.cfs_quota_us': '10000'}
        >>> Hierarchy("/x", 2).quota_files(0.25)
        {'cpu.max': '5000 20000'}
        """
        quota = round(cores * period_us)
        if self.version == 1:
            return {"cpu.cfs_period_us": str(period_us), "cpu.cfs_quota_us": str(quota)}
        return {"cpu.max": f"{quota} {period_us}"}


def find_hierarchy(base: str = BASE) -> Hierarchy:
    """The cgroup hierarchy whose ``cpu`` controller can cap this machine's processes, or a
    TfschedError saying why there is none."""
    v1 = os.path.join(base, "cpu")
    if os.path.isfile(os.path.join(v1, "cpu.cfs_quota_us")):
        if not os.access(v1, os.W_OK):
            raise TfschedError(f"{v1}: the cgroup cpu controller is not writable here (root needed)")
        return Hierarchy(v1, 1)
    controllers = os.path.join(base, "cgroup.controllers")
    if os.path.isfile(controllers):
        with open(controllers) as f:
            if "cpu" not in f.read().split():
                raise TfschedError(f"{controllers}: no cpu controller in this cgroup v2 hierarchy")
        subtree = os.path.join(base, "cgroup.subtree_control")
        try:
            with open(subtree) as f:
                enabled = "cpu" in f.read().split()
            if not enabled:
                with open(subtree, "w") as f:
                    f.write("+cpu")
        except OSError as e:
            raise TfschedError(
                f"{subtree}: cannot enable the cpu controller for new groups ({e.strerror})"
            ) from None
        return Hierarchy(base, 2)
    raise TfschedError(
        f"{base}: no cgroup cpu controller (v1 {v1}/cpu.cfs_quota_us or v2 cgroup.controllers)"
    )


def check(cores: float) -> Hierarchy:
    """The hierarchy to cap tasks at ``cores`` with, or a TfschedError saying why there is none
    (``check_cores``, ``find_hierarchy``): what a caller checks before it starts anything."""
    check_cores(cores)
    return find_hierarchy()


def check_cores(cores: float) -> None:
    """Refuses a share of cores no task could have on this machine."""
    most = os.cpu_count() or 1
    if not (isinstance(cores, (int, float)) and MIN_QUOTA_US / PERIOD_US <= cores <= most):
        raise TfschedError(
            f"cores per host must be from {MIN_QUOTA_US / PERIOD_US:g} to this machine's {most}, got {cores!r}"
        )


def _remove(path: str, wait_s: float) -> bool:
    """rmdir a group, retrying while its last processes are reaped; whether it went."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def orphans(hierarchy: Hierarchy) -> list[str]:
    """The groups of runs whose process is gone: a run names its groups with its tag (its pid
    modulo 100,000), which no live process has once it died before it could clean up."""
    from tfsched.bench.netns import live_tags

    live = live_tags()
    tags = {name: name[len(PREFIX) : len(PREFIX) + 5] for name in os.listdir(hierarchy.root)}
    return [
        os.path.join(hierarchy.root, name)
        for name, tag in tags.items()
        if name.startswith(PREFIX) and tag.isdigit() and tag not in live
    ]


def reap_orphans(hierarchy: Hierarchy) -> int:
    """Remove the ``orphans``; returns how many. A group that still holds a process is kept."""
    return sum(_remove(path, 0.0) for path in orphans(hierarchy))


_made = 0  # groups made by this process: two clusters at once get distinct names


@dataclass
class HostCpu:
    """``with HostCpu(0.5) as h: Popen([*h.prefix("worker", 0), ...])``: each (job, index) a
    group capped at ``cores``, made when first asked for, removed on ``close``."""

    cores: float
    hierarchy: Hierarchy | None = None  # found on entry when not given
    groups: dict = field(default_factory=dict)  # (job, index) -> the group's directory

    def __enter__(self) -> HostCpu:
        if self.hierarchy is None:
            self.hierarchy = check(self.cores)
        else:
            check_cores(self.cores)
        reap_orphans(self.hierarchy)
        return self

    def group(self, job: str, index: int) -> str:
        """The group of task (job, index), made with its quota when first asked for."""
        global _made
        if (job, index) not in self.groups:
            from tfsched.bench.netns import run_tag

            _made += 1
            path = os.path.join(self.hierarchy.root, f"{PREFIX}{run_tag()}-{_made}-{job}{index}")
            try:
                os.mkdir(path)
                self.groups[(job, index)] = path  # removed on close, even if the quota fails
                for name, value in self.hierarchy.quota_files(self.cores).items():
                    with open(os.path.join(path, name), "w") as f:
                        f.write(value)
            except OSError as e:
                raise TfschedError(f"{path}: cannot make a capped cpu group ({e.strerror})") from None
        return self.groups[(job, index)]

    def procs(self, job: str, index: int) -> str:
        """The ``cgroup.procs`` file a process writes its pid to to join task (job, index)'s
        group (``bench.zygote.TaskHost.enter``)."""
        return os.path.join(self.group(job, index), "cgroup.procs")

    def prefix(self, job: str, index: int) -> list[str]:
        """The command a task's command runs under: a shell that enters its group, then runs it
        in its own place (``exec``: the same process, so its pid and signals are the task's)."""
        return TaskHost(cgroup_procs=self.procs(job, index)).prefix()

    def close(self) -> None:
        """Remove the groups (their processes stopped first); one that cannot go yet is left to
        ``reap_orphans`` once this process is gone."""
        for path in self.groups.values():
            _remove(path, 5.0)
        self.groups.clear()

    def __exit__(self, *exc) -> None:
        self.close()


def describe(cores: float) -> str:
    """How the hosts' processors read in a title.

    >>> describe(0.5)
    'each host 0.5 cores of its own'
    >>> describe(1)
    'each host 1 core of its own'
    """
    return f"each host {cores:g} core{'' if cores == 1 else 's'} of its own"
