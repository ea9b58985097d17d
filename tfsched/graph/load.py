"""Reading TensorFlow graph files into :class:`~tfsched.graph.model.RawNode` records.

Accepted inputs:

* a GraphDef, binary (``.pb``) or text (``.pbtxt``);
* a MetaGraphDef (``.meta``, binary or text), whose ``train_op`` collection supplies default fetches;
* a RunMetadata (``.runmeta``) holding the partition graphs of a real run
  (``RunOptions(output_partition_graphs=True)``); its ``_Send``/``_Recv`` pairs are turned back
  into the cross-task edges they implement, so the result is the ground truth of what crossed;
* a SavedModel: its export directory or its ``saved_model.pb`` / ``.pbtxt``. One of its meta
  graphs is read, as a MetaGraphDef: the one whose tags are ``tag_set`` (comma-separated, as
  ``saved_model_cli --tag_set``), else the only one, else the one tagged ``train``. Without a
  ``train_op`` collection, its serving signature's outputs are the default fetches. A TF1 export
  keeps the devices the analysis needs with ``Builder.add_meta_graph_and_variables(...,
  clear_devices=False)``.

Only this module (and ``_tf``) touches protobuf; everything downstream sees plain records.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.graph._tf import op_def, tf_submodule
from tfsched.graph.model import RawNode
from tfsched.io import as_path

GRAPH_FORMATS = ("graphdef", "metagraph", "runmeta", "savedmodel")
_NAMES = {
    "graphdef": "GraphDef",
    "metagraph": "MetaGraphDef",
    "runmeta": "RunMetadata",
    "savedmodel": "SavedModel",
}
_TEXT_SUFFIXES = (".pbtxt", ".pbtext", ".txt", ".prototxt")
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
# the collections a TF1 graph names its training op in: tf.compat.v1 convention, SavedModel's
_TRAIN_OP_COLLECTIONS = ("train_op", "saved_model_train_op")
_SERVING_SIGNATURE = "serving_default"


@dataclass
class LoadedGraph:
    """The nodes of a graph file and what the file says about fetches."""

    path: str
    format: str  # one of GRAPH_FORMATS
    nodes: list[RawNode]
    fetch_hints: list[str] = field(default_factory=list)  # e.g. MetaGraphDef's train_op collection
    graph_def: object | None = None  # the GraphDef proto, kept for TensorFlow's shape inference


def _protos():
    return (
        tf_submodule("core.framework.graph_pb2"),
        tf_submodule("core.protobuf.meta_graph_pb2"),
        tf_submodule("core.protobuf.config_pb2"),
        tf_submodule("core.protobuf.saved_model_pb2"),
    )


def _parse(message, data: bytes, text: bool):
    from google.protobuf import text_format

    if text:
        text_format.Parse(data.decode("utf-8"), message)
    else:
        message.ParseFromString(data)
    return message


def _plausible_graph(graph_def) -> bool:
    return len(graph_def.node) > 0 and all(n.name and n.op for n in graph_def.node)


def _fetch_hints(meta_graph) -> list[str]:
    """What a MetaGraphDef says a step runs: its training op's collection, else the outputs of its
    serving signature (or, without one, of every signature, by name)."""
    for key in _TRAIN_OP_COLLECTIONS:
        if key in meta_graph.collection_def:
            return list(meta_graph.collection_def[key].node_list.value)
    sigs = meta_graph.signature_def
    names = [_SERVING_SIGNATURE] if _SERVING_SIGNATURE in sigs else sorted(sigs)
    return [out.name for n in names for _, out in sorted(sigs[n].outputs.items()) if out.name]


def _tags(meta_graph) -> str:
    return ",".join(meta_graph.meta_info_def.tags) or "(no tags)"


def _choose_meta_graph(saved_model, tag_set: str | None, path: str):
    """The SavedModel's meta graph to read (see the module's docstring)."""
    graphs = list(saved_model.meta_graphs)
    have = "; ".join(_tags(m) for m in graphs)
    if tag_set is not None:
        want = {t.strip() for t in tag_set.split(",") if t.strip()}
        for m in graphs:
            if set(m.meta_info_def.tags) == want:
                return m
        raise TfschedError(f"{path}: no meta graph tagged {','.join(sorted(want))} (its tag sets: {have})")
    if len(graphs) == 1:
        return graphs[0]
    train = [m for m in graphs if "train" in m.meta_info_def.tags]
    if len(train) == 1:
        return train[0]
    raise TfschedError(
        f"{path}: {len(graphs)} meta graphs (tag sets: {have}); choose one by its tag set (--tag-set)"
    )


def _saved_model_file(path: str) -> str:
    """The SavedModel file of an export directory."""
    for name in _SAVED_MODEL_FILES:
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    raise TfschedError(
        f"{path}: is a directory without saved_model.pb or saved_model.pbtxt, not a SavedModel"
    )


def read_graph_file(path: str, fmt: str | None = None, tag_set: str | None = None) -> LoadedGraph:
    """Read a graph file; ``fmt`` forces one of ``graphdef``, ``metagraph``, ``runmeta``,
    ``savedmodel``; ``tag_set`` chooses a SavedModel's meta graph.

    Raises :class:`TfschedError` naming the file for a missing, unreadable, truncated or
    foreign file.
    """
    if fmt is not None and fmt not in GRAPH_FORMATS:
        raise TfschedError(f"unknown graph format {fmt!r}; expected one of {', '.join(GRAPH_FORMATS)}")
    path = as_path(path, "graph")
    if not os.path.exists(path):
        raise TfschedError(f"{path}: no such file")
    if os.path.isdir(path):
        if fmt not in (None, "savedmodel"):
            raise TfschedError(f"{path}: is a directory, not a graph file")
        path, fmt = _saved_model_file(path), "savedmodel"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TfschedError(f"{path}: cannot read ({e.strerror})") from None
    if not data:
        raise TfschedError(f"{path}: empty file")

    graph_pb2, meta_graph_pb2, config_pb2, saved_model_pb2 = _protos()
    low = path.lower()
    if fmt is None:
        if low.endswith(".meta") or low.endswith(".meta.pbtxt"):
            order = ["metagraph", "graphdef", "runmeta", "savedmodel"]
        elif ".runmeta" in low or ".partitions" in low:
            order = ["runmeta", "graphdef", "metagraph", "savedmodel"]
        elif os.path.basename(low) in _SAVED_MODEL_FILES:
            order = ["savedmodel", "graphdef", "metagraph", "runmeta"]
        else:
            order = ["graphdef", "metagraph", "runmeta", "savedmodel"]
    else:
        order = [fmt]
    text = low.endswith(_TEXT_SUFFIXES) or _looks_like_text(data)

    def found(loaded: LoadedGraph) -> LoadedGraph:
        if tag_set is not None and loaded.format != "savedmodel":
            raise TfschedError(
                f"{path}: a tag set chooses a SavedModel's meta graph; this is a {_NAMES[loaded.format]}"
            )
        return loaded

    first_error = None
    for kind in order:
        try:
            if kind == "graphdef":
                g = _parse(graph_pb2.GraphDef(), data, text)
                if _plausible_graph(g):
                    return found(LoadedGraph(path, kind, nodes_from_graph_def(g, path), graph_def=g))
            elif kind in ("metagraph", "savedmodel"):
                if kind == "metagraph":
                    m = _parse(meta_graph_pb2.MetaGraphDef(), data, text)
                else:
                    sm = _parse(saved_model_pb2.SavedModel(), data, text)
                    if not any(_plausible_graph(g.graph_def) for g in sm.meta_graphs):
                        continue
                    m = _choose_meta_graph(sm, tag_set, path)
                if _plausible_graph(m.graph_def):
                    return found(
                        LoadedGraph(
                            path, kind, nodes_from_graph_def(m.graph_def, path), _fetch_hints(m), m.graph_def
                        )
                    )
            else:
                r = _parse(config_pb2.RunMetadata(), data, text)
                if r.partition_graphs and all(_plausible_graph(p) for p in r.partition_graphs):
                    return found(
                        LoadedGraph(path, kind, nodes_from_partition_graphs(list(r.partition_graphs), path))
                    )
        except TfschedError:
            raise
        except Exception as e:  # protobuf raises DecodeError, ParseError, UnicodeDecodeError...
            first_error = first_error or e
    what = " or ".join(_NAMES[k] for k in order)
    schema = _tfsched_schema(data)
    if schema is not None:  # one of tfsched's own files, given where a graph goes
        kind = schema.split("/")[0].removeprefix("tfsched.")
        raise TfschedError(
            f"{path}: a tfsched {kind} file ({schema}), not a TensorFlow {what}{_AS_GRAPH.get(kind, '')}"
        )
    detail = f" ({_one_line(first_error)})" if first_error else ""
    raise TfschedError(
        f"{path}: not a TensorFlow {what}: the file is truncated, corrupt or of another kind{detail}"
    )


# what to do with a tfsched file that was given as the graph
_AS_GRAPH = {
    "trace": "; analyze takes it with --trace, beside the graph it traced",
    "schedule": "; give it to tfsched.enable(schedule=...) or viz --schedule",
}


def _tfsched_schema(data: bytes) -> str | None:
    """The schema of a JSON file tfsched wrote ("tfsched.trace/1"), None for anything else."""
    if data.lstrip()[:1] != b"{":
        return None
    try:
        schema = json.loads(data).get("schema")
    except (ValueError, AttributeError):
        return None
    return schema if isinstance(schema, str) and schema.startswith("tfsched.") else None


def _looks_like_text(data: bytes) -> bool:
    head = data[:4096]
    try:
        s = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\r\n\t" for c in s)


def _one_line(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:200]


def _dtype_name(value: int, node: str, attr: str, path: str) -> str:
    types_pb2 = tf_submodule("core.framework.types_pb2")
    try:
        return types_pb2.DataType.Name(value).removeprefix("DT_")
    except ValueError:
        raise TfschedError(f"{path}: node {node!r}: unknown dtype {value} in attr {attr!r}") from None


def _shape(shape_proto) -> tuple[int, ...] | None:
    if shape_proto.unknown_rank:
        return None
    return tuple(int(d.size) for d in shape_proto.dim)


def _convert_attrs(node, path: str) -> tuple[dict, list[str], list | None]:
    attrs: dict = {}
    colocate: list[str] = []
    shapes = None
    for key, value in node.attr.items():
        which = value.WhichOneof("value")
        if key == "_class" and which == "list":
            colocate = [s.decode()[5:] for s in value.list.s if s.startswith(b"loc:@")]
        elif key == "_output_shapes" and which == "list":
            shapes = [_shape(s) for s in value.list.shape]
        elif which == "type":
            attrs[key] = _dtype_name(value.type, node.name, key, path)
        elif which == "i":
            attrs[key] = int(value.i)
        elif which == "b":
            attrs[key] = bool(value.b)
        elif which == "f":
            attrs[key] = float(value.f)
        elif which == "s":
            attrs[key] = value.s.decode("utf-8", "replace")
        elif which == "shape":
            attrs[key] = _shape(value.shape)
        elif which == "tensor" and key == "value":
            attrs["value_shape"] = _shape(value.tensor.tensor_shape)
        elif which == "list":
            if value.list.type:
                attrs[key] = [_dtype_name(t, node.name, key, path) for t in value.list.type]
            elif value.list.i:
                attrs[key] = [int(i) for i in value.list.i]
    return attrs, colocate, shapes


def nodes_from_graph_def(graph_def, path: str = "<graph>") -> list[RawNode]:
    """Convert a GraphDef proto into RawNodes (output dtypes are resolved later, on demand)."""
    nodes = []
    for n in graph_def.node:
        attrs, colocate, shapes = _convert_attrs(n, path)
        nodes.append(
            RawNode(
                name=n.name,
                op=n.op,
                device=n.device,
                inputs=list(n.input),
                colocate_with=colocate,
                output_shapes=shapes,
                attrs=attrs,
            )
        )
    return nodes


def nodes_from_partition_graphs(graphs: list, path: str = "<partitions>") -> list[RawNode]:
    """Merge partition graphs, replacing each ``_Send``/``_Recv`` pair by the edge it implements.

    The partitioner (``graph_partition.cc``) turns a cross-device data edge ``a:i -> b`` into
    ``a:i -> _Send`` on a's device and ``_Recv -> b`` on b's, matched by ``tensor_name``; a
    control edge ``a -> b`` becomes ``a -> (^) dummy Const -> _Send`` and ``_Recv -> (^) b``.
    Node names are unique across partitions, so the partitions merge by name.
    """
    nodes: dict[str, RawNode] = {}
    sends: dict[str, tuple[str, str]] = {}  # tensor_name -> (input spelled as in NodeDef, send device)
    recvs: dict[str, str] = {}  # recv node name -> tensor_name
    for g in graphs:
        for rn in nodes_from_graph_def(g, path):
            if rn.op in ("_Send", "_HostSend"):
                data_inputs = [i for i in rn.inputs if not i.startswith("^")]
                sends[rn.attrs.get("tensor_name", "")] = (data_inputs[0] if data_inputs else "", rn.device)
            elif rn.op in ("_Recv", "_HostRecv"):
                recvs[rn.name] = rn.attrs.get("tensor_name", "")
            else:
                nodes[rn.name] = rn
    # A control edge's dummy: a Const with only control inputs, feeding only a _Send.
    dummies = {}
    for name, rn in nodes.items():
        if rn.op == "Const" and rn.inputs and all(i.startswith("^") for i in rn.inputs):
            dummies[name] = rn.inputs[0][1:]

    def source_of(recv: str) -> tuple[str, bool]:
        tensor_name = recvs[recv]
        if tensor_name not in sends:
            raise TfschedError(f"{path}: _Recv {recv!r} has no matching _Send (tensor_name {tensor_name!r})")
        src = sends[tensor_name][0]
        op = src.split(":")[0].lstrip("^")
        if op in dummies:
            return dummies[op], True
        return src, False

    for rn in nodes.values():
        new_inputs = []
        for i in rn.inputs:
            ctrl = i.startswith("^")
            op, _, idx = i.lstrip("^").partition(":")
            if op in recvs:
                src, is_ctrl = source_of(op)
                new_inputs.append(f"^{src.split(':')[0]}" if (ctrl or is_ctrl) else src)
            else:
                new_inputs.append(i)
        rn.inputs = list(dict.fromkeys(new_inputs))
    for d in dummies:
        # Drop dummies that only fed a _Send.
        if not any(d == i.lstrip("^").split(":")[0] for rn in nodes.values() for i in rn.inputs):
            nodes.pop(d)
    return list(nodes.values())


def output_specs(op_type: str) -> list[tuple[str | None, str, str, str]] | None:
    """The output args of an op type from TensorFlow's registry, as plain tuples.

    Each is ``(fixed dtype or None, type_attr, number_attr, type_list_attr)``; None when
    TensorFlow does not know the op.
    """
    od = op_def(op_type)
    if od is None:
        return None
    types_pb2 = tf_submodule("core.framework.types_pb2")
    out = []
    for arg in od.output_arg:
        fixed = types_pb2.DataType.Name(arg.type).removeprefix("DT_") if arg.type else None
        if fixed is not None and arg.is_ref:
            fixed += "_REF"
        out.append((fixed, arg.type_attr, arg.number_attr, arg.type_list_attr))
    return out


def infer_shapes_with_tensorflow(graph_def, names: set[str], path: str) -> dict[str, list]:
    """Static output shapes of ``names`` from TensorFlow's shape inference (imports TensorFlow).

    Used only when the file was saved without ``_output_shapes`` for a transfer's source.
    """
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()  # without its C++ start-up chatter (it was on analyze's stderr)

    graph_pb2 = tf_submodule("core.framework.graph_pb2")
    stripped = graph_pb2.GraphDef()
    stripped.CopyFrom(graph_def)
    for n in stripped.node:  # placement is ours to decide; TF only has to infer shapes here
        n.device = ""
        if "_class" in n.attr:
            del n.attr["_class"]
    g = tf.Graph()
    try:
        with g.as_default():
            tf.compat.v1.import_graph_def(stripped, name="")
    except Exception as e:
        raise TfschedError(f"{path}: TensorFlow cannot import the graph: {_one_line(e)}") from None
    shapes = {}
    for name in names:
        try:
            op = g.get_operation_by_name(name)
        except KeyError:
            continue
        shapes[name] = [
            tuple(-1 if d is None else d for d in o.shape.as_list()) if o.shape.rank is not None else None
            for o in op.outputs
        ]
    return shapes


def placed_graph_def(graph_def, default_device: str | None = None, path: str = "<graph>"):
    """A copy of ``graph_def`` with every node's device resolved as TensorFlow's placer would.

    This is the state a session's master hands to Grappler; useful to run the pass offline.
    """
    from collections import defaultdict

    from tfsched.graph.build import _split_input, place
    from tfsched.graph.devices import parse_device

    nodes = {rn.name: rn for rn in nodes_from_graph_def(graph_def, path)}
    inputs = {n: [_split_input(i) for i in rn.inputs] for n, rn in nodes.items()}
    consumers = defaultdict(list)
    for n, ins in inputs.items():
        for src, _, _ in ins:
            consumers[src].append(n)
    if default_device is None:
        jobs = sorted({parse_device(rn.device).job for rn in nodes.values() if rn.device} - {None, "ps"})
        default_device = f"/job:{jobs[0] if jobs else 'worker'}/replica:0/task:0/device:CPU:0"
    devices = place(nodes, inputs, consumers, default_device, path)
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    for n in out.node:
        n.device = devices[n.name]
    return out
