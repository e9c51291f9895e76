"""The softmax relay's reduce (Note [a lean reduce] in templates/softmax_relay.py): the max over packed 16-bit pairs
where the slot's packs hold the softmax's own values, and the test of a warp share with no finite value taken once."""
from __future__ import annotations

import re

import pytest

import template_cards as tc
from sm90 import spill_stores
from forge_backend.search.templates import softmax as sm
from forge_backend.search.templates.relay import pack_test

SOFTCAP = "to_float32(mul(tanh(div(x0,30.0)),30.0))"


def _reduce(src: str) -> str:
    """The consumers' reduce of a piece in a relay kernel's source: from the packs' load to the warp's partial."""
    start = src.index("P pk[NPL];")
    return src[start:src.index("const V v = make_float2(m, sum);", start)]


def _relay(card, **knobs):
    p = {**sm.defaults(card, "relay"), **knobs}
    assert sm.valid(card, p), p
    return p


PAIRED = [
    (tc.softmax((64, 262144), "bfloat16"), {}, "__nv_bfloat162"),
    (tc.softmax((7, 65536), "float16"), {"pe": 512, "nw": 2, "nc": 3, "k": 3, "lag": 1}, "__half2"),
    (tc.softmax((5, 33000), "bfloat16", log=True), {"pe": 4096, "nw": 8, "nc": 2, "k": 4, "lag": 2}, "__nv_bfloat162"),
    # a prologue evaluated once: the packs hold its values, rounded to the input's type
    (tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")]), {}, "__nv_bfloat162"),
    (tc.softmax_fused("mul(x0,0.125)", [((5, 40000), "float16")]),
     {"pe": 4096, "nw": 8, "nc": 2, "k": 4, "lag": 2, "once": True}, "__half2"),
]


@pytest.mark.parametrize("case", PAIRED, ids=lambda c: f"{c[0].inputs[0].spec.dtype}-{c[2]}")
def test_16_bit_packs_of_the_softmax_values_take_their_max_in_pairs(case) -> None:
    card, knobs, pair = case
    reduce = _reduce(sm.generate(card, _relay(card, **knobs)).source)
    assert f"const {pair}* h = reinterpret_cast<const {pair}*>(pk[i].v);" in reduce
    assert reduce.count("__hmax2(") == 3 and "fmaxf(m, fmaxf(__low2float(a), __high2float(a)))" in reduce
    assert "m = fmaxf(m, xv(" not in reduce and "m = fmaxf(m, to_f(" not in reduce


@pytest.mark.parametrize("card", [
    tc.softmax((64, 262144), "float32"),
    # a prologue evaluated at each read: the raw packs are not the values the max is over
    tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]),
    tc.softmax_fused("mul(x0,0.125)", [((5, 40000), "float16")]),
], ids=lambda c: f"{c.inputs[0].spec.dtype}-{c.op}")
def test_other_packs_take_their_max_an_element(card) -> None:
    p = {k: v for k, v in _relay(card).items() if k != "once"}
    reduce = _reduce(sm.generate(card, p).source)
    assert "__hmax2" not in reduce
    assert re.search(r"m = fmaxf\(m, (xv|to_f)\(pk\[i\]\.v\[j\]\)\);", reduce)


@pytest.mark.parametrize("card", [tc.softmax((64, 262144), "bfloat16"), tc.softmax((64, 262144), "float32"),
                                  tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")])],
                         ids=lambda c: f"{c.inputs[0].spec.dtype}-{c.op}")
def test_a_share_with_no_finite_value_is_tested_once(card) -> None:
    reduce = _reduce(sm.generate(card, _relay(card)).source)
    # the test guards the whole sum loop, whose exps go unguarded: sexp's result, once for the warp's share
    guard = reduce.index("if (m != -CUDART_INF_F) {")
    assert reduce.index("sum += __expf(") > guard and "sexp(" not in reduce
    assert reduce.index("m = group_all<32, 32>(m, Max()") < guard < reduce.index("sum = group_all<32, 32>(sum")


def test_paired_layouts_compile_for_sm90_without_spilling() -> None:
    for card, knobs, _ in PAIRED:
        p = _relay(card, **knobs)
        spills, log = spill_stores(sm.generate(card, p).source)
        assert spills and not any(spills), (p, log)


def test_a_packs_range_test_is_left_out_only_where_every_row_is_whole_pieces() -> None:
    """Note [a pack's range test only where a row's last piece is short] (relay.py)."""
    assert pack_test("col < COLS", 262144, 16384) == ""
    assert pack_test("col < COLS", 248320, 16384) == "if (col < COLS) "
    tests = ("if (c0 + wc + (i * 32 + lane) * VEC < COLS)", "if (col < COLS)")
    cap = tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")])
    whole = [(tc.softmax((64, 262144), "bfloat16"), {}), (tc.softmax((64, 262144), "float32"), {}),
             (cap, sm.root_params(cap))]  # the soft cap's root: a prologue evaluated once, half packs a lane
    short = [(tc.softmax((64, 248320), "bfloat16"), {}),
             (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]), {}),
             (tc.softmax((5, 33000), "bfloat16", log=True), {"pe": 4096, "nw": 8, "nc": 2, "k": 4, "lag": 2})]
    for card, knobs in whole:
        src = sm.generate(card, _relay(card, **knobs)).source
        assert not any(t in src for t in tests), card
    for card, knobs in short:
        p = _relay(card, **knobs)
        assert card.sizes["cols"] % p["pe"], (card, p)
        src = sm.generate(card, p).source
        assert src.count(tests[0]) == 2 and src.count(tests[1]) == 1, card


def test_plain_softmaxes_of_whole_pieces_root_in_writers_of_their_own() -> None:
    """Note [writers of their own for whole pieces] (templates/softmax_relay.py): eight reducer and eight writer warps
    in seven slots where every row is whole pieces and no prologue runs; the joint relay elsewhere."""
    for card in (tc.softmax((64, 262144), "bfloat16"), tc.softmax((64, 262144), "float32"),
                 tc.softmax((128, 131072), "float16", log=True)):
        root = sm.root_params(card)
        assert card.sizes["cols"] % root["pe"] == 0
        assert root["writers"] is True and "lag" not in root and (root["nw"], root["k"]) == (8, 7), root
        assert sm.valid(card, root) and sm.defaults(card, "relay")["lag"] == 3  # the joint relay's defaults stand
    for card in (tc.softmax((64, 248320), "bfloat16"), tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")])):
        root = sm.root_params(card)
        assert root["strategy"] == "relay" and "writers" not in root and "lag" in root, root
