"""TensorFlow 2 function traces (``tfsched.tracing.functions``): from the records of the tasks'
profiles to a Trace, worked out by hand. The real cluster's profile is read in
``tests/enforce/test_tf2.py::test_traced_calls_record_every_transfer_with_its_bytes``."""

import pytest

from tfsched.errors import TfschedError
from tfsched.tracing.functions import FunctionTracer, Sizes, _slice_bytes, _Task, build_trace

PS = "/job:ps/replica:0/task:0/device:CPU:0"
WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
US = 1_000_000  # picoseconds
T0 = 1_795_000_000_000_000_000  # ns since the epoch


class _NoGraphs(Sizes):
    """Sizes from a table: tensor -> (elements, bytes each); every node one output."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def elements(self, tensor):
        return self.table.get(tensor, (0, 0))


def _cluster(calls_on_ps=None):
    """Call 7 pulls w (1,000 floats) from the PS and pushes its gradient g; call 8's part on the
    PS began before the window; call 9 (the runtime's copy of a result) moves nothing."""
    ps, worker = _Task(PS, started_ns=0), _Task(WORKER, started_ns=0)  # on one clock
    ps.calls = calls_on_ps or {7: [100 * US, 900 * US, 1, 1], 8: [None, 950 * US, 0, 1]}
    worker.calls = {
        7: [90 * US, 1000 * US, 1, 1],
        8: [920 * US, 1500 * US, 1, 1],
        9: [1100 * US, 1200 * US, 1, 1],
    }
    ps.sends[(WORKER, "w/read/_3")] = (PS, "w/read", "matmul")
    worker.sends[(PS, "g/_5")] = (WORKER, "g", "apply")
    worker.recvs = [(7, "w/read/_4", 110 * US, 300 * US), (8, "w/read/_4", 930 * US, 990 * US)]
    ps.recvs = [(7, "g/_6", 120 * US, 800 * US)]
    worker.ops = [(7, "matmul", "MatMul", 300 * US, 50 * US), (9, "input/_1", "_Send", 1100 * US, 5 * US)]
    ps.ops = [(7, "apply", "AssignSubVariableOp", 810 * US, 10 * US)]
    return [ps, worker]


class TestBuildTrace:
    def test_a_call_is_a_step_when_every_task_saw_it_whole_and_it_moved_a_tensor(self):
        trace = build_trace(_cluster(), _NoGraphs({"w/read:0": (1000, 4), "g:0": (1000, 4)}))
        assert trace.steps == 1
        assert trace.step_times_us == [910.0]  # from the worker's start at 90 us to its end at 1000
        assert trace.step_starts_us == [90.0]  # on the tasks' one clock: the worker's start
        pull, push = sorted(trace.transfers, key=lambda t: t.src)
        assert (pull.src, pull.dst, pull.tensor, pull.bytes) == (PS, WORKER, "w/read:0", 4000)
        assert (pull.start_us, pull.duration_us) == (20.0, 190.0)
        assert (push.src, push.dst, push.tensor, push.bytes) == (WORKER, PS, "g:0", 4000)
        assert sorted((o.device, o.node, o.start_us) for o in trace.ops) == [
            (PS, "apply", 720.0),
            (WORKER, "matmul", 210.0),
        ]
        assert trace.meta["missing_transfers"] == {} and trace.meta["unsized"] == []

    def test_only_the_named_functions_calls(self):
        tasks = _cluster()
        tasks[1].functions = {7: "__inference_step_1"}
        assert build_trace(tasks, _NoGraphs({}), functions={"__inference_step_1"}).steps == 1
        assert build_trace(tasks, _NoGraphs({}), functions={"__inference_other_2"}).steps == 0

    def test_a_part_that_ran_twice_and_ended_once_is_not_whole(self):
        tasks = _cluster(calls_on_ps={7: [100 * US, 900 * US, 2, 1], 8: [None, 950 * US, 0, 1]})
        assert build_trace(tasks, _NoGraphs({})).steps == 0

    def test_slices_share_their_tensor_as_the_pass_cuts_it(self):
        ps, worker = _cluster()
        worker.recvs, ps.recvs = [], []
        for i in range(3):  # sends _10, _12, _14; receives one after each
            gate = f"w/read/tfsched_to_worker_0_gate_{i}"
            ps.sends[(WORKER, f"{gate}/_{10 + 2 * i}")] = (PS, gate, "w/read/tfsched_concat")
            worker.recvs.append((7, f"{gate}/_{11 + 2 * i}", 110 * US, 200 * US))
        trace = build_trace([ps, worker], _NoGraphs({"w/read:0": (1000, 4)}))
        assert [t.bytes for t in sorted(trace.transfers, key=lambda t: t.tensor)] == [1344, 1344, 1312]
        assert sum(t.bytes for t in trace.transfers) == 4000

    def test_a_second_send_of_a_node_to_a_task_is_its_control_edge(self):
        # TensorFlow sends a tensor to a task once; the read's second send (made after, to a
        # gradient's ShapeN that keeps only a control input) carries an empty tensor
        ps, worker = _cluster()
        ps.sends[(WORKER, "w/read/_6")] = (PS, "w/read", "grad/ShapeN")
        worker.recvs.append((7, "w/read/_7", 110 * US, 120 * US))
        trace = build_trace([ps, worker], _NoGraphs({"w/read:0": (1000, 4), "g:0": (1000, 4)}))
        pulls = {t.tensor: (t.edge, t.bytes) for t in trace.transfers if t.src == PS}
        assert pulls == {"w/read:0": ("w/read/_4", 4000), "w/read/ctrl/_5:0": ("w/read/_7", 0)}
        assert trace.meta["unsized"] == []

    def test_where_the_pass_gated_a_tensor_its_direct_send_is_the_control_edge(self):
        # the data goes through the gate (made after the control edge's send here)
        ps, worker = _cluster()
        ps.sends = {
            (WORKER, "w/read/_3"): (PS, "w/read", "grad/ShapeN"),
            (WORKER, "w/read/tfsched_gate_to_worker_0/_8"): (PS, "w/read/tfsched_gate_to_worker_0", "matmul"),
        }
        worker.recvs = [
            (7, "w/read/_4", 110 * US, 120 * US),
            (7, "w/read/tfsched_gate_to_worker_0/_9", 110 * US, 300 * US),
        ]
        trace = build_trace([ps, worker], _NoGraphs({"w/read:0": (1000, 4)}))
        pulls = {t.tensor: t.bytes for t in trace.transfers if t.src == PS}
        assert pulls == {"w/read/tfsched_gate_to_worker_0:0": 4000, "w/read/ctrl/_2:0": 0}

    def test_a_receive_whose_send_was_not_seen_is_missing_not_guessed(self):
        ps, worker = _cluster()
        ps.sends.clear()
        trace = build_trace([ps, worker], _NoGraphs({"g:0": (1000, 4)}))
        assert trace.meta["missing_transfers"] == {"0": ["w/read/_4"]}
        assert [t.tensor for t in trace.transfers] == ["g:0"]

    def test_a_tensor_of_no_graph_is_named_unsized(self):
        trace = build_trace(_cluster(), _NoGraphs({"g:0": (1000, 4)}))
        assert trace.meta["unsized"] == ["w/read:0"]
        assert {t.tensor: t.bytes for t in trace.transfers} == {"w/read:0": 0, "g:0": 4000}


def test_slice_bytes_follow_the_pass():
    # Slicing (cc/scheduler.cc): 100,000 floats in 3: 33,334 rounded up to 16 floats (64 bytes)
    assert [_slice_bytes(100_000, 4, 3, i) for i in range(3)] == [4 * 33_344, 4 * 33_344, 4 * 33_312]
    assert _slice_bytes(10, 8, 1, 0) == 80


@pytest.mark.tf
def test_sizes_tell_a_multi_output_nodes_outputs_apart_by_their_reader():
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        a, b = tf.raw_ops.IdentityN(input=[tf.zeros([3, 4]), tf.zeros([5], tf.float64)], name="grads")
        tf.identity(a, name="use_a")
        tf.identity(b, name="use_b")
    sizes = Sizes([g])
    assert sizes.tensor("grads", "use_b") == "grads:1" and sizes.elements("grads:1") == (5, 8)
    assert sizes.tensor("grads", "use_a") == "grads:0" and sizes.elements("grads:0") == (12, 4)
    assert sizes.tensor("grads", "fused_elsewhere") == "grads:0"  # the reader is not in the graph
    assert sizes.elements("nowhere:0") == (0, 0)


@pytest.mark.parametrize(
    ("cluster", "seconds", "words"),
    [
        ({"ps": ["h:1"], "worker": ["h:2"]}, 0, "seconds must be a window"),
        ({"ps": ["h:1"], "worker": ["h:2"]}, True, "seconds must be a window"),
        ({"chief": ["h:3"]}, 5, r"no task but the coordinator's \(chief\)"),
        ({}, 5, "cluster must be"),
    ],
)
def test_bad_settings_are_one_error(cluster, seconds, words):
    with pytest.raises(TfschedError, match=words):
        FunctionTracer(cluster, seconds=seconds)


def test_the_chief_is_left_out_and_every_other_task_is_profiled():
    tracer = FunctionTracer(
        {"chief": ["c:1"], "ps": ["p:1", "p:2"], "worker": {0: "w:1", 3: "w:4"}}, seconds=5
    )
    assert tracer.devices == {
        "p:1": "/job:ps/replica:0/task:0/device:CPU:0",
        "p:2": "/job:ps/replica:0/task:1/device:CPU:0",
        "w:1": "/job:worker/replica:0/task:0/device:CPU:0",
        "w:4": "/job:worker/replica:0/task:3/device:CPU:0",  # the task index the dict gives
    }
    with pytest.raises(TfschedError, match="no task of the jobs evaluator"):
        FunctionTracer({"ps": ["p:1"]}, seconds=5, jobs=["evaluator"])
    with pytest.raises(TfschedError, match="not a tf.function"):
        FunctionTracer({"ps": ["p:1"]}, seconds=5, functions=[42])


def _xspace(lines, started_ns=None):
    """An XSpace of one host plane: ``lines`` is [[(name, start us, duration us, {stat: value})]];
    with ``started_ns``, the "Task Environment" plane saying when the profile began."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    if started_ns is not None:
        env = space.planes.add(name="Task Environment")
        env.stat_metadata[1].name = "profile_start_time"
        env.stats.add(metadata_id=1, uint64_value=started_ns)
    plane = space.planes.add(name="/host:CPU")
    events, stats = {}, {}

    def stat_id(name):
        if name not in stats:
            stats[name] = len(stats) + 1
            plane.stat_metadata[stats[name]].name = name
        return stats[name]

    for i, line in enumerate(lines):
        xline = plane.lines.add(id=i, name=f"tf_Compute/{i}", timestamp_ns=1_000_000)  # 1,000 us
        for name, start, dur, st in line:
            if name not in events:
                events[name] = len(events) + 1
                plane.event_metadata[events[name]].name = name
            ev = xline.events.add(metadata_id=events[name], offset_ps=start * US, duration_ps=dur * US)
            for k, v in st.items():
                x = ev.stats.add(metadata_id=stat_id(k))
                if isinstance(v, int):
                    x.int64_value = v
                else:
                    x.str_value = v
    return space


def _async(edge, at, dur, start=True, call=7):
    """The event that starts (or ends) receive ``edge``'s ``_Recv`` of ``call``."""
    kind = "Start" if start else "Done"
    return (
        f"ExecutorState::ProcessAsync::{kind}",
        at,
        dur,
        {"step_id": call, "name": edge, "kernel_type": "_Recv"},
    )


@pytest.mark.tf
def test_a_tasks_profile_is_read_by_thread_and_step():
    """Ops are the ``node:Type`` events inside an ``ExecutorState::Process`` (its ``id`` the
    step); a receive starts on one thread and is done on another; a send's key names its
    devices; ``FunctionRun`` inside ``EagerExecute`` names the call's function."""
    from tfsched.tracing.functions import read_task

    key = f"{PS};1;{WORKER};edge_4_w/read;0:0"
    space = _xspace(
        [
            [
                ("EagerExecute", 0, 500, {"eager_op": "__inference_step_9"}),
                ("FunctionRun", 1, 2, {"id": 7}),
                ("ExecutorState::Process", 10, 30, {"id": 7}),
                ("matmul:MatMul", 12, 20, {}),
                ("ThreadpoolListener::Record", 15, 1, {}),
                ("late:Add", 50, 5, {}),  # outside any Process: not an op of a step
                _async("w/read/_4", 300, 1, start=False),
            ],
            [
                _async("w/read/_4", 100, 2),
                ("ExecutorState::Process", 400, 20, {"id": 7}),
                ("w/read/_3:_Send", 401, 2, {"from": "w/read", "to": "matmul", "key": key}),
                ("ExecutorDoneCallback", 480, 3, {"id": 7}),
            ],
        ]
    )
    task = read_task(space, WORKER)
    assert task.ops == [
        (7, "matmul", "MatMul", 1012 * US, 20 * US),
        (7, "w/read/_3", "_Send", 1401 * US, 2 * US),
    ]
    assert task.recvs == [(7, "w/read/_4", 1100 * US, 1300 * US)]
    assert task.sends == {(WORKER, "w/read/_3"): (PS, "w/read", "matmul")}
    assert task.calls == {7: [1001 * US, 1480 * US, 1, 1]}  # to where its executor called back
    assert task.functions == {7: "__inference_step_9"}
    assert task.started_ns is None


@pytest.mark.tf
def test_tasks_whose_profiles_began_apart_are_put_on_one_clock():
    """Each task's profiler stamps its events from its own start: the worker's profile began
    200 us after the PS's, so its receive, 100 us into its profile, began 50 us after the PS's
    send, 250 us into the PS's. On the wall clock the step begins at the PS's FunctionRun."""
    from tfsched.tracing.functions import read_task

    t0 = T0
    key = f"{PS};1;{WORKER};edge_4_w/read;0:0"
    ps = _xspace(
        [
            [
                ("FunctionRun", 0, 1, {"id": 7}),
                ("ExecutorState::Process", 249, 10, {"id": 7}),
                ("w/read/_3:_Send", 250, 2, {"from": "w/read", "to": "matmul", "key": key}),
                ("ExecutorDoneCallback", 600, 1, {"id": 7}),
            ]
        ],
        started_ns=t0 - 1_000_000,  # its lines are stamped 1,000 us after that: they count from t0
    )
    worker = _xspace(
        [
            [
                ("FunctionRun", 0, 1, {"id": 7}),
                _async("w/read/_4", 100, 1),
                _async("w/read/_4", 150, 1, start=False),
                ("ExecutorDoneCallback", 500, 1, {"id": 7}),
            ]
        ],
        started_ns=t0 - 1_000_000 + 200_000,
    )
    tasks = [read_task(ps, PS), read_task(worker, WORKER)]
    assert tasks[1].recvs == [(7, "w/read/_4", (t0 + 300_000) * 1000, (t0 + 350_000) * 1000)]
    trace = build_trace(tasks, _NoGraphs({"w/read:0": (1000, 4)}))
    assert trace.step_starts_us == [t0 / 1000]  # both calls' FunctionRun: the PS's at t0
    (pull,) = trace.transfers
    assert (pull.start_us, pull.duration_us) == (300.0, 50.0)  # unaligned: 100 us
    assert trace.step_times_us == [700.0]  # to the worker's callback, 500 us into its profile
    # a task that does not say when its profile began: no step starts, rather than wrong ones
    assert (
        build_trace([read_task(ps, PS), read_task(_xspace([]), WORKER)], _NoGraphs({})).step_starts_us == []
    )


@pytest.mark.tf
def test_a_call_ends_where_its_last_part_called_back_not_where_the_callback_returned():
    """The PS's part of call 7 calls back at 400 us, sends its result, and its thread is held
    until 700 us; the worker's part calls back at 450 us and the worker begins call 8 at 600
    us. Call 7 ends at 450 us, before call 8 begins (to the callback's return it would have
    ended at 700 us, overlapping it)."""
    from tfsched.tracing.functions import read_task

    key = f"{PS};1;{WORKER};edge_4_w/read;0:0"
    send = ("w/read/_3:_Send", 0, 2, {"from": "w/read", "to": "matmul", "key": key})
    ps = _xspace(
        [
            [
                ("FunctionRun", 0, 1, {"id": 7}),
                ("ExecutorState::Process", 10, 10, {"id": 7}),
                (send[0], 11, *send[2:]),
                ("ExecutorDoneCallback", 400, 300, {"id": 7}),
            ],
            [
                ("FunctionRun", 605, 1, {"id": 8}),
                ("ExecutorState::Process", 610, 10, {"id": 8}),
                (send[0], 611, *send[2:]),
                ("ExecutorDoneCallback", 790, 1, {"id": 8}),
            ],
        ],
        started_ns=T0,
    )
    worker = _xspace(
        [
            [
                ("FunctionRun", 0, 1, {"id": 7}),
                _async("w/read/_4", 100, 1),
                _async("w/read/_4", 150, 1, start=False),
                ("ExecutorDoneCallback", 450, 1, {"id": 7}),
                ("FunctionRun", 600, 1, {"id": 8}),
                _async("w/read/_4", 612, 1, call=8),
                _async("w/read/_4", 620, 1, start=False, call=8),
                ("ExecutorDoneCallback", 800, 1, {"id": 8}),
            ]
        ],
        started_ns=T0,
    )
    trace = build_trace([read_task(ps, PS), read_task(worker, WORKER)], _NoGraphs({"w/read:0": (1000, 4)}))
    assert trace.steps == 2
    assert trace.step_starts_us[1] - trace.step_starts_us[0] == pytest.approx(
        600.0, abs=0.5
    )  # float ulp 0.25
    assert trace.step_times_us == [450.0, 200.0]
    assert trace.step_starts_us[0] + trace.step_times_us[0] <= trace.step_starts_us[1]


@pytest.mark.tf
def test_an_error_in_the_block_is_raised_at_once_and_nothing_is_written(tmp_path):
    import time

    path = tmp_path / "t.json"
    start = time.monotonic()
    with pytest.raises(ValueError, match="the block's own"):
        with FunctionTracer({"ps": ["127.0.0.1:1"]}, str(path), seconds=120):
            raise ValueError("the block's own")
    assert time.monotonic() - start < 30  # not at the window's end
    assert not path.exists()


@pytest.mark.tf
def test_a_task_that_does_not_answer_is_one_error_and_nothing_is_written(tmp_path):
    path = tmp_path / "t.json"
    with pytest.raises(TfschedError, match=r"profiling 127\.0\.0\.1:1 failed"):
        with FunctionTracer({"ps": ["127.0.0.1:1"]}, str(path), seconds=1):
            pass
    assert not path.exists()
