"""benchmarks/cpu_floor.py: stored runs' simulated steps held to their baseline's CPU over the cores."""

import json

import pytest

from tests.helpers import benchmark_script


def _run(path, modes, *, cores=2, host_cores=0, base_cpu=2.3):
    """A stored bench run: (mode, measured step, simulated step, CPU a step) per mode."""
    doc = {
        "config": {"workers": 4, "host_cores": host_cores},
        "cores": cores,
        "modes": [
            {
                "mode": m,
                "iteration_mean_s": step,
                "predicted_s": sim,
                "cpu_s_per_step": base_cpu if m == "baseline" else cpu,
            }
            for m, step, sim, cpu in modes
        ],
    }
    path.write_text(json.dumps(doc))
    return str(path)


def test_each_mode_held_to_its_runs_floor_and_a_run_stored_twice_counted_once(tmp_path):
    module = benchmark_script("cpu_floor")
    # floor 1.15 s: the baseline's simulated 1.20 s stands; tao's 0.98 s becomes 1.15 (closer to
    # 1.25); tio, which spent less CPU than the baseline, measured 1.10: 1.15 is further off
    modes = [("baseline", 1.34, 1.20, 2.3), ("tao", 1.25, 0.98, 2.4), ("tio", 1.10, 1.09, 2.0)]
    a = _run(tmp_path / "a.json", modes)
    copy = _run(tmp_path / "a-row.json", modes)
    own = _run(tmp_path / "b.json", [("baseline", 2.0, 1.9, 2.2), ("tao", 1.8, 1.7, 2.2)], host_cores=0.5)
    # a file that is not a predicted run is passed over
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    module.main([a, copy, own, str(tmp_path / "other.json"), "--name", str(tmp_path / "out")])
    result = json.loads((tmp_path / "out.json").read_text())
    shared = result["groups"]["shared cores"]
    assert (shared["runs"], shared["modes"], shared["closer"], shared["further"]) == (1, 3, 1, 1)
    before = [0.14 / 1.34, 0.27 / 1.25, 0.01 / 1.10]
    after = [0.14 / 1.34, 0.10 / 1.25, 0.05 / 1.10]
    assert shared["mean_error"] == pytest.approx(sum(before) / 3)
    assert shared["mean_error_floored"] == pytest.approx(sum(after) / 3)
    assert shared["most_further"] == pytest.approx(0.04 / 1.10)
    # on hosts of their own the floor (1.1 s) is under every step: nothing moves
    own_cores = result["groups"]["cores of their own"]
    assert (own_cores["modes"], own_cores["closer"], own_cores["further"]) == (2, 0, 0)
    md = (tmp_path / "out.md").read_text()
    assert "| a.json | tio | 1.100 | 1.090 | 1.150 | 0.870 |" in md


def test_a_file_that_is_not_json_or_no_run_is_one_error_line(tmp_path):
    module = benchmark_script("cpu_floor")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SystemExit, match=r"bad.json: "):
        module.main([str(tmp_path / "bad.json")])
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(SystemExit, match="no stored bench run"):
        module.main([str(tmp_path / "other.json")])
