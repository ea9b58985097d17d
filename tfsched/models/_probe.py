"""One process of a batch-size probe with processes computing at once (``batch._compute_time``).

    python -m tfsched.models._probe MODEL MODE BATCH IMAGE_SIZE STEPS

It builds the model, warms it up, says it is ready, waits for ``go`` on stdin (the others have
warmed up too), runs STEPS + 1 steps and reports the first STEPS step times. Its messages are
the stdout lines that start with ``PREFIX``, each one JSON object: ``{"ready": true}``,
``{"times": [...]}`` or ``{"error": "..."}``. Without ``go`` (the parent gave up or went away)
it exits without running the steps.

It ends with ``os._exit`` once its last message is flushed, not through the interpreter's
finalization, where a probe process was once seen to abort (and write a core) when a peer died:
after its last message it has nothing left to do.
"""

from __future__ import annotations

import json
import os
import sys

PREFIX = "tfsched-probe "


def _say(**message) -> None:
    print(PREFIX + json.dumps(message), flush=True)


def main(argv: list[str]) -> int:
    from tfsched.errors import TfschedError
    from tfsched.models.batch import _step_times

    model, mode, batch, image_size, steps = argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[4])

    def ready() -> None:
        _say(ready=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit(3)

    try:
        times = _step_times(model, mode, batch, image_size or None, steps + 1, ready)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        first = str(e).splitlines()[0] if str(e) else ""
        _say(error=first if isinstance(e, TfschedError) else f"{type(e).__name__}: {first}")
        return 1
    _say(times=times[:steps])
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except SystemExit as e:  # no "go": the parent gave up
        code = e.code if isinstance(e.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
