"""GPU: ``fx2`` (Note [a prologue two elements at a time] in templates/fused.py) against the element-wise prologue the
relay evaluated before it, ``narrow(xv(v))``, over every 16-bit input, each in both halves of a word. The header is
the relay's own (softmax_relay.raw_header), so both sides compile as the kernels do (--use_fast_math)."""
from __future__ import annotations

import pytest
import torch

import template_cards as tc
from forge_backend.contract import Candidate
from forge_backend.runtime.launch import Launcher
from forge_backend.runtime.nvrtc import compile_candidate
from forge_backend.search.templates import softmax as sm
from forge_backend.search.templates.softmax_relay import raw_header
from forge_backend.search.templates.relay import relay_consts
from planted import UNARY_PLAN, unary_card

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0) if torch.cuda.is_available() else None

# out[i]: the element-wise result of input bits i in the high half, fx2's (i in a word's low half) in the low half;
# out[65536 + i] the same for input i in a word's high half (its low half is input 65535 - i)
KERNEL = r"""
__device__ __forceinline__ void of_bits(unsigned short b, __nv_bfloat16* t) { *t = __ushort_as_bfloat16(b); }
__device__ __forceinline__ void of_bits(unsigned short b, __half* t) { *t = __ushort_as_half(b); }
__device__ __forceinline__ unsigned bits(__nv_bfloat16 t) { return __bfloat16_as_ushort(t); }
__device__ __forceinline__ unsigned bits(__half t) { return __half_as_ushort(t); }
__device__ __forceinline__ T from_bits(unsigned b) { T t; of_bits((unsigned short)b, &t); return t; }
extern "C" __global__ void k(const float* x, float* y, int n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536u) return;
  const unsigned j = 65535u - i, lo = fx2((j << 16) | i), hi = fx2((i << 16) | j);
  unsigned* out = reinterpret_cast<unsigned*>(y);
  out[i] = bits(narrow(xv(from_bits(i)))) << 16 | (lo & 0xffffu);
  out[65536 + i] = bits(narrow(xv(from_bits(i)))) << 16 | (hi >> 16);
}
"""
PLAN = UNARY_PLAN  # a thread an element of a card of 131072: the first 65536 threads work
SOFTCAP = "to_float32(mul(tanh(div(x0,30.0)),30.0))"
CASES = [(SOFTCAP, "bfloat16"), ("to_float32(x0)", "bfloat16"), ("mul(x0,x0)", "bfloat16"),
         ("add(mul(x0,0.5),1.0)", "bfloat16"), ("div(x0,0.7)", "bfloat16"),
         ("add(mul(tanh(x0),x0),tanh(x0))", "bfloat16"), ("mul(x0,0.125)", "float16"), ("mul(tanh(x0),3.0)", "float16"),
         ("mul(x0,x0)", "float16")]


@pytest.mark.parametrize("expr,dtype", CASES)
def test_fx2_gives_the_element_wise_prologue_bit_for_bit(expr: str, dtype: str) -> None:
    card = tc.softmax_fused(expr, [((4, 65536), dtype)])
    assert sm._once_ok(card)
    p = {**sm.defaults(card, "relay"), "once": True}
    src = raw_header(card, p, relay_consts(p, card.sizes["cols"])) + KERNEL
    assert "unsigned fx2(unsigned w)" in src
    run_card = unary_card("aten.relu.default", 2 * 65536)
    cand = Candidate.from_parts(src, PLAN, f"fx2 {expr}")
    (y,) = Launcher(run_card, cand, compile_candidate(cand, "sm_90").cubin, DEV)([torch.zeros(2 * 65536,
                                                                                                 device=DEV)])
    words = y.view(torch.int32).cpu().long() & 0xFFFFFFFF
    scalar, pair = (words >> 16).reshape(2, 65536), (words & 0xFFFF).reshape(2, 65536)
    as_float = lambda b: b.to(torch.int16).view(getattr(torch, dtype)).float()  # noqa: E731
    both_nan = as_float(scalar).isnan() & as_float(pair).isnan()
    x = as_float(torch.arange(65536)).expand(2, -1)
    # fp32 subnormal products: the element-wise path flushes them (--use_fast_math), the paired multiply keeps them
    tiny = x.abs() < 2.0 ** -60
    differ = (scalar != pair) & ~both_nan
    assert int((differ & ~tiny).sum()) == 0, [(float(a), int(s), int(q)) for a, s, q in
                                             zip(x[differ & ~tiny][:6], scalar[differ & ~tiny][:6],
                                                 pair[differ & ~tiny][:6])]
