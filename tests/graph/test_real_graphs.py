"""Transfers found in saved graphs of real models are exactly the real _Send/_Recv pairs.

Each model's PS training graph (replica_device_setter, as users build them) runs one step on an
in-process cluster of tf.distribute.Server tasks over gRPC; TensorFlow returns the partition
graphs it really executed. Grappler is off for that run so that node names stay as saved: the
test checks placement and partitioning, not Grappler's rewrites.
"""

import pytest

from tests.conftest import free_port
from tfsched.graph import load_comm_graph
from tfsched.graph.load import nodes_from_partition_graphs

pytestmark = [pytest.mark.tf, pytest.mark.cluster]


@pytest.fixture(scope="module")
def cluster():
    import tensorflow as tf

    spec = {"ps": [f"127.0.0.1:{free_port()}" for _ in range(2)], "worker": [f"127.0.0.1:{free_port()}"]}
    cs = tf.train.ClusterSpec(spec)
    servers = [
        tf.distribute.Server(cs, job_name=j, task_index=i, start=True)
        for j in spec
        for i in range(len(spec[j]))
    ]
    return servers[-1].target


def _real_transfers(built, target, tmp_path):
    import tensorflow as tf

    cfg = tf.compat.v1.ConfigProto()
    cfg.graph_options.rewrite_options.disable_meta_optimizer = True
    # The classic optimizer's CSE merges equal constants (e.g. two 0.01 scalars) and renames them.
    cfg.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    cfg.graph_options.optimizer_options.do_common_subexpression_elimination = False
    cfg.graph_options.optimizer_options.do_constant_folding = False
    md = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(target, graph=built.graph, config=cfg) as sess:
        sess.run(built.init_op)
        sess.run(
            built.train_op, options=tf.compat.v1.RunOptions(output_partition_graphs=True), run_metadata=md
        )
    pairs = set()
    for pg in md.partition_graphs:
        by_name = {n.name: n for n in pg.node}
        for n in pg.node:
            src = by_name.get(n.input[0].split(":")[0]) if n.input else None
            control_dummy = (
                src is not None
                and src.op == "Const"
                and src.input
                and all(i.startswith("^") for i in src.input)
            )
            if n.op == "_Send" and not control_dummy:
                src = n.input[0] if ":" in n.input[0] else n.input[0] + ":0"
                pairs.add(
                    (
                        src,
                        n.attr["send_device"].s.decode().split("/device:")[0],
                        n.attr["recv_device"].s.decode().split("/device:")[0],
                    )
                )
    path = tmp_path / "run.runmeta"
    path.write_bytes(md.SerializeToString())
    return pairs, str(path)


@pytest.mark.parametrize("model,ps_tasks", [("vgg16", 1), ("resnet50", 2)])
def test_transfers_match_partition_graphs(model, ps_tasks, cluster, tmp_path):
    from tfsched.models import build_graph

    built = build_graph(model, batch_size=2, ps_tasks=ps_tasks)
    saved = tmp_path / f"{model}.pb"
    saved.write_bytes(built.graph_def(add_shapes=False).SerializeToString())
    g = load_comm_graph(str(saved), fetches=built.fetches)

    real, runmeta = _real_transfers(built, cluster, tmp_path)
    data = {(t.tensor, t.src_task, t.dst_task) for t in g.transfers if t.kind != "control"}
    assert data == real
    # Control edges cross as a dummy Const's _Send; the runmeta loader maps them back to their source.

    from_run = load_comm_graph(runmeta, fetches=built.fetches)
    mine = {(t.tensor, t.src_task, t.dst_task, t.kind) for t in g.transfers}
    theirs = {(t.tensor, t.src_task, t.dst_task, t.kind) for t in from_run.transfers}
    assert mine == theirs
    assert len(g.ps_tasks) == ps_tasks
    pulls = [t for t in g.transfers if t.kind == "pull"]
    assert pulls and all(t.bytes and t.variable for t in pulls)
    # sizes without _output_shapes: pulls from the variables' shapes, pushes from TF's shape inference
    pushes = [t for t in g.transfers if t.kind == "push" and t.variable]
    assert pushes and all(t.bytes for t in pushes)
    by_var = {t.variable: t.bytes for t in pulls}
    assert all(by_var.get(t.variable, t.bytes) == t.bytes for t in pushes)


def test_partition_graph_loader_restores_edges():
    """A hand-written pair of partitions: a data edge and a control edge cut by the partitioner."""
    import tensorflow as tf

    ps = "/job:ps/replica:0/task:0/device:CPU:0"
    w = "/job:worker/replica:0/task:0/device:CPU:0"
    p0, p1 = tf.compat.v1.GraphDef(), tf.compat.v1.GraphDef()
    a = p0.node.add(name="a", op="Const", device=ps)
    a.attr["dtype"].type = tf.float32.as_datatype_enum
    s = p0.node.add(name="a_S0", op="_Send", device=ps, input=["a"])
    s.attr["tensor_name"].s = b"edge_1_a"
    d = p0.node.add(name="a/_ctrl", op="Const", device=ps, input=["^a"])
    d.attr["dtype"].type = tf.float32.as_datatype_enum
    s2 = p0.node.add(name="ctrl_S1", op="_Send", device=ps, input=["a/_ctrl"])
    s2.attr["tensor_name"].s = b"edge_2_ctrl"
    r = p1.node.add(name="a_R0", op="_Recv", device=w)
    r.attr["tensor_name"].s = b"edge_1_a"
    r2 = p1.node.add(name="ctrl_R1", op="_Recv", device=w)
    r2.attr["tensor_name"].s = b"edge_2_ctrl"
    p1.node.add(name="b", op="Identity", device=w, input=["a_R0", "^ctrl_R1"])
    nodes = {n.name: n for n in nodes_from_partition_graphs([p0, p1])}
    assert set(nodes) == {"a", "b"}
    assert nodes["b"].inputs == ["a", "^a"]
