"""Emulated hosts with cores of their own: real cgroups capping real processes, removed after."""

import os
import subprocess
import sys
import time

import pytest

from tests.helpers import cgroups_unavailable
from tfsched.bench import hostcpu, netns
from tfsched.errors import TfschedError

needs_cgroups = pytest.mark.skipif(
    cgroups_unavailable() is not None, reason=f"no cpu cgroups here: {cgroups_unavailable()}"
)

# one thread spinning for SPIN_S seconds of wall time, then its CPU seconds
SPIN = """
import os, sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
t = os.times()
print(t.user + t.system)
"""
SPIN_S = 2.0


def _spin(prefix: list[str]) -> float:
    out = subprocess.run(
        [*prefix, sys.executable, "-c", SPIN, str(SPIN_S)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return float(out.stdout)


def _ours() -> list[str]:
    root = hostcpu.find_hierarchy().root
    tag = f"{hostcpu.PREFIX}{netns.run_tag()}-"
    return [n for n in os.listdir(root) if n.startswith(tag)]


@needs_cgroups
@pytest.mark.alone  # the uncapped spin's share of the cores must not depend on other tests
def test_a_capped_process_gets_no_more_than_its_cores_and_its_group_goes():
    free = _spin([])
    with hostcpu.HostCpu(0.25) as caps:
        capped = _spin(caps.prefix("worker", 0))
        group = caps.groups[("worker", 0)]
        assert os.path.isdir(group)
    # one spinning thread has a core when nothing else runs; at a quarter of a core it gets that
    assert free > 0.7 * SPIN_S
    assert 0.15 * SPIN_S < capped < 0.35 * SPIN_S, (free, capped)
    assert not os.path.exists(group) and _ours() == []


@needs_cgroups
def test_the_process_is_in_its_group_before_it_runs_anything():
    with hostcpu.HostCpu(0.5) as caps:
        line = subprocess.run(
            [*caps.prefix("ps", 0), "cat", "/proc/self/cgroup"], capture_output=True, text=True, check=True
        ).stdout
        name = os.path.basename(caps.groups[("ps", 0)])
        assert any(
            name in entry and ("cpu" in entry or entry.startswith("0::")) for entry in line.splitlines()
        ), line
        quota = hostcpu.find_hierarchy().quota_files(0.5)
        for f, value in quota.items():
            with open(os.path.join(caps.groups[("ps", 0)], f)) as fh:
                assert fh.read().split() == value.split()
    assert _ours() == []


@needs_cgroups
def test_a_dead_runs_groups_go_with_the_next_run():
    root = hostcpu.find_hierarchy().root
    live = netns.live_tags()
    dead = next(f"{t:05d}" for t in range(99999, 0, -1) if f"{t:05d}" not in live)
    orphan = os.path.join(root, f"{hostcpu.PREFIX}{dead}-1-worker0")
    os.mkdir(orphan)
    try:
        assert orphan in hostcpu.orphans(hostcpu.find_hierarchy())
        with hostcpu.HostCpu(0.5):
            assert not os.path.exists(orphan)
    finally:
        if os.path.exists(orphan):
            os.rmdir(orphan)


def test_cgroup_v2_groups_are_written_as_cpu_max(tmp_path):
    # a v2 hierarchy's files as the kernel shows them; the controller enabled for the new groups
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    h = hostcpu.find_hierarchy(str(tmp_path))
    assert h == hostcpu.Hierarchy(str(tmp_path), 2)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    caps = hostcpu.HostCpu(0.5, hierarchy=h)
    group = caps.group("worker", 1)
    assert (tmp_path / os.path.basename(group) / "cpu.max").read_text() == "10000 20000"
    assert caps.prefix("worker", 1)[-1] == os.path.join(group, "cgroup.procs")
    (tmp_path / "cgroup.controllers").write_text("io memory\n")
    with pytest.raises(TfschedError, match="cgroup.controllers: no cpu controller"):
        hostcpu.find_hierarchy(str(tmp_path))
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(TfschedError, match="no cgroup cpu controller"):
        hostcpu.find_hierarchy(str(empty))


@pytest.mark.parametrize("cores", [0, 0.01, (os.cpu_count() or 1) + 1])
def test_a_share_no_task_could_have_is_refused(cores):
    with pytest.raises(TfschedError, match="cores per host must be from 0.05 to"):
        hostcpu.check_cores(cores)


@needs_cgroups
@pytest.mark.cluster
@pytest.mark.tf
@pytest.mark.skipif(netns.available() is not None, reason=f"no network namespaces here: {netns.available()}")
def test_every_task_of_the_emulated_cluster_runs_capped_and_trains():
    import tensorflow as tf

    from tfsched.models import build_graph

    with netns.EmulatedCluster(ps=1, workers=2, bandwidth_bps=1e9, vanilla=True, host_cores=0.5) as c:
        groups = dict(c.host_cpu.groups)
        assert set(groups) == {("ps", 0), ("worker", 0), ("worker", 1)}
        for key, proc in c.procs.items():
            with open(os.path.join(groups[key], "cgroup.procs")) as f:
                assert str(proc.pid) in f.read().split(), key  # the task itself, TensorFlow and all
        built = build_graph("seq32")
        with tf.compat.v1.Session(c.target("worker", 0), graph=built.graph) as sess:
            sess.run(built.init_op)
            start = time.monotonic()
            loss = sess.run([built.train_op, built.loss])[1]
            assert time.monotonic() - start < 60
        assert loss > 0
    assert not any(os.path.exists(g) for g in groups.values()) and _ours() == []
