"""Operator cards for template tests (CPU) and GPU tests alike, built the way capture builds them.

Each factory runs the ATen op on ``meta`` tensors to get exactly the outputs (shapes, strides, dtypes) PyTorch
would produce, then builds an OpSignature with schema argument names and the card from it. No GPU needed.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from forge_backend.cards import OperatorCard, build_card
from forge_backend.signature import ArgSpec, OpSignature, TensorSpec, _scalar_value

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def meta(shape: Sequence[int], dtype: str = "float32", channels_last: bool = False) -> torch.Tensor:
    t = torch.empty(tuple(shape), dtype=DTYPES[dtype], device="meta")
    return t.to(memory_format=torch.channels_last) if channels_last else t


def card_for(op: str, args: dict[str, Any], used_outputs: Sequence[int] | None = None) -> OperatorCard:
    """``args``: schema name -> meta tensor, scalar, or None, in any order; defaults fill the rest."""
    packet, overload = op.removeprefix("aten.").rsplit(".", 1)
    fn = getattr(getattr(torch.ops.aten, packet), overload)
    schema = fn._schema.arguments
    values = [args[a.name] if a.name in args else a.default_value for a in schema]
    positional = [v for v, a in zip(values, schema) if not a.kwarg_only]
    kwargs = {a.name: v for v, a in zip(values, schema) if a.kwarg_only}
    out = fn(*positional, **kwargs)
    outs = tuple(out) if isinstance(out, (list, tuple)) else (out,)
    specs = []
    for a, v in zip(schema, values):
        if isinstance(v, torch.Tensor):
            specs.append(ArgSpec(a.name, TensorSpec.of(v)))
        else:
            specs.append(ArgSpec(a.name, value=_scalar_value(v)))
    used = tuple(used_outputs) if used_outputs is not None else tuple(range(len(outs)))
    sig = OpSignature(op, tuple(specs), tuple(TensorSpec.of(o) for o in outs), used, "sm_90")
    return build_card(sig)


def softmax(shape, dtype="float32", log=False, dim=-1) -> OperatorCard:
    op = "aten._log_softmax.default" if log else "aten._softmax.default"
    return card_for(op, {"self": meta(shape, dtype), "dim": dim, "half_to_float": False})


def reduction(op, shape, dims, dtype="float32", keepdim=False, out_dtype=None) -> OperatorCard:
    args = {"self": meta(shape, dtype), "dim": list(dims), "keepdim": keepdim}
    if op == "aten.mean.dim" or op == "aten.sum.dim_IntList":
        args["dtype"] = DTYPES[out_dtype] if out_dtype else None
    return card_for(op, args)


def layer_norm(shape, normalized, dtype="float32", weight=True, bias=True, used=(0, 1, 2), eps=1e-5):
    x = meta(shape, dtype)
    w = meta(normalized, dtype) if weight else None
    b = meta(normalized, dtype) if bias else None
    return card_for("aten.native_layer_norm.default",
                    {"input": x, "normalized_shape": list(normalized), "weight": w, "bias": b, "eps": eps}, used)


def rms_norm(shape, normalized, dtype="float32", weight=True, used=(0, 1), eps=1e-6):
    w = meta(normalized, dtype) if weight else None
    return card_for("aten._fused_rms_norm.default",
                    {"input": meta(shape, dtype), "normalized_shape": list(normalized), "weight": w, "eps": eps}, used)


def group_norm(n, c, h, w, groups=32, dtype="float32", affine=True, used=(0, 1, 2), eps=1e-6):
    wt = meta([c], dtype) if affine else None
    return card_for("aten.native_group_norm.default",
                    {"input": meta([n, c, h, w], dtype), "weight": wt, "bias": wt, "N": n, "C": c, "HxW": h * w,
                     "group": groups, "eps": eps}, used)


def batch_norm(shape, dtype="float32", channels_last=False, stats_dtype="float32", affine=True):
    c = shape[1]
    wt = meta([c], stats_dtype) if affine else None
    return card_for("aten._native_batch_norm_legit_no_training.default",
                    {"input": meta(shape, dtype, channels_last), "weight": wt, "bias": wt,
                     "running_mean": meta([c], stats_dtype), "running_var": meta([c], stats_dtype),
                     "momentum": 0.1, "eps": 1e-5}, (0,))


def adaptive_pool(shape, dtype="float32", channels_last=False) -> OperatorCard:
    return card_for("aten._adaptive_avg_pool2d.default",
                    {"self": meta(shape, dtype, channels_last), "output_size": [1, 1]})


def spatial_mean(shape, dtype="float32", channels_last=False, dims=(-1, -2), keepdim=True) -> OperatorCard:
    return card_for("aten.mean.dim", {"self": meta(shape, dtype, channels_last), "dim": list(dims),
                                      "keepdim": keepdim, "dtype": None})


def unary(op, shape, dtype="float32", channels_last=False, **scalars) -> OperatorCard:
    return card_for(op, {"self": meta(shape, dtype, channels_last), **scalars})


def binary(op, shape, dtype="float32", other_dtype=None, other=None, alpha=None) -> OperatorCard:
    args: dict[str, Any] = {"self": meta(shape, dtype)}
    args["other"] = other if other is not None else meta(shape, other_dtype or dtype)
    if alpha is not None:
        args["alpha"] = alpha
    return card_for(op, args)


def to_copy(shape, dtype, out_dtype, channels_last=False) -> OperatorCard:
    return card_for("aten._to_copy.default", {"self": meta(shape, dtype, channels_last), "dtype": DTYPES[out_dtype]})


def fused(expr: str, inputs: Sequence[tuple[Sequence[int], str]]) -> OperatorCard:
    """A ``kforge.pointwise`` card; the output comes from evaluating the expression on meta tensors."""
    from forge_backend.expression import FUSED_OP, evaluate, parse

    xs = [meta(shape, dtype) for shape, dtype in inputs]
    out = evaluate(parse(expr), xs)
    args = tuple(ArgSpec(f"x{i}", TensorSpec.of(x)) for i, x in enumerate(xs)) + (ArgSpec("expr", value=expr),)
    return build_card(OpSignature(FUSED_OP, args, (TensorSpec.of(out),), (0,), "sm_90"))


def softmax_fused(expr: str, inputs: Sequence[tuple[Sequence[int], str]], out_dtype: str | None = None
                  ) -> OperatorCard:
    """A ``kforge.softmax`` card (softmax_fusion.py): softmax over the last dim of the expression, cast to
    ``out_dtype`` (default: the expression's dtype). Inputs may broadcast, as an attention mask does."""
    from forge_backend.expression import SOFTMAX_OP, evaluate, parse

    xs = [meta(shape, dtype) for shape, dtype in inputs]
    v = evaluate(parse(expr), xs)
    out = torch.empty(v.shape, dtype=DTYPES[out_dtype] if out_dtype else v.dtype, device="meta")
    args = tuple(ArgSpec(f"x{i}", TensorSpec.of(x)) for i, x in enumerate(xs)) + (ArgSpec("expr", value=expr),)
    return build_card(OpSignature(SOFTMAX_OP, args, (TensorSpec.of(out),), (0,), "sm_90"))


def norm_fused(expr: str, shape: Sequence[int], extras: Sequence[tuple[Sequence[int], str]], dtype: str = "bfloat16",
               norm: str = "layer_norm", norm_out: int = 0, weight: bool = False) -> OperatorCard:
    """A ``kforge.norm`` card (norm_fusion.py): a layer/rms norm over the last dim, then ``expr`` with input
    ``x<norm_out>`` the norm's output and the other inputs ``extras`` (in expression order)."""
    from forge_backend.expression import NORM_OP, evaluate, parse

    n = shape[-1]
    if norm == "layer_norm":
        base = layer_norm(shape, (n,), dtype, weight=weight, bias=weight, used=(0,))
    else:
        base = rms_norm(shape, (n,), dtype, weight=weight, used=(0,))
    sig = base.signature_obj()
    y = meta(shape, dtype)
    xs = [meta(s, d) for s, d in extras]
    operands = xs[:norm_out] + [y] + xs[norm_out:]
    out = evaluate(parse(expr), operands)
    names = [i for i in range(len(operands)) if i != norm_out]
    args = sig.args + tuple(ArgSpec(f"x{i}", TensorSpec.of(x)) for i, x in zip(names, xs)) + (
        ArgSpec("expr", value=expr), ArgSpec("norm", value=sig.op), ArgSpec("norm_out", value=norm_out))
    return build_card(OpSignature(NORM_OP, args, (TensorSpec.of(out),), (0,), "sm_90"))


def norm_residual(prologue: str, heads: Sequence[tuple[Sequence[int], str]], expr: str,
                  extras: Sequence[tuple[Sequence[int], str]], shape: Sequence[int], dtype: str = "bfloat16",
                  norm: str = "layer_norm", weight: bool = False) -> OperatorCard:
    """A ``kforge.norm`` card with a prologue (Note [a norm takes the residual add before it]): the norm's input is
    ``prologue`` over inputs ``heads`` (p0..pm) and is output 1; then ``expr`` with x0 the norm's output."""
    from forge_backend.expression import evaluate, parse

    card = norm_fused(expr, shape, extras, dtype, norm, 0, weight)
    sig = card.signature_obj()
    hs = [meta(sh, d) for sh, d in heads]
    r = evaluate(parse(prologue), hs)
    assert tuple(r.shape) == tuple(shape), (r.shape, shape)
    args = tuple(ArgSpec(f"p{i}", TensorSpec.of(h)) for i, h in enumerate(hs)) + \
        tuple(a for a in sig.args if a.name != "input") + (ArgSpec("prologue", value=prologue),)
    return build_card(OpSignature(sig.op, args, (sig.outputs[0], TensorSpec.of(r)), (0, 1), "sm_90"))


def causal_conv1d(c: int = 96, length: int = 37, k: int = 4, dtype: str = "bfloat16", channels_fast: bool = True,
                  bias: bool = False, padding: int | None = None, batch: int = 1) -> OperatorCard:
    """Qwen 3.5's causal conv1d: a depthwise convolution (padding k - 1, unless given) over a [B, L, C] activation
    seen as [B, C, L] (a transposed view, channels fast), or over a contiguous [B, C, L]."""
    x = meta((batch, length, c), dtype).transpose(1, 2) if channels_fast else meta((batch, c, length), dtype)
    return card_for("aten.convolution.default", {
        "input": x, "weight": meta((c, 1, k), dtype), "bias": meta((c,), dtype) if bias else None,
        "stride": [1], "padding": [k - 1 if padding is None else padding], "dilation": [1], "transposed": False,
        "output_padding": [0], "groups": c})


def for_arch(card: OperatorCard, arch: str) -> OperatorCard:
    """``card`` as it would be built on a GPU of architecture ``arch`` (its key changes with it)."""
    return build_card(dataclasses.replace(card.signature_obj(), arch=arch))


def relay_from_90_blocks() -> tuple[OperatorCard, dict[str, Any]]:
    """A relay softmax whose progress rule holds only from 90 blocks (538 pieces a row, up to cdiv(538, n) of a row in
    one block, a lag of 5): the card and the layout's knobs (Note [rows relayed through global memory] in relay.py)."""
    from forge_backend.search.templates import family_for

    card = softmax((2, 1100000), "float32")
    base = family_for(card).defaults(card, "relay")
    return card, {k: v for k, v in base.items() if k not in ("writers", "regs")} | {
        "pe": 2048, "nw": 8, "nc": 1, "k": 7, "lag": 5}


def odd_cards() -> list[OperatorCard]:
    """A card of every family at odd sizes (tails that are not multiples of any tile): the GPU tests verify a sample
    of each family's space at them (test_templates_gpu.py), the host tests each strategy (test_templates_host.py)."""
    return [
        softmax((3, 4097), "float32"), softmax((37, 1000), "bfloat16"), softmax((5, 70001), "float16"),
        softmax((2, 3, 33), "float32", log=True),
        group_norm(1, 96, 13, 17, groups=32, dtype="bfloat16"), group_norm(3, 64, 7, 9, groups=8),
        layer_norm((7, 1001), (1001,), "float32"), layer_norm((33, 4096), (4096,), "bfloat16", used=(0,)),
        rms_norm((9, 777), (777,), "bfloat16", used=(0,)),
        spatial_mean((3, 33, 7, 7), "float16"), spatial_mean((2, 40, 5, 3), "float32", channels_last=True),
        adaptive_pool((5, 24, 9, 9), "bfloat16", channels_last=True),
        unary("aten.gelu.default", (1001, 7), "bfloat16"), unary("aten.silu.default", (3, 5, 77), "float32"),
        binary("aten.mul.Tensor", (999, 13), "bfloat16"),
        softmax_fused("add(mul(x0,0.125),x1)", [((3, 5, 7, 1000), "float32"), ((5, 1, 1000), "float32")], "float16"),
        softmax_fused("to_float32(add(x0,x1))", [((2, 3, 4104), "bfloat16"), ((3, 4104), "bfloat16")], "bfloat16"),
        softmax_fused("to_float32(x0)", [((3, 70001), "float16")]),
        # a norm with its epilogue (norm_fusion.py; fuse_norm): adaLN at MMDiT's width, and odd sizes
        norm_fused("add(mul(x0,x1),x2)", (2, 4096, 1536), [((2, 1, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16")]),
        norm_fused("mul(x0,sigmoid(x1))", (3, 7, 1000), [((3, 7, 1000), "float32")], "float32", norm="rms_norm",
                      weight=True),
        norm_fused("add(x0,mul(x1,2.0))", (5, 999), [((999,), "float16")], "float16", norm_out=1, weight=True),
        # with the residual add before it (Note [a norm takes the residual add before it]): a broadcast gate, odd sizes
        norm_residual("add(x0,mul(x1,x2))", [((3, 7, 1000), "float32"), ((3, 1, 1000), "float32"),
                                                ((3, 7, 1000), "float32")],
                         "add(mul(x0,x1),x2)", [((3, 1, 1000), "float32"), ((3, 1, 1000), "float32")], (3, 7, 1000),
                         "float32"),
        norm_residual("add(x0,x1)", [((5, 999), "float16"), ((5, 999), "float16")], "mul(x0,2.0)", [], (5, 999),
                         "float16", norm="rms_norm", weight=True),
        norm_residual("add(x0,mul(x1,x2))", [((2, 33, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16"),
                                                ((2, 33, 1536), "bfloat16")],
                         "add(mul(x0,x1),x2)", [((2, 1, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16")], (2, 33, 1536)),
        # the depthwise conv1d in both layouts, a bias, kernels that do not divide the tiles
        causal_conv1d(37, 29, k=3, dtype="float32", channels_fast=False, bias=True),
        causal_conv1d(100, 130, k=4, dtype="bfloat16"), causal_conv1d(33, 70, k=7, dtype="float16", bias=True),
        causal_conv1d(96, 37, k=4, dtype="float32", bias=True),  # vec=4 channel loads, a 37-position tail
        causal_conv1d(34, 70, k=7, dtype="float16", bias=True),  # a window of 2-channel vectors, a 7-tap halo
    ]
