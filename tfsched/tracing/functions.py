"""Tracing TensorFlow 2's functions (``ParameterServerStrategy``): per-op times and every
cross-task transfer of real calls, as a :class:`Trace`.

A session's step stats (``collector``) do not exist for functions: TensorFlow 2 runs each call of
a ``tf.function`` as components on the tasks it touches (the worker's part, the PS's part), and
what they did is seen only by TensorFlow's profiler. Every task's ``tf.distribute.Server`` serves
the profiler's gRPC service at its own address, so the coordinator can profile the PS and the
workers while its steps run (``tf.profiler.experimental.client.trace``), with nothing started on
the tasks. Each task then gives an XSpace (``*.xplane.pb``); what tfsched reads of it, per thread
("line") of the host plane:

- ``ExecutorState::Process`` (stat ``id``: the call's step id, the same on every task of the call)
  encloses the op events it ran, named ``node:OpType``;
- an asynchronous kernel (a ``_Recv``) starts in ``ExecutorState::ProcessAsync::Start`` and ends at
  ``ExecutorState::ProcessAsync::Done``, both with stats ``name``, ``kernel_type`` and ``step_id``:
  a received tensor's transfer, timed by its receiver, as a session's ``RecvTensor`` is;
- a ``_Send`` op's stats name the rendezvous key ``src device;incarnation;dst device;edge;frame``
  and the node it sends (``from``): where a receiver's tensor comes from;
- ``FunctionRun`` and ``ExecutorDoneCallback`` (stat ``id``) start and end a call's part on the
  task: the part's work ends where the callback starts (``build_trace``). A call is traced when
  its parts started and ended inside the profiling window on every task that ran one.

A node's second send to the same task is a control edge (TensorFlow sends a tensor to a task
once, and a control edge as an empty tensor whose ``_Send`` names the node as its source too):
it is recorded as TensorFlow names that empty tensor, ``SRC/ctrl/_K``, with 0 bytes
(``build_trace``). Bytes are not in the profile: they come from the functions' graphs (``functions``), whose node
names the instantiated components keep. A slice of a partitioned transfer (tfsched's pass, named
``SRC/tfsched_to_TASK_gate_I.TAG``) gets its share of the source tensor by the pass's rule
(``Slicing`` in cc/scheduler.cc, from the slices seen). A tensor the graphs do not have (the
runtime's ``GroupCrossDeviceControlEdges`` identities, which carry a call's control dependencies
between tasks) is recorded with 0 bytes and named in the trace's ``meta["unsized"]``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.graph.devices import cluster_task_devices
from tfsched.io import check_writable
from tfsched.tracing.replay import GRAPH_TAG, scheduled_tensor
from tfsched.tracing.trace import FUNCTIONS_API, MISSING, OpRecord, Trace, TransferRecord, send_node

# kernels whose Start..Done is a transfer into this task
RECV_KERNELS = frozenset({"_Recv", "_HostRecv"})
# an op's event: "node:OpType" (the runtime's own are "Class::Method")
_OP_EVENT = re.compile(r"^[^:]+:[A-Za-z_][A-Za-z0-9_]*$")
# a slice's gate (cc/scheduler.cc): "SRC/tfsched[_PORT]_to_TASK_gate_I.TAG"
_SLICE = re.compile(rf"/tfsched(?:_\d+)?_to_[^/]*_gate_(?P<index>\d+)(?:{GRAPH_TAG})?$")
# a pause before the block's steps, for the profiling request to reach the servers (not
# measured: a call that begins before a server profiles is dropped, not mis-timed)
START_WAIT_S = 0.5


@dataclass
class _Task:
    """What one task's profile holds, in picoseconds: since the epoch where the profile says
    when it began (``started_ns``), else since that start."""

    device: str
    started_ns: int | None = None  # the profile's start on the wall clock (None: not said)
    ops: list = field(default_factory=list)  # (step id, node, op type, start, duration)
    recvs: list = field(default_factory=list)  # (step id, recv node, start, end)
    # (dst device, send node) -> (src device, the node it sends, the node it sends to)
    sends: dict = field(default_factory=dict)
    # step id -> [first FunctionRun start, last ExecutorDoneCallback start, runs, dones]: a
    # part's work ends where its executor calls back (build_trace says why not the callback's end)
    calls: dict = field(default_factory=dict)
    functions: dict = field(default_factory=dict)  # step id -> the function called (where launched)


def _stats(plane, stats) -> dict:
    meta = plane.stat_metadata
    out = {}
    for s in stats:
        kind = s.WhichOneof("value")
        value = getattr(s, kind) if kind else None
        out[meta[s.metadata_id].name] = meta[value].name if kind == "ref_value" else value
    return out


def _profile_start_ns(space) -> int | None:
    """When the profile of ``space`` began (ns since the epoch), from its "Task Environment"
    plane; None if it does not say.

    The profiler stamps each task's events relative to that task's own start (its lines'
    ``timestamp_ns`` count from it): without it, two tasks' events are as far out of line as
    their profiles' starts are apart (186 us between a PS and a worker in a test run).
    """
    for plane in space.planes:
        if plane.name == "Task Environment":
            for s in plane.stats:
                if plane.stat_metadata[s.metadata_id].name == "profile_start_time":
                    return int(s.uint64_value) or None
    return None


def read_task(space, device: str) -> _Task:
    """The records of one task's XSpace (``device``: the task's device, e.g.
    ``/job:ps/replica:0/task:0/device:CPU:0``)."""
    task = _Task(device, started_ns=_profile_start_ns(space))
    base_ns = task.started_ns or 0
    async_starts: dict[tuple[int, str], int] = {}  # (step id, node) -> start
    async_dones: dict[tuple[int, str], tuple[int, str]] = {}  # (step id, node) -> (done, kernel)
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = plane.event_metadata
        for line in plane.lines:
            base = (base_ns + line.timestamp_ns) * 1000
            events = sorted(line.events, key=lambda e: e.offset_ps)
            step, step_end = None, -1  # the ExecutorState::Process this thread is in
            function, function_end = None, -1  # the EagerExecute (a call's launch) it is in
            for e in events:
                start, name = base + e.offset_ps, names[e.metadata_id].name
                end = start + e.duration_ps
                if name == "ExecutorState::Process":
                    step, step_end = _stats(plane, e.stats).get("id"), end
                elif name == "EagerExecute":
                    function, function_end = _stats(plane, e.stats).get("eager_op"), end
                elif name.startswith("ExecutorState::ProcessAsync::"):
                    s = _stats(plane, e.stats)
                    key = (s.get("step_id"), s.get("name", ""))
                    if name.endswith("::Start"):
                        async_starts[key] = start
                    elif name.endswith("::Done"):  # often on another thread than its start
                        async_dones[key] = (start, s.get("kernel_type", ""))
                elif name in ("FunctionRun", "ExecutorDoneCallback"):
                    sid = _stats(plane, e.stats).get("id")
                    call = task.calls.setdefault(sid, [None, None, 0, 0])
                    if name == "FunctionRun":
                        call[0] = start if call[0] is None else min(call[0], start)
                        call[2] += 1
                        if function is not None and start < function_end:
                            task.functions[sid] = function
                    else:
                        call[1] = start if call[1] is None else max(call[1], start)
                        call[3] += 1
                elif step is not None and start < step_end and _OP_EVENT.match(name):
                    node, _, op = name.rpartition(":")
                    task.ops.append((step, node, op, start, e.duration_ps))
                    if op == "_Send":
                        s = _stats(plane, e.stats)
                        parts = str(s.get("key", "")).split(";")
                        if len(parts) >= 3 and s.get("from"):
                            task.sends[(parts[2], node)] = (parts[0], s["from"], s.get("to", ""))
    for (sid, node), began in async_starts.items():
        if (sid, node) in async_dones:
            done, kernel = async_dones[(sid, node)]
            if kernel in RECV_KERNELS:
                task.recvs.append((sid, node, began, done))
            else:  # a kernel that waits (tfsched's gate): an op from its launch to its done
                task.ops.append((sid, node, kernel, began, done - began))
    return task


class Sizes:
    """What the functions' graphs (``tf.Graph``s) say of a transfer's tensor: which output of
    its node it is, and its size."""

    def __init__(self, graphs=()):
        self.ops = {}
        for g in graphs:
            for op in g.get_operations():
                self.ops.setdefault(op.name, op)

    def tensor(self, sent: str, to: str) -> str:
        """The tensor a ``_Send`` of node ``sent`` to node ``to`` carries: ``sent``'s only
        output, the output ``to`` reads in the graphs, or (a gate's) the one its name gives."""
        op = self.ops.get(sent)
        if op is not None and len(op.outputs) > 1:
            consumer = self.ops.get(to)
            ports = (
                {
                    t.value_index
                    for t in (_past_identities(t, sent) for t in consumer.inputs)
                    if t.op.name == sent
                }
                if consumer is not None
                else set()
            )
            if len(ports) == 1:
                return f"{sent}:{ports.pop()}"
        return f"{sent}:0"

    def elements(self, tensor: str) -> tuple[int, int]:
        """(elements, bytes per element) of a statically shaped tensor of the graphs, else (0, 0)."""
        name, _, port = tensor.rpartition(":")
        op = self.ops.get(name)
        if op is None or int(port) >= len(op.outputs):
            return 0, 0
        t = op.outputs[int(port)]
        dtype = t.dtype.base_dtype
        if not (t.shape.is_fully_defined() and dtype.is_numpy_compatible and dtype.size):
            return 0, 0
        return t.shape.num_elements(), dtype.size


# ops that hand a tensor on unchanged, which Grappler removes from an instantiated function
_IDENTITIES = frozenset({"Identity", "IdentityN", "Snapshot"})


def _past_identities(tensor, sent: str):
    """The tensor ``tensor`` is, past the identities that hand it on, up to node ``sent`` (which
    may be an identity itself: an optimizer's ``IdentityN`` of the gradients). The partitioner
    names the consumer of a send as the instantiated function has it, where Grappler has removed
    them: the gradient of a batch normalization's scale reaches tf_keras's optimizer through an
    ``Identity`` in the Python graph, and without looking past it the trace took the node's
    first output (the activations' gradient) for both of its sends to the PS, and the second
    for a control edge."""
    for _ in range(1000):  # bounded, against a malformed graph
        if tensor.op.name == sent or tensor.op.type not in _IDENTITIES:
            break
        tensor = tensor.op.inputs[tensor.value_index if tensor.op.type == "IdentityN" else 0]
    return tensor


def _slice_bytes(elements: int, size: int, count: int, index: int) -> int:
    """Bytes of slice ``index`` of ``count`` of a tensor, by the pass's ``Slicing``: equal slices
    rounded up to 64 bytes, the last one shorter.

    >>> [_slice_bytes(1000, 4, 3, i) for i in range(3)]
    [1344, 1344, 1312]
    """
    unit = 64 // size if size and 64 % size == 0 else 1
    each = -(-elements // count)
    each = -(-each // unit) * unit
    return size * max(0, min(each, elements - index * each))


def build_trace(
    tasks: list[_Task], sizes: Sizes, meta: dict | None = None, functions: set[str] | None = None
) -> Trace:
    """The :class:`Trace` of the calls every task saw whole that received a tensor from another
    task (of ``functions``, by name, where given), in the order they started; each call is a
    step, its times relative to its first event on any task. A call that moves nothing between
    tasks (the runtime's own: the copy of a result to the coordinator) is not a step.

    A call ends where the last of its parts' executors finished: the start of that part's
    ``ExecutorDoneCallback``. The callback's event lasts until the callback returns, after it
    has sent the part's result to its caller. On a local cluster (Seq-32 training, one PS, one
    worker: ``benchmarks/results/tf2-callback-spans.md``) a PS's callback took 76 us at the
    median and 531 us at most on an idle machine, 3.7 ms at most with four busy processes
    beside it; there the last callback returned up to 3.5 ms after the call's end, and one call
    in 100 would have overlapped the next had it ended there."""
    seen: dict[int, list] = defaultdict(list)  # step id -> its parts' [start, end, runs, dones]
    for t in tasks:
        for sid, call in t.calls.items():
            seen[sid].append(call)
    called = {sid: f for t in tasks for sid, f in t.functions.items()}
    exchanged = {sid for t in tasks for sid, *_ in t.recvs}
    whole = {
        sid: (min(c[0] for c in calls), max(c[1] for c in calls))
        for sid, calls in seen.items()
        if all(c[0] is not None and c[1] is not None and c[2] == c[3] for c in calls)
        and sid in exchanged
        and (not functions or called.get(sid) in functions)
    }
    order = sorted(whole, key=lambda sid: whole[sid][0])
    index = {sid: k for k, sid in enumerate(order)}
    trace = Trace(steps=len(order), meta=dict(meta or {}))
    begin = {sid: whole[sid][0] for sid in order}  # the step's first event on any task
    for t in tasks:
        for sid, _node, _op, start, _dur in t.ops:
            if sid in begin:
                begin[sid] = min(begin[sid], start)
        for sid, _node, start, _end in t.recvs:
            if sid in begin:
                begin[sid] = min(begin[sid], start)
    trace.step_times_us = [(whole[sid][1] - begin[sid]) / 1e6 for sid in order]
    # on the wall clock, where every task's profile said when it began (read_task): so ``viz``
    # can lay this trace beside another of the run
    if all(t.started_ns is not None for t in tasks):
        trace.step_starts_us = [begin[sid] / 1e6 for sid in order]
    unsized: set[str] = set()
    unmatched: dict[str, list[str]] = defaultdict(list)
    for t in tasks:
        for sid, node, op, start, dur in t.ops:
            if sid in index:
                trace.ops.append(
                    OpRecord(index[sid], t.device, node, op, (start - begin[sid]) / 1e6, dur / 1e6)
                )
    sends = {k: v for t in tasks for k, v in t.sends.items()}  # as _Task.sends, of every task

    def sent_by(recv: str, dst: str):
        """The send of the receive node ``recv`` (``SRC/_N``, ``trace.send_node``), and its number."""
        named = send_node(recv)
        if named is None:
            return None, 0
        return sends.get((dst, named[0])), named[1]

    for t in tasks:
        received = []  # [step id, node, start, end, src device, tensor, a control edge's]
        # (step id, src device, tensor of the graph) -> [(gated, send number, index in received)]
        by_tensor = defaultdict(list)
        slices = defaultdict(int)  # (step id, source tensor) -> its slices received
        for sid, node, start, end in t.recvs:
            if sid not in index:
                continue
            send, number = sent_by(node, t.device)
            if send is None:
                unmatched[str(index[sid])].append(node)
                continue
            src, sent, to = send
            tensor = sizes.tensor(sent, to)
            source = scheduled_tensor(tensor)
            if source is not None:  # not the pass's acknowledgement or credit
                by_tensor[(sid, src, source)].append((source != tensor, number, len(received)))
            received.append([sid, node, start, end, src, tensor, False])
            if _SLICE.search(sent):
                slices[(sid, scheduled_tensor(tensor))] += 1
        # The partitioner sends a tensor to a task once (DupRecvKey: source output, destination
        # partition); a control edge from the same node sends an empty tensor of its own, whose
        # _Send names the node as its source too. Where tfsched's pass gated the tensor for the
        # task, every data read there goes through the gate (or its slices), and a direct send
        # is a control edge. Else, of a node's sends to a task, the first made is the data's:
        # the partitioner walks the consumers in node order, and the data's reader (the forward
        # pass's) comes before the control edge's (a gradient's ShapeN, which Grappler's
        # constant folding left with only a control input from the kernel's read: each of
        # VGG16's 13 kernels). The control edges are named as TensorFlow names their empty
        # tensor ("SRC/ctrl/_K-1").
        for group in by_tensor.values():
            direct = sorted((number, i) for gated, number, i in group if not gated)
            for number, i in direct[0 if len(direct) < len(group) else 1 :]:
                node = received[i][5].rpartition(":")[0]
                received[i][5:] = [f"{node}/ctrl/_{number - 1}:0", True]
        for sid, node, start, end, src, tensor, control in received:
            source = "" if control else scheduled_tensor(tensor) or ""
            elements, size = sizes.elements(source)
            m = _SLICE.search(tensor.rpartition(":")[0])
            if m and elements:
                nbytes = _slice_bytes(elements, size, slices[(sid, source)], int(m["index"]))
            else:
                nbytes = elements * size
            if not nbytes and source:  # not an acknowledgement or credit of the pass's
                unsized.add(tensor)
            trace.transfers.append(
                TransferRecord(
                    step=index[sid],
                    edge=node,
                    tensor=tensor,
                    bytes=nbytes,
                    src=src,
                    dst=t.device,
                    start_us=(start - begin[sid]) / 1e6,
                    duration_us=(end - start) / 1e6,
                )
            )
    trace.meta["unsized"] = sorted(unsized)
    trace.meta[MISSING] = dict(unmatched)
    return trace


def _text(name) -> str:
    return name.decode() if isinstance(name, bytes) else str(name)


def _concrete_graphs(functions) -> tuple[list, set[str]]:
    """The graphs of ``functions`` (``tf.function``s, every signature they were traced for;
    ``ConcreteFunction``s; ``tf.Graph``s) and the names their calls run under (none for a
    graph)."""
    graphs, names = [], set()
    for f in functions:
        if hasattr(f, "get_operations"):
            graphs.append(f)
        elif hasattr(f, "graph"):
            graphs.append(f.graph)
            names.add(_text(f.name))
        elif hasattr(f, "_list_all_concrete_functions"):
            for c in f._list_all_concrete_functions():
                graphs.append(c.graph)
                names.add(_text(c.name))
        else:  # a callable (FunctionTracer checked the rest): a TensorFlow without the list
            raise TfschedError(
                f"functions: {type(f).__name__} has no list of its traced signatures here: give its "
                "concrete function (step.get_concrete_function(...)) instead"
            )
    if any(hasattr(f, "get_operations") for f in functions):
        names = set()  # a graph's calls have no name to choose them by
    return graphs, names


class FunctionTracer:
    """Profile a cluster's tasks while a block of TensorFlow 2 steps runs; the traced calls are
    then ``self.trace`` (and written to ``path``, if given).

    Parameters
    ----------
    cluster : the cluster (``tf.train.ClusterSpec``, its dict, or the strategy's cluster
        resolver); every task of ``jobs`` is profiled through its own server's address.
    path : where to write the trace (``tfsched.trace/1`` JSON, as ``tfsched trace`` writes), or None.
    seconds : the profiling window. The block's steps must run inside it: leaving the block waits
        for its end, and a call that began before it or ended after it is dropped. An error in the
        block is raised at once, and nothing is written.
    functions : the ``tf.function``s (or concrete functions) the steps run, for the bytes of each
        transfer; a transfer whose tensor they do not have is recorded with 0 bytes.
    jobs : the jobs to profile (default: every job but ``chief``, the coordinator's).

    Example
    -------
    >>> with tfsched.trace_functions(resolver, "trace.json", seconds=20, functions=[step]):  # doctest: +SKIP
    ...     for _ in range(4):
    ...         coordinator.schedule(step)
    ...     coordinator.join()
    """

    def __init__(
        self, cluster, path: str | None = None, *, seconds: float, functions=(), jobs=None, meta=None
    ):
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not 0 < seconds <= 3600:
            raise TfschedError(f"seconds must be a window of more than 0 and at most 3600 s, got {seconds!r}")
        self.devices = cluster_task_devices(cluster, jobs, "to profile")
        for f in functions:  # their graphs are read at the block's end, once the calls traced them
            if not (hasattr(f, "get_operations") or hasattr(f, "graph") or callable(f)):
                raise TfschedError(
                    f"functions: {type(f).__name__} is not a tf.function, a ConcreteFunction or a tf.Graph"
                )
        if path is not None:
            check_writable(path)  # now, not after the block's steps
        self.path, self.seconds, self.functions = path, float(seconds), list(functions)
        self.meta = dict(meta or {})
        self.trace: Trace | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._logdir: str | None = None

    def _profile(self) -> None:
        from tensorflow.python.profiler import profiler_client

        try:
            addresses = ",".join(f"grpc://{a}" for a in self.devices)
            profiler_client.trace(addresses, self._logdir, int(self.seconds * 1000), num_tracing_attempts=1)
        except BaseException as e:  # reported when the block ends
            self._error = e
        finally:
            with self._lock:
                self._done = True
                if self._abandoned:  # the block ended with an error: nobody reads the profile
                    shutil.rmtree(self._logdir, ignore_errors=True)

    def _abandon(self) -> None:
        """Leave the profile to its thread, which removes its files when the window ends (the
        profiler has no way to stop early)."""
        with self._lock:
            if self._done:
                shutil.rmtree(self._logdir, ignore_errors=True)
            else:
                self._abandoned = True

    def __enter__(self) -> FunctionTracer:
        self._logdir = tempfile.mkdtemp(prefix="tfsched-profile-")
        self._lock, self._done, self._abandoned = threading.Lock(), False, False
        self._thread = threading.Thread(target=self._profile, name="tfsched-profile", daemon=True)
        self._thread.start()
        time.sleep(START_WAIT_S)
        return self

    def __exit__(self, kind, value, tb) -> bool:
        if kind is not None:  # the block's error, at once: not at the window's end
            self._abandon()
            return False
        self._thread.join(self.seconds + 120)
        if self._thread.is_alive():
            self._abandon()
            raise TfschedError(
                f"profiling {', '.join(self.devices)} did not end within {self.seconds + 120:.0f} s"
            )
        try:
            if self._error is not None:
                first = str(self._error).strip().splitlines() or [type(self._error).__name__]
                raise TfschedError(f"profiling {', '.join(self.devices)} failed: {first[0]}")
            self.trace = self._read()
            if self.path:
                self.trace.save(self.path)
            return False
        finally:
            shutil.rmtree(self._logdir, ignore_errors=True)

    def _read(self) -> Trace:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        tasks = []
        for address, device in self.devices.items():
            name = address.replace(":", "_") + ".xplane.pb"
            found = glob.glob(os.path.join(self._logdir, "plugins", "profile", "*", name))
            if not found:
                raise TfschedError(f"profiling {address} ({device}) returned no profile")
            space = xplane_pb2.XSpace()
            with open(found[0], "rb") as f:
                space.ParseFromString(f.read())
            tasks.append(read_task(space, device))
        meta = {
            **self.meta,
            "api": FUNCTIONS_API,
            "tasks": {d: a for a, d in self.devices.items()},
            "window_s": self.seconds,
        }
        graphs, names = _concrete_graphs(self.functions)
        trace = build_trace(tasks, Sizes(graphs), meta, names)
        if trace.steps == 0:
            raise TfschedError(
                f"no call ran whole inside the {self.seconds:g} s profiling window: run the steps "
                "inside the block, and give a window long enough for them"
            )
        return trace
