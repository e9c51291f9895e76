"""Knob ``halves`` of the softmax's relay (Note [stores of whole sectors] in templates/softmax_relay.py): a lane's write
reads half packs, so each of its stores is 16 bytes of whole sectors where an output pack is 32 bytes."""
from __future__ import annotations

import template_cards as tc
from sm90 import spill_stores
from forge_backend.search.templates import softmax as sm

SOFTCAP = "to_float32(mul(tanh(div(x0,30.0)),30.0))"


def _softcap(dtype: str = "bfloat16", shape=(64, 262144)):
    return tc.softmax_fused(SOFTCAP, [(shape, dtype)])


def test_halves_only_where_an_output_pack_is_32_bytes() -> None:
    wide = _softcap()
    root = sm.root_params(wide)
    assert root["strategy"] == "relay" and root["halves"] is True and sm.valid(wide, root)
    plain = {k: v for k, v in root.items() if k != "halves"}
    assert sm.valid(wide, plain)  # the 32-byte stores stay valid: the knob toggles
    assert not sm.valid(wide, {**plain, "halves": False}) and not sm.valid(wide, {**plain, "halves": 1})
    sampling = tc.softmax_fused("to_float32(x0)", [((64, 262144), "bfloat16")])
    assert sm.root_params(sampling)["halves"] is True
    assert sm.valid(_softcap("float16", (4, 65536)), {**sm.defaults(_softcap("float16", (4, 65536)), "relay")})
    for card in (tc.softmax((64, 262144), "bfloat16"), tc.softmax((64, 262144), "float32"),
                 tc.softmax_fused("mul(x0,0.125)", [((64, 262144), "bfloat16")])):
        relay = sm.defaults(card, "relay")  # 16-byte output packs: nothing to halve
        assert "halves" not in relay and sm.valid(card, relay) and not sm.valid(card, {**relay, "halves": True})
    # a relay knob, and not with pieces held in the writers' registers (their write hook reads whole packs)
    assert not sm.valid(wide, {**sm.defaults(wide, "cluster"), "halves": True})
    writers = {k: v for k, v in root.items() if k != "lag"} | {"writers": True, "nw": 8, "k": 6}
    assert sm.valid(wide, writers)
    held = {**writers, "nw": 4, "regs": 1}
    assert sm.valid(wide, {k: v for k, v in held.items() if k != "halves"}) and not sm.valid(wide, held)


def test_halves_stores_16_bytes_a_lane_from_half_packs() -> None:
    card = _softcap()
    root = sm.root_params(card)
    src = sm.generate(card, root).source
    assert "reinterpret_cast<const Pack<T, VEC / 2>*>(sp)" in src and "stp<TO, (VEC / 2)>(yr + col, o);" in src
    assert "const Pack<T, VEC / 2> p = sh[i * 32 + lane];" in src and "for (int i = 0; i < 2 * NPL; ++i)" in src
    assert "__syncwarp();  // with once" in src  # lanes read halves other lanes put back into the slot
    plain = sm.generate(card, {k: v for k, v in root.items() if k != "halves"}).source
    assert "stp<TO, VEC>(yr + col, o);" in plain and "Pack<T, VEC / 2>" not in plain and "(VEC / 2)" not in plain


def test_actions_keep_halves_and_toggle_it() -> None:
    card = _softcap()
    root = sm.root_params(card)
    acts = dict(sm.actions(card, root))
    assert acts["nw 16 -> 8"]["halves"] is True and acts["nw 16 -> 8"]["once"] is True
    off = acts["halves True -> False"]
    assert "halves" not in off and dict(sm.actions(card, off))["halves False -> True"] == root
    bf16 = tc.softmax((64, 262144), "bfloat16")
    assert not any("halves" in label for label in dict(sm.actions(bf16, sm.root_params(bf16))))


def test_halves_layouts_compile_for_sm90_without_spilling() -> None:
    card = _softcap()
    root = sm.root_params(card)
    writers = {k: v for k, v in root.items() if k != "lag"} | {"writers": True, "nw": 8, "k": 6}
    once_off = {k: v for k, v in root.items() if k != "once"}
    for p in (root, writers, once_off, {**root, "pe": 16384, "k": 6, "lag": 3}):
        assert sm.valid(card, p), p
        spills, log = spill_stores(sm.generate(card, p).source)
        assert spills and not any(spills), (p, log)
