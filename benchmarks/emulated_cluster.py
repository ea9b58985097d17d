"""The rows of BENCHMARKS.md: ``tfsched bench`` on emulated multi-host clusters.

Each row is one ``tfsched bench`` command (printed, and recorded in BENCHMARKS.md so that any
row can be reproduced alone); vanilla TensorFlow is measured in the same run as every tfsched
mode, interleaved. Results: ``benchmarks/results/bench-<row>.json`` and ``.md``.

    python benchmarks/emulated_cluster.py [--rows vgg16-train,seq32-train] [--assemble-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

from tfsched.bench.results import cpu_description, glance, markdown
from tfsched.io import write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
ROOT = os.path.dirname(HERE)

# row -> tfsched bench arguments
ROWS = {
    # TicTac's setting (1 PS x 4 workers, 1 Gbit/s); the batch that balances computation and
    # communication (``--batch-size auto``, TicTac §6) is written out where it was measured.
    # Auto changed in the seventh session and in the fourteenth (benchmarks/reading.md): the rows
    # run before say the batch auto chose then. The VGG16 rows were the fourteenth session's
    # balance, measured with the workers computing at once (106 and 496 before), and so are
    # ResNet-50's, Inception-v3 training's and the Transformer's (235, 358, 141 and 29 before);
    # Inception-v3 inference (344 now) and AlexNet (220) stay within 15% of theirs.
    # The rows of the targets (VGG16, ResNet-50 inference) run more rounds, so that their
    # ratios carry 95% intervals (2 rounds before the fifteenth session). The sixteenth session
    # ran on a faster processor, where VGG16's balance moved to 397 (inference) and 103
    # (training) from 331 and 81; the VGG16 rows were re-run at it (the 331 and 81 rows kept).
    # The seventeenth session's processor (Intel, family 6, model 167) moved the Transformer's balance
    # to 21 (16 before; the others stayed within 15%): its row re-ran at it, with 5 rounds of 5 steps.
    "vgg16-train": "--model vgg16 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 5 --batch-size 103 --modes baseline,tio,tao,tio+pc,tao+pc,tao+p1000000+c1000000,tao+pc+host",
    "vgg16-inference": "--model vgg16 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 5 --batch-size 397 --modes baseline,tio,tao,tio+pc,tao+pc,tao+p1000000+c1000000,tao+pc+host",
    # The sixtieth session's: VGG16 inference on hosts with cores of their own (``--host-cores``:
    # each task's process capped at half a core, the machine's two over the four workers), at this
    # processor's balance (708, measured in the fifty-seventh session with the four workers
    # computing at once, as they do here), beside the row above, whose tasks share the cores.
    "vgg16-inference-hosts": "--model vgg16 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 5 --batch-size 708 --host-cores 0.5 --modes baseline,tio,tao,tio+pc,tao+pc,tao+p1000000+c1000000,tao+pc+host",
    # The sixty-first session's: VGG16 training on such hosts, at the balance of its processor (201,
    # fifty-sixth session), with the training row's fastest and lockstep modes; traced on every
    # worker (2 steps), so that the table has the simulator's floor.
    "vgg16-train-hosts": "--model vgg16 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 201 --host-cores 0.5 --trace-steps 2 --modes baseline,tao+pc,tio+pc+host,tao+pc+host,tao+p250000+c4000000+a32+lockstep+w250000",
    # The seventy-sixth session's: the same training across TensorFlow's barrier
    # (tfsched.enforce.crossing, ``+cross``), at this processor's balance (103), beside the best
    # mode behind it; 5 steps a round, since a round's last step is timed to the end of its
    # updates (no next step overlaps them).
    "vgg16-train-hosts-cross": "--model vgg16 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 3 --batch-size 103 --host-cores 0.5 --trace-steps 1 --modes baseline,layer+pc+ready+cross,layer+pc+host+ready+cross,tio+pc+host",
    # The training rows of the models with batch normalization (ResNet-50, Inception-v3, MobileNet)
    # were measured before the eightieth session, whose training steps also update its moving
    # statistics (``--moving-averages``, the default since): ``--no-moving-averages`` runs them as
    # they ran. The eighty-ninth session re-ran them all with them, on the Intel Xeon (the runs
    # before: ``results/bench-<row>-no-ma.*``).
    # The hundred-and-twenty-sixth session re-ran every row of two rounds on its code, on the AMD
    # EPYC of family 25, with four (these, AlexNet's and the `-sent` rows of the same models), so
    # that their ratios carry 95% intervals; the runs before are kept as
    # ``results/bench-<row>-s89.*`` (ResNet-50 and Inception-v3 training and their `-sent` rows,
    # Intel Xeon), ``-s19.*`` (Inception-v3 inference), ``-s17.*`` (AlexNet, Intel Xeon),
    # ``-s20.*`` (Inception-v3 inference `-sent`) and ``-s21.*`` (AlexNet `-sent`). It re-ran
    # MobileNet's row too, its command unchanged (the run before: ``results/bench-mobilenet-train-s89.*``).
    "resnet50-train": "--model resnet50 --mode train --ps 1 --workers 2 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 161 --modes baseline,tio,tao,tio+pc,tao+pc,tio+p4194304+c4194304,tao+pc+host",
    "resnet50-inference": "--model resnet50 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 680 --modes baseline,tio,tao,tio+pc,tao+pc,tao+pc+host,tio+pc+a32,tao+pc+a32",
    "inception_v3-train": "--model inception_v3 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 73 --modes baseline,tio,tao,tao+pc,tao+pc+host,tao+pc+a32",
    "inception_v3-inference": "--model inception_v3 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 299 --modes baseline,tio,tao,tao+pc,tao+pc+host,tao+pc+a32,tao+pc+host+a32",
    # The toy models' steps are short (par32: about 20 ms): more steps and rounds than the large
    # models, so that a mode's mean is not a tenth of a second of measurement and the rows carry
    # 95% intervals (5 steps x 2 rounds before the thirteenth session: par32's ratios moved by
    # up to 0.17 between two runs of the same code).
    "seq32-train": "--model seq32 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 10 --rounds 4 --batch-size 4 --modes baseline,tio,tao,tio+pc,tao+pc,tao+pc+host",
    "seq32-inference": "--model seq32 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 10 --rounds 4 --batch-size 4 --modes baseline,tio,tao,tio+pc,tao+pc,tao+pc+host",
    "par32-train": "--model par32 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 50 --rounds 6 --batch-size 4 --modes baseline,tio,tao,tio+pc,tao+pc,tao+pc+host",
    "par32-inference": "--model par32 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 50 --rounds 6 --batch-size 4 --modes baseline,tio,tao,tio+pc,tao+pc,tao+pc+host",
    # The compute-bound setting of the third target: 36 rounds (12 before the sixteenth
    # session), so that the intervals (+-1% to +-2% on the processor of that session, +-6% to +-9%
    # before) can tell a 2% loss. This row and its `-sent` row were re-run in the
    # hundred-and-twenty-seventh session (Intel Xeon, model 106); the runs before:
    # ``results/bench-resnet50-train-10g-s89.*`` and ``-sent-s89.*``.
    "resnet50-train-10g": "--model resnet50 --mode train --ps 1 --workers 2 --bandwidth 10Gbit --steps 4 --rounds 36 --batch-size 8 --modes baseline,tio,tao,tao+pc,tao+pc+host,tao+p1000000+c4000000",
    "alexnet-train": "--model alexnet --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 227 --modes baseline,tio,tao,tao+pc,tao+pc+host",
    # The Transformer's +pc credit (4M parameters) exceeds its pulls (3.5M a worker) and so orders
    # nothing on the wire: since the eighteenth session the row also runs two credits that bind.
    "transformer-train": "--model transformer --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 5 --batch-size 21 --modes baseline,tio,tao,tao+pc,tao+p1000000+c1000000,tao+p250000+c250000,tao+pc+host",
    # The twenty-third session's: a second model whose whole step fits in ByteScheduler's credit
    # (MobileNet: 3.2M parameters), to test the channel share of ``link_sizes`` (the `+pc` sizes)
    # beside ByteScheduler's fixed ones on a model it was not fitted on. Batch 99: `--batch-size
    # auto` that session.
    "mobilenet-train": "--model mobilenet --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 5 --batch-size 99 --modes baseline,tio,tao,tao+pc,tao+p1000000+c4000000,tao+pc+host",
    # The credit returned when sent (``+sent``, enable(credit_return="sent"), the twentieth
    # session) beside the same modes with the receiver's acknowledgements, in the same runs.
    "resnet50-train-10g-sent": "--model resnet50 --mode train --ps 1 --workers 2 --bandwidth 10Gbit --steps 4 --rounds 36 --batch-size 8 --modes baseline,tao+p1000000+c4000000,tao+p1000000+c4000000+sent,tao+pc+host,tao+pc+host+sent",
    "vgg16-inference-sent": "--model vgg16 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 5 --batch-size 397 --modes baseline,tao+pc,tao+pc+sent,tao+pc+host,tao+pc+host+sent",
    "vgg16-train-sent": "--model vgg16 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 5 --batch-size 103 --modes baseline,tao+pc,tao+pc+sent,tao+pc+host,tao+pc+host+sent",
    "inception_v3-inference-sent": "--model inception_v3 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 299 --modes baseline,tao+pc,tao+pc+sent,tao+pc+host,tao+pc+host+sent,tao+pc+a32,tao+pc+a32+sent",
    "resnet50-inference-sent": "--model resnet50 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 680 --modes baseline,tao+pc,tao+pc+sent,tao+pc+a32,tao+pc+a32+sent",
    "inception_v3-train-sent": "--model inception_v3 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 73 --modes baseline,tao+pc,tao+pc+sent,tao+pc+host,tao+pc+host+sent,tao+pc+a32,tao+pc+a32+sent",
    # The twenty-first session's: the other rows whose modes acknowledge. seq32's and par32's
    # modes do not: their `+pc` credit acknowledges tensors of at least an eighth of it (500,000
    # parameters at 1 Gbit/s), and their largest are 65,536 and 4,096.
    "resnet50-train-sent": "--model resnet50 --mode train --ps 1 --workers 2 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 161 --modes baseline,tao+pc,tao+pc+sent,tio+p4194304+c4194304,tio+p4194304+c4194304+sent,tao+pc+host,tao+pc+host+sent",
    "alexnet-train-sent": "--model alexnet --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 4 --batch-size 227 --modes baseline,tao+pc,tao+pc+sent,tao+pc+host,tao+pc+host+sent",
    "transformer-train-sent": "--model transformer --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 5 --batch-size 21 --modes baseline,tao+p1000000+c1000000,tao+p1000000+c1000000+sent,tao+p250000+c250000,tao+p250000+c250000+sent",
    # The thirty-fourth session's: two PS, the variables spread by the bytes each moves a step
    # (build_graph's ``ps_placement``, largest first since the thirty-fifth session: each PS half
    # of VGG16's bytes; round-robin left the second PS 12,426 of its 33.6M parameters), at the
    # 1 PS rows' batch, so that the rows differ in the PS count alone. Re-run in the
    # hundred-and-twenty-eighth (Intel Xeon, model 106); the thirty-fifth session's runs before:
    # ``results/bench-vgg16-train-2ps-s35.*`` and ``bench-vgg16-inference-2ps-s35.*``.
    "vgg16-train-2ps": "--model vgg16 --mode train --ps 2 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 5 --batch-size 103 --modes baseline,tio,tao,tao+pc,tao+p1000000+c1000000,tao+pc+host",
    "vgg16-inference-2ps": "--model vgg16 --mode inference --ps 2 --workers 4 --bandwidth 1Gbit --steps 3 --rounds 5 --batch-size 397 --modes baseline,tio,tao,tao+pc,tao+p1000000+c1000000,tao+pc+host",
    # The thirty-fifth session's: the Transformer on two PS, the transformer-train row's modes.
    # Re-run in the hundred-and-twenty-sixth (AMD EPYC); the run before: ``results/bench-transformer-train-2ps-s35.*``.
    # Its embedding table is looked up on its PS: by bytes held that PS exchanged 20% of a step's
    # bytes; by bytes moved, half.
    "transformer-train-2ps": "--model transformer --mode train --ps 2 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 5 --batch-size 21 --modes baseline,tio,tao,tao+pc,tao+p1000000+c1000000,tao+p250000+c250000,tao+pc+host",
    # The seventy-ninth session's: the Transformer across TensorFlow's barrier (its embedding's
    # sparse gradient held between the runs as values and indices) on hosts with cores of their
    # own, beside one window per task behind the barrier.
    "transformer-train-hosts-cross": "--model transformer --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 5 --batch-size 21 --host-cores 0.5 --trace-steps 1 --modes baseline,tao+pc+host,tao+pc+host+ready+cross,layer+pc+ready+cross,tao+pc+ready+cross",
    # The eighty-first session's: the same at 0.4 cores a task, quotas that add up to the
    # machine's 2 cores (0.5 a task is 2.5 on 2: a limit once every task computes at once, as
    # across the barrier), in rounds of twenty: the crossing's steps as steady as the baseline's.
    "transformer-train-hosts04-cross": "--model transformer --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 20 --rounds 4 --batch-size 21 --host-cores 0.4 --trace-steps 1 --modes baseline,tao+pc+host,tao+pc+ready+cross",
    # and VGG16 training so, at a batch that keeps communication and computation about as equal
    # at 0.4 cores as 201 does at 0.5
    "vgg16-train-hosts04-cross": "--model vgg16 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 3 --batch-size 161 --host-cores 0.4 --trace-steps 1 --modes baseline,tao+pc+host,layer+pc+ready+cross",
    # The eighty-second session's, on an Intel Xeon (family 6, model 167): the same at that
    # processor's balance at 0.4 cores a task, the bench's default batch there (56). Re-run in
    # the hundred-and-twenty-eighth (model 106); the eighty-second's run before:
    # ``results/bench-vgg16-train-hosts04-b56-s82.*``.
    "vgg16-train-hosts04-b56-cross": "--model vgg16 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 3 --batch-size 56 --host-cores 0.4 --trace-steps 1 --modes baseline,tao+pc+host,layer+pc+ready+cross",
    # The eightieth session's: ResNet-50 training with batch normalization's moving averages
    # updated each step (the default since), behind TensorFlow's barrier and across it (the
    # averages in the compute run: ``compute_also``), at the resnet50-train row's batch, five steps
    # a round; and at 10 Gbit/s, the compute-bound setting, as the resnet50-train-10g row.
    "resnet50-train-cross": "--model resnet50 --mode train --ps 1 --workers 2 --bandwidth 1Gbit --steps 5 --rounds 3 --batch-size 161 --modes baseline,tao+pc,tao+pc+host,cross,tao+pc+ready+cross",
    "resnet50-train-10g-cross": "--model resnet50 --mode train --ps 1 --workers 2 --bandwidth 10Gbit --steps 4 --rounds 36 --batch-size 8 --modes baseline,tao+pc+host,cross,tao+pc+ready+cross",
    # and Inception-v3 training so (its 188 moving statistics), at the inception_v3-train row's batch
    "inception_v3-train-cross": "--model inception_v3 --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 3 --batch-size 73 --modes baseline,tao+pc+host,cross,tao+pc+ready+cross",
    # and MobileNet's (54), at the mobilenet-train row's batch
    "mobilenet-train-cross": "--model mobilenet --mode train --ps 1 --workers 4 --bandwidth 1Gbit --steps 5 --rounds 3 --batch-size 99 --modes baseline,tao+pc+host,cross,tao+pc+ready+cross",
}


def command(row: str) -> list[str]:
    out = os.path.join(RESULTS, f"bench-{row}.json")
    return ["tfsched", "bench", *ROWS[row].split(), "-o", out]


def assembled() -> tuple[str, dict[str, str]]:
    """BENCHMARKS.md's text, from the rows' results files, ``targets.md`` and ``reading.md``
    (BENCHMARKS.md is made, not edited: an edit there alone is lost at the next assembly), and
    each row's table as today's columns show it (row -> its Markdown). Writes nothing."""
    tables = {}
    parts = [
        "# Benchmarks",
        "",
        "Vanilla TensorFlow against tfsched, measured in the same run: the modes alternate in rounds on one",
        "cluster after warm-up. Every task (PS and workers) is its own process in its own network",
        "namespace; each host's link is shaped with `tc` in both directions (full duplex).",
        "",
        f"Machine: {cpu_description()}, no GPU, {platform.platform()}, Python {platform.python_version()}.",
        "All tasks share these cores, which matters: see the reading at the end. Rows whose command has",
        "`--host-cores` give each task cores of its own instead (a CPU quota: what one task leaves idle",
        "is not lent to another, as on separate hosts). The processor under",
        "this machine is not always the same one: each row says which one it ran on (rows run before",
        "the sixteenth session do not), and its CPU s/step column shows what a step cost there.",
        "",
        "## At a glance",
        "",
        "Each row's fastest mode (its p95/p50 and straggler effect beside the baseline's) and its",
        "slowest mode; the tables below have every mode, the reading at the end what they mean.",
        "p95/p50 is of every worker's step times, sync p95/p50 of the synchronized steps (each as",
        "long as its slowest worker): a mode that staggers the workers on purpose has a wide first",
        "and can still have a steady training step.",
        "",
    ]
    done = {}
    for row in ROWS:
        path = os.path.join(RESULTS, f"bench-{row}.json")
        if os.path.exists(path):
            with open(path) as f:
                done[row] = json.load(f)
    parts.append(glance(done))
    targets = os.path.join(HERE, "targets.md")
    if os.path.exists(targets):
        with open(targets) as f:
            parts.append(f.read().strip())
        parts.append("")
    for row in ROWS:
        parts.append(f"## {row}")
        parts.append("")
        parts.append("```bash")
        parts.append(" ".join(command(row)[:-2]) + f" -o bench-{row}.json")
        parts.append("```")
        parts.append("")
        if row in done:
            # the table as today's columns show it (a column added since is computed from the
            # raw times the file keeps)
            tables[row] = markdown(done[row])
            parts.append(tables[row].strip())
        else:
            parts.append("Not run yet.")
        parts.append("")
    extra = os.path.join(RESULTS, "bytescheduler.md")  # benchmarks/bytescheduler.py
    if os.path.exists(extra):
        with open(extra) as f:
            parts.append(f.read().strip().replace("# Partitioning", "## Partitioning", 1))
        parts.append("")
    extra = os.path.join(RESULTS, "tf2-vgg16-train.md")  # benchmarks/tf2_strategy.py
    if os.path.exists(extra):
        parts.append("## TensorFlow 2: ParameterServerStrategy")
        parts.append("")
        with open(extra) as f:
            parts.append(f.read().strip())
        parts.append("")
    # tf2_strategy.py with tao and layer, and TAO beside TIO with one window per task
    tao = [os.path.join(RESULTS, f"tf2-vgg16-train-{x}.md") for x in ("tao", "tao-host")]
    if any(os.path.exists(x) for x in tao):
        parts.append("### TensorFlow 2: TAO and layer schedules")
        parts.append("")
        for extra in filter(os.path.exists, tao):
            with open(extra) as f:
                parts.append(f.read().strip())
            parts.append("")
    # tfsched bench --api tf2's own rows (their Markdown has no command: it is here)
    for name, title in TF2_ROWS.items():
        extra = os.path.join(RESULTS, f"{name}.md")
        if os.path.exists(extra):
            parts += [f"### {title}", "", f"```bash\n{TF2_COMMANDS[name]}\n```", ""]
            with open(extra) as f:
                parts.append(f.read().strip())
            parts.append("")
    reading = os.path.join(HERE, "reading.md")
    if os.path.exists(reading):
        with open(reading) as f:
            parts.append(f.read().strip())
    return "\n".join(parts) + "\n", tables


def assemble() -> None:
    """Write BENCHMARKS.md (``assembled``), and each row's table back beside its results file."""
    text, tables = assembled()
    for row, table in tables.items():
        write_atomic(os.path.join(RESULTS, f"bench-{row}.md"), lambda f, t=table: f.write(t))
    write_atomic(os.path.join(ROOT, "BENCHMARKS.md"), lambda f: f.write(text))


TF2_ROWS = {
    "tf2-vgg16-inference": "TensorFlow 2: inference (`tfsched bench --api tf2`)",
    "tf2-resnet50-train": "TensorFlow 2: ResNet-50 training (`tfsched bench --api tf2`)",
    "tf2-vgg16-inference-2ps": "TensorFlow 2: inference on two PS, the variables split "
    "(`tfsched bench --api tf2 --ps-placement min-size`)",
    "tf2-vgg16-train-hosts": "TensorFlow 2: training on hosts with cores of their own "
    "(`tfsched bench --api tf2 --host-cores 0.5`)",
}
TF2_COMMANDS = {
    "tf2-vgg16-inference": "tfsched bench --api tf2 --model vgg16 --mode inference --workers 4 --bandwidth 1Gbit "
    "--batch-size 397 --steps 3 --rounds 3 --modes baseline,tio,tao,tao+pc,tao+pc+host "
    "-o benchmarks/results/tf2-vgg16-inference.json",
    "tf2-resnet50-train": "tfsched bench --api tf2 --model resnet50 --mode train --workers 4 --bandwidth 1Gbit "
    "--batch-size 161 --steps 3 --rounds 3 --modes baseline,tio,tao,tao+pc,tao+pc+host "
    "-o benchmarks/results/tf2-resnet50-train.json",
    # the forty-sixth session's: the strategy's variable_partitioner, at the 1 PS row's batch
    "tf2-vgg16-inference-2ps": "tfsched bench --api tf2 --model vgg16 --mode inference --ps 2 --workers 4 "
    "--bandwidth 1Gbit --batch-size 397 --steps 3 --rounds 3 --ps-placement min-size "
    "--modes baseline,tio,tao,tao+pc,tao+pc+host -o benchmarks/results/tf2-vgg16-inference-2ps.json",
    # the sixty-second session's: the batch of the session rows' training on such hosts
    "tf2-vgg16-train-hosts": "tfsched bench --api tf2 --model vgg16 --mode train --workers 4 --bandwidth 1Gbit "
    "--batch-size 201 --host-cores 0.5 --steps 3 --rounds 3 --modes baseline,tio,tao+pc,tao+pc+host "
    "-o benchmarks/results/tf2-vgg16-train-hosts.json",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--assemble-only", action="store_true")
    args = ap.parse_args()
    if not args.assemble_only:
        os.makedirs(RESULTS, exist_ok=True)
        failed = []
        for row in args.rows.split(","):
            cmd = command(row)
            print("+", " ".join(cmd), flush=True)
            p = subprocess.run(cmd)
            if p.returncode != 0:
                print(f"row {row} failed ({p.returncode}); its results are the last run's", file=sys.stderr)
                failed.append(row)
            assemble()
        if failed:
            sys.exit(f"failed: {', '.join(failed)}")
    assemble()


if __name__ == "__main__":
    main()
