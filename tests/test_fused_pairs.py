"""A fused prologue two elements at a time (Note [a prologue two elements at a time] in templates/fused.py): the
paired code ``pair_prologue`` writes, and the relays that evaluate a prologue once into 16-bit packs taking it. The
GPU tests (test_fused_pairs_gpu.py) compare its bits with the element-wise prologue over every 16-bit input."""
from __future__ import annotations

import re

import pytest

import template_cards as tc
from forge_backend.runtime.nvrtc import compile_candidate
from forge_backend.search.templates import softmax as sm
from forge_backend.search.templates.fused import pair_prologue

SOFTCAP = "to_float32(mul(tanh(div(x0,30.0)),30.0))"


def _body(expr: str, dtype: str) -> str:
    """The lines of ``fx2``."""
    src = pair_prologue(expr, dtype)
    return src[src.index("unsigned fx2(unsigned w)"):]


def test_the_soft_cap_rounds_in_pairs_and_takes_its_product_packed() -> None:
    body = _body(SOFTCAP, "bfloat16")
    assert body.count("f_tanh(") == 2 and body.count("* ((float)0x1.1111111111111p-5)") == 2
    assert body.count("pair_of<__nv_bfloat16>(") == 2  # x / 30 and the tanh, each rounded once for both elements
    assert "const unsigned t2 = pair_mul<__nv_bfloat16>(t1, 0x41f041f0u);" in body  # * 30: 30 is 0x41f0 in bf16
    assert body.rstrip().endswith("return t2;\n}")  # to_float32 of a bf16 value, narrowed back: the same word


@pytest.mark.parametrize("expr,dtype,product", [
    ("mul(x0,3.0)", "bfloat16", "pair_mul<__nv_bfloat16>(w, 0x40404040u)"),
    ("mul(x0,x0)", "bfloat16", "pair_mul<__nv_bfloat16>(w, w)"),
    ("mul(x0,-0.375)", "float16", "pair_mul<__half>(w, 0xb600b600u)"),
    ("mul(x0,0.1)", "bfloat16", None),  # 0.1 is no bf16 value: x * fp32(0.1) rounds, so it stays in fp32
    ("mul(x0,65536.0)", "float16", None),  # past fp16's range
    ("mul(to_float32(x0),2.0)", "bfloat16", None),  # an fp32 product: the narrowing rounds it, not the multiply
    ("add(x0,x0)", "bfloat16", None),  # a sum of two bf16 values need not be exact in fp32
    ("mul(x0,to_float16(x0))", "bfloat16", None),  # operands of two types
])
def test_a_product_is_paired_only_where_it_is_exact(expr: str, dtype: str, product: str | None) -> None:
    body = _body(expr, dtype)
    if product is None:
        assert "pair_mul" not in body
        assert re.search(r"const float v\d+_lo = ", body) and re.search(r"const float v\d+_hi = ", body)
    else:
        assert product in body and "const float" not in body  # nothing widened: one instruction for both elements


def test_a_widening_cast_keeps_the_word() -> None:
    assert _body("to_float32(x0)", "bfloat16").splitlines()[1:] == ["", "  return w;", "}"]


def test_a_value_needed_again_in_fp32_is_widened_from_its_rounded_word_once() -> None:
    body = _body("add(mul(tanh(x0),x0),tanh(x0))", "bfloat16")
    assert body.count("f_tanh(") == 2  # tanh(x0) once for each element, shared by both uses
    assert "const unsigned t0 = pair_of<__nv_bfloat16>(v0_hi, v0_lo);" in body
    assert "const unsigned t1 = pair_mul<__nv_bfloat16>(t0, w);" in body
    for word in ("t0", "t1"):  # the sum widens each rounded word once, never its fp32 value before the rounding
        assert body.count(f"const float {word}_lo = pair_lo<__nv_bfloat16>({word}), {word}_hi = ") == 1
    assert "const float v2_lo = t1_lo + t0_lo;" in body and "const float v2_hi = t1_hi + t0_hi;" in body


@pytest.mark.parametrize("expr,dtype", [("add(x0,x1)", "bfloat16"), ("mul(x0,2.0)", "float32")])
def test_only_one_16_bit_input_is_paired(expr: str, dtype: str) -> None:
    with pytest.raises(ValueError, match="no paired prologue"):
        pair_prologue(expr, dtype)


def _reduce(src: str) -> str:
    start = src.index("P pk[NPL];")
    return src[start:src.index("const V v = make_float2(m, sum);", start)]


@pytest.mark.parametrize("card,paired", [
    (tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")]), True),
    (tc.softmax_fused("to_float32(x0)", [((64, 262144), "bfloat16")], "float32"), True),
    (tc.softmax_fused("mul(x0,0.125)", [((5, 40000), "float16")]), True),
    (tc.softmax_fused("mul(x0,0.125)", [((5, 40000), "float32")]), False),  # 4-byte packs: one at a time
], ids=lambda c: c if isinstance(c, bool) else f"{c.inputs[0].spec.dtype}-{c.scalars['expr']}")
def test_a_relay_evaluating_its_prologue_once_takes_it_in_pairs(card, paired: bool) -> None:
    p = {**sm.defaults(card, "relay"), "once": True}
    if card.sizes["cols"] < 100000:
        p.update(pe=4096 // (2 if paired else 1), nw=8, nc=2, k=4, lag=2)
    assert sm.valid(card, p), p
    cand = sm.generate(card, p)
    reduce = _reduce(cand.source)
    assert ("fx2(reinterpret_cast<const unsigned*>(pk[i].v)[j])" in reduce) is paired
    assert ("narrow(xv(pk[i].v[j]))" in reduce) is not paired
    assert ("unsigned fx2(unsigned w)" in cand.source) is paired
    compile_candidate(cand, "sm_90")  # NVRTC, on the CPU


def test_a_relay_evaluating_its_prologue_at_each_read_has_no_pairs() -> None:
    card = tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")])
    p = {k: v for k, v in sm.defaults(card, "relay").items() if k != "once"}
    assert sm.valid(card, p)
    assert "fx2" not in sm.generate(card, p).source
