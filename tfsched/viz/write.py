"""Writing a visualization, by the output file's extension."""

from __future__ import annotations

import json
import os
import tempfile

from tfsched.errors import TfschedError
from tfsched.tracing.trace import Trace
from tfsched.viz.chrome import chrome_trace

FORMATS = (".json",)


def _priorities(schedule_path: str) -> dict[str, int]:
    from tfsched.graph.devices import task_of
    from tfsched.ordering.schedule import load_schedule

    doc = load_schedule(schedule_path)
    return {
        f"{t['tensor']} -> {task_of(t['dst'])}": t["priority"]
        for ch in doc["channels"]
        for t in ch["transfers"]
    }


def write_visualization(trace: Trace, output: str, *, schedule: str | None = None) -> None:
    ext = os.path.splitext(output)[1].lower()
    if ext not in FORMATS:
        raise TfschedError(
            f"{output}: unsupported output type {ext or '(none)'}; use one of {', '.join(FORMATS)}"
        )
    priorities = _priorities(schedule) if schedule else None
    doc = chrome_trace(trace, priorities=priorities)
    directory = os.path.dirname(os.path.abspath(output))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".viz-", dir=directory)
    except OSError as e:
        raise TfschedError(f"{output}: cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, output)
    except BaseException:
        os.unlink(tmp)
        raise
