"""strategy=walk of the row norms (Note [row norms walked with the next rows' loads in flight] in
forge_backend/search/templates/norm.py): a fixed grid of blocks walks the rows with the next rows' packs loading into
registers. CPU tests: parameters, validity, actions, the plan's grid and the compiled source; the GPU verifier runs it
in tests/test_templates_gpu.py."""
from __future__ import annotations

import template_cards as tc
from forge_backend.contract import resolve_plan
from forge_backend.runtime.nvrtc import compile_candidate
from forge_backend.search.templates import norm

ADALN = ((1, 4096, 1536), [((1, 1, 1536), "bfloat16"), ((1, 1, 1536), "bfloat16")])


def _adaln():
    return tc.norm_fused("add(mul(x0,x1),x2)", *ADALN)


def test_walk_walks_the_roots_layout_with_a_fixed_grid() -> None:
    card = _adaln()  # MMDiT's adaLN norm: 3 KB rows, a block of 64 a row at the root
    root = norm.root_params(card)
    p = norm.defaults(card, "walk")
    assert p == {"strategy": "walk", "vec": 8, "tpr": root["block"], "block": root["block"], "bps": 16,
                 "cache": "reg"}
    assert norm.valid(card, p) and all(q["strategy"] != "walk" for q in norm.seeds(card))  # an action's only
    root_walked = dict(norm.actions(card, root))["strategy block -> walk, same layout"]
    assert root_walked == p  # one step from the root
    cand = norm.generate(card, p)
    assert "walk" in cand.description and "then add(mul(x0,x1),x2)" in cand.description
    for sms, grid in ((132, 132 * 16), (114, 114 * 16), (1000, 4096)):  # at most one block a row
        launches, _ = resolve_plan(cand, card.sizes, card.floats, sms)
        assert launches[0].kernel == "norm_walk" and launches[0].grid[0] == grid
    src = cand.source
    assert "for (long long g = ng; g < items; g += ncl" in src and "nx[i] = ldp<T, VEC>(xn + col)" in src
    assert "c[i] = nx[i]" in src and "const long long row = g * RPB + threadIdx.x / TPR;" in src
    compile_candidate(cand, "sm_90")


def test_short_rows_walk_several_rows_a_block() -> None:
    card = tc.rms_norm((9, 777), (777,), "bfloat16", used=(0,))  # 1.5 KB rows: threads of a group take a row
    p = norm.defaults(card, "walk")
    assert p["tpr"] <= 32 and p["block"] // p["tpr"] > 1 and norm.valid(card, p)
    launches, _ = resolve_plan(norm.generate(card, p), card.sizes, card.floats, 132)
    assert launches[0].grid[0] == -(-9 // (p["block"] // p["tpr"]))  # fewer row groups than the SMs allow
    compile_candidate(norm.generate(card, p), "sm_90")
    stats = tc.layer_norm((7, 4097), (4097,), "float16", bias=False, used=(0, 2))  # rstd written per row
    q = norm.defaults(stats, "walk")
    src = norm.generate(stats, q).source
    assert "rstd_out[row]" in src and "norm_walk" in src
    compile_candidate(norm.generate(stats, q), "sm_90")


def test_walk_needs_registers_for_two_rows() -> None:
    card = _adaln()
    p = norm.defaults(card, "walk")
    assert not norm.valid(card, {**p, "cache": "none"})  # the prefetch lands in registers
    assert not norm.valid(card, {**p, "bps": 3}) and not norm.valid(card, {**p, "bps": 64})
    assert not norm.valid(card, {**p, "block": 256, "tpr": 256, "bps": 16})  # 4096 threads an SM
    assert not norm.valid(card, {**p, "tpr": 48})  # neither a block a row nor a power of two up to 32
    wide = tc.layer_norm((8, 32768), (32768,), "float32", used=(0,))  # 128 KB rows: a block's register budget
    block = norm.defaults(wide, "block")
    assert block["cache"] == "reg" and norm.valid(wide, block)
    assert not norm.valid(wide, norm.walked(block, block["block"]))  # twice its row's packs overflow the registers


def test_a_prologue_group_prefetches_each_input_and_writes_the_sum() -> None:
    """Note [a norm takes the residual add before it]: the walk prefetches the packs of each of the prologue's inputs
    (the broadcast gate too), computes the norm's input from them as they move into the cache, and writes it as
    output 1 before the statistics."""
    residual = tc.norm_residual("add(x0,mul(x1,x2))", [((1, 64, 1536), "bfloat16"), ((1, 1, 1536), "bfloat16"),
                                                       ((1, 64, 1536), "bfloat16")],
                                "add(mul(x0,x1),x2)", [((1, 1, 1536), "bfloat16"), ((1, 1, 1536), "bfloat16")],
                                (1, 64, 1536))
    p = norm.defaults(residual, "walk")
    assert norm.valid(residual, p)
    src = norm.generate(residual, p).source
    assert "Pack<TP0, VEC> nx0[NIT]; Pack<TP1, VEC> nx1[NIT]; Pack<TP2, VEC> nx2[NIT];" in src
    assert "const XRow xn = x_row(p0, p1, p2, nr);" in src and "nx2[i] = ldp<TP2, VEC>(a.p2);" in src
    assert "c[i] = prologue_of(nx0[i], nx1[i], nx2[i]);" in src
    assert src.index("stp<T, VEC>(rr + col, p);") < src.index("group_all<NT, TPR>(s, Sum(), red)")
    compile_candidate(norm.generate(residual, p), "sm_90")
    # the prologue's three inputs' packs beside the cached row count against the registers
    wide = tc.norm_residual("add(x0,mul(x1,x2))", [((8, 8192), "float32"), ((1, 8192), "float32"),
                                                   ((8, 8192), "float32")], "mul(x0,2.0)", [], (8, 8192),
                            "float32")
    tight = {"strategy": "walk", "vec": 4, "tpr": 256, "block": 256, "bps": 8, "cache": "reg"}
    assert not norm.valid(wide, tight)  # 8 packs of 16 bytes, 4 times (the row, 3 inputs): 512 bytes a thread
    assert norm.valid(tc.layer_norm((8, 8192), (8192,), "float32", used=(0,)), tight)  # 8 x 16 x 2: 256, the budget


def test_walk_actions_keep_a_block_a_row_and_walk_any_layout() -> None:
    card = _adaln()
    p = norm.defaults(card, "walk")
    acts = dict(norm.actions(card, p))
    assert acts["block 64 -> 128"]["tpr"] == 128  # a block a row stays one
    # Note [a block that fits the row], with the blocks per SM its threads allow
    assert acts["block 64 -> 192"] == {**p, "block": 192, "tpr": 192, "bps": 8}
    assert acts["tpr 64 -> 32"]["block"] == 64  # two rows a block
    assert acts["bps 16 -> 8"]["bps"] == 8 and acts["bps 16 -> 32"]["bps"] == 32
    group = norm.defaults(card, "group")
    walked = dict(norm.actions(card, group))["strategy group -> walk, same layout"]
    assert walked == {**norm.walked(group, group["tpr"]), "block": group["block"]} and norm.valid(card, walked)
    wider = {**norm.root_params(card), "block": 128}
    assert dict(norm.actions(card, wider))["strategy block -> walk, same layout"]["tpr"] == 128
    for q in acts.values():
        assert norm.valid(card, q)


def test_the_block_that_fits_the_row_walks_too() -> None:
    """Note [a block that fits the row]: a block of 192 threads (MMDiT's 1536 columns in packs of 8) is no power of
    two, and its walk takes the blocks per SM that fit, a power of two."""
    card = _adaln()
    fit = {"strategy": "block", "vec": 8, "block": norm.fit_block(1536, 8), "cache": "reg"}
    assert fit["block"] == 192 and norm.valid(card, fit)
    walk = dict(norm.actions(card, fit))["strategy block -> walk, same layout"]
    assert walk == {"strategy": "walk", "vec": 8, "tpr": 192, "block": 192, "bps": 8, "cache": "reg"}
    assert norm.valid(card, walk)
