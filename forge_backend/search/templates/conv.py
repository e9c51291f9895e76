"""Depthwise 1-D convolution: ``aten.convolution`` with ``groups == C``, a [C, 1, K] weight, unit stride and
dilation, any padding.

Qwen 3.5's linear-attention layers run one over their 8192 q/k/v channels and the 2048 prefill tokens (kernel 4,
padding 3, then the first L outputs are kept: a causal conv1d) when the fused causal-conv kernel is not installed.
ATen runs it with a generic depthwise kernel: 178 us per call for [1, 8192, 2048] bf16 in Inductor's graph on the
H200 (benchmarks/results/h200/kernels_qwen35_moe_inductor.txt), where the bytes allow 16 us. The input is often a
transposed view ([B, L, C] in memory), so the op is a transpose as well as a convolution.

One strategy, ``tile``: a block computes TL positions x TC channels of one sample. It loads the input tile with its
TL + K - 1 halo into shared memory with consecutive threads along the input's unit-stride dim (channels or
positions), then computes and stores with consecutive threads along the output's unit-stride dim, so both the
loads and the stores coalesce whatever the layouts. Sums are fp32 over k in ascending order, rounded once.

On the H200 (seventh session, benchmarks/results/h200/ops.json, row ``causal_conv1d``): 52.3 us against Inductor's
191.6 us and eager's 297.4 us, at 30% of the copy bandwidth; inside Qwen under Inductor it replaces ATen's kernel.
"""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from .common import (FLOAT_DTYPES, ITEMSIZE, PREAMBLE, STATIC_SMEM_LIMIT, align_of, cdiv, consts, filter_actions,
                     input_spec, launch, make_candidate, output_spec, scale_knob, typedefs)

OP = "aten.convolution.default"
MAX_K = 32


def _dims(card: OperatorCard) -> tuple[int, int, int, int, int, int]:
    """N, C, L_in, L_out, K, padding."""
    x, w, y = input_spec(card, "input"), input_spec(card, "weight"), output_spec(card, 0)
    return x.shape[0], x.shape[1], x.shape[2], y.shape[2], w.shape[2], int(card.scalars["padding"][0])


def matches(card: OperatorCard) -> bool:
    if card.op != OP:
        return False
    x, w, b, y = (input_spec(card, "input"), input_spec(card, "weight"), input_spec(card, "bias"),
                  output_spec(card, 0))
    if x is None or w is None or y is None or len(x.shape) != 3 or len(w.shape) != 3 or len(y.shape) != 3:
        return False
    if x.dtype not in FLOAT_DTYPES or w.dtype != x.dtype or y.dtype != x.dtype or x.numel == 0 or y.numel == 0:
        return False
    c = x.shape[1]
    s = card.scalars
    if (list(s.get("stride") or ()) != [1] or list(s.get("dilation") or ()) != [1] or s.get("transposed")
            or list(s.get("output_padding") or ()) != [0] or s.get("groups") != c):
        return False
    if list(w.shape) != [c, 1, w.shape[2]] or not 1 <= w.shape[2] <= MAX_K or not w.is_contiguous():
        return False
    if b is not None and (b.dtype != x.dtype or list(b.shape) != [c] or b.stride[0] != 1):
        return False
    pad = list(s.get("padding") or ())
    return len(pad) == 1 and pad[0] >= 0 and y.shape[:2] == x.shape[:2] and \
        y.shape[2] == x.shape[2] + 2 * pad[0] - w.shape[2] + 1 and min(x.stride) >= 0 and min(y.stride) >= 0


def _smem_bytes(p: dict[str, Any], k: int) -> int:
    return ((p["tl"] + k - 1) * (p["tc"] + 1) + p["tc"] * k) * 4


def defaults(card: OperatorCard, strategy: str = "tile") -> dict[str, Any]:
    return {"strategy": "tile", "tl": 64, "tc": 32, "block": 256}


def root_params(card: OperatorCard) -> dict[str, Any]:
    """The default tile, loading 16 bytes of channels at a time where the input is channels-fast and aligned for it
    (Note [vector loads of a channels-fast input])."""
    p = defaults(card)
    for vec in (16 // ITEMSIZE[input_spec(card, "input").dtype], 4, 2):
        if valid(card, q := {**p, "vec": vec}):
            return q
    return p


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    root = root_params(card)
    return [root] + ([defaults(card)] if root != defaults(card) else [])


def _channels_fast(card: OperatorCard) -> bool:
    x = input_spec(card, "input")
    return x.stride[1] == 1 and x.stride[2] != 1


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    n, c, _, l_out, k, _ = _dims(card)
    tl, tc, block = p.get("tl", 0), p.get("tc", 0), p.get("block", 0)
    if p.get("strategy") != "tile" or tl not in (16, 32, 64, 128, 256) or tc not in (8, 16, 32, 64):
        return False
    if "vec" in p:  # Note [vector loads of a channels-fast input]
        x, vec = input_spec(card, "input"), p["vec"]
        if vec not in (2, 4, 8) or vec * ITEMSIZE[x.dtype] > 16 or not _channels_fast(card):
            return False
        if tc % vec or c % vec or x.stride[0] % vec or x.stride[2] % vec:
            return False
    if block not in (64, 128, 256, 512) or block > tl * tc:
        return False
    return _smem_bytes(p, k) <= STATIC_SMEM_LIMIT and cdiv(c, tc) <= 65535 and n <= 65535 and \
        cdiv(l_out, tl) < 2**31


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    acts = scale_knob(p, "tl") + scale_knob(p, "tc") + scale_knob(p, "block") + scale_knob(p, "vec")
    if "vec" in p:
        acts.append((f"vec {p['vec']} -> scalar", {k: v for k, v in p.items() if k != "vec"}))
    return filter_actions(card, p, acts, valid)


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    if not valid(card, p):
        raise ValueError(f"depthwise conv params {p} are not valid for sizes {card.sizes}")
    n, c, l_in, l_out, k, pad = _dims(card)
    x, y = input_spec(card, "input"), output_spec(card, 0)
    has_bias = input_spec(card, "bias") is not None
    tl, tc, block = p["tl"], p["tc"], p["block"]
    params = "const T* __restrict__ x, const T* __restrict__ w, " + \
             ("const T* __restrict__ b, " if has_bias else "") + "TO* __restrict__ y"
    args = ["in:input", "in:weight"] + (["in:bias"] if has_bias else []) + ["out:0"]
    source = f"""{PREAMBLE}
{typedefs(T=x.dtype, TO=y.dtype)}
{consts(C=c, LIN=l_in, LOUT=l_out, K=k, PAD=pad, TL=tl, TC=tc, NT=block, HALO=tl + k - 1,
        XC_FAST=int(x.stride[1] == 1 and x.stride[2] != 1), YL_FAST=int(y.stride[2] == 1))}
constexpr long long XS0 = {x.stride[0]}LL, XS1 = {x.stride[1]}LL, XS2 = {x.stride[2]}LL;
constexpr long long YS0 = {y.stride[0]}LL, YS1 = {y.stride[1]}LL, YS2 = {y.stride[2]}LL;

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d({params}) {{
  __shared__ float s[HALO][TC + 1];  // the input tile with its halo; +1: no bank conflicts along either dim
  __shared__ float ws[TC][K];
  const int l0 = blockIdx.x * TL, c0 = blockIdx.y * TC;
  const long long n = blockIdx.z;
  for (int e = threadIdx.x; e < TC * K; e += NT) {{
    const int i = e / K, c = c0 + i;
    ws[i][e % K] = c < C ? to_f(w[(long long)c * K + e % K]) : 0.f;
  }}
{_tile_load(p.get("vec", 1))}
  __syncthreads();
  for (int e = threadIdx.x; e < TL * TC; e += NT) {{
    const int j = YL_FAST ? e % TL : e / TC, i = YL_FAST ? e / TL : e % TC;  // along the output's fast dim
    const int c = c0 + i, l = l0 + j;
    if (c < C && l < LOUT) {{
      float acc = {"to_f(b[c])" if has_bias else "0.f"};
#pragma unroll
      for (int q = 0; q < K; ++q) acc = fmaf(ws[i][q], s[j + q][i], acc);
      y[n * YS0 + c * YS1 + l * YS2] = from_f<TO>(acc);
    }}
  }}
}}
"""
    grid = (cdiv(l_out, tl), cdiv(c, tc), n)
    vec = p.get("vec", 1)
    desc = f"depthwise conv1d k={k} tile tl={tl} tc={tc} block={block}" + \
           (" (input channels-fast)" if _channels_fast(card) else "") + \
           (f" vec={vec}" if vec > 1 else "")
    return make_candidate(source, [launch("dwconv1d", grid, block, args)], desc, p, align_of(vec, [x]))


# Note [vector loads of a channels-fast input]
# Qwen's input is a transposed view: channels are the unit-stride dim. With ``vec`` a thread loads ``vec``
# consecutive channels of one position in one access (16 bytes of bf16 at vec=8) instead of one element, so a
# warp moves the tile's rows with an eighth of the load instructions and more bytes in flight per thread. It needs
# the channel tile, C and the other input strides to be multiples of ``vec`` (every vector starts on a multiple of
# ``vec`` elements) and the input pointer aligned to the vector (the launcher's alignment check). The output keeps
# scalar stores: Qwen's [1, 8192, 2051] output rows start at odd element offsets.


def _tile_load(vec: int) -> str:
    """C++: the input tile with its halo into ``s`` (zero outside the input), along the input's fast dim."""
    if vec == 1:
        return """  for (int e = threadIdx.x; e < HALO * TC; e += NT) {
    const int i = XC_FAST ? e % TC : e / HALO, j = XC_FAST ? e / TC : e % HALO;  // along the input's fast dim
    const int c = c0 + i;
    const long long l = (long long)l0 - PAD + j;
    s[j][i] = c < C && l >= 0 && l < LIN ? to_f(x[n * XS0 + c * XS1 + l * XS2]) : 0.f;
  }"""
    return f"""  for (int e = threadIdx.x; e < HALO * (TC / {vec}); e += NT) {{  // {vec} channels per load
    const int i = (e % (TC / {vec})) * {vec}, j = e / (TC / {vec});
    const int c = c0 + i;
    const long long l = (long long)l0 - PAD + j;
    if (c < C && l >= 0 && l < LIN) {{
      const Pack<T, {vec}> v = ldp<T, {vec}>(x + n * XS0 + c + l * XS2);
#pragma unroll
      for (int u = 0; u < {vec}; ++u) s[j][i + u] = to_f(v.v[u]);
    }} else {{
#pragma unroll
      for (int u = 0; u < {vec}; ++u) s[j][i + u] = 0.f;
    }}
  }}"""
