"""Minimum bytes, FLOP counts and derived named sizes per op.

Note [minimum bytes]
Each distinct input tensor is read once and each *used* output written once; nothing else counts. That is the
floor METHOD.md asks for: time >= bytes / measured copy bandwidth.

Note [FLOP convention]
Counts are per element and deliberately simple so a person can check them by hand; exp, rsqrt and division count
as one FLOP each:
  softmax / log_softmax      5 per element   (max, subtract, exp, sum, scale)
  layer_norm / group_norm    7 per element   (sum, square, sum of squares; subtract, * rstd, * weight, + bias)
  rms_norm                   4 per element   (square, sum; * rstd, * weight)
  inference batch_norm       4 per element   (subtract, * scale, * weight, + bias)
  sum / amax / amin          1 per input element
  mean, adaptive/avg pool    1 per input element + 1 per output element (the divide)
  max_pool2d                 1 per input element
  elementwise                per-op constant per output element (see _POINTWISE_FLOPS)
  fused pointwise            the sum of its distinct ops' constants per output element (silu(x)*x: 4 + 1)
"""
from __future__ import annotations

import math
from typing import Any

from .expression import FUSED_OP, NORM_OP, OPS, SOFTMAX_OP, distinct_calls, parse
from .signature import OpSignature

_POINTWISE_FLOPS = {
    "aten.relu.default": 1, "aten.add.Tensor": 1, "aten.sub.Tensor": 1, "aten.mul.Tensor": 1, "aten.div.Tensor": 1,
    "aten.sigmoid.default": 3, "aten.silu.default": 4, "aten.tanh.default": 1, "aten.gelu.default": 8,
    "aten._to_copy.default": 0,
}
_PER_ELEMENT = {
    "aten._softmax.default": 5, "aten._log_softmax.default": 5, "aten._safe_softmax.default": 5,
    "aten.native_layer_norm.default": 7, "aten.native_group_norm.default": 7, "aten._fused_rms_norm.default": 4,
    "aten._native_batch_norm_legit_no_training.default": 4,
    "aten.sum.dim_IntList": 1, "aten.amax.default": 1, "aten.amin.default": 1,
    "aten.max_pool2d_with_indices.default": 1,
}
_WITH_DIVIDE = {"aten.mean.dim", "aten._adaptive_avg_pool2d.default", "aten.avg_pool2d.default"}


def min_bytes(sig: OpSignature) -> int:
    reads = sum(spec.nbytes for _, spec in sig.tensor_args())
    writes = sum(sig.outputs[i].nbytes for i in sig.used_outputs)
    return reads + writes


def _main_input(sig: OpSignature):
    return sig.tensor_args()[0][1]


def flops(sig: OpSignature) -> int:
    x = _main_input(sig)
    if sig.op in _PER_ELEMENT:
        return _PER_ELEMENT[sig.op] * x.numel
    if sig.op in _WITH_DIVIDE:
        return x.numel + sig.outputs[0].numel
    if sig.op in _POINTWISE_FLOPS:
        return _POINTWISE_FLOPS[sig.op] * sig.outputs[0].numel
    if sig.op in (FUSED_OP, SOFTMAX_OP, NORM_OP):
        calls = distinct_calls(parse(sig.scalar_args()["expr"]))
        per = sum(_POINTWISE_FLOPS[OPS[c.op].aten] for c in calls) + {SOFTMAX_OP: 5, NORM_OP: 7}.get(sig.op, 0)
        return per * sig.outputs[0].numel
    return 0


def _norm_dim(dim: int, ndim: int) -> int:
    return dim + ndim if dim < 0 else dim


def derived_sizes(sig: OpSignature) -> dict[str, int]:
    """Per-op sizes with stable names that templates and LLM plans use (rows/cols, N/C/H/W, group sizes)."""
    x = _main_input(sig)
    s = sig.scalar_args()
    out: dict[str, int] = {}
    if sig.op in ("aten._softmax.default", "aten._log_softmax.default", "aten._safe_softmax.default"):
        d = _norm_dim(int(s["dim"]), len(x.shape))
        out["cols"] = x.shape[d] if x.shape else 1
        out["inner"] = math.prod(x.shape[d + 1:])
        out["rows"] = x.numel // max(out["cols"], 1)
    elif sig.op == SOFTMAX_OP:  # over the last dim of the output's shape; the inputs may broadcast
        out["cols"] = sig.outputs[0].shape[-1]
        out["inner"] = 1
        out["rows"] = sig.outputs[0].numel // max(out["cols"], 1)
    elif sig.op in ("aten.native_layer_norm.default", "aten._fused_rms_norm.default", NORM_OP):
        out["cols"] = math.prod(s["normalized_shape"])
        # a group's first input may be a prologue's broadcast operand: its output has the norm's shape
        out["rows"] = (sig.outputs[0] if sig.op == NORM_OP else x).numel // max(out["cols"], 1)
        out["ndims"] = len(s["normalized_shape"])
    elif sig.op == "aten.native_group_norm.default":
        out["G"] = int(s["group"])
        out["ch_per_group"] = int(s["C"]) // max(int(s["group"]), 1)
        out["group_size"] = out["ch_per_group"] * int(s["HxW"])
    elif sig.op in ("aten.mean.dim", "aten.sum.dim_IntList", "aten.amax.default", "aten.amin.default"):
        dims = s.get("dim") or tuple(range(len(x.shape)))
        dims = sorted(_norm_dim(int(d), len(x.shape)) for d in dims)
        out["cols"] = math.prod(x.shape[d] for d in dims)
        out["rows"] = x.numel // max(out["cols"], 1)
        out.update(_nchw(x.shape))
    elif sig.op in ("aten._adaptive_avg_pool2d.default", "aten.avg_pool2d.default",
                    "aten.max_pool2d_with_indices.default", "aten._native_batch_norm_legit_no_training.default"):
        out.update(_nchw(x.shape))
        out["HxW"] = out.get("H", 1) * out.get("W", 1)
        if len(sig.outputs[0].shape) == 4:
            out["OH"], out["OW"] = sig.outputs[0].shape[2], sig.outputs[0].shape[3]
    out["numel"] = sig.outputs[0].numel if sig.op == SOFTMAX_OP else x.numel
    return out


def _nchw(shape: tuple[int, ...]) -> dict[str, Any]:
    if len(shape) == 4:
        return dict(zip(("N", "C", "H", "W"), shape))
    if len(shape) == 3:
        return dict(zip(("C", "H", "W"), shape))
    return {}
