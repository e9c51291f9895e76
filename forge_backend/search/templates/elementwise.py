"""Pointwise ops over tensors that share one dense layout: activations (gelu erf/tanh, silu, relu, sigmoid, tanh),
add/sub/mul/div of two same-shape tensors or a tensor and a Python number, and ``_to_copy`` casts among
fp32/fp16/bf16. Broadcasting operands are not matched (left to PyTorch).

The flat index means the same element in every operand (``same_layout``), so contiguous and channels-last tensors
are both a 1-D stream. Knobs: ``vec`` elements per access (up to 16 bytes for every operand), ``block``, ``unroll``
(vectors per thread in one-shot mode), and ``mode``: ``oneshot`` (one grid covering everything) or ``stride`` (a
grid of ~one wave looping over the data). The < vec leftover elements are done by block 0. Math is fp32.
"""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from .common import (FLOAT_DTYPES, ITEMSIZE, POINTWISE_MATH, PREAMBLE, SMS, align_of, cdiv, consts, filter_actions,
                     float_literal, input_spec, launch, main_input, make_candidate, output_spec, same_layout,
                     scale_knob, stream_loop, typedefs, vec_ok)

_UNARY = {
    "aten.relu.default": POINTWISE_MATH["relu"],
    "aten.sigmoid.default": POINTWISE_MATH["sigmoid"],
    "aten.silu.default": POINTWISE_MATH["silu"],
    "aten.tanh.default": POINTWISE_MATH["tanh"],
    "aten._to_copy.default": "v",
}
_GELU = {"none": POINTWISE_MATH["gelu"], "tanh": POINTWISE_MATH["gelu_tanh"]}
_BINARY = {"aten.add.Tensor": "v + ALPHA * u", "aten.sub.Tensor": "v - ALPHA * u", "aten.mul.Tensor": "v * u",
           "aten.div.Tensor": "v / u"}
OPS = tuple(_UNARY) + ("aten.gelu.default",) + tuple(_BINARY)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _expr(card: OperatorCard) -> str | None:
    if card.op in _UNARY:
        return _UNARY[card.op]
    if card.op == "aten.gelu.default":
        return _GELU.get(card.scalars.get("approximate", "none"))
    return _BINARY.get(card.op)


def _other_is_tensor(card: OperatorCard) -> bool:
    return input_spec(card, "other") is not None


def matches(card: OperatorCard) -> bool:
    if card.op not in OPS or _expr(card) is None or not card.inputs:
        return False
    x, y = main_input(card), output_spec(card, 0)
    specs = [t.spec for t in card.inputs] + ([y] if y else [])
    if y is None or x.numel == 0 or any(s.dtype not in FLOAT_DTYPES for s in specs):
        return False
    if not all(same_layout(x, s) for s in specs):
        return False
    if card.op in _BINARY:
        if not _other_is_tensor(card) and not _number(card.scalars.get("other")):
            return False
        if not _number(card.scalars.get("alpha", 1)):
            return False
    if card.op == "aten._to_copy.default":
        dev, layout = card.scalars.get("device"), card.scalars.get("layout")
        if (dev is not None and not str(dev).startswith("cuda")) or layout not in (None, "torch.strided"):
            return False
    return True


def _specs(card: OperatorCard) -> list:
    return [t.spec for t in card.inputs] + [output_spec(card, 0)]


def _nv(card: OperatorCard, vec: int) -> int:
    return main_input(card).numel // vec


def defaults(card: OperatorCard, mode: str = "oneshot") -> dict[str, Any]:
    vec = 16 // max(ITEMSIZE[s.dtype] for s in _specs(card))
    while vec > 1 and not vec_ok(vec, vec, _specs(card)):
        vec //= 2
    return {"mode": mode, "vec": vec, "block": 256, "unroll": 4 if mode == "oneshot" else 1}


def root_params(card: OperatorCard) -> dict[str, Any]:
    return defaults(card)


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    return [defaults(card), defaults(card, "stride")]


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    vec, block, unroll = p.get("vec", 0), p.get("block", 0), p.get("unroll", 0)
    if p.get("mode") not in ("oneshot", "stride") or not vec_ok(vec, vec, _specs(card)):
        return False
    if block % 32 or not 32 <= block <= 1024 or unroll not in (1, 2, 4, 8):
        return False
    if p["mode"] == "stride" and unroll != 1:
        return False
    return cdiv(max(_nv(card, vec), 1), block * unroll) < 2**31


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    acts = scale_knob(p, "vec") + scale_knob(p, "block") + scale_knob(p, "unroll")
    other = "stride" if p["mode"] == "oneshot" else "oneshot"
    acts.append((f"mode {p['mode']} -> {other}", {**p, "mode": other, "unroll": 1 if other == "stride" else 4}))
    return filter_actions(card, p, acts, valid)


def _source(card: OperatorCard, p: dict[str, Any]) -> str:
    x, y = main_input(card), output_spec(card, 0)
    vec, block, unroll = p["vec"], p["block"], p["unroll"]
    numel = x.numel
    binary = card.op in _BINARY
    tensor_u = binary and _other_is_tensor(card)
    u_type = typedefs(TU=input_spec(card, "other").dtype) if tensor_u else ""
    u_param = "const TU* __restrict__ u, " if tensor_u else ""
    scal = ""
    if binary:
        scal = f"constexpr float ALPHA = {float_literal(card.scalars.get('alpha', 1))};\n"
        if not tensor_u:
            scal += f"constexpr float U = {float_literal(card.scalars['other'])};\n"
    u_pack = "const PU q = ldp<TU, VEC>(u + i * VEC);" if tensor_u else ""
    u_of_j = "to_f(q.v[j])" if tensor_u else "U" if binary else "0.f"
    u_tail = "to_f(u[e])" if tensor_u else "U" if binary else "0.f"
    tail = "" if numel % vec == 0 else f"""
  if (blockIdx.x == 0 && threadIdx.x < N - NV * VEC) {{
    const I e = NV * VEC + threadIdx.x;
    y[e] = from_f<TO>(op(to_f(x[e]), {u_tail}));
  }}"""
    ops = f"__device__ __forceinline__ float op(float v, float u) {{ return {_expr(card)}; }}"
    pack = f"""const P p = ldp<T, VEC>(x + i * VEC); {u_pack} PO o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>(op(to_f(p.v[j]), {u_of_j}));
      stp<TO, VEC>(y + i * VEC, o);"""
    loop = stream_loop(p["mode"], pack)
    return f"""{PREAMBLE}
{typedefs(T=x.dtype, TO=y.dtype)}
{u_type}
typedef {"long long" if numel > 2**31 - 1 - 1024 else "int"} I;
{consts(N=numel, NV=numel // vec, VEC=vec, NT=block, UNROLL=unroll)}
{scal}typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
{"typedef Pack<TU, VEC> PU;" if tensor_u else ""}
{ops}

extern "C" __global__ __launch_bounds__(NT) void ew({"const T* __restrict__ x, " + u_param}TO* __restrict__ y) {{{loop}{tail}
}}
"""


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    if not valid(card, p):
        raise ValueError(f"elementwise params {p} are not valid for {card.op} {main_input(card).shape}")
    vec, block = p["vec"], p["block"]
    nv = max(_nv(card, vec), 1)
    if p["mode"] == "oneshot":
        grid = cdiv(nv, block * p["unroll"])
    else:
        grid = max(1, min(cdiv(nv, block), SMS * (2048 // block)))
    args = ["in:self"] + (["in:other"] if _other_is_tensor(card) and card.op in _BINARY else []) + ["out:0"]
    name = card.op.split(".")[1]
    if card.op == "aten.gelu.default":
        name += f"({card.scalars.get('approximate', 'none')})"
    desc = f"{name} " + " ".join(f"{k}={v}" for k, v in sorted(p.items()))
    return make_candidate(_source(card, p), [launch("ew", grid, block, args)], desc, p, align_of(vec, _specs(card)))
