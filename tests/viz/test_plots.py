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


def test_bad_output_and_step(tmp_path):
    from tfsched.viz.write import write_visualization

    with pytest.raises(TfschedError, match="unsupported output type .gif"):
        write_visualization(small_trace(), str(tmp_path / "t.gif"))
    with pytest.raises(TfschedError, match="step 7 is not in the trace"):
        write_visualization(small_trace(), str(tmp_path / "t.png"), step=7)
    assert list(tmp_path.iterdir()) == []
