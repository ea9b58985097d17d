"""Pictures and pages from a (synthetic) trace: written, complete, and honest about bad input."""

import pytest

from tfsched.errors import TfschedError
from tfsched.tracing.trace import OpRecord, Trace, TransferRecord

PS = "/job:ps/replica:0/task:0/device:CPU:0"
W = "/job:worker/replica:0/task:0/device:CPU:0"


def small_trace(steps=3):
    ops, transfers = [], []
    for s in range(steps):
        ops += [
            OpRecord(s, W, "conv", "Conv2D", 1000.0, 3000.0 + s),
            OpRecord(s, PS, "apply", "ApplyGradientDescent", 5000.0, 200.0),
        ]
        transfers += [TransferRecord(s, "edge_1_w/read", "w/read:0", 40000, PS, W, 0.0, 900.0, ("conv",))]
    return Trace(
        steps=steps,
        ops=ops,
        transfers=transfers,
        step_times_us=[6000.0, 6500.0, 7000.0][:steps],
        meta={"model": "toy"},
    )


def test_png_and_svg_are_written(tmp_path):
    from tfsched.viz.write import write_visualization

    for ext in ("png", "svg"):
        out = tmp_path / f"t.{ext}"
        write_visualization(small_trace(), str(out))
        data = out.read_bytes()
        assert len(data) > 5000
        assert data.startswith(b"\x89PNG") if ext == "png" else b"<svg" in data
        assert (out.stat().st_mode & 0o044) == 0o044  # readable by others, like any result file


def test_html_is_self_contained(tmp_path):
    from tfsched.viz.write import write_visualization

    out = tmp_path / "t.html"
    write_visualization(small_trace(), str(out), compare={"a": small_trace(), "b": small_trace(2)})
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "toy" in page
    assert 'src="http' not in page and 'href="http' not in page.replace('xmlns:xlink="http', "")


def test_rows_cover_compute_and_links():
    from tfsched.viz.plots import trace_rows

    rows = trace_rows(small_trace(), 1)
    assert set(rows) == {"worker:0 compute", "ps:0 compute", "worker:0 ← ps:0"}
    assert rows["worker:0 ← ps:0"] == [(0.0, 0.0009, "transfer")]


def test_a_gate_held_until_its_turn_is_drawn_waiting_not_computing(tmp_path):
    import json

    from tfsched.viz.plots import trace_rows
    from tfsched.viz.write import write_visualization

    trace = small_trace(1)
    trace.ops.append(OpRecord(0, PS, "w/read/tfsched_gate_to_worker_0", "TfschedGate", 0.0, 5000.0))
    assert sorted(trace_rows(trace, 0)["ps:0 compute"]) == [(0.0, 0.005, "wait"), (0.005, 0.0002, "op")]
    write_visualization(trace, str(tmp_path / "t.json"))
    cats = {
        e["name"]: e["cat"]
        for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"]
        if "cat" in e
    }
    assert cats["w/read/tfsched_gate_to_worker_0"] == "wait" and cats["apply"] == cats["conv"] == "op"
    write_visualization(trace, str(tmp_path / "t.png"))  # with its key
    assert (tmp_path / "t.png").stat().st_size > 5000


def test_bad_output_and_step(tmp_path):
    from tfsched.viz.write import write_visualization

    with pytest.raises(TfschedError, match="unsupported output type .gif"):
        write_visualization(small_trace(), str(tmp_path / "t.gif"))
    with pytest.raises(TfschedError, match="step 7 is not in the trace"):
        write_visualization(small_trace(), str(tmp_path / "t.png"), step=7)
    assert list(tmp_path.iterdir()) == []


def _schedule_file(path, tensors):
    """A schedule of one PS -> worker 0 channel naming ``tensors`` (name, bytes) in that order."""
    import json

    ps, w0 = PS.split("/device:")[0], W.split("/device:")[0]
    transfers = [
        {"key": f"pull:{name}", "tensor": name, "variable": name, "kind": "pull", "src": PS, "dst": W}
        | {"bytes": nbytes, "priority": k}
        for k, (name, nbytes) in enumerate(tensors)
    ]
    doc = {
        "schema": "tfsched.schedule/1",
        "algorithm": "tio",
        "mode": "counter",
        "partition": None,
        "credit": None,
        "graph": {"source": "g.pb", "fetches": ["train"], "transfers": len(transfers)},
        "channels": [{"sender": ps, "receiver": w0, "transfers": transfers}],
    }
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_schedule_is_shown_on_the_transfers_it_names(tmp_path):
    import json

    from tfsched.viz.write import write_visualization

    trace = small_trace()
    # worker 1's pulls too: a one-worker graph's schedule names only worker 0's, by tensor
    W1 = W.replace("task:0", "task:1")
    trace.transfers += [TransferRecord(0, "edge_1_w/read", "w/read:0", 40000, PS, W1, 0.0, 900.0, ())]
    sched = _schedule_file(tmp_path / "s.json", [("other:0", 4), ("w/read:0", 40000)])
    write_visualization(trace, str(tmp_path / "t.json"), schedule=sched)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    shown = [e["args"].get("priority") for e in events if e.get("cat") == "transfer"]
    assert shown == [1] * len(trace.transfers)


def test_options_this_output_does_not_draw_are_errors(tmp_path):
    from tfsched.viz.write import write_visualization

    sched = _schedule_file(tmp_path / "s.json", [("w/read:0", 40000)])
    other = _schedule_file(tmp_path / "other.json", [("fc/read:0", 40000), ("w/read:0", 4)])
    out = tmp_path / "out"
    out.mkdir()
    cases = [
        (dict(schedule=sched), "t.png", "--schedule puts priorities on the Chrome trace"),
        (dict(graph="g.pb"), "t.json", "--graph and --compare draw into a picture"),
        (dict(compare={"b": small_trace()}), "t.json", "--graph and --compare draw into a picture"),
        (dict(fetches=["train"]), "t.png", "give --graph too"),
        (dict(tag_set="serve"), "t.html", "give --graph too"),
        # a schedule of another graph: the names or the sizes differ
        (dict(schedule=other), "t.json", "other.json: the schedule names 0 of the 1 tensors the trace moved"),
    ]
    for kwargs, name, message in cases:
        with pytest.raises(TfschedError, match=message.replace(".", r"\.")):
            write_visualization(small_trace(), str(out / name), **kwargs)
    assert list(out.iterdir()) == []


def test_a_scheduled_steps_gates_show_the_priority_of_the_tensor_they_forward(tmp_path):
    """A step the pass scheduled moves its gates' outputs (names as cc/scheduler.cc gives them,
    as seen in a traced VGG16 step with partition and credit), and acknowledgements."""
    import json

    from tfsched.viz.write import write_visualization

    moved = [
        ("w/read/tfsched_gate_to_worker_0:0", 40000, PS, W),  # whole
        ("fc/read/tfsched_to_worker_0_gate_0:0", 20000, PS, W),  # two slices
        ("fc/read/tfsched_to_worker_0_gate_1:0", 20000, PS, W),
        ("fc/read/tfsched_to_worker_0_gate_1/ack:0", 8, W, PS),  # its acknowledgement
        ("tfsched_credit_sink_ps_0/ctrl_S200:0", 0, W, PS),
    ]
    trace = small_trace(1)
    trace.transfers = [
        TransferRecord(0, f"edge_{k}", t, b, src, dst, 0.0, 100.0, ())
        for k, (t, b, src, dst) in enumerate(moved)
    ]
    sched = _schedule_file(tmp_path / "s.json", [("fc/read:0", 40000), ("w/read:0", 40000)])
    write_visualization(trace, str(tmp_path / "t.json"), schedule=sched)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    shown = {e["args"]["tensor"]: e["args"].get("priority") for e in events if e.get("cat") == "transfer"}
    assert shown == {
        "w/read/tfsched_gate_to_worker_0:0": 1,
        "fc/read/tfsched_to_worker_0_gate_0:0": 0,
        "fc/read/tfsched_to_worker_0_gate_1:0": 0,
        "fc/read/tfsched_to_worker_0_gate_1/ack:0": None,
        "tfsched_credit_sink_ps_0/ctrl_S200:0": None,
    }


def test_a_push_grappler_sent_without_its_identity_shows_its_priority(tmp_path):
    """Seq-32 training, traced on a real cluster: Grappler pushes the first layer's gradient as
    ``gradients/MatMul_grad/MatMul_1:0``, where the saved graph (and so its schedule) sends it
    through ``tuple/control_dependency_1``. It is matched by its variable, as the pass matches
    it, and shows that transfer's priority (it showed none before)."""
    import json

    from tfsched.graph import load_comm_graph
    from tfsched.models import build_graph
    from tfsched.ordering import order
    from tfsched.tracing.run import trace_local
    from tfsched.viz.write import write_visualization

    built = build_graph("seq32", mode="train", batch_size=4)
    path = tmp_path / "g.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    sched = order(load_comm_graph(str(path), fetches=built.fetches), "tao")
    sched.save(str(tmp_path / "s.json"))
    trace = trace_local(model="seq32", steps=1, warmup=1)
    # the gated pushes' (the learning rate, a scalar constant, goes ungated and last)
    by_variable = {
        t.variable: p for t, p in sched.priorities.items() if t.kind == "push" and t not in sched.ungated
    }
    saved_names = {t.tensor for t in sched.priorities}
    renamed = [x for x in trace.transfers if x.src.startswith("/job:worker") and x.tensor not in saved_names]
    assert [x.tensor for x in renamed] == ["gradients/MatMul_grad/MatMul_1:0"]

    write_visualization(trace, str(tmp_path / "t.json"), schedule=str(tmp_path / "s.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    shown = {e["args"]["tensor"]: e["args"].get("priority") for e in events if e.get("cat") == "transfer"}
    assert None not in shown.values()
    # the first layer's kernel, pushed last under TAO: not any push's priority
    assert shown["gradients/MatMul_grad/MatMul_1:0"] == by_variable["seq/w0"] == max(by_variable.values())


def test_a_push_grappler_merged_shows_the_most_urgent_of_its_variables_priorities(tmp_path):
    """Par-32 training, traced on a real cluster: Grappler merges the 32 branches' identical
    weight gradients into one push that updates all 32 variables. It shows the most urgent of
    their priorities, the one the pass gives it (it showed none before the thirty-fourth
    session)."""
    import json

    from tfsched.graph import load_comm_graph
    from tfsched.models import build_graph
    from tfsched.ordering import order
    from tfsched.tracing.replay import comm_graph_of_trace
    from tfsched.tracing.run import trace_local
    from tfsched.viz.write import write_visualization

    built = build_graph("par32", mode="train", batch_size=4)
    path = tmp_path / "g.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    sched = order(load_comm_graph(str(path), fetches=built.fetches), "tao")
    sched.save(str(tmp_path / "s.json"))
    # the gated pushes' (the learning rate, a scalar constant, goes ungated and last)
    by_variable = {
        t.variable: p for t, p in sched.priorities.items() if t.kind == "push" and t not in sched.ungated
    }
    trace = trace_local(model="par32", steps=1, warmup=1)
    ran = comm_graph_of_trace(trace, fetches=built.fetches).transfers
    # (the learning rate feeds all 32 updates too; the schedule names it by its own tensor)
    (merged,) = [t for t in ran if t.updates and t.tensor.startswith("gradients/")]
    assert len(merged.updates) == 32 and set(merged.updates) <= set(by_variable)

    write_visualization(trace, str(tmp_path / "t.json"), schedule=str(tmp_path / "s.json"))
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    shown = {e["args"]["tensor"]: e["args"].get("priority") for e in events if e.get("cat") == "transfer"}
    assert None not in shown.values()
    assert shown[merged.tensor] == min(by_variable[v] for v in merged.updates)
