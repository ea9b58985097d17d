"""The time oracle: how long an op computes and how long a transfer takes on its link."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.graph.model import CommGraph, Transfer

DEFAULT_BANDWIDTH_BPS = 1e9  # bits per second
# ByteScheduler §4.1 measured about 300 us of per-message ("partition") overhead.
DEFAULT_OVERHEAD_S = 300e-6
# What one of the crossing's gate ops costs its PS where no trace ran them (TimeOracle.gate_op_s):
# the median traced on MobileNet across the barrier, 1 PS x 4 workers, was 4 to 5 us on an Intel
# Xeon for the token queues' ops (benchmarks/results/bench-mobilenet-train-cross-s83.md)
DEFAULT_GATE_OP_S = 5e-6
# What putting a cut tensor back together costs its receiver a byte where nothing measured it
# (TimeOracle.copy_s_per_byte): the pass's TfschedConcat took 1.09e-10 and 1.21e-10 CPU seconds a
# byte on an AMD EPYC (bench.run.copy_cpu_s_per_byte; ``copy_cpu_s_per_byte`` in
# benchmarks/results/bench-resnet50-train-10g-s90.json and bench-resnet50-train-10g-sent-s90.json)
DEFAULT_COPY_S_PER_BYTE = 1.1e-10


@dataclass(frozen=True)
class LinkModel:
    """Transfer time = fixed per-message overhead + bytes / bandwidth."""

    bandwidth_bps: float = DEFAULT_BANDWIDTH_BPS
    overhead_s: float = DEFAULT_OVERHEAD_S

    def __post_init__(self) -> None:
        if not (self.bandwidth_bps > 0 and math.isfinite(self.bandwidth_bps)):
            raise TfschedError(
                f"bandwidth must be a positive number of bits per second, got {self.bandwidth_bps}"
            )
        if not (self.overhead_s >= 0 and math.isfinite(self.overhead_s)):
            raise TfschedError(f"overhead must be a non-negative number of seconds, got {self.overhead_s}")

    def time(self, nbytes: int | None) -> float:
        return self.overhead_s + 8.0 * (nbytes or 0) / self.bandwidth_bps


@dataclass
class TimeOracle:
    """Per-op compute times (seconds) and link models; TicTac's ``Time(op)``.

    ``op_times`` maps op names to seconds; ops it does not name take ``default_op_s``.
    ``links`` overrides ``link`` per (sender task, receiver task).
    """

    op_times: dict[str, float] = field(default_factory=dict)
    link: LinkModel = field(default_factory=LinkModel)
    links: dict[tuple[str, str], LinkModel] = field(default_factory=dict)
    default_op_s: float = 0.0
    fixed_transfer_s: float | None = None  # TIO's general oracle: every transfer costs the same
    name: str = "model"
    # Ops' worth of work a task does at once (TensorFlow's inter-op threads), measured in a
    # trace; may be fractional (1.5: two ops at once, each at three quarters speed); default 1.
    compute_slots: dict[str, float] = field(default_factory=dict)
    # Seconds from a step's start until a task can run its first op (RunGraph dispatch), measured.
    task_start_s: dict[str, float] = field(default_factory=dict)
    # Bits per second a host's link carries, per (task, "up" | "down"), measured over all the
    # task's channels at once. Absent: the largest rate of the channels on it (a shaped NIC).
    host_bps: dict[tuple[str, str], float] = field(default_factory=dict)
    # An emulated cluster on one machine: the ops' worth of work the machine does at once, for
    # all tasks together (what one worker measured alone: its compute_slots), with op times
    # measured alone; None: every task computes on its own machine.
    machine_slots: float | None = None
    # With machine_slots: what moving a byte between two tasks costs that machine, in slot-seconds
    # (gRPC's serialization and copies and the kernel's TCP at both ends, measured by the bench);
    # 0: communication costs no CPU.
    comm_slot_s_per_byte: float = 0.0
    # With machine_slots: the most of that machine one task's ops take at once, where each task
    # is capped at cores of its own (bench.hostcpu); None: whatever the others leave.
    host_slots: float | None = None
    # With host_slots: each end of a flow spends its share of the bytes' CPU within its own
    # task's cores (sim.engine); False: on the machine only, as until the sixty-third session
    host_bytes: bool = True
    # With host_bytes: the shares of a byte's CPU the sender and the receiver spend in their own
    # tasks' cores; the rest is the kernel's, on the machine alone (the bench measures them per
    # process, bench.run._comm_cpu_costs; until the sixty-fourth session half each)
    host_byte_shares: tuple[float, float] = (0.5, 0.5)
    # What one op of tfsched's crossing's gates costs its PS (an arrival at a count): the
    # simulator charges a step across the barrier its gates' ops at that (sim.build_sim_graph);
    # 0: not charged, as until the eighty-third session. A trace that ran them times them
    # (oracle.fit.gate_op_time), else DEFAULT_GATE_OP_S.
    gate_op_s: float = 0.0
    # What the receiver of a cut transfer spends a byte putting its slices back together (the
    # pass's TfschedConcat): the simulator runs the copy as an op of that task, before the
    # tensor's consumers (sim.build_sim_graph); 0: no copy, as until the ninety-first session.
    # The bench measures it (bench.run.copy_cpu_s_per_byte), else DEFAULT_COPY_S_PER_BYTE.
    copy_s_per_byte: float = 0.0

    @classmethod
    def general(cls) -> TimeOracle:
        """TicTac's general time oracle (§4.3, eq. 6): a recv costs 1, everything else 0."""
        return cls(fixed_transfer_s=1.0, name="general")

    @classmethod
    def from_cost_model(
        cls,
        graph: CommGraph,
        *,
        link: LinkModel | None = None,
        flops_per_s: float = 2e10,
        mem_bytes_per_s: float = 1e10,
        per_op_s: float = 5e-6,
    ) -> TimeOracle:
        """Compute times estimated from op shapes (FLOPs and bytes touched); a trace replaces them."""
        from tfsched.oracle.compute import estimate_op_time

        times = {}
        g = graph.graph
        for name in g:
            op = graph.op(name)
            in_shapes = []
            for u in g.predecessors(name):
                src = graph.op(u)
                for tensor in g.edges[u, name]["tensors"]:
                    if not tensor.startswith("^"):
                        idx = int(tensor.rsplit(":", 1)[1])
                        in_shapes.append(src.output_shapes[idx] if idx < len(src.output_shapes) else None)
            times[name] = estimate_op_time(
                op.type,
                in_shapes,
                op.output_shapes,
                op.attrs,
                flops_per_s=flops_per_s,
                mem_bytes_per_s=mem_bytes_per_s,
                per_op_s=per_op_s,
            )
        return cls(
            op_times=times,
            link=link or LinkModel(),
            name="cost-model",
            gate_op_s=DEFAULT_GATE_OP_S,
            copy_s_per_byte=DEFAULT_COPY_S_PER_BYTE,
        )

    @classmethod
    def from_trace(cls, trace, statistic: str = "min", *, fallback: TimeOracle | None = None) -> TimeOracle:
        """Op times and link models measured in ``trace`` (TicTac §5: the minimum over steps).

        Ops the trace does not time (pruned, renamed) keep ``fallback``'s estimates. Steps that
        did not record every transfer are left out where others did (``Trace.complete_steps``).
        """
        from tfsched.oracle.fit import (
            compute_parallelism,
            gate_op_time,
            host_rates,
            link_fits,
            op_times,
            task_starts,
        )

        trace = trace.complete_steps()
        fits, overall = link_fits(trace, statistic)
        times = dict(fallback.op_times) if fallback is not None else {}
        times.update(op_times(trace, statistic))
        oracle = cls(
            op_times=times,
            link=overall.model,
            links={link: f.model for link, f in fits.items()},
            name=f"trace ({statistic})",
            compute_slots=compute_parallelism(trace),
            task_start_s=task_starts(trace, statistic),
            host_bps=host_rates(trace, fits, statistic),
        )
        gate = gate_op_time(trace, statistic)
        oracle.gate_op_s = gate if gate is not None else fallback.gate_op_s if fallback else DEFAULT_GATE_OP_S
        oracle.copy_s_per_byte = fallback.copy_s_per_byte if fallback else DEFAULT_COPY_S_PER_BYTE
        oracle.fits = fits  # kept for reports: samples, RMSE, R^2 per link
        return oracle

    def set_links(self, *, bandwidth_bps: float | None = None, overhead_s: float | None = None) -> None:
        """Give every link (the default and each channel's) ``bandwidth_bps`` and/or ``overhead_s``,
        keeping the rest of each model: a traced oracle asked about another link (``tfsched
        analyze --trace --bandwidth``) or about the shaped one it was traced on (the bench: a
        worker's trace sees only its share of the PS's link). With a bandwidth every host's NIC
        carries that rate, not what the trace measured it carrying."""
        if bandwidth_bps is None and overhead_s is None:
            return

        def relinked(m: LinkModel) -> LinkModel:
            return LinkModel(
                bandwidth_bps=m.bandwidth_bps if bandwidth_bps is None else bandwidth_bps,
                overhead_s=m.overhead_s if overhead_s is None else overhead_s,
            )

        self.link = relinked(self.link)
        self.links = {k: relinked(m) for k, m in self.links.items()}
        if bandwidth_bps is not None:
            self.host_bps = {}

    def compute(self, op_name: str) -> float:
        if self.fixed_transfer_s is not None:
            return 0.0
        return self.op_times.get(op_name, self.default_op_s)

    def start(self, task: str) -> float:
        return self.task_start_s.get(task, 0.0)

    def slots(self, task: str) -> float:
        return self.compute_slots.get(task, 1)

    def host_link(self, task: str, direction: str) -> float | None:
        """Bits per second of ``task``'s host link in ``direction`` ("up" or "down"), if measured."""
        return self.host_bps.get((task, direction))

    def link_for(self, src_task: str, dst_task: str) -> LinkModel:
        return self.links.get((src_task, dst_task), self.link)

    def transfer(self, t: Transfer, nbytes: int | None = None) -> float:
        """Time of a transfer (or of ``nbytes`` of it, for a slice) with its link to itself."""
        if self.fixed_transfer_s is not None:
            return self.fixed_transfer_s
        return self.link_for(t.src_task, t.dst_task).time(t.bytes if nbytes is None else nbytes)
