"""TensorFlow 2's ParameterServerStrategy, vanilla against tfsched, on the emulated cluster.

``tfsched bench --api tf2`` (``tfsched.bench.tf2``) with this script's options, kept so that the
commands of the results it wrote before that existed still run: it writes
``benchmarks/results/<name>.json`` and ``.md`` (the Markdown with the command), as then. Since
the forty-second session every mode's traced round runs always (it gives the calls' p50 and p95),
into ``--traces DIR`` or a temporary directory. ``--model`` takes every built-in model.

    python benchmarks/tf2_strategy.py --model vgg16 --workers 4 --bandwidth 1Gbit --batch-size 103 \\
        --steps 4 --rounds 3 --modes baseline,tio,tio+pc,tio+pc+host --name tf2-vgg16-train
    python benchmarks/tf2_strategy.py --loopback --model seq32 --workers 2 --steps 3 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import RESULTS  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from tfsched.bench import tf2
    from tfsched.bench.run import parse_modes
    from tfsched.cli import BUILTIN_MODELS
    from tfsched.errors import TfschedError
    from tfsched.io import write_atomic
    from tfsched.units import parse_bandwidth

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=BUILTIN_MODELS, default="vgg16")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--bandwidth", default="1Gbit")
    ap.add_argument("--batch-size", type=int, default=103)
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per worker per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="baseline,tio,tio+pc,tio+pc+host")
    ap.add_argument("--loopback", action="store_true", help="every task on loopback, unshaped")
    ap.add_argument("--name", default=None)
    ap.add_argument("--traces", metavar="DIR", help="each mode's traced round: DIR/MODE.trace.json")
    a = ap.parse_args(argv)
    model = a.model
    name = a.name or f"tf2-{model}-{'loopback' if a.loopback else a.bandwidth}"
    try:
        summary = tf2.side_by_side(
            model,
            workers=a.workers,
            modes=parse_modes(a.modes),
            steps=a.steps,
            rounds=a.rounds,
            batch_size=a.batch_size,
            image_size=a.image_size,
            bandwidth_bps=None if a.loopback else parse_bandwidth(a.bandwidth),
            traces_dir=a.traces,
            progress=lambda text: print(text, flush=True),
        )
        os.makedirs(RESULTS, exist_ok=True)
        md = tf2.write(summary, os.path.join(RESULTS, f"{name}.json"))
    except TfschedError as e:
        raise SystemExit(f"tf2_strategy: {e}") from None
    command = "python benchmarks/tf2_strategy.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = tf2.markdown(summary).replace("\n\n", f"\n\n```bash\n{command}\n```\n\n", 1)
    write_atomic(md, lambda f: f.write(text))  # the Markdown with its command, whole or not at all
    print(tf2.markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
