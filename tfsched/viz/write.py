"""Writing a visualization, by the output file's extension."""

from __future__ import annotations

import json
import os

from tfsched.errors import TfschedError
from tfsched.io import write_atomic
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
    write_atomic(output, lambda f: json.dump(doc, f))
