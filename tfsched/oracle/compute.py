"""A compute-time model from op shapes, for analysis before any trace exists.

Time = per-op overhead + max(FLOPs / peak FLOP rate, bytes touched / memory bandwidth):
a roofline estimate. The constants are defaults for a small CPU; a trace
(``TimeOracle.from_trace``) replaces the estimates with measured times.
"""

from __future__ import annotations

import math

from tfsched.graph.model import Shape

# Ops that do no work at run time (or that the runtime elides).
_FREE = frozenset(
    {
        "Const",
        "Identity",
        "NoOp",
        "VarHandleOp",
        "VariableV2",
        "Placeholder",
        "Shape",
        "ShapeN",
        "Size",
        "Rank",
        "StopGradient",
        "Reshape",
        "Squeeze",
        "ExpandDims",
        "Enter",
        "Exit",
        "Merge",
        "Switch",
        "NextIteration",
        "LoopCond",
        "ReadVariableOp",
        "Snapshot",
    }
)


def _n(shape: Shape | None) -> int:
    if shape is None:
        return 0
    return math.prod(max(d, 1) for d in shape)


def _conv_flops(out: Shape | None, filt: Shape | None, per_output: bool = True) -> float:
    """2 * outputs * kh * kw * in_channels for a conv whose output (or out_backprop) is ``out``."""
    if out is None or filt is None or len(filt) != 4:
        return 0.0
    kh, kw, cin, _ = (max(d, 1) for d in filt)
    return 2.0 * _n(out) * kh * kw * cin


def estimate_op_time(
    op_type: str,
    in_shapes: list[Shape | None],
    out_shapes: list[Shape | None],
    attrs: dict,
    *,
    flops_per_s: float = 2e10,
    mem_bytes_per_s: float = 1e10,
    per_op_s: float = 5e-6,
) -> float:
    """Estimated seconds for one op (float32 assumed for bytes)."""
    if op_type in _FREE:
        return 0.0
    out0 = out_shapes[0] if out_shapes else None
    flops = 0.0
    if (
        op_type in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
        and len(in_shapes) >= 2
        and in_shapes[0]
    ):
        a = in_shapes[0]
        k = a[-2] if attrs.get("transpose_a") or attrs.get("adj_x") else a[-1]
        flops = 2.0 * _n(out0) * max(k, 1)
    elif op_type == "Conv2D" and len(in_shapes) >= 2:
        flops = _conv_flops(out0, in_shapes[1])
    elif op_type == "Conv2DBackpropInput" and len(in_shapes) >= 3:
        # inputs: input_sizes, filter, out_backprop; as many FLOPs as the forward conv
        flops = _conv_flops(in_shapes[2], in_shapes[1])
    elif op_type == "Conv2DBackpropFilter" and len(in_shapes) >= 3:
        flops = _conv_flops(in_shapes[2], out0)
    elif op_type.startswith("DepthwiseConv2dNative") and len(in_shapes) >= 2:
        filt = in_shapes[1] if op_type == "DepthwiseConv2dNative" else out0
        if filt and len(filt) == 4:
            flops = (
                2.0 * _n(out0 if op_type == "DepthwiseConv2dNative" else in_shapes[-1]) * filt[0] * filt[1]
            )
    touched = 4.0 * (sum(_n(s) for s in in_shapes) + sum(_n(s) for s in out_shapes))
    return per_op_s + max(flops / flops_per_s, touched / mem_bytes_per_s)
