"""Several workers' traces of one run on one time axis (tfsched viz W0 W1 ...)."""

import json
import subprocess
import sys

import pytest

from tfsched.errors import TfschedError
from tfsched.tracing.trace import OpRecord, Trace, TransferRecord

PS = "/job:ps/replica:0/task:0/device:CPU:0"
EPOCH = 1.8e15  # us since the epoch: late 2027


def worker_trace(w: int, starts: list[float], tmp_path=None) -> Trace:
    """Worker ``w``'s traced steps, begun at ``starts``: a pull, a computing op, the PS's update."""
    dev = f"/job:worker/replica:0/task:{w}/device:CPU:0"
    ops, transfers = [], []
    for s in range(len(starts)):
        ops += [
            OpRecord(s, dev, "conv", "Conv2D", 1000.0, 3000.0),
            OpRecord(s, PS, "apply", "Apply", 5000.0, 200.0),
        ]
        transfers += [
            TransferRecord(s, "edge_1_w/read", "w/read:0", 40000, PS, dev, 0.0, 900.0, ("conv",)),
            TransferRecord(s, "edge_2_grad", "grad:0", 40000, dev, PS, 4000.0, 900.0, ("apply",)),
        ]
    trace = Trace(
        steps=len(starts),
        ops=ops,
        transfers=transfers,
        step_times_us=[6000.0] * len(starts),
        step_starts_us=list(starts),
        meta={"model": "toy", "worker": w},
    )
    if tmp_path is not None:
        path = tmp_path / f"w{w}.trace.json"
        trace.save(str(path))
        return Trace.load(str(path))
    return trace


def test_each_event_is_where_the_clock_had_it_and_each_worker_is_a_process():
    from tfsched.viz.chrome import chrome_traces

    w0 = worker_trace(0, [EPOCH, EPOCH + 10_000])
    w1 = worker_trace(1, [EPOCH + 700, EPOCH + 10_300])  # 0.7 ms behind, then 0.3 ms
    doc = chrome_traces([w0, w1])
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {1: "worker:0", 2: "worker:1", 3: "ps:0 in worker:0's step", 4: "ps:0 in worker:1's step"}
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    conv = {(names[e["pid"]], e["args"]["step"]): e["ts"] for e in slices if e["name"] == "conv"}
    assert conv == {
        ("worker:0", 0): 1000.0,
        ("worker:1", 0): 1700.0,
        ("worker:0", 1): 11_000.0,
        ("worker:1", 1): 11_300.0,
    }
    # a worker's push is received on the PS, in the process of that worker's step
    pushes = {names[e["pid"]]: e["ts"] for e in slices if e["name"] == "grad:0" and e["args"]["step"] == 0}
    assert pushes == {"ps:0 in worker:0's step": 4000.0, "ps:0 in worker:1's step": 4700.0}
    # flows stay within a worker's trace: from its pull's end to its own conv
    flows = [e for e in doc["traceEvents"] if e["ph"] in "sf"]
    assert len(flows) == 2 * 8 and all(f["pid"] in (1, 2, 3, 4) for f in flows)
    # what the traces are of, not what one of them alone is (its worker)
    assert doc["otherData"]["model"] == "toy" and "worker" not in doc["otherData"]


def test_a_picture_of_one_step_of_every_worker(tmp_path):
    from tfsched.viz.plots import worker_rows
    from tfsched.viz.write import write_visualization

    w0, w1 = worker_trace(0, [EPOCH, EPOCH + 10_000]), worker_trace(1, [EPOCH + 700, EPOCH + 10_300])
    rows = worker_rows([w0, w1], ["worker:0", "worker:1"], 1)
    assert rows["worker:1 compute"] == [(pytest.approx(0.0013), 0.003, "op")]
    assert rows["worker:0 compute"] == [(0.001, 0.003, "op")]
    assert rows["ps:0 compute in worker:1's step"] == [(pytest.approx(0.0053), 0.0002, "op")]
    assert "ps:0 ← worker:1" in rows and "ps:0 compute" not in rows
    for ext in ("png", "html"):
        out = tmp_path / f"w.{ext}"
        write_visualization(w0, str(out), workers=[w1], step=1)
        assert out.stat().st_size > 5000
    page = (tmp_path / "w.html").read_text()
    assert "worker:0: 2 traced steps" in page and "worker:1: 2 traced steps" in page


@pytest.mark.parametrize(
    "make,kwargs,message",
    [
        (
            lambda tp: [worker_trace(0, [EPOCH]), worker_trace(0, [EPOCH])],
            {},
            "/job:worker/replica:0/task:0's steps",
        ),
        (lambda tp: [worker_trace(0, [EPOCH]), worker_trace(1, [EPOCH + 1e9])], {}, "do not overlap"),
        (
            lambda tp: [
                worker_trace(0, [EPOCH]),
                Trace(**{**vars(worker_trace(1, [EPOCH])), "step_starts_us": []}),
            ],
            {},
            "does not say when its steps began",
        ),
        (
            lambda tp: [worker_trace(0, [EPOCH]), worker_trace(1, [EPOCH])],
            {"graph": "g.pb"},
            "--graph and --compare draw",
        ),
        (
            lambda tp: [worker_trace(0, [EPOCH, EPOCH + 1e4]), worker_trace(1, [EPOCH])],
            {"step": 1},
            "step 1 is not",
        ),
    ],
)
def test_traces_not_of_one_run_are_errors(tmp_path, make, kwargs, message):
    from tfsched.viz.write import write_visualization

    first, *others = make(tmp_path)
    for out in ("w.json", "w.png"):
        with pytest.raises(TfschedError, match=message):
            write_visualization(first, str(tmp_path / out), workers=others, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_the_command_draws_several_traces_and_says_what_is_wrong_in_one_line(tmp_path):
    paths = [str(tmp_path / f"w{w}.trace.json") for w in (0, 1)]
    worker_trace(0, [EPOCH], tmp_path), worker_trace(1, [EPOCH + 500], tmp_path)
    out = tmp_path / "all.json"
    p = subprocess.run(
        [sys.executable, "-m", "tfsched.cli", "viz", *paths, "-o", str(out)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["otherData"]["traces"] == paths
    assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"} >= {
        "worker:0",
        "worker:1",
    }
    worker_trace(1, [EPOCH + 1e9], tmp_path)  # now worker 1's steps are another run's
    bad = tmp_path / "bad.json"
    p = subprocess.run(
        [sys.executable, "-m", "tfsched.cli", "viz", *paths, "-o", str(bad)], capture_output=True, text=True
    )
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert (
        p.returncode != 0 and len(lines) == 1 and "w1.trace.json: its traced steps do not overlap" in lines[0]
    )
    assert not bad.exists()


def test_a_trace_of_no_one_worker_is_named_by_its_file(tmp_path):
    """In-graph replication: one client's trace holds both workers; two such files of one name
    are told apart by their paths."""
    from tfsched.viz.workers import worker_labels

    both = []
    for d in ("a", "b"):
        t = worker_trace(0, [EPOCH])
        t.ops += [OpRecord(0, "/job:worker/replica:0/task:1/device:CPU:0", "conv", "Conv2D", 0.0, 1.0)]
        (tmp_path / d).mkdir()
        t.save(str(tmp_path / d / "trace.json"))
        both.append(Trace.load(str(tmp_path / d / "trace.json")))
    assert worker_labels(both) == [str(tmp_path / "a" / "trace.json"), str(tmp_path / "b" / "trace.json")]
    assert worker_labels(both[:1] + [worker_trace(1, [EPOCH])]) == ["trace.json", "worker:1"]
