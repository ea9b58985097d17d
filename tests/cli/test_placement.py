"""``analyze --placement`` and ``tfsched.ps_strategy``: a user's own graph, spread round-robin
over two PS, planned from its saved file and built again with the plan."""

import json

import pytest

import tfsched
from tests.cli.test_analyze import assert_one_line_error, run
from tfsched.errors import TfschedError

pytestmark = pytest.mark.tf


def _user_graph(strategy=None):
    """A user's model as TF1 code builds it: dense layers, each a kernel and a bias, so that
    round-robin over two PS puts every kernel on the first."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        with tf.compat.v1.device(
            tf.compat.v1.train.replica_device_setter(
                ps_tasks=2, worker_device="/job:worker/task:0", ps_strategy=strategy
            )
        ):
            x = tf.random.stateless_uniform([4, 256], seed=[1, 2])
            for i, width in enumerate((256, 256, 256, 256)):
                w = tf.compat.v1.get_variable(f"dense{i}/kernel", [x.shape[1], width])
                b = tf.compat.v1.get_variable(f"dense{i}/bias", [width])
                x = tf.tanh(tf.matmul(x, w) + b)
            loss = tf.reduce_mean(x)
            step = tf.compat.v1.train.get_or_create_global_step()
            tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step, name="train")
    return g


def _save(g, path):
    path.write_bytes(g.as_graph_def(add_shapes=True).SerializeToString())
    return str(path)


def _shares(path) -> list[float]:
    p = run("analyze", path, "--fetch", "train", "--json")
    assert p.returncode == 0, p.stderr
    load = json.loads(p.stdout)["ps_load"]
    return [n / sum(load.values()) for n in load.values()]


def test_a_graph_built_again_with_its_placement_has_its_ps_exchange_the_same_bytes(tmp_path):
    rr = _save(_user_graph(), tmp_path / "rr.pb")
    assert max(_shares(rr)) > 0.95  # every kernel on ps:0
    plan = tmp_path / "placement.json"
    p = run("analyze", rr, "--fetch", "train", "--placement", str(plan))
    assert p.returncode == 0, p.stderr
    said = " ".join(p.stdout.split())
    assert f"placement over 2 PS written to {plan}: ps:0" in said
    assert "partition it" not in said.split("written to")[1]  # no variable is over a PS's share
    data = json.loads(plan.read_text())
    assert data["schema"] == "tfsched.placement/1" and data["ps_tasks"] == 2
    # every variable of the graph is placed, the global step (which moves nothing) too
    assert set(data["variables"]) == {f"dense{i}/{k}" for i in range(4) for k in ("kernel", "bias")} | {
        "global_step"
    }
    assert data["variables"]["dense0/kernel"]["bytes"] == 2 * 256 * 256 * 4  # pulled and pushed

    again = _save(_user_graph(tfsched.ps_strategy(str(plan), ps_tasks=2)), tmp_path / "placed.pb")
    shares = _shares(again)
    assert max(shares) < 0.51, shares
    # the plan's bytes are what the rebuilt graph's PS exchange
    planned = [0, 0]
    for r in data["variables"].values():
        planned[r["ps"]] += r["bytes"]
    assert [round(s, 3) for s in shares] == [round(n / sum(planned), 3) for n in planned]


def test_a_placement_for_three_ps(tmp_path):
    rr = _save(_user_graph(), tmp_path / "rr.pb")
    plan = tmp_path / "p3.json"
    p = run("analyze", rr, "--fetch", "train", "--placement", str(plan), "--placement-ps", "3", "--json")
    assert p.returncode == 0, p.stderr
    json.loads(p.stdout)  # --json still prints exactly one object
    assert {r["ps"] for r in json.loads(plan.read_text())["variables"].values()} == {0, 1, 2}
    with pytest.raises(TfschedError, match=r"p3.json: a placement over 3 PS tasks, used with ps_tasks=2"):
        tfsched.ps_strategy(str(plan), ps_tasks=2)
    for bad in (True, 3.0, 0, "3"):  # True and 3.0 compared equal to the plan's 1 and 3
        with pytest.raises(TfschedError, match="ps_tasks must be a whole number of PS tasks, at least 1"):
            tfsched.ps_strategy(str(plan), ps_tasks=bad)
    assert tfsched.ps_strategy(str(plan), ps_tasks=3).ps_tasks == 3


def test_bad_placement_files_and_flags_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"schema": "tfsched.placement/1", "ps_tasks": 2, "variables": {"w": {"ps": 5, "bytes": 1}}}'
    )
    with pytest.raises(TfschedError, match=r"bad.json: variable 'w' has PS 5, not one of 0 to 1"):
        tfsched.ps_strategy(str(bad), ps_tasks=2)
    bad.write_text('{"schema": "tfsched.schedule/1"}')
    with pytest.raises(TfschedError, match=r"bad.json: not a tfsched.placement/1 file"):
        tfsched.ps_strategy(str(bad), ps_tasks=2)
    bad.write_text('{"schema": "tfsched.placement/1", "ps_tasks": 2, "variables": {"w": 3}}')
    with pytest.raises(
        TfschedError, match=r"bad.json: not a tfsched.placement/1 file \(bad or missing field"
    ):
        tfsched.ps_strategy(str(bad), ps_tasks=2)

    graph = _save(_user_graph(), tmp_path / "rr.pb")
    assert_one_line_error(
        run("analyze", graph, "--placement-ps", "2"), "--placement-ps needs --placement FILE"
    )
    missing = tmp_path / "no" / "such" / "dir" / "p.json"
    assert_one_line_error(
        run("analyze", graph, "--fetch", "train", "--placement", str(missing)), str(missing)
    )
    assert not missing.parent.exists()
    # more PS than variables: some would serve nothing (the report listed each, 1.9 MB for 100,000)
    plan, schedule = tmp_path / "p.json", tmp_path / "s.json"
    p = run(
        "analyze",
        graph,
        "--fetch",
        "train",
        "--placement",
        str(plan),
        "--placement-ps",
        "1000",
        "-o",
        str(schedule),
    )
    assert_one_line_error(
        p, "rr.pb: a placement over 1000 PS tasks would leave", "without a variable: the graph has"
    )
    assert not plan.exists() and not schedule.exists()  # nothing written half-way


def test_a_variable_the_plan_does_not_name_goes_to_the_ps_with_the_fewest_bytes():
    import tensorflow as tf

    from tfsched.placement import Placement

    plan = Placement(2, {"a": 0}, {"a": 100.0})
    g = tf.Graph()
    with (
        g.as_default(),
        tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2, ps_strategy=plan)),
    ):
        a = tf.compat.v1.get_variable("a", [5])
        z = tf.compat.v1.get_variable("z", [20])  # 80 bytes: twice that (a pull and a push) on ps:1
        y = tf.compat.v1.get_variable("y", [1])  # ps:1 has 160, ps:0 100
    assert [v.device for v in (a, z, y)] == ["/job:ps/task:0", "/job:ps/task:1", "/job:ps/task:0"]


@pytest.mark.cluster
def test_trace_places_a_built_in_models_variables_as_asked(tmp_path):
    """``tfsched trace --ps 2 --ps-placement``: the Transformer's embedding table, held on one PS,
    moves only the rows a step needs, so TF1's placement by bytes held leaves that PS a fifth of
    the traffic; placed by bytes moved, the traced PS exchange about half each. Split first as
    TensorFlow 2's ``MinSizePartitioner`` splits it (``min-size``), the table's rows come from
    both PS, each shard's gathered where it lives."""
    shares, embedding_from = {}, {}
    for placement in ("held", "bytes", "min-size"):
        out = tmp_path / f"{placement}.json"
        p = run(
            "trace", "--model", "transformer", "--ps", "2", "--ps-placement", placement,
            "--steps", "1", "--warmup", "0", "-o", str(out),
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        doc = json.loads(out.read_text())
        assert doc["meta"]["ps_placement"] == placement
        moved = [0, 0]
        embedding_from[placement] = set()
        for t in doc["transfers"]:
            ps = next(e for e in (t["src"], t["dst"]) if "/job:ps/" in e)
            task = int(ps.split("/task:")[1].split("/")[0])
            moved[task] += t["bytes"]
            if t["src"] == ps and t["tensor"].startswith("embedding/"):
                embedding_from[placement].add(task)
        shares[placement] = max(moved) / sum(moved)
    assert shares["held"] > 0.7 and shares["bytes"] < 0.55, shares
    assert len(embedding_from["held"]) == len(embedding_from["bytes"]) == 1, embedding_from
    assert embedding_from["min-size"] == {0, 1}, embedding_from
