"""benchmarks/pool_runs.py: one mode's speedup pooled over runs of one benchmark."""

import doctest
import json
import math
import re
import statistics
import sys
from pathlib import Path

import pytest

from tests.helpers import benchmark_script


@pytest.fixture(scope="module")
def pool_runs():
    return benchmark_script("pool_runs")


def _results_file(
    path: Path,
    *,
    ratio: float,
    batch: int = 708,
    cpu: str = "EPYC, 2 cores",
    host_cores: float = 0,
    api: str = "session",
    task_config: dict | None = None,
) -> str:
    config = {"model": "vgg16", "mode": "inference", "workers": 4, "ps": 1, "batch_size": batch}
    config.update(bandwidth="1 Gbit/s", latency=None, queue=None, rounds=3)
    if host_cores:  # bench --host-cores records it; runs on shared cores do not
        config["host_cores"] = host_cores
    if api == "tf2":  # bench --api tf2 records it, and names its benchmark so
        config["api"] = "tf2"
    config.update(task_config or {})  # the tasks' settings, recorded only where not TensorFlow's
    doc = {
        "benchmark": "tfsched bench --api tf2" if api == "tf2" else "tfsched bench",
        "config": config,
        "cpu": cpu,
        "modes": [
            {"mode": "baseline", "vs_baseline": 1.0, "vs_baseline_ci95": None, "iteration_mean_s": 7.0},
            {"mode": "tao+pc+host", "vs_baseline": ratio, "vs_baseline_ci95": [ratio - 0.1, ratio + 0.1]}
            | {"iteration_mean_s": 7.0 / ratio},
        ],
    }
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_pool_is_the_runs_geometric_mean_with_an_interval_over_them(pool_runs):
    ratios = [1.44, 1.6, 1.45, 1.49]
    mean, low, high = pool_runs.pooled(ratios)
    assert mean == pytest.approx(statistics.geometric_mean(ratios))
    # symmetric on the logarithms, and wider the more the runs disagree
    assert low < mean < high
    assert math.log(mean) - math.log(low) == pytest.approx(math.log(high) - math.log(mean))
    _, wider_low, wider_high = pool_runs.pooled([1.2, 1.6, 1.45, 1.49])
    assert wider_high / wider_low > high / low
    # runs that agree: an interval of nothing; one run: no interval
    assert pool_runs.pooled([1.5, 1.5, 1.5])[1:] == (pytest.approx(1.5), pytest.approx(1.5))
    assert pool_runs.pooled([1.4]) == (pytest.approx(1.4), None, None)


def test_the_scripts_docstring_examples_hold(pool_runs):
    result = doctest.testmod(pool_runs, verbose=False, report=False)
    assert result.attempted >= 2 and result.failed == 0


def test_runs_of_one_benchmark_are_pooled_into_a_results_file(pool_runs, tmp_path, monkeypatch):
    files = [_results_file(tmp_path / f"run{k}.json", ratio=r) for k, r in enumerate((1.44, 1.6, 1.45))]
    out = tmp_path / "results"
    monkeypatch.setattr(sys.modules["_results"], "RESULTS", str(out))
    monkeypatch.setattr(
        sys, "argv", ["pool_runs.py", "--mode", "tao+pc+host", "--target", "1.5", "--name", "p", *files]
    )
    pool_runs.main()
    doc = json.loads((out / "p.json").read_text())
    assert [r["vs_baseline"] for r in doc["runs"]] == [1.44, 1.6, 1.45]
    assert doc["pooled"]["vs_baseline"] == pytest.approx(statistics.geometric_mean([1.44, 1.6, 1.45]))
    assert doc["runs_at_target"] == 1 and doc["cpu"] == "EPYC, 2 cores"
    md = (out / "p.md").read_text()
    assert "in 3 runs" in md and "1 of 3 runs at or above 1.5x" in md and "| 1.600x | 1.50 to 1.70 |" in md


def test_runs_of_tensorflow_2_are_pooled_and_say_so(pool_runs, tmp_path, monkeypatch):
    files = [_results_file(tmp_path / f"run{k}.json", ratio=r, api="tf2") for k, r in enumerate((1.31, 1.29))]
    out = tmp_path / "results"
    monkeypatch.setattr(sys.modules["_results"], "RESULTS", str(out))
    monkeypatch.setattr(sys, "argv", ["pool_runs.py", "--mode", "tao+pc+host", "--name", "p", *files])
    pool_runs.main()
    doc = json.loads((out / "p.json").read_text())
    assert doc["pooled"]["vs_baseline"] == pytest.approx(statistics.geometric_mean([1.31, 1.29]))
    assert "TensorFlow 2's asynchronous steps" in (out / "p.md").read_text()


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"batch": 397}, "batch_size 397, not 708 as in"),
        ({"cpu": "Xeon, 2 cores"}, "ran on 'Xeon, 2 cores', not 'EPYC, 2 cores'"),
        ({"host_cores": 0.5}, "host_cores 0.5, not None as in"),
        ({"api": "tf2"}, "api 'tf2', not None as in"),
        ({"task_config": {"inter_op_threads": 4}}, "inter_op_threads 4, not None as in"),
        ({"task_config": {"thread_spinning": False}}, "thread_spinning False, not None as in"),
    ],
    ids=[
        "another-batch",
        "another-processor",
        "hosts-with-cores-of-their-own",
        "tensorflow-2",
        "more-inter-op-threads",
        "idle-threads-not-spinning",
    ],
)
def test_runs_of_another_benchmark_are_refused_in_one_line(pool_runs, tmp_path, monkeypatch, bad, error):
    files = [
        _results_file(tmp_path / "a.json", ratio=1.4),
        _results_file(tmp_path / "b.json", ratio=1.5, **bad),
    ]
    out = tmp_path / "results"
    monkeypatch.setattr(sys.modules["_results"], "RESULTS", str(out))
    monkeypatch.setattr(sys, "argv", ["pool_runs.py", "--mode", "tao+pc+host", "--name", "p", *files])
    with pytest.raises(SystemExit, match="^" + re.escape(f"Error: {tmp_path / 'b.json'}: {error}")):
        pool_runs.main()
    assert not out.exists()  # nothing written


def test_a_file_that_is_no_bench_run_or_lacks_the_mode_is_named(pool_runs, tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"config": {}}))
    with pytest.raises(pool_runs.PoolError, match="other.json: not a tfsched bench results file"):
        pool_runs.read_run(str(other), "tao+pc+host")
    path = _results_file(tmp_path / "run.json", ratio=1.4)
    with pytest.raises(
        pool_runs.PoolError, match=r"run.json: no mode 'tio' \(its modes: baseline, tao\+pc\+host\)"
    ):
        pool_runs.read_run(path, "tio")
    (tmp_path / "cut.json").write_text('{"benchmark": ')
    with pytest.raises(pool_runs.PoolError, match="cut.json: not JSON"):
        pool_runs.read_run(str(tmp_path / "cut.json"), "tao+pc+host")


def test_several_modes_are_pooled_each_over_the_runs_that_have_it_and_judged(
    pool_runs, tmp_path, monkeypatch
):
    """Runs of one benchmark with different modes beside the baseline: each mode pooled over the
    runs that ran it, and against the target its pooled interval met, not met or undecided."""
    # tao+pc+host in the first three runs, a second mode in the last three
    files = [
        _results_file(tmp_path / f"run{k}.json", ratio=r) for k, r in enumerate((0.995, 1.005, 1.0, 1.0))
    ]
    for k, ratio in ((1, 0.95), (2, 0.96), (3, 0.955)):
        doc = json.loads(Path(files[k]).read_text())
        doc["modes"].append({"mode": "tio+sent", "vs_baseline": ratio, "vs_baseline_ci95": [0.9, 1.0]})
        if k == 3:
            doc["modes"] = [m for m in doc["modes"] if m["mode"] != "tao+pc+host"]
        Path(files[k]).write_text(json.dumps(doc))
    out = tmp_path / "results"
    monkeypatch.setattr(sys.modules["_results"], "RESULTS", str(out))
    argv = ["pool_runs.py", "--mode", "tao+pc+host,tio+sent", "--target", "0.98", "--name", "p", *files]
    monkeypatch.setattr(sys, "argv", argv)
    pool_runs.main()
    doc = json.loads((out / "p.json").read_text())
    assert [p["mode"] for p in doc["modes"]] == ["tao+pc+host", "tio+sent"]
    host, sent = doc["modes"]
    assert [r["file"] for r in host["runs"]] == files[:3] and [r["file"] for r in sent["runs"]] == files[1:]
    assert sent["pooled"]["vs_baseline"] == pytest.approx(statistics.geometric_mean([0.95, 0.96, 0.955]))
    assert (host["runs_at_target"], sent["runs_at_target"]) == (3, 0)
    low, high = host["pooled"]["vs_baseline_ci95"]
    assert 0.98 <= low < high and host["verdict"] == "met"  # three runs within 1% of one another
    assert sent["pooled"]["vs_baseline_ci95"][1] < 0.98 and sent["verdict"] == "not met"
    md = (out / "p.md").read_text()
    assert "2 modes over vanilla TensorFlow in 4 runs" in md
    assert "| `tio+sent` | 3 | 0.955x |" in md and "| met |" in md and "| not met |" in md

    # a run with none of the modes is named; so is a mode no run has
    monkeypatch.setattr(sys, "argv", ["pool_runs.py", "--mode", "tio+sent", "--name", "q", *files])
    with pytest.raises(SystemExit, match=re.escape(f"Error: {files[0]}: no mode 'tio+sent'")):
        pool_runs.main()
    monkeypatch.setattr(sys, "argv", ["pool_runs.py", "--mode", "tao+pc+host,tio", "--name", "q", *files])
    with pytest.raises(SystemExit, match=re.escape(f"Error: {files[0]}: no mode 'tio'")):
        pool_runs.main()
    monkeypatch.setattr(sys, "argv", ["pool_runs.py", "--mode", "tio,tio", "--name", "q", *files])
    with pytest.raises(SystemExit, match="expected distinct modes"):
        pool_runs.main()
    monkeypatch.setattr(sys, "argv", ["pool_runs.py", "--mode", "tio+sent", "--name", "q", *files, files[2]])
    with pytest.raises(SystemExit, match=re.escape(f"Error: {files[2]}: given twice")):
        pool_runs.main()
    assert not (out / "q.json").exists()
