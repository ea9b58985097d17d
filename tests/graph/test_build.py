import pytest

from tests.helpers import PS, PS1, W0, W1, op, var
from tfsched.errors import TfschedError
from tfsched.graph import RawNode, build_comm_graph
from tfsched.graph.devices import parse_device


class TestDevices:
    def test_partial_and_legacy_forms(self):
        assert parse_device("/job:ps/task:1").full() == "/job:ps/replica:0/task:1/device:CPU:0"
        assert parse_device("/job:worker/cpu:0").full() == "/job:worker/replica:0/task:0/device:CPU:0"
        assert (
            parse_device("/job:w/replica:0/task:2/device:GPU:1").full()
            == "/job:w/replica:0/task:2/device:GPU:1"
        )

    def test_garbage_is_an_error(self):
        with pytest.raises(TfschedError, match="cannot parse device"):
            parse_device("/job:ps/banana:1")


class TestPlacement:
    def test_reads_of_resources_go_to_the_ps(self):
        g = build_comm_graph(var("w") + [op("y", ["w/read"])], fetches=["y"])
        assert g.op("w/read").device == PS
        assert g.op("y").device == W0

    def test_class_colocation_is_honoured(self):
        nodes = var("w") + [
            RawNode("c", "Const", "", attrs={"dtype": "FLOAT"}, output_shapes=[(4,)], colocate_with=["w"]),
            op("y", ["w/read", "c"]),
        ]
        g = build_comm_graph(nodes, fetches=["y"])
        assert g.op("c").device == PS
        assert {t.tensor for t in g.transfers} == {"w/read:0", "c:0"}

    def test_generator_goes_with_its_only_consumer(self):
        # Heuristic A of TensorFlow's placer: an unplaced Const follows its single consumer.
        nodes = var("w") + [
            RawNode("c", "Const", "", attrs={"dtype": "FLOAT"}, output_shapes=[(4,)]),
            op("y", ["w/read", "c"], device=W1),
        ]
        g = build_comm_graph(nodes, fetches=["y"], default_device=W0)
        assert g.op("c").device == W1

    def test_unplaced_ops_take_the_default_device(self):
        nodes = var("w") + [op("a", ["w/read"], device=""), op("y", ["a"], device=W1)]
        g = build_comm_graph(nodes, fetches=["y"], default_device=W0)
        assert g.op("a").device == W0

    def test_partial_devices_are_completed(self):
        nodes = var("w", device="/job:ps") + [op("y", ["w/read"], device="/job:worker/task:1")]
        g = build_comm_graph(nodes, fetches=["y"])
        assert g.op("w").device == PS and g.op("y").device == W1


class TestTransfers:
    def test_pull_push_and_variable(self):
        nodes = var("w", (3, 5)) + [
            op("y", ["w/read"], shape=(3, 5)),
            op("grad", ["y"], shape=(3, 5)),
            RawNode("lr", "Const", W0, attrs={"dtype": "FLOAT"}, output_shapes=[()]),
            RawNode(
                "apply",
                "ResourceApplyGradientDescent",
                "",
                ["w", "lr", "grad"],
                attrs={"T": "FLOAT"},
                output_shapes=[],
            ),
        ]
        g = build_comm_graph(nodes, fetches=["apply"])
        by = {t.tensor: t for t in g.transfers}
        assert by["w/read:0"].kind == "pull" and by["w/read:0"].bytes == 60 and by["w/read:0"].variable == "w"
        assert by["grad:0"].kind == "push" and by["grad:0"].bytes == 60 and by["grad:0"].variable == "w"
        assert by["lr:0"].kind == "push" and by["lr:0"].bytes == 4
        assert by["w/read:0"].channel == ("/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0")

    def test_one_transfer_per_tensor_and_destination_task(self):
        nodes = var("w") + [
            op("a", ["w/read"]),
            op("b", ["w/read"]),
            op("c", ["w/read"], device=W1),
            op("y", ["a", "b", "c"]),
        ]
        g = build_comm_graph(nodes, fetches=["y"])
        pulls = sorted((t.tensor, t.dst_task, t.consumers) for t in g.transfers if t.src_task in g.ps_tasks)
        # c:0 also crosses, from worker 1 to worker 0 (the receiver pulls it).
        assert {t.tensor for t in g.transfers if t.src_task not in g.ps_tasks} == {"c:0"}
        assert pulls == [
            ("w/read:0", "/job:worker/replica:0/task:0", ("a", "b")),
            ("w/read:0", "/job:worker/replica:0/task:1", ("c",)),
        ]

    def test_control_edges_cross_tasks_too(self):
        nodes = var("w") + [op("y", ["w/read"]), RawNode("train", "NoOp", W0, ["^w/read", "^y"])]
        g = build_comm_graph(nodes, fetches=["train"])
        ctrl = [t for t in g.transfers if t.kind == "control"]
        assert [(t.tensor, t.bytes) for t in ctrl] == [("^w/read", 0)]

    def test_pruning_to_fetches(self):
        nodes = var("a") + var("b") + [op("ya", ["a/read"]), op("yb", ["b/read"])]
        g = build_comm_graph(nodes, fetches=["ya:0"])
        assert {t.variable for t in g.transfers} == {"a"}
        assert "yb" not in g.graph

    def test_unknown_shape_gives_no_bytes(self):
        nodes = [
            RawNode("w", "VarHandleOp", PS, attrs={"dtype": "FLOAT", "shape": (-1, 3)}),
            RawNode("r", "ReadVariableOp", "", ["w"], attrs={"dtype": "FLOAT"}),
            op("y", ["r"]),
        ]
        g = build_comm_graph(nodes, fetches=["y"])
        assert g.transfers[0].bytes is None

    def test_busiest_channel_counts_elements_of_known_size(self):
        # PS 0 sends 15 + 4 elements, PS 1 sends 8; a double counts as one element, an unknown
        # shape as none; the control edge carries nothing
        nodes = (
            var("a", (3, 5))
            + var("b")
            + var("c", (8,), device=PS1)
            + [
                RawNode("d", "VarHandleOp", PS, attrs={"dtype": "DOUBLE", "shape": (2,)}),
                RawNode("d/read", "ReadVariableOp", "", ["d"], attrs={"dtype": "DOUBLE"}),
                RawNode("u", "VarHandleOp", PS, attrs={"dtype": "FLOAT", "shape": (-1, 3)}),
                RawNode("u/read", "ReadVariableOp", "", ["u"], attrs={"dtype": "FLOAT"}),
                op("y", ["a/read", "b/read", "c/read", "d/read", "u/read"]),
                RawNode("train", "NoOp", W0, ["^y", "^c/read"]),
            ]
        )
        g = build_comm_graph(nodes, fetches=["train"])
        assert g.busiest_channel_params == 15 + 4 + 2
        assert (
            build_comm_graph(
                var("c", (8,), device=PS1) + [op("y", ["c/read"])], fetches=["y"]
            ).busiest_channel_params
            == 8
        )

    def test_several_ps_tasks(self):
        nodes = var("a") + var("b", device=PS1) + [op("y", ["a/read", "b/read"])]
        g = build_comm_graph(nodes, fetches=["y"])
        assert g.ps_tasks == ["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]
        assert sorted(t.src_task for t in g.transfers) == g.ps_tasks

    def test_in_graph_replication(self):
        nodes = var("w") + [
            op("y0", ["w/read"], device=W0),
            op("y1", ["w/read"], device=W1),
            op("loss", ["y0", "y1"]),
        ]
        g = build_comm_graph(nodes, fetches=["loss"])
        assert g.worker_tasks == ["/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"]
        assert sorted(t.dst_task for t in g.transfers if t.src_task in g.ps_tasks) == g.worker_tasks
        assert [t.tensor for t in g.transfers if t.src_task not in g.ps_tasks] == ["y1:0"]

    def test_while_loop_back_edges_are_allowed(self):
        nodes = var("w") + [
            op("enter", ["w/read"], op_type="Enter"),
            op("merge", ["enter", "next"], op_type="Merge"),
            op("body", ["merge"]),
            op("next", ["body"], op_type="NextIteration"),
            op("exit", ["merge"], op_type="Exit"),
        ]
        g = build_comm_graph(nodes, fetches=["exit"])
        assert ("next", "merge") in g.back_edges
        assert [t.tensor for t in g.transfers] == ["w/read:0"]


class TestBadGraphs:
    def test_cycle_outside_control_flow(self):
        nodes = var("w") + [op("a", ["w/read", "b"]), op("b", ["a"])]
        with pytest.raises(TfschedError, match="cycle outside control flow: .*a.*b"):
            build_comm_graph(nodes, fetches=["b"], source="g.pb")

    def test_no_ps(self):
        with pytest.raises(TfschedError, match="no parameter server"):
            build_comm_graph([op("a", []), op("b", ["a"])], fetches=["b"], source="g.pb")

    def test_a_ps_job_that_holds_no_variable_where_another_does_is_an_error(self):
        """``--ps-job worker`` on a graph whose variables are on ps: the roles came out swapped
        (the worker's reads taken for pushes) until the hundred-and-eighteenth session."""
        nodes = var("w") + [op("y", ["w/read"]), op("z", ["y"], device=PS)]
        with pytest.raises(
            TfschedError,
            match="^g.pb: no variable of the step is on the parameter servers' job worker but on ps: name",
        ):
            build_comm_graph(nodes, fetches=["z"], ps_jobs=("worker",), source="g.pb")
        assert build_comm_graph(nodes, fetches=["z"], source="g.pb").ps_tasks == [PS.rsplit("/device", 1)[0]]
        # a PS job holding an embedding's table and no variable, the worker a local one, is a PS
        local = var("steps", device=W0) + [
            RawNode("table", "MutableHashTableV2", PS, attrs={}),
            RawNode("find", "LookupTableFindV2", PS, ["table", "steps/read"], attrs={}, output_shapes=[(4,)]),
            op("emb", ["find", "steps/read"]),
        ]
        assert build_comm_graph(local, fetches=["emb"], source="g.pb").ps_tasks == [
            PS.rsplit("/device", 1)[0]
        ]

    def test_missing_input(self):
        with pytest.raises(TfschedError, match="g.pb: node 'a' has input 'zz'"):
            build_comm_graph([op("a", ["zz"])], source="g.pb")

    def test_missing_fetch(self):
        with pytest.raises(TfschedError, match="fetch 'nope' is not in the graph"):
            build_comm_graph(var("w") + [op("y", ["w/read"])], fetches=["nope"])

    def test_duplicate_names(self):
        with pytest.raises(TfschedError, match="appears twice"):
            build_comm_graph([op("a", []), op("a", [])])


class TestReplicatedConstants:
    def _graph(self, devices):
        nodes = [RawNode("lr", "Const", W0, attrs={"dtype": "FLOAT", "value_shape": ()}, output_shapes=[()])]
        for i, dev in enumerate(devices):
            nodes += var(f"w{i}", device=dev)
            nodes.append(
                RawNode(
                    f"apply{i}",
                    "ResourceApplyGradientDescent",
                    "",
                    [f"w{i}", "lr", f"w{i}/read"],
                    attrs={"T": "FLOAT"},
                    output_shapes=[],
                )
            )
        return build_comm_graph(nodes, fetches=[f"apply{i}" for i in range(len(devices))])

    def test_small_constant_used_on_two_devices_is_copied_not_sent(self):
        # TensorFlow's ReplicateConstantsPass: no transfer of lr when its users span two PS tasks.
        g = self._graph([PS, PS1])
        assert not [t for t in g.transfers if t.tensor == "lr:0"]

    def test_constant_used_on_one_device_is_sent(self):
        g = self._graph([PS, PS])
        assert [t.dst_task for t in g.transfers if t.tensor == "lr:0"] == ["/job:ps/replica:0/task:0"]


@pytest.mark.tf
def test_fast_dtype_table_agrees_with_tensorflow():
    from tfsched.graph.build import _ALL_OUTPUTS_OF
    from tfsched.graph.load import output_specs

    for op_type, attr in _ALL_OUTPUTS_OF.items():
        specs = output_specs(op_type)
        assert specs, op_type
        assert all(type_attr == attr and not fixed for fixed, type_attr, _, _ in specs), (op_type, specs)


@pytest.mark.tf
def test_gradients_into_sync_replicas_accumulators_are_their_variables(tmp_path):
    """SyncReplicasOptimizer: a dense gradient into its accumulator and a sparse one (an
    embedding's indices and values) into a sparse accumulator are each their variable's pushes;
    the worker's local step, pushed into the same ops, is no variable's."""
    import tensorflow as tf

    from tfsched.graph import load_comm_graph

    g = tf.Graph()
    with g.as_default(), tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(ps_tasks=2)):
        ids = tf.constant([[1, 3], [5, 7]])
        emb = tf.compat.v1.get_variable("emb", [50, 8])
        dense = tf.compat.v1.get_variable("dense", [8, 4])
        x = tf.reduce_mean(tf.nn.embedding_lookup(emb, ids), axis=1)
        loss = tf.reduce_sum(tf.matmul(x, dense))
        opt = tf.compat.v1.train.SyncReplicasOptimizer(
            tf.compat.v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2, total_num_replicas=2
        )
        train = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())
    path = tmp_path / "sync.pb"
    path.write_bytes(g.as_graph_def(add_shapes=True).SerializeToString())
    cg = load_comm_graph(str(path), fetches=[train.name])
    pushes = [t for t in cg.transfers if t.kind == "push"]
    by_variable = {}
    for t in pushes:
        by_variable.setdefault(t.variable, []).append(t.tensor)
    assert len(by_variable["dense"]) == 1, by_variable
    assert len(by_variable["emb"]) >= 2, by_variable  # the sparse gradient's indices and values
    assert all("sync_replicas/" in n for n in by_variable[None]), by_variable  # the local steps
    assert len(by_variable[None]) == 2  # one into each PS's accumulator
