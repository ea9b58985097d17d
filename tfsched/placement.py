"""Where each variable of a PS graph goes, so that the PS tasks exchange about the same bytes.

``replica_device_setter`` puts variables on the PS round-robin unless given a ``ps_strategy``,
and a model whose layers alternate kernel and bias then has every kernel on the first PS (VGG16
on two PS: 33.6M parameters against 12,426); the busiest PS's link bounds the step.
:class:`Placement` is a strategy planned from the graph's transfers: ``tfsched analyze GRAPH
--placement placement.json`` writes it, and a worker's graph-building code uses it::

    strategy = tfsched.ps_strategy("placement.json", ps_tasks=2)
    with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
            ps_tasks=2, ps_strategy=strategy)):
        ...  # the model, as before

The built-in models use the same plan (``build_graph(ps_placement="bytes")``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.graph.build import VARIABLE_OPS
from tfsched.graph.model import CommGraph

SCHEMA = "tfsched.placement/1"


def plan_placement(moved: dict[str, float], ps_tasks: int) -> dict[str, int]:
    """Each variable's PS (its index): largest first by ``moved``, the bytes its pulls and
    pushes move a step, each to the PS with the fewest bytes so far, the lowest index on a tie
    (longest processing time first: within 4/3 of the best split of whole variables).

    Improves on TF1's ``GreedyLoadBalancingStrategy`` with ``byte_size_load_fn`` (which
    TensorFlow 2 no longer ships, and which the built-in models followed until the thirty-fifth
    session) in two ways, measured on two PS at batch 4 (``tests/models/test_models.py``):

    - It weighs bytes moved, not bytes held. The Transformer's 8000-row embedding table is looked
      up on its PS and sends a few rows a step: by bytes held its PS exchanged 20% of a step's
      bytes and the other 80%; by bytes moved, 49.5% and 50.5%.
    - It places the largest first. Greedy in creation order cannot foresee VGG16's 16.8M-parameter
      fc2, which comes after the first PS has taken most of the rest: 74% and 26% of a step's
      bytes; largest first, 50% each. ResNet-50 and Inception-v3 go from 49/51 to 50/50.

    Vanilla TensorFlow's synchronized step, VGG16 training at batch 103, 2 PS x 4 workers at
    1 Gbit/s, two runs of each placement alternating (``benchmarks/placement.py``,
    ``benchmarks/results/placement-vgg16-train.md``): 6.30 s with this plan, 6.75 s by bytes held
    (1.07x), 9.01 s round-robin (1.43x). The Transformer's at batch 21, whose step the two cores
    bound (83% to 87% busy): 0.945 s, 0.974 s (1.03x), 1.111 s (1.18x).

    No placement of whole variables evens a variable that moves more than a PS's share: AlexNet's
    second dense layer (16.8M parameters) alone moves 68% of its bytes (``analyze`` says to
    partition it). Variables that move nothing (the global step) come last, ties by name.

    >>> plan_placement({"a": 5, "b": 4, "c": 3, "d": 3, "e": 3, "step": 0}, 2)
    {'a': 0, 'b': 1, 'c': 1, 'd': 0, 'e': 1, 'step': 0}
    """
    if ps_tasks < 1:
        raise TfschedError(f"a placement needs at least one PS task, got {ps_tasks}")
    loads, plan = [0.0] * ps_tasks, {}
    for name in sorted(moved, key=lambda n: (-moved[n], n)):
        task = loads.index(min(loads))
        plan[name] = task
        loads[task] += moved[name]
    return plan


@dataclass
class Placement:
    """A planned placement, usable as ``replica_device_setter``'s ``ps_strategy``.

    ``variables`` maps each variable (op name) to its PS index and ``moved`` to the bytes it
    moves a step. A PS op the plan does not name (a variable added since the graph was analyzed)
    goes to the PS with the fewest bytes, weighing twice its bytes held (a pull and a push).
    """

    ps_tasks: int
    variables: dict[str, int]
    moved: dict[str, float]
    source: str = ""
    _extra: list[float] = field(default_factory=list, repr=False)

    @classmethod
    def of_graph(cls, graph: CommGraph, ps_tasks: int | None = None) -> Placement:
        """The plan for ``graph``'s variables over ``ps_tasks`` PS (default: the graph's)."""
        moved: dict[str, float] = {}
        for load in graph.variable_load.values():
            for v, n in load.items():
                moved[v] = moved.get(v, 0) + n
        for name in graph.graph:  # variables whose transfers move nothing still get a PS
            if graph.op(name).type in VARIABLE_OPS and graph.op(name).task in graph.ps_tasks:
                moved.setdefault(name, 0)
        n = ps_tasks or len(graph.ps_tasks)
        return cls(n, plan_placement(moved, n), moved, graph.source)

    def check_every_ps_serves(self) -> None:
        """One error if a PS of the plan holds no variable: ``analyze --placement-ps`` past the
        graph's variables (the report listed every such PS: a line of 1.9 MB for 100,000 PS and
        Seq-32's 34 variables). A built-in model spread over more PS than it has variables keeps
        them idle, as its round-robin placement does."""
        if self.moved and self.ps_tasks > len(self.moved):
            raise TfschedError(
                f"{self.source}: a placement over {self.ps_tasks} PS tasks would leave "
                f"{self.ps_tasks - len(self.moved)} of them without a variable: the graph has {len(self.moved)}"
            )

    def loads(self) -> list[float]:
        """Bytes each PS exchanges a step under this plan."""
        out = [0.0] * self.ps_tasks
        for v, task in self.variables.items():
            out[task] += self.moved.get(v, 0)
        return out

    def __call__(self, op) -> int:
        task = self.variables.get(op.name)
        if task is not None:
            return task
        if not self._extra:
            self._extra.extend(self.loads())
        task = self._extra.index(min(self._extra))
        self._extra[task] += 2 * held_bytes(op)
        return task

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "graph": self.source,
            "ps_tasks": self.ps_tasks,
            "variables": {v: {"ps": t, "bytes": self.moved.get(v, 0)} for v, t in self.variables.items()},
        }

    def save(self, path: str) -> None:
        from tfsched.io import write_atomic

        write_atomic(path, lambda f: json.dump(self.to_json(), f, indent=1))


def held_bytes(op) -> int:
    """The bytes a variable op holds, from its ``shape`` and ``dtype`` attributes (0 when unknown)."""
    attrs = op.node_def.attr
    if "shape" not in attrs or "dtype" not in attrs:
        return 0
    dims = [d.size for d in attrs["shape"].shape.dim]
    if any(d < 0 for d in dims):
        return 0
    from tfsched.graph._tf import import_tensorflow

    n = import_tensorflow().dtypes.as_dtype(attrs["dtype"].type).size
    for d in dims:
        n *= d
    return n


def load_placement(path: str, ps_tasks: int | None = None) -> Placement:
    """Read a placement file (``analyze --placement``); one TfschedError line when it is not one,
    or when it was planned for another number of PS than ``ps_tasks``."""
    from tfsched.io import read_json
    from tfsched.units import is_count

    if ps_tasks is not None and not is_count(ps_tasks, least=1):
        # True and 2.0 compared equal to a plan's 1 and 2, and went on to the device setter
        raise TfschedError(f"ps_tasks must be a whole number of PS tasks, at least 1, got {ps_tasks!r}")
    data = read_json(path, "placement", SCHEMA)
    try:
        n = data["ps_tasks"]
        variables = {str(v): r["ps"] for v, r in data["variables"].items()}
        moved = {str(v): float(r["bytes"]) for v, r in data["variables"].items()}
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise TfschedError(f"{path}: not a {SCHEMA} file (bad or missing field: {e})") from None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TfschedError(f"{path}: ps_tasks must be a positive integer, got {n!r}")
    bad = next((v for v, t in variables.items() if not isinstance(t, int) or not 0 <= t < n), None)
    if bad is not None:
        raise TfschedError(f"{path}: variable {bad!r} has PS {variables[bad]!r}, not one of 0 to {n - 1}")
    if ps_tasks is not None and ps_tasks != n:
        raise TfschedError(
            f"{path}: a placement over {n} PS tasks, used with ps_tasks={ps_tasks} "
            f"(write one for {ps_tasks}: tfsched analyze GRAPH --placement FILE --placement-ps {ps_tasks})"
        )
    return Placement(n, variables, moved, str(data.get("graph", "")))


__all__ = ["Placement", "SCHEMA", "held_bytes", "load_placement", "plan_placement"]
