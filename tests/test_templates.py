"""Template families and TemplateProposer, on the CPU: every template compiles for sm_90 with NVRTC.

For each representative card (the anchor shapes plus odd sizes), the root params and params one action away from the
root (sampled) must screen, resolve to a launch plan within CUDA's limits that names only the card's tensors, and
compile. Cubins are cached by source hash for the session. Correctness on a GPU is the verifier's job.
"""
from __future__ import annotations

import random
import re

import pytest

import template_cards as tc
from forge_backend.contract import PlanError, ResolvedScratch, resolve_plan, screen
from forge_backend.search.proposer import ParentView
from forge_backend.search.templates import FAMILIES, TemplateProposer, family_for, family_name
from forge_backend.search.templates.common import SMS, freeze
from forge_backend.search.templates.proposer import seed_labels

ACTIONS_PER_CARD = 3  # sampled one-action neighbours of the root, on top of every strategy seed

CARDS = {
    # softmax family (anchors, then odd sizes)
    "softmax_logits_f32": (lambda: tc.softmax((64, 262144), "float32"), "softmax"),
    "softmax_logits_bf16": (lambda: tc.softmax((64, 248320), "bfloat16"), "softmax"),
    "softmax_attn_bf16": (lambda: tc.softmax((1, 16, 4096, 4096), "bfloat16"), "softmax"),
    "softmax_router_f32": (lambda: tc.softmax((4096, 256), "float32"), "softmax"),
    "softmax_1024_bf16": (lambda: tc.softmax((8192, 1024), "bfloat16"), "softmax"),
    "log_softmax_1000_f16": (lambda: tc.softmax((3, 1000), "float16", log=True), "softmax"),
    "softmax_4097_f32": (lambda: tc.softmax((5, 4097), "float32"), "softmax"),
    "softmax_tiny": (lambda: tc.softmax((3, 3), "float32", dim=1), "softmax"),
    "softmax_long_rows": (lambda: tc.softmax((3, 700001), "float32"), "softmax"),
    # reductions over trailing dims
    "sum_rows_bf16_to_f32": (lambda: tc.reduction("aten.sum.dim_IntList", (3, 5, 1000), [1, 2], "bfloat16",
                                                  out_dtype="float32"), "reduce"),
    "amax_37_keepdim": (lambda: tc.reduction("aten.amax.default", (100, 37), [-1], "float16", keepdim=True), "reduce"),
    "mean_long": (lambda: tc.reduction("aten.mean.dim", (8, 4096), [-1]), "reduce"),
    "sum_all": (lambda: tc.reduction("aten.sum.dim_IntList", (2, 3, 30001), [], "float32"), "reduce"),
    # pooling
    "pool_nchw_f16": (lambda: tc.adaptive_pool((256, 2048, 7, 7), "float16"), "pool"),
    "pool_nchw_f32_b1": (lambda: tc.adaptive_pool((1, 2048, 7, 7), "float32"), "pool"),
    "pool_cl_f16": (lambda: tc.adaptive_pool((256, 2048, 7, 7), "float16", channels_last=True), "pool"),
    "mean_hw_cl_odd": (lambda: tc.spatial_mean((3, 33, 6, 6), "bfloat16", channels_last=True), "pool"),
    "mean_hw_37": (lambda: tc.spatial_mean((2, 5, 37, 1), "float32", dims=(2, 3), keepdim=False), "pool"),
    # norms
    "layer_norm_bf16": (lambda: tc.layer_norm((4096, 2048), (2048,), "bfloat16"), "norm"),
    "layer_norm_out0_only": (lambda: tc.layer_norm((16384, 4096), (4096,), "bfloat16", used=(0,)), "norm"),
    "layer_norm_no_affine_2d": (lambda: tc.layer_norm((3, 5, 1000), (5, 1000), weight=False, bias=False), "norm"),
    "layer_norm_4097_f16": (lambda: tc.layer_norm((7, 4097), (4097,), "float16", bias=False, used=(0, 2)), "norm"),
    "rms_norm_bf16": (lambda: tc.rms_norm((4096, 2048), (2048,), "bfloat16"), "norm"),
    "rms_norm_no_weight": (lambda: tc.rms_norm((3, 100), (100,), weight=False, used=(0,)), "norm"),
    "rms_norm_eps_none": (lambda: tc.rms_norm((5, 96), (96,), "float16", eps=None), "norm"),
    "batch_norm_nchw": (lambda: tc.batch_norm((8, 64, 56, 56), "float16"), "norm"),
    "batch_norm_cl": (lambda: tc.batch_norm((8, 64, 56, 56), "float16", channels_last=True), "norm"),
    "batch_norm_odd": (lambda: tc.batch_norm((2, 33, 7, 7), "float32"), "norm"),
    "batch_norm_cl_no_affine": (lambda: tc.batch_norm((2, 33, 5, 5), "bfloat16", channels_last=True, affine=False),
                                "norm"),
    "group_norm_vae_bf16": (lambda: tc.group_norm(1, 512, 256, 256, dtype="bfloat16"), "group_norm"),
    "group_norm_vae_f32_out0": (lambda: tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,)), "group_norm"),
    "group_norm_2x1536": (lambda: tc.group_norm(2, 1536, 64, 64, dtype="bfloat16"), "group_norm"),
    "group_norm_big_f32": (lambda: tc.group_norm(1, 128, 1024, 1024, dtype="float32"), "group_norm"),
    "group_norm_hw37_f16": (lambda: tc.group_norm(2, 96, 37, 1, groups=32, dtype="float16"), "group_norm"),
    "group_norm_no_affine": (lambda: tc.group_norm(3, 64, 6, 6, groups=8, affine=False), "group_norm"),
    # elementwise
    "gelu_bf16": (lambda: tc.unary("aten.gelu.default", (4096, 2048), "bfloat16"), "elementwise"),
    "gelu_tanh_odd": (lambda: tc.unary("aten.gelu.default", (1001,), approximate="tanh"), "elementwise"),
    "silu_cl": (lambda: tc.unary("aten.silu.default", (8, 64, 7, 7), "float16", channels_last=True), "elementwise"),
    "relu_tiny": (lambda: tc.unary("aten.relu.default", (3, 5)), "elementwise"),
    "sigmoid_bf16": (lambda: tc.unary("aten.sigmoid.default", (1000,), "bfloat16"), "elementwise"),
    "add_alpha": (lambda: tc.binary("aten.add.Tensor", (4096, 2048), "bfloat16", alpha=2), "elementwise"),
    "mul_mixed": (lambda: tc.binary("aten.mul.Tensor", (33, 7), "float16", "float32"), "elementwise"),
    "mul_scalar": (lambda: tc.binary("aten.mul.Tensor", (33, 7), "bfloat16", other=0.1), "elementwise"),
    "add_int_scalar": (lambda: tc.binary("aten.add.Tensor", (4, 4), other=3), "elementwise"),
    "to_bf16": (lambda: tc.to_copy((4096, 2047), "float32", "bfloat16"), "elementwise"),
    "to_f32_cl": (lambda: tc.to_copy((2, 3, 4, 5), "float16", "float32", channels_last=True), "elementwise"),
    # softmax with its prologue and cast (softmax_fusion.py): Gemma 4's attention (mask broadcast over heads) and
    # sampling (soft-capping), at the model's sizes and odd ones
    "softmax_fused_attn_bf16": (lambda: tc.softmax_fused(
        "to_float32(add(mul(x0,1.0),x1))", [((1, 8, 2048, 2048), "bfloat16"), ((1, 1, 2048, 2048), "bfloat16")],
        "bfloat16"), "softmax"),
    "softmax_fused_softcap": (lambda: tc.softmax_fused(
        "to_float32(mul(tanh(div(x0,30.0)),30.0))", [((1, 64, 262144), "bfloat16")]), "softmax"),
    "softmax_fused_odd": (lambda: tc.softmax_fused(
        "add(mul(x0,0.125),x1)", [((3, 5, 7, 1000), "float32"), ((5, 1, 1000), "float32")], "float16"), "softmax"),
    "softmax_fused_long_rows": (lambda: tc.softmax_fused(
        "to_float32(x0)", [((3, 700001), "float16")]), "softmax"),
    # a norm with its epilogue (norm_fusion.py): SD3.5 MMDiT's adaLN modulation, at its width and odd sizes
    "norm_fused_adaln_bf16": (lambda: tc.norm_fused(
        "add(mul(x0,x1),x2)", (2, 4096, 1536), [((2, 1, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16")]), "norm"),
    "norm_fused_rms_odd": (lambda: tc.norm_fused(
        "mul(x0,sigmoid(x1))", (3, 7, 1000), [((3, 7, 1000), "float32")], "float32", norm="rms_norm",
        weight=True), "norm"),
    "norm_fused_shift_first": (lambda: tc.norm_fused(
        "add(x0,mul(x1,2.0))", (5, 999), [((999,), "float16")], "float16", norm_out=1, weight=True), "norm"),
    # with the residual add before it (Note [a norm takes the residual add before it]): MMDiT's, and odd sizes
    "norm_residual_mmdit_bf16": (lambda: tc.norm_residual(
        "add(x0,mul(x1,x2))",
        [((2, 4096, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16"), ((2, 4096, 1536), "bfloat16")],
        "add(mul(x0,x1),x2)", [((2, 1, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16")], (2, 4096, 1536)), "norm"),
    "norm_residual_rms_odd": (lambda: tc.norm_residual(
        "add(x0,x1)", [((5, 999), "float16"), ((5, 999), "float16")], "mul(x0,2.0)", [], (5, 999), "float16",
        norm="rms_norm", weight=True), "norm"),
    # fused pointwise groups (fusion.py)
    "fused_silu_mul_bf16": (lambda: tc.fused("mul(silu(x0),x0)", [((16384, 4096), "bfloat16")]), "fused"),
    "fused_gelu_add_odd": (lambda: tc.fused("add(gelu(x0),x1)", [((1001, 7), "float32")] * 2), "fused"),
    "fused_relu_to_bf16": (lambda: tc.fused("to_bfloat16(mul(relu(x0),2.0))", [((1001, 7), "float32")]), "fused"),
    "fused_div_scalar_f16": (lambda: tc.fused("div(sub(x0,1),-0.0)", [((4097,), "float16")]), "fused"),
    "fused_mixed_shared": (lambda: tc.fused("add(mul(sub(x0,x1,alpha=0.5),sub(x0,x1,alpha=0.5)),gelu_tanh(x2))",
                                            [((33, 7), "float16"), ((33, 7), "bfloat16"), ((33, 7), "float32")]),
                           "fused"),
}


CARDS.update({
    "dwconv_qwen_bf16": (lambda: tc.causal_conv1d(8192, 2048), "conv"),
    "dwconv_odd_f32": (lambda: tc.causal_conv1d(37, 29, k=3, dtype="float32", channels_fast=False, bias=True), "conv"),
})

UNMATCHED = {
    "convolution": lambda: tc.card_for("aten.convolution.default", {
        "input": tc.meta((1, 3, 8, 8)), "weight": tc.meta((4, 3, 3, 3)), "bias": None, "stride": [1, 1],
        "padding": [0, 0], "dilation": [1, 1], "transposed": False, "output_padding": [0, 0], "groups": 1}),
    "softmax_dim0": lambda: tc.softmax((4, 8), dim=0),
    "softmax_half_to_float": lambda: tc.card_for("aten._softmax.default", {
        "self": tc.meta((4, 8), "float16"), "dim": -1, "half_to_float": True}),
    "add_broadcast": lambda: tc.card_for("aten.add.Tensor", {"self": tc.meta((4, 4)), "other": tc.meta((4,))}),
    "mean_middle_dim": lambda: tc.reduction("aten.mean.dim", (4, 5, 6), [1]),
    "to_float64": lambda: tc.card_for("aten._to_copy.default", {"self": tc.meta((4, 4)), "dtype": tc.torch.float64}),
    "adaptive_pool_2x2": lambda: tc.card_for("aten._adaptive_avg_pool2d.default", {
        "self": tc.meta((2, 8, 7, 7)), "output_size": [2, 2]}),
    "fused_broadcast": lambda: tc.fused("add(x0,x1)", [((4, 8), "float32"), ((8,), "float32")]),
    "softmax_fused_broadcast_columns": lambda: tc.softmax_fused("add(x0,x1)", [((4, 8), "float32"), ((4, 1), "float32")]),
    "fused_wrong_output_dtype": lambda: _fused_with(out_dtype="float16"),
    "fused_channels_last": lambda: _fused_with(channels_last=True),
}


def _fused_with(expr="mul(silu(x0),x0)", out_dtype="bfloat16", channels_last=False):
    """A fused card that no template may serve: an output dtype promotion does not give, or a layout other than
    row-major (fusion.py never builds these)."""
    from forge_backend.cards import build_card
    from forge_backend.expression import FUSED_OP
    from forge_backend.signature import ArgSpec, OpSignature, TensorSpec

    x = TensorSpec.of(tc.meta((2, 8, 4, 4), "bfloat16", channels_last))
    out = TensorSpec.of(tc.meta((2, 8, 4, 4), out_dtype, channels_last))
    return build_card(OpSignature(FUSED_OP, (ArgSpec("x0", x), ArgSpec("expr", value=expr)), (out,), (0,), "sm_90"))

_compiled: dict[str, bool] = {}


def _compile_once(candidate) -> None:
    from forge_backend.runtime.nvrtc import compile_candidate

    key = candidate.source_hash()
    if key not in _compiled:
        compile_candidate(candidate, "sm_90")
        _compiled[key] = True


def _params_to_check(fam, card) -> list[tuple[str, dict]]:
    seeds = fam.seeds(card)
    acts = fam.actions(card, seeds[0])
    rng = random.Random(card.key)
    picked = rng.sample(acts, min(ACTIONS_PER_CARD, len(acts)))
    seen, out = set(), []
    for label, p in [("seed", p) for p in seeds] + picked:
        if freeze(p) not in seen:
            seen.add(freeze(p))
            out.append((label, p))
    return out


def _check_plan(card, candidate) -> None:
    screen(candidate)
    launches, scratch = resolve_plan(candidate, card.sizes, card.floats, SMS)
    inputs = {t.name for t in card.inputs}
    outputs = {int(t.name[3:]) for t in card.outputs}
    scratch_names = {s.name for s in scratch}
    for launch in launches:
        assert launch.grid[0] < 2**31 and launch.grid[1] <= 65535 and launch.grid[2] <= 65535
        assert launch.block[0] * launch.block[1] * launch.block[2] <= 1024
        assert launch.smem <= 227 * 1024
        for kind, payload in launch.args:
            if kind == "in":
                assert payload in inputs, f"plan names input {payload!r}; the card has {sorted(inputs)}"
            elif kind == "out":
                assert payload in outputs, f"plan writes output {payload}; the card uses {sorted(outputs)}"
            elif kind == "scratch":
                assert payload in scratch_names
    # every output the graph uses is written by some launch
    written = {p for l in launches for k, p in l.args if k == "out"}
    assert written == outputs
    assert candidate.requires_align in (1, 2, 4, 8, 16, 32)
    if re.search(r"ldp<\w+, VEC>", candidate.source) and "constexpr int VEC = 1;" not in candidate.source:
        assert candidate.requires_align > 1, "vector loads need the runtime's alignment check"


@pytest.mark.parametrize("name", sorted(CARDS))
def test_family_templates_compile(name: str) -> None:
    factory, expected = CARDS[name]
    card = factory()
    fam = family_for(card)
    assert fam is not None and family_name(fam) == expected
    root = fam.root_params(card)
    assert fam.valid(card, root) and fam.seeds(card)[0] == root
    for label, params in _params_to_check(fam, card):
        assert fam.valid(card, params), (label, params)
        candidate = fam.generate(card, params)
        assert dict(candidate.params) == params and candidate.description
        _check_plan(card, candidate)
        _compile_once(candidate)


@pytest.mark.parametrize("name", sorted(CARDS))
def test_actions_are_valid_distinct_and_labelled(name: str) -> None:
    card = CARDS[name][0]()
    fam = family_for(card)
    for params in fam.seeds(card):
        acts = fam.actions(card, params)
        frozen = [freeze(p) for _, p in acts]
        assert len(set(frozen)) == len(frozen) and freeze(params) not in frozen
        for label, p in acts:
            assert label and "\n" not in label and fam.valid(card, p)


@pytest.mark.parametrize("name", sorted(UNMATCHED))
def test_unmatched_ops_are_left_to_pytorch(name: str) -> None:
    card = UNMATCHED[name]()
    assert family_for(card) is None
    parent = ParentView(0, None, {}, None, None, None)
    assert TemplateProposer().propose(card, parent, random.Random(0)) is None


def test_root_strategies_fit_the_shape() -> None:
    pick = lambda name: family_for(c := CARDS[name][0]()).root_params(c)  # noqa: E731
    assert pick("softmax_logits_f32")["strategy"] == "relay"  # few 1 MB rows, 64 MB: pieces through every SM
    assert pick("softmax_logits_bf16")["strategy"] == "relay"
    assert family_for(c := tc.softmax((8, 262144), "float32")).root_params(c)["strategy"] == "cluster"  # 8 MB
    assert pick("softmax_long_rows")["strategy"] == "split"  # too long for 16 blocks' registers
    assert pick("softmax_attn_bf16") == {"strategy": "block", "vec": 8, "block": 128, "cache": "reg"}
    assert pick("softmax_router_f32")["strategy"] == "group"
    assert pick("pool_nchw_f16")["strategy"] == "tile"
    assert pick("pool_cl_f16")["strategy"] == "cl"
    assert pick("group_norm_vae_bf16")["strategy"] == "relay"  # 32 groups of 2 MB: pieces through every SM
    gn_sync = family_for(c := CARDS["group_norm_vae_bf16"][0]()).defaults(c, "sync")
    assert gn_sync == {"strategy": "sync", "vec": 8, "block": 512, "bpt": 128, "cache": "none",
                       "stream": True}  # the sync's best for 2 MB groups
    cluster = lambda name: family_for(c := CARDS[name][0]()).defaults(c, "cluster")  # noqa: E731
    assert cluster("softmax_logits_f32")["cache"] == "smem"  # 64 KB chunks: the probe's best
    assert cluster("softmax_logits_bf16")["cache"] == "reg"  # 32 KB chunks: registers tie
    assert pick("group_norm_big_f32")["strategy"] == "relay"  # 16 MB groups: 512 pieces, up to 4 a block (lag 3)
    huge = tc.group_norm(1, 128, 2048, 2048, dtype="float32")  # 64 MB groups: 2048 pieces, too many to poll
    assert family_for(huge).root_params(huge)["strategy"] == "split"
    assert pick("softmax_4097_f32")["vec"] == 1  # 4097 * 4 bytes is not a multiple of 16
    # Note [a prologue evaluated once, into its slot]: the soft cap's bf16 values fit the relay's slots; Note [stores
    # of whole sectors]: its fp32 outputs are stored 16 bytes a lane; Note [eight slots for a paired prologue]
    assert pick("softmax_fused_softcap") == {"strategy": "relay", "vec": 8, "pe": 8192, "nw": 16, "nc": 1, "k": 8,
                                             "lag": 3, "once": True, "ramp": 2, "halves": True}
    softcap = CARDS["softmax_fused_softcap"][0]()
    assert family_for(softcap).defaults(softcap, "cluster")["vec"] == 4  # bf16 logits, fp32 after the prologue
    assert family_for(softcap).seeds(softcap)[1]["strategy"] == "cluster"
    two = CARDS["softmax_fused_attn_bf16"][0]()  # two inputs (logits and mask): no relay
    assert family_for(two).root_params(two)["strategy"] != "relay"


def test_cluster_softmax_can_keep_its_chunk_in_shared_memory() -> None:
    """cache=smem: the chunk (64 KB of a 1 MB fp32 row over 16 blocks) is dynamic shared memory, so the launch asks
    for it; it is the cluster's default there (a seed after the relay), and registers are one action away."""
    from forge_backend.search.templates import softmax as sm

    card = CARDS["softmax_logits_f32"][0]()
    smem = sm.defaults(card, "cluster")
    assert smem in sm.seeds(card) and smem["cache"] == "smem"
    root = dict(sm.actions(card, smem))["cache smem -> reg"]
    launches, _ = resolve_plan(sm.generate(card, smem), card.sizes, card.floats, SMS)
    assert launches[0].smem == 262144 // root["cs"] * 4
    _compile_once(sm.generate(card, smem))
    too_big = {**smem, "cs": 2}  # 512 KB per block
    assert not sm.valid(card, too_big)


def test_group_norm_sync_can_keep_its_chunk_in_shared_memory() -> None:
    """cache=smem for the one-launch group norm: the chunk (bpt bytes per thread) is dynamic shared memory, which
    also bounds how many blocks the ticket barrier may count on being resident."""
    from forge_backend.search.templates import group_norm as gn

    card = CARDS["group_norm_vae_bf16"][0]()
    root = gn.defaults(card, "sync")
    assert root in gn.seeds(card)
    smem = dict(gn.actions(card, root))["cache none -> smem"]
    big = {**smem, "bpt": 512, "block": 256}  # 128 KB of chunk per block: beyond what registers could hold
    assert gn.valid(card, big) and not gn.valid(card, {**big, "cache": "reg"})
    launches, _ = resolve_plan(gn.generate(card, big), card.sizes, card.floats, SMS)
    assert launches[0].smem == 512 * 256
    _compile_once(gn.generate(card, big))
    assert not gn.valid(card, {**big, "bpt": 1024, "block": 1024})  # 1 MB: no SM has that much shared memory


def test_pipe_softmax_walks_the_rows_with_a_fixed_set_of_clusters() -> None:
    """strategy=pipe: ``clusters`` clusters of cs blocks (one block per SM by default) loop over the rows, the
    current row's chunk in shared memory and the next row's in registers; the rows are a kernel argument, and the
    grid does not depend on them. Long rows only; a fused prologue is loaded the same way."""
    from forge_backend.search.templates import softmax as sm

    card = CARDS["softmax_logits_f32"][0]()  # [64, 262144] fp32: 1 MB rows
    p = sm.defaults(card, "pipe")
    assert p == {"strategy": "pipe", "vec": 4, "block": 512, "cs": 16, "clusters": 8, "stream": False}
    assert sm.valid(card, p) and p in sm.seeds(card)
    cand = sm.generate(card, p)
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert launches[0].grid[0] == 8 * 16 and launches[0].smem == 262144 // 16 * 4
    assert launches[0].args[-1] == ("i64", 64)  # the rows, resolved from the card's sizes
    assert "__cluster_dims__(CS, 1, 1)" in cand.source and "nx[i]" in cand.source
    _compile_once(cand)
    acts = dict(sm.actions(card, p))
    assert acts["clusters 8 -> 16"]["clusters"] == 16 and sm.valid(card, acts["clusters 8 -> 4"])
    _compile_once(sm.generate(card, acts["stream False -> True"]))
    assert sm.valid(card, {**p, "cs": 8})  # 128 KB per block: the most registers and shared memory allow
    assert not sm.valid(card, {**p, "cs": 4})  # 256 KB per block: too much for either
    assert not sm.valid(card, {**p, "clusters": 65})  # more clusters than rows
    short = CARDS["softmax_1024_bf16"][0]()
    assert not sm.valid(short, sm.defaults(short, "pipe"))  # 2 KB rows: not what it is for
    fused = CARDS["softmax_fused_softcap"][0]()
    q = sm.defaults(fused, "pipe")
    assert sm.valid(fused, q)
    src = sm.generate(fused, q).source
    assert "const XRow xn = x_row(" in src and "ldx<T, VEC>(xn + col)" in src
    _compile_once(sm.generate(fused, q))


def test_relay_softmax_streams_pieces_through_every_sm() -> None:
    """strategy=relay (Note [rows relayed through global memory]): one cooperative block of NW consumer warps and NC
    control warps per SM, K shared-memory slots of PE elements filled by bulk copies, each piece's partial one marked
    word in a kept scratch. Only for the plain input (a bulk copy moves bytes as they are), 16-byte packs, rows of
    >= 64 KB, whole packs per lane, slots within shared memory, a lag that leaves loads in flight, and at least as
    many blocks as a row has pieces."""
    from forge_backend.search.templates import softmax as sm

    card = CARDS["softmax_logits_f32"][0]()  # [64, 262144] fp32
    p = sm.defaults(card, "relay")
    # Note [the first copies a few at a time]: two at a time
    assert p == {"strategy": "relay", "vec": 4, "pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 3, "ramp": 2}
    # Note [writers of their own for whole pieces]: the root takes them, in seven slots; these defaults stay joint
    root = {**{k: v for k, v in p.items() if k != "lag"}, "writers": True, "nw": 8, "k": 7}
    assert sm.valid(card, p) and sm.seeds(card)[0] == root and sm.seeds(card)[1]["strategy"] == "cluster"
    cand = sm.generate(card, p)
    # Note [the GPU's SM count in a plan]: one block per SM of the GPU that launches it
    with pytest.raises(PlanError, match="unknown size 'num_sms'"):
        resolve_plan(cand, card.sizes, card.floats)
    assert resolve_plan(cand, card.sizes, card.floats, 114)[0][0].grid == (114, 1, 1)
    (l,), scratch = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert l.cooperative and l.grid == (SMS, 1, 1) and l.block == (19 * 32, 1, 1)  # 16 + 1 + loader + publisher
    assert l.smem == 6 * 32 * 1024 + 1024  # the slots, after 6 x (4 mbarriers, 16 warp partials, a statistic)
    # 32 pieces a row, one marked word each, then the epoch and the count; zeroed once and kept between launches
    assert scratch == (ResolvedScratch("part", 64 * 32 * 8 + 8, True, True),)
    for needle in ("cp.async.bulk", "st.relaxed.gpu.global.u64", "ld.relaxed.gpu.global.u64", "__trap()"):
        assert needle in cand.source
    _compile_once(cand)
    acts = dict(sm.actions(card, p))
    assert {"lag 3 -> 4", "lag 3 -> 2", "k 6 -> 5", "pe 8192 -> 4096", "nw 16 -> 8", "nc 1 -> 2"} <= set(acts)
    assert not sm.valid(card, {**p, "nc": 8}) and not sm.valid(card, {**p, "nw": 28, "nc": 3})  # <= 4, <= 32 warps
    assert sm.valid(card, {**p, "nc": 4}) and not sm.valid(card, {**p, "k": 3, "lag": 1, "nc": 4})  # nc <= k
    assert "k 6 -> 7" in acts and not sm.valid(card, {**p, "k": 8})  # 7 slots of 32 KB fit, 8 do not
    assert not sm.valid(card, {**p, "lag": 5})  # the lag must leave slots for loads in flight
    few = {**p, "pe": 512, "nw": 4, "k": 12}  # 512 pieces a row for 132 blocks: up to 4 a block, so the consumers
    assert not sm.valid(card, {**few, "lag": 2}) and sm.valid(card, {**few, "lag": 3})  # must reduce 3 past one
    assert not sm.valid(card, {**p, "pe": 128, "nw": 1, "k": 16, "lag": 14})  # 2048 pieces a row: too many to poll
    assert not sm.valid(card, {**p, "pe": 8192 + 64})  # each of the 16 warps takes whole 32-lane rounds of packs
    log = tc.softmax((3, 70000), "float32", log=True)
    assert sm.valid(log, sm.defaults(log, "relay"))
    _compile_once(sm.generate(log, sm.defaults(log, "relay")))  # a last piece of 4464 elements, log_softmax
    odd = tc.softmax((3, 70001), "float32")
    assert not sm.valid(odd, {**sm.defaults(odd, "relay"), "vec": 4})  # rows not a multiple of 16 bytes
    short = CARDS["softmax_1024_bf16"][0]()
    assert not sm.valid(short, sm.defaults(short, "relay"))  # 2 KB rows: one block per row does it
    # Note [a prologue run from the relay's slots]: the slots hold the bf16 logits, the consumers run the soft cap;
    # Note [a prologue evaluated once, into its slot]: its bf16 values go back into the slot, and that relay is the root
    fused = CARDS["softmax_fused_softcap"][0]()
    q = sm.defaults(fused, "relay")
    assert q == {"strategy": "relay", "vec": 8, "pe": 8192, "nw": 16, "nc": 1, "k": 8, "lag": 3, "once": True,
                 "ramp": 2, "halves": True}
    assert sm.valid(fused, q) and sm.root_params(fused) == q
    relay = sm.generate(fused, q)
    assert relay.requires_align == 32  # 8 fp32 outputs a pack: two 16-byte stores
    assert relay.launches[0].args[0] == "in:x0" and "fx(to_f(v))" in relay.source
    _compile_once(relay)
    # fp32 values of bf16 logits do not fit the slots: evaluated three times an element, the relay lost to the
    # cluster (an action, neither the root nor a seed)
    wide = tc.softmax_fused("mul(to_float32(x0),2.0)", [((64, 262144), "bfloat16")])
    w = sm.defaults(wide, "relay")
    assert "once" not in w and sm.valid(wide, w) and sm.root_params(wide)["strategy"] == "cluster"
    assert w not in sm.seeds(wide) and dict(sm.actions(wide, sm.root_params(wide)))["strategy cluster -> relay"] == w
    _compile_once(sm.generate(wide, w))
    masked = tc.softmax_fused("add(x0,x1)", [((1, 4, 8, 32768), "float32"), ((1, 1, 8, 32768), "float32")])
    assert not sm.valid(masked, sm.defaults(masked, "relay"))  # a second input: the bulk copies take one
    assert not sm.valid(masked, {**sm.defaults(masked, "relay"), "vec": 4})


def test_rows_sharing_a_broadcast_row_launch_together() -> None:
    """order=bcast (Note [rows that share a broadcast row run together]): the row kernels of a fused softmax launch
    the rows whose broadcasting input row is the same one after another. The launch order is a permutation of the
    rows (numpy's transpose of the leading dims), offered only where it differs from row order."""
    import numpy as np

    from forge_backend.search.templates import softmax as sm
    from forge_backend.search.templates.common import row_order, row_terms

    def launched(card) -> list[int]:
        out = card.outputs[0].spec
        terms, rows = row_terms(out, row_order(out, [t.spec for t in card.inputs])), card.sizes["rows"]
        got = []
        for r in range(rows):
            row = 0
            for size, stride in terms:
                row += (r % size) * stride
                r //= size
            got.append(row)
        return got

    mask = tc.softmax_fused("add(x0,x1)", [((2, 3, 5, 64), "float32"), ((2, 1, 5, 64), "float32")])
    assert row_order(mask.outputs[0].spec, [t.spec for t in mask.inputs]) == [0, 2, 1]  # heads innermost
    want = np.arange(30).reshape(2, 3, 5).transpose(0, 2, 1).reshape(-1).tolist()
    assert launched(mask) == want and sorted(want) == list(range(30)) and want[:3] == [0, 5, 10]
    gemma = tc.softmax_fused("to_float32(add(mul(x0,1.0),x1))",
                             [((1, 8, 16, 64), "bfloat16"), ((1, 1, 16, 64), "bfloat16")], "bfloat16")
    assert launched(gemma)[:9] == [0, 16, 32, 48, 64, 80, 96, 112, 1]
    # a mask that already broadcasts over the innermost leading dim, and a plain softmax: nothing to reorder
    inner = tc.softmax_fused("add(x0,x1)", [((4, 6, 64), "float32"), ((4, 1, 64), "float32")])
    for card in (inner, CARDS["softmax_1024_bf16"][0]()):
        root = sm.root_params(card)
        assert not sm.valid(card, {**root, "order": "bcast"})
        assert not any(label.startswith("order") for label, _ in sm.actions(card, root))
    q = sm.root_params(mask)  # the row kernels launch in this order by default, and row order is an action
    assert q["order"] == "bcast" and sm.valid(mask, q)
    root = dict(sm.actions(mask, q))["order bcast -> rows"]
    assert root == {k: v for k, v in q.items() if k != "order"} and sm.valid(mask, root)
    assert dict(sm.actions(mask, root))["order rows -> bcast"] == q
    assert not sm.valid(mask, {**root, "order": "heads"})
    assert not sm.valid(mask, {**sm.defaults(mask, "cluster"), "order": "bcast"})  # the row kernels only
    src = sm.generate(mask, q).source
    assert "row += (r % 3LL) * 5LL; r /= 3LL;" in src and "const long long row = ok ? row_of(lr) : lr;" in src
    assert "row_of" not in sm.generate(mask, root).source
    _compile_once(sm.generate(gemma, {**sm.root_params(gemma), "order": "bcast"}))


def test_relay_reads_its_epoch_before_the_first_copy() -> None:
    """Note [the epoch read before the first copies]: lane 0 of the publisher and of each resolver loads the epoch
    before the block's __syncthreads, after which the loader issues the first bulk copy; the mark is made from that
    value, with no second read of the epoch; the publisher does not count itself in, and the resolvers count after the
    barrier. The resident kernel's thread 0 reads it before its first copy too."""
    from forge_backend.search.templates import group_norm as gn
    from forge_backend.search.templates import softmax as sm

    for fam, card in ((sm, CARDS["softmax_logits_f32"][0]()), (gn, tc.group_norm(1, 512, 128, 128, used=(0,)))):
        p = fam.root_params(card)
        src = fam.generate(card, p).source
        kernel = src[src.index('extern "C"'):]
        read, barrier = kernel.index("? relay_epoch(ctl) : 0u;"), kernel.index("__syncthreads();")
        assert read < barrier < kernel.index("slot_load(")
        # Note [the publisher left out of the epoch's count]: only the resolvers count, after the barrier
        assert kernel.count("relay_epoch(") == 1 and kernel.count("relay_mark_of(epoch)") == 1
        assert kernel.count("relay_mark(") == 1 and barrier < kernel.index("relay_mark(epoch, ctl, &fin, NC);")
    card = tc.softmax((64, 262144), "bfloat16")
    src = sm.generate(card, sm.defaults(card, "resident")).source
    kernel = src[src.index('extern "C"'):]
    first_copy = kernel.index("issue(c);")
    assert kernel.index("relay_epoch(ctl)") < first_copy < kernel.index("relay_mark(epoch, ctl, &fin, 1)")


def test_group_norm_roots_take_six_slots_for_4_byte_groups_of_one_piece_a_block() -> None:
    """Note [six slots where a block holds one piece of a group]: writers of their own take six 32 KB slots where the
    group is 4-byte and at most 132 pieces, seven elsewhere (2-byte groups; 4-byte groups held in registers)."""
    from forge_backend.search.templates import group_norm as gn

    cases = [((1, 512, 128, 128, "float32"), 6), ((2, 1536, 64, 64, "float32"), 6), ((1, 512, 256, 256, "float32"), 6),
             ((1, 512, 128, 128, "bfloat16"), 7), ((1, 512, 256, 256, "bfloat16"), 7),
             ((1, 256, 512, 512, "float32"), 7), ((1, 128, 1024, 1024, "float32"), 7)]
    for (n, c, h, w, dtype), slots in cases:
        card = tc.group_norm(n, c, h, w, dtype=dtype, used=(0,))
        root = gn.root_params(card)
        assert root["writers"] is True and root["k"] == slots, (n, c, h, w, dtype, root)
        assert gn.valid(card, {**root, "k": 7}) and ("regs" in root) == (slots == 7 and dtype == "float32")
    # exactly 132 pieces of a group (4.125 MB in 32 KB pieces) still one a block; 133 two for one block
    assert gn.own_slots(tc.group_norm(1, 32, 264, 1024, groups=8, dtype="float32", used=(0,)), {"pe": 8192}) == 6
    assert gn.own_slots(tc.group_norm(1, 32, 266, 1024, groups=8, dtype="float32", used=(0,)), {"pe": 8192}) == 7


def test_relay_group_norm_takes_groups_as_rows() -> None:
    """strategy=relay for group norms (Note [rows relayed through global memory]): a group is a row of
    group_size elements; each piece publishes (mean, M2) and its count follows from its place in the group, so the
    pieces combine with Chan's formula; the resolver of a group's first piece stores mean and rstd. Groups of >=
    256 KB, 16-byte packs that never straddle a channel."""
    from forge_backend.search.templates import group_norm as gn

    card = tc.group_norm(1, 512, 256, 256, dtype="bfloat16")  # 32 groups of 2 MB, every output used
    p = gn.defaults(card, "relay")
    assert p == {"strategy": "relay", "vec": 8, "pe": 16384, "nw": 16, "nc": 1, "k": 6, "lag": 3}
    # the root has writers of their own (Note [writers of their own]): half the consumer warps write, no lag, seven
    # slots (the most that fit); the relay without them is the next seed, and one action away
    root = gn.root_params(card)
    assert root == {**{key: v for key, v in p.items() if key != "lag"}, "nw": 8, "k": 7, "writers": True, "ramp": 2}
    assert gn.valid(card, p) and gn.valid(card, root) and gn.seeds(card)[1] == p
    assert not gn.valid(card, {**root, "k": 8})  # eight 32 KB slots do not fit
    # nor do seven beside sixteen consumer warps' partials, so from the root the action back is not offered (the
    # joint relay is a seed instead); from six slots it is
    assert "writers True -> False" not in dict(gn.actions(card, root))
    assert dict(gn.actions(card, {**root, "k": 6}))["writers True -> False"] == {**p, "lag": 4, "ramp": 2}
    (w,), _ = resolve_plan(gn.generate(card, root), card.sizes, card.floats, SMS)
    assert w.block == (19 * 32, 1, 1)  # 8 reducers, 1 resolver, the loader, the publisher, 8 writers
    # Note [relay pieces of 48 KB: an action, not the root]: pieces 1.5 times larger in the same slot bytes are one
    # action away, and the action back gives 32 KB pieces in 6 slots again; 1.5 times the consumer warps too
    wide = dict(gn.actions(card, p))["pieces 16384 -> 24576 in 4 slots"]
    assert wide == {**p, "pe": 24576, "k": 4, "lag": 2} and gn.valid(card, wide)
    assert dict(gn.actions(card, wide))["pieces 24576 -> 16384 in 6 slots"] == {**p, "lag": 2}
    assert dict(gn.actions(card, wide))["nw 16 -> 24"] == {**wide, "nw": 24}
    assert "nw 16 -> 24" not in dict(gn.actions(card, p))  # 32 KB pieces do not split over 24 warps' packs
    _compile_once(gn.generate(card, {**wide, "nw": 24}))
    cand = gn.generate(card, p)
    (l,), scratch = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert l.cooperative and l.grid == (SMS, 1, 1) and l.block == (19 * 32, 1, 1)
    assert [a for a, _ in l.args] == ["in", "in", "in", "out", "out", "out", "f32", "scratch", "i64"]
    assert l.args[-1] == ("i64", 32)
    assert scratch == (ResolvedScratch("part", 32 * 64 * 8 + 8, True, True),)  # 64 pieces a group, then 2 counters
    assert l.smem == 1792 + 6 * 32768  # the head holds 16-byte (count, mean, M2) partials
    assert "typedef Chan Op;" in cand.source and "if (c0 == 0) { mean_out[row]" in cand.source
    _compile_once(cand)
    assert not gn.valid(card, {**p, "vec": 4})  # 8-byte packs
    small = tc.group_norm(2, 96, 64, 64, dtype="bfloat16")  # 24 KB groups: a cluster holds them
    assert not gn.valid(small, gn.defaults(small, "relay"))
    odd = tc.group_norm(1, 64, 200, 200, groups=8, dtype="float32", affine=False)  # a last piece of 520 elements
    q = gn.defaults(odd, "relay")
    assert gn.valid(odd, q) and "w[c]" not in gn.generate(odd, q).source
    _compile_once(gn.generate(odd, q))
    acts = dict(gn.actions(card, p))
    assert {"nc 1 -> 2", "lag 3 -> 2", "pe 16384 -> 8192", "strategy relay -> cluster"} <= set(acts)
    # Note [weights loaded before the wait]: the writers load their channels' weights before they wait for the
    # statistic, into registers while that is at most 8 packs a lane; past that, at each pack as before
    for q, early in ((p, True), ({**p, "pe": 16384, "nw": 2}, False)):
        src = gn.generate(card, q).source
        write = src[src.index("if (t >= LAG)"):]
        loads, wait = write.find("to_f(w["), write.index("bar_wait(ready + sl")
        assert gn.valid(card, q) and (loads < wait if early else loads > wait), q
        assert ("float wv[NPL]" in src) == early and ("ca * m_r" in write)
    plain = gn.generate(odd, q := gn.defaults(odd, "relay")).source
    assert "wv[" not in plain and "(to_f(p.v[j]) - m_r) * r_r" in plain  # no weights: nothing to load


def test_four_byte_group_norms_try_half_the_reducers_second() -> None:
    """group_norm.fewer_reducers: for fp32 groups the seed right after the root is the root with half its reducer and
    writer warps (it won [2,1536,64,64] fp32 by 3.5% in the twenty-second session's probe); bf16 groups, where it
    lost, do not get it. Its label tells it apart from the root's, so the search proposes it."""
    from forge_backend.search.templates import group_norm as gn

    card = tc.group_norm(2, 1536, 64, 64)
    root = gn.root_params(card)
    assert root["strategy"] == "relay" and root["writers"] and root["nw"] == 8
    half = gn.seeds(card)[1]
    assert half == {**root, "nw": 4} and gn.valid(card, half)
    (w,), _ = resolve_plan(gn.generate(card, half), card.sizes, card.floats, SMS)
    assert w.block == (11 * 32, 1, 1)  # 4 reducers, 1 resolver, the loader, the publisher, 4 writers
    assert gn.seeds(card)[2] == gn.defaults(card, "relay")  # then the relay without writers, as for bf16
    labels = seed_labels(gn.seeds(card))
    assert len(set(labels)) == len(labels) and "nw=4" in labels[1]
    bf16 = tc.group_norm(2, 1536, 64, 64, dtype="bfloat16")
    assert gn.root_params(bf16)["nw"] == 8 and not any(q.get("writers") and q["nw"] == 4 for q in gn.seeds(bf16))


def test_group_norm_cluster_keeps_each_group_on_one_cluster() -> None:
    """strategy=cluster: one cluster of cs blocks per group, the chunk in registers (or shared memory, which the
    launch then asks for); a group too big for 16 blocks' registers or shared memory has no cluster variant."""
    from forge_backend.search.templates import group_norm as gn

    card = CARDS["group_norm_vae_bf16"][0]()
    p = gn.defaults(card, "cluster")
    assert p["cs"] == 16 and p["cache"] == "reg" and gn.valid(card, p)  # 2 MB groups: 128 KB per block
    assert p in gn.seeds(card)
    cand = gn.generate(card, p)
    assert "__cluster_dims__(K, 1, 1)" in cand.source and not cand.scratch
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    ng = card.sizes["N"] * card.sizes["G"]
    assert launches[0].grid[0] == ng * 16 and launches[0].smem == 0
    _compile_once(cand)
    smem = dict(gn.actions(card, p))["cache reg -> smem"]
    launches, _ = resolve_plan(gn.generate(card, smem), card.sizes, card.floats, SMS)
    assert launches[0].smem == card.sizes["group_size"] // 16 * 2
    _compile_once(gn.generate(card, smem))
    assert not gn.valid(card, {**p, "cs": 8})  # 256 KB per block: over the register budget
    assert not gn.valid(card, {**p, "cs": 8, "cache": "smem"})  # and over the 227 KB of shared memory
    big = CARDS["group_norm_big_f32"][0]()
    assert not gn.valid(big, gn.defaults(big, "cluster"))


def test_group_norm_pipe_walks_the_groups_with_a_fixed_set_of_clusters() -> None:
    """strategy=pipe for group norm: ``clusters`` clusters of cs blocks walk the N*G groups, the current group's
    chunk in shared memory and the next group's in registers; only groups of 256 KB or more."""
    from forge_backend.search.templates import group_norm as gn

    card = CARDS["group_norm_vae_bf16"][0]()  # 2 MB groups
    p = gn.defaults(card, "pipe")
    assert p == {"strategy": "pipe", "vec": 8, "block": 1024, "cs": 16, "clusters": 8, "stream": False}
    assert gn.valid(card, p) and p in gn.seeds(card)
    cand = gn.generate(card, p)
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert launches[0].grid[0] == 8 * 16 and launches[0].smem == card.sizes["group_size"] // 16 * 2
    assert "nx[i]" in cand.source and "cpart[it & 1]" in cand.source and not cand.scratch
    _compile_once(cand)
    _compile_once(gn.generate(card, dict(gn.actions(card, p))["stream False -> True"]))
    assert not gn.valid(card, {**p, "clusters": 33})  # more clusters than the 32 groups
    assert not gn.valid(card, {**p, "cs": 8})  # 256 KB per block
    small = CARDS["group_norm_no_affine"][0]()  # 288 B groups
    assert not gn.valid(small, gn.defaults(small, "pipe"))


def test_softmax_cluster_keeps_part_of_its_chunk_and_rereads_the_rest_first() -> None:
    """Note [a chunk kept in part]: cluster + cache=smem + keep holds the first ``keep`` packs of each thread in
    shared memory (the launch asks for only that much) and re-reads the rest, first in the write; ``keep`` must be
    below the chunk's packs (all of them is plain smem) and the loops stay fully unrolled."""
    from forge_backend.search.templates import softmax as sm

    card = CARDS["softmax_logits_f32"][0]()  # 64 KB chunks over 16 blocks of 256 threads: 16 packs per thread
    p = {"strategy": "cluster", "vec": 4, "block": 256, "cs": 16, "cache": "smem", "keep": 6, "stream": True}
    assert sm.valid(card, p)
    cand = sm.generate(card, p)
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert launches[0].smem == 6 * 256 * 4 * 4 and launches[0].grid[0] == 64 * 16
    src = cand.source
    assert "for (int i = KEEP; i < NIT; ++i)" in src and "for (int i = 0; i < KEEP; ++i)" in src
    write = src[src.index("const float inv"):]  # the rest (streamed: its last read) before the kept packs
    assert write.index("ldp_cs<T, VEC>(xr + col)") < write.index("c[i * TPR + lane]")
    _compile_once(cand)
    assert not sm.valid(card, {**p, "keep": 16}) and not sm.valid(card, {**p, "keep": 0})
    assert not sm.valid(card, {**p, "cache": "reg"})  # a part is kept in shared memory only
    assert not sm.valid(card, {**p, "block": 32, "keep": 1})  # 128 packs per thread: past MAX_UNROLLED_PACKS
    acts = dict(sm.actions(card, p))
    assert acts["keep 6 -> all"] == {k: v for k, v in p.items() if k != "keep"}
    assert acts["keep 6 -> 12"]["keep"] == 12 and acts["keep 6 -> 7"]["keep"] == 7
    assert "keep" not in acts["cache smem -> none"]
    whole = acts["keep 6 -> all"]
    assert dict(sm.actions(card, whole))["keep None -> 8"]["keep"] == 8  # from a whole chunk: keep half
    for name in ("softmax_logits_f32", "softmax_logits_bf16"):  # long rows: the second seed keeps half
        c = CARDS[name][0]()
        kept = sm.kept_seed(c)
        assert sm.seeds(c)[1] == kept and kept["cache"] == "smem" and kept["strategy"] == "cluster"
        root = sm.defaults(c, "cluster")
        packs = -(-sm.chunk_of(c.sizes["cols"], root["cs"], root["vec"]) // (root["block"] * root["vec"]))
        assert kept["keep"] == packs // 2 and {k: v for k, v in kept.items() if k not in ("cache", "keep")} == \
            {k: v for k, v in root.items() if k != "cache"}  # the cluster's default layout, half kept
    assert sm.kept_seed(CARDS["softmax_1024_bf16"][0]()) is None  # 2 KB rows: no cluster
    fused = CARDS["softmax_fused_softcap"][0]()
    q = {**sm.defaults(fused, "cluster"), "cache": "smem"}
    nit = -(-sm.chunk_of(fused.sizes["cols"], q["cs"], q["vec"]) // (q["block"] * q["vec"]))
    q["keep"] = max(1, nit // 2)
    assert sm.valid(fused, q)
    _compile_once(sm.generate(fused, q))


def test_group_norm_cluster_keeps_part_of_its_chunk() -> None:
    """The group norm's cluster keeps ``keep`` packs per thread in shared memory and re-reads the rest (Note [a
    chunk kept in part] in softmax.py): statistics from shifted sums over both, the write re-reading the rest first."""
    from forge_backend.search.templates import group_norm as gn

    card = CARDS["group_norm_vae_bf16"][0]()  # 2 MB groups over 16 blocks of 512 threads: 16 packs per thread
    p = {"strategy": "cluster", "vec": 8, "block": 512, "cs": 16, "cache": "smem", "keep": 6, "stream": False}
    assert gn.valid(card, p)
    cand = gn.generate(card, p)
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert launches[0].smem == 6 * 512 * 8 * 2
    src = cand.source
    write = src[src.index("const float4 st = cstat"):]
    assert write.index("ldp<T, VEC>(xg + e)") < write.index("cache[i * NT + threadIdx.x]")
    _compile_once(cand)
    assert not gn.valid(card, {**p, "keep": 16}) and not gn.valid(card, {**p, "cache": "reg"})
    assert dict(gn.actions(card, {k: v for k, v in p.items() if k != "keep"}))["keep None -> 8"]["keep"] == 8
    odd = tc.group_norm(1, 96, 13, 17)
    q = {"strategy": "cluster", "vec": 1, "block": 128, "cs": 2, "cache": "smem", "keep": 1, "stream": True}
    assert gn.valid(odd, q)  # 663-element groups: 3 packs per thread, the last partly past the chunk
    _compile_once(gn.generate(odd, q))


def test_a_chunk_fetched_by_the_copy_engine() -> None:
    """Note [a chunk fetched by the copy engine]: ``tma`` fills a cluster block's shared-memory chunk (whole, or the
    kept part) with bulk copies counted on an mbarrier; only 16-byte packs of an input read as it is (no prologue)."""
    from forge_backend.search.templates import group_norm as gn
    from forge_backend.search.templates import softmax as sm

    card = CARDS["softmax_logits_f32"][0]()
    cluster = sm.defaults(card, "cluster")
    assert cluster["vec"] == 2 and not sm.valid(card, {**cluster, "tma": True})
    p = {**cluster, "vec": 4, "tma": True}  # the whole-chunk smem cluster, 16-byte packs
    assert sm.valid(card, p) and p["cache"] == "smem"
    src = sm.generate(card, p).source
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in src
    assert "bulk_fill(dsm, xr + cbeg, (unsigned)((cend - cbeg) * sizeof(T)), &bar);" in src
    _compile_once(sm.generate(card, p))
    kept = {**sm.kept_seed(card), "vec": 4, "keep": 4, "tma": True}
    assert "min(KEEP * NT * VEC, cend - cbeg)" in sm.generate(card, kept).source
    _compile_once(sm.generate(card, kept))
    assert "bulk_fill" not in sm.generate(card, cluster).source
    assert not sm.valid(card, {**p, "vec": 2})  # 8-byte packs
    assert not sm.valid(card, {**p, "cache": "reg"}) and not sm.valid(card, {**p, "tma": 1})
    assert not sm.valid(card, {**sm.defaults(card, "split"), "tma": True})  # no chunk in shared memory
    fused = CARDS["softmax_fused_softcap"][0]()
    assert not sm.valid(fused, {**sm.defaults(fused, "cluster"), "cache": "smem", "tma": True})  # a prologue
    wide = {**cluster, "vec": 4}  # one action from the cluster's default (vec 2 -> 4)
    assert dict(sm.actions(card, cluster))["vec 2 -> 4"] == wide
    assert dict(sm.actions(card, wide))["tma False -> True"] == p
    assert dict(sm.actions(card, p))["tma True -> False"] == wide
    g = CARDS["group_norm_vae_bf16"][0]()
    q = {**gn.kept_seed(g), "tma": True}
    assert gn.valid(g, q) and dict(gn.actions(g, gn.kept_seed(g)))["tma False -> True"] == q
    src = gn.generate(g, q).source
    assert "bulk_fill(dsm, xg + beg, (unsigned)(min((I)KEEP * NT * VEC, end - beg) * sizeof(T)), &bar);" in src
    _compile_once(gn.generate(g, q))
    assert not gn.valid(g, {**gn.defaults(g, "sync"), "tma": True})  # the sync strategy: no cluster chunk
    assert not gn.valid(g, {**gn.root_params(g), "tma": True})  # nor the relay


def test_depthwise_conv1d_tiles_coalesce_both_layouts() -> None:
    """The depthwise conv1d template loads along the input's unit-stride dim (channels, for Qwen's transposed view)
    and stores along the output's; other convolutions (UNMATCHED) are left to PyTorch."""
    from forge_backend.search.templates import conv

    card = CARDS["dwconv_qwen_bf16"][0]()
    plain = {"strategy": "tile", "tl": 64, "tc": 64, "block": 256}
    window = {"strategy": "window", "tl": 64, "tc": 64, "vec": 8, "r": 8}
    rows = {"strategy": "rows", "tl": 128, "tc": 32, "block": 256, "vec": 8}  # Note [a warp per output row]
    pairs = {"strategy": "rows", "tl": 256, "tc": 16, "block": 128, "vec": 8, "lp": 2}  # [two positions per lane]
    flat = {"strategy": "flat", "g": 16, "block": 512, "ld": 8, "vec": 8}  # [a block's channel rows as one flat run]
    # Note [channel rows over a band of positions]: 16-byte channel loads, one contiguous output
    bands = {"strategy": "bands", "g": 32, "lt": 256, "block": 256, "ld": 8, "vec": 8, "bfirst": True}
    # Note [whole lines, 8 x 8 blocks turned in registers]: 16-bit, whole tiles of 64 channels, the root since session 51
    lines = {"strategy": "lines", "tp": 128, "tc": 64, "block": 256, "stages": 3, "vo": 8}
    assert conv.matches(card) and conv.root_params(card) == lines
    # Note [a window of positions in registers]
    chunks = {"strategy": "chunks", "tl": 128, "tc": 64, "block": 128, "vec": 8, "rowfast": True}
    assert conv.seeds(card) == [lines, bands, flat, pairs, chunks, rows, {**plain, "vec": 8}, window, plain]
    cand = conv.generate(card, {**plain, "vec": 8})
    assert "constexpr int XC_FAST = 1;" in cand.source and "constexpr int YL_FAST = 1;" in cand.source
    assert "ldp<T, 8>(x + n * XS0 + c + l * XS2)" in cand.source and cand.requires_align == 16
    _compile_once(cand)
    assert "ldp<T" not in conv.generate(card, plain).source and conv.generate(card, plain).requires_align == 1
    assert dict(conv.actions(card, {**plain, "vec": 8}))["vec 8 -> scalar"] == plain
    # a tile and a window of the same tile and threads are one action apart, both ways
    assert dict(conv.actions(card, {**plain, "vec": 8}))["strategy tile -> window"] == {**window, "r": 2}
    assert dict(conv.actions(card, window))["strategy window -> tile"] == {**plain, "block": 64, "vec": 8}
    assert dict(conv.actions(card, window))["cfirst False -> True"] == {**window, "cfirst": True}
    first = conv.generate(card, {**window, "cfirst": True})  # Note [channel tiles first]
    assert "constexpr int CFIRST = 1;" in first.source
    assert resolve_plan(first, card.sizes, card.floats, SMS)[0][0].grid == (8192 // 64, 2051 // 64 + 1, 1)
    assert not conv.valid(card, {**plain, "vec": 16})  # 32 bytes: past a 16-byte load
    assert not conv.valid(card, {**plain, "tc": 8, "vec": 16})
    assert not conv.valid(card, {k: v for k, v in window.items() if k != "vec"})  # a window loads vectors
    assert not conv.valid(card, {**window, "r": 16, "tl": 64, "tc": 32})  # 4 x 4 threads: under 64
    win = conv.generate(card, window)
    assert "ldp<T, VEC>(x + n * XS0 + cb + l * XS2)" in win.source and win.requires_align == 16
    assert "constexpr int VEC = 8, R = 8, NVEC = TC / VEC, W = R + K - 1;" in win.source
    _compile_once(win)
    launches, _ = resolve_plan(win, card.sizes, card.floats, SMS)
    assert launches[0].grid == (2051 // 64 + 1, 8192 // 64, 1) and launches[0].block == (64, 1, 1)
    odd_c = tc.causal_conv1d(33, 70, k=7, dtype="float16")  # 33 channels: a vector would straddle two rows
    assert conv.root_params(odd_c) == plain and not conv.valid(odd_c, {**plain, "vec": 2})
    # 100 channels: 8-byte vectors only, so no chunks (16-byte vectors in and out)
    assert conv.seeds(tc.causal_conv1d(100, 130))[:4] == [{**pairs, "vec": 4}, {**rows, "vec": 4},
                                                          {**plain, "vec": 4}, {**window, "vec": 4}]
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert launches[0].grid == (2051 // 64 + 1, 8192 // 64, 1)  # L_out = 2048 + 2 * 3 - 4 + 1
    odd = CARDS["dwconv_odd_f32"][0]()
    src = conv.generate(odd, conv.root_params(odd)).source
    assert "constexpr int XC_FAST = 0;" in src and "to_f(b[c])" in src
    assert not conv.valid(odd, {**plain, "vec": 4})  # positions fast: loads along the position dim stay scalar
    assert not conv.valid(odd, {**window, "vec": 4})
    strided = tc.causal_conv1d(16, 9, k=2)
    strided.scalars["stride"] = [2]
    assert not conv.matches(strided)


def test_depthwise_conv1d_rows_keep_weights_in_registers_and_store_rows() -> None:
    """Note [a warp per output row]: channel rows in shared memory (an odd row stride), the weights loaded once per
    channel, one row pointer per channel; only for a channels-fast input with vector loads and a positions-fast
    output, one action away from the tile of the same shape."""
    import dataclasses

    from forge_backend.cards import build_card
    from forge_backend.search.templates import conv

    card = CARDS["dwconv_qwen_bf16"][0]()
    rows = {"strategy": "rows", "tl": 128, "tc": 64, "block": 256, "vec": 8}
    assert conv.valid(card, rows)
    cand = conv.generate(card, rows)
    assert "__shared__ float s[TC][RS];" in cand.source and "constexpr int VEC = 8, RS = 131," in cand.source
    assert "constexpr int PER = (PCH * VCH * 32 + NT - 1) / NT;" in cand.source  # every load in flight at once
    assert "__shared__ float ws[TC][K + 1];" in cand.source and "wr[q] = ws[i][q];" in cand.source  # weights once
    assert "yr[r * 32] = from_f<TO>(acc);" in cand.source
    assert cand.requires_align == 16
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert launches[0].kernel == "dwconv1d_rows" and launches[0].grid == (2051 // 128 + 1, 8192 // 64, 1)
    _compile_once(cand)
    assert "RS = 135," in conv.generate(tc.causal_conv1d(64, 300, k=7), {**rows, "vec": 8}).source  # 128 + 6, odd
    acts = dict(conv.actions(card, rows))
    assert acts["strategy rows -> tile"] == {**rows, "strategy": "tile"}
    assert dict(conv.actions(card, {**rows, "strategy": "tile", "tl": 64}))["strategy tile -> rows"] == \
        {**rows, "tl": 64}
    assert not conv.valid(card, {k: v for k, v in rows.items() if k != "vec"})  # rows load vectors
    assert not conv.valid(card, {**rows, "tl": 48})  # a lane per position: whole warps of positions
    assert not conv.valid(card, {**rows, "tc": 8, "block": 512})  # 16 warps for 8 channel rows
    assert not conv.valid(card, {**rows, "tl": 256, "tc": 128})  # 128 x 259 floats: past static shared memory
    odd = CARDS["dwconv_odd_f32"][0]()  # positions-fast input and output
    assert not conv.valid(odd, {**rows, "vec": 4})
    sig = tc.causal_conv1d(16, 40).signature_obj()  # a channels-fast output: rows would store with a stride
    out = dataclasses.replace(sig.outputs[0], stride=(16 * 43, 1, 16))
    cl_out = build_card(dataclasses.replace(sig, outputs=(out,), _key=""))
    assert conv.valid(cl_out, {**rows, "strategy": "tile", "tc": 16}) and not conv.valid(cl_out, {**rows, "tc": 16})
    # Note [the next tile's loads in flight]: steps position tiles per block, a smaller grid, one knob away
    stepped = conv.generate(card, {**rows, "steps": 4})
    assert "STEPS = 4;" in stepped.source and "load(l0 + TL);" in stepped.source and "steps=4" in stepped.description
    assert resolve_plan(stepped, card.sizes, card.floats, SMS)[0][0].grid == (5, 8192 // 64, 1)  # 17 tiles in fours
    assert acts["steps 1 -> 2"] == {**rows, "steps": 2}
    assert dict(conv.actions(card, {**rows, "steps": 2}))["steps 2 -> 1"] == rows
    assert not conv.valid(card, {**rows, "steps": 1})  # one step is the plain kernel: no key
    assert not conv.valid(card, {**rows, "steps": 3}) and not conv.valid(card, {**rows, "strategy": "tile", "steps": 2})
    small = tc.causal_conv1d(16, 40, dtype="float32")  # 4 vectors of 4 channels: one vector per lane group
    _compile_once(conv.generate(small, {**rows, "tc": 16, "tl": 32, "block": 64, "vec": 4}))


def _root_view() -> ParentView:
    return ParentView(0, None, {}, None, None, None)


def test_proposer_root_then_strategies_then_exhausted() -> None:
    """Seeds in order; while none failed, nothing else at the root (a passing seed's neighbours are its children)."""
    card = CARDS["softmax_logits_f32"][0]()
    fam = family_for(card)
    prop, rng = TemplateProposer(), random.Random(0)
    got = []
    while (p := prop.propose(card, _root_view(), rng)) is not None:
        got.append(p)
        assert p.proposer == "templates" and p.candidate is not None and p.failure is None
        assert "\n" not in p.action
    seeds = fam.seeds(card)
    assert len(seeds) > 1 and got[0].params == fam.root_params(card) and got[0].action == "template root"
    assert [p.params for p in got] == seeds
    labels = [f"template {label}" for label in seed_labels(seeds)[1:]]
    assert [p.action for p in got[1:]] == labels and len(set(labels)) == len(labels)
    assert "template strategy cluster (keep=None)" in labels  # the whole chunk, after the kept-in-part seed
    assert prop.propose(card, _root_view(), rng) is None


def test_two_seeds_of_one_strategy_both_reach_the_search() -> None:
    """The big group norms have a plain cluster seed and a kept-in-part one (group_norm.kept_seed), the kept one right
    after the root. The search skips an action its parent's children already took, so each seed needs its own
    label: in the seventh session's ops run the kept seed shared "template strategy cluster" with the plain one and
    was never tried."""
    from forge_backend.search.templates import group_norm as gn

    card = CARDS["group_norm_vae_bf16"][0]()
    seeds = gn.seeds(card)
    assert gn.kept_seed(card) in seeds
    prop, rng, siblings, got = TemplateProposer(), random.Random(0), [], []
    while (p := prop.propose(card, ParentView(0, None, {}, None, None, None, (), tuple(siblings)), rng)) is not None:
        siblings.append(p.action)
        got.append(p)
    assert [p.params for p in got] == seeds
    assert len(set(siblings)) == len(siblings)
    # right after the root (a relay with writers of their own) the relay without them, then the kept cluster
    assert got[1].action == "template strategy relay (k=6 lag=3 nw=16 ramp=None writers=None)"
    assert "writers" not in got[1].params
    assert "keep" in got[2].params and got[2].action == "template strategy cluster"
    plain = next(p for p in got[3:] if p.params.get("strategy") == "cluster")
    assert plain.action.startswith("template strategy cluster (") and "cache=reg" in plain.action


def test_proposer_offers_the_neighbours_of_failed_seeds_at_the_root() -> None:
    card = CARDS["softmax_logits_f32"][0]()
    fam = family_for(card)
    seeds = fam.seeds(card)
    prop, rng, siblings = TemplateProposer(), random.Random(0), []
    for _ in seeds:
        siblings.append(prop.propose(card, ParentView(0, None, {}, None, None, None, (), tuple(siblings)), rng).action)
    failed = ({"action": siblings[1], "stage": "verify", "reason": "tolerance", "log": ""},)
    got = []
    while (p := prop.propose(card, ParentView(0, None, {}, None, None, None, failed, tuple(siblings)), rng)):
        got.append(p)
        siblings.append(p.action)
    name = f"strategy {seeds[1]['strategy']}"
    assert got and all(p.action.endswith(f" (from {name})") for p in got)
    assert {freeze(p.params) for p in got} <= {freeze(q) for _, q in fam.actions(card, seeds[1])}


def test_proposer_keeps_proposing_at_the_root_when_its_children_fail() -> None:
    """The search never expands a failed node, so when the root's children all fail (group_norm [1,128,1024,1024]
    fp32 on the H200: one valid strategy, its root failed verification) the root itself must still offer a
    neighbour of the root params."""
    card = CARDS["group_norm_big_f32"][0]()
    fam = family_for(card)
    root = fam.root_params(card)
    prop, rng, siblings, failed = TemplateProposer(), random.Random(0), [], []
    for _ in range(len(fam.seeds(card))):  # every seed proposed, and (as far as the search knows) failed
        p = prop.propose(card, ParentView(0, None, {}, None, None, None, tuple(failed), tuple(siblings)), rng)
        siblings.append(p.action)
        failed.append({"action": p.action, "stage": "verify", "reason": "tolerance", "log": ""})
    view = ParentView(0, None, {}, None, None, None, tuple(failed), tuple(siblings))
    p = prop.propose(card, view, rng)
    assert p is not None and p.candidate is not None and p.action.endswith(" (from root)")
    assert p.params in [q for _, q in fam.actions(card, root)]
    assert freeze(p.params) not in {freeze(s) for s in fam.seeds(card)}


def test_proposer_walks_actions_without_duplicates() -> None:
    card = CARDS["layer_norm_bf16"][0]()
    prop, rng = TemplateProposer(), random.Random(1)
    first = prop.propose(card, _root_view(), rng)
    frontier, seen = [first], {freeze(first.params)}
    for _ in range(60):  # expand breadth-first until the proposer runs dry
        if not frontier:
            break
        node = frontier.pop(0)
        view = ParentView(1, node.candidate, node.params, None, None, None)
        siblings: list[str] = []
        while (child := prop.propose(card, ParentView(1, node.candidate, node.params, None, None, None,
                                                      sibling_actions=tuple(siblings)), rng)) is not None:
            assert freeze(child.params) not in seen, child.action
            seen.add(freeze(child.params))
            siblings.append(child.action)
            frontier.append(child)
        assert prop.propose(card, view, rng) is None
    assert len(seen) > 5


def test_proposer_skips_sibling_actions() -> None:
    card = CARDS["gelu_bf16"][0]()
    fam = family_for(card)
    root = fam.root_params(card)
    parent_cand = fam.generate(card, root)
    labels = [a for a, _ in fam.actions(card, root)]
    view = ParentView(1, parent_cand, root, None, None, None, sibling_actions=tuple(labels[:-1]))
    p = TemplateProposer().propose(card, view, random.Random(0))
    assert p is not None and p.action == labels[-1]
    view = ParentView(1, parent_cand, root, None, None, None, sibling_actions=tuple(labels))
    assert TemplateProposer().propose(card, view, random.Random(0)) is None


def test_every_family_is_covered() -> None:
    assert {family_name(f) for f in FAMILIES} == {e for _, e in CARDS.values()}


def test_proposer_below_an_llm_node_offers_only_the_seeds() -> None:
    """Below an LLM candidate (no template params) the seeds lead back into the template space; their neighbours
    are the root's to offer, so they are not repeated under every LLM node."""
    card = CARDS["softmax_logits_f32"][0]()
    fam = family_for(card)
    view = ParentView(1, fam.generate(card, fam.root_params(card)), {}, None, None, None)
    prop, rng, got = TemplateProposer(), random.Random(0), []
    while (p := prop.propose(card, view, rng)) is not None:
        got.append(p)
    assert [p.params for p in got] == fam.seeds(card)
    assert all(p.action.startswith("template strategy ") for p in got)


class _FailsVerify:
    """Evaluator stub: every candidate compiles and fails verification (the measured group-norm case)."""

    def compile(self, candidate):
        return candidate.identity()

    def evaluate(self, card, candidate, compiled):
        from forge_backend.search.mcts import Evaluation

        return Evaluation(False, failure_stage="verify", failure_reason="max abs error 0.5 > 1e-4")

    def remeasure(self, card, candidate, compiled, runs):
        return []


def test_search_goes_on_after_the_only_seed_fails() -> None:
    """The engine end to end: with one seed that fails, the root keeps getting children instead of the search
    stopping 'exhausted' after one iteration."""
    from forge_backend.search.mcts import MCTS, SearchConfig

    card = tc.group_norm(1, 128, 2048, 2048, dtype="float32")  # 64 MB groups: only the split fits
    assert len(family_for(card).seeds(card)) == 1
    engine = MCTS(card, 100.0, 20.0, [TemplateProposer()], _FailsVerify(), SearchConfig(iterations=5, parallel=1))
    rec = engine.run().record
    assert rec.iterations == 5 and rec.stop_reason == "iterations"
    kids = rec.children(0)
    assert len(kids) == 5 and kids[0].action == "template root" and all(n.status == "failed" for n in kids)
    assert all(n.action.endswith(" (from root)") for n in kids[1:])


def test_a_norm_computes_and_writes_its_prologue() -> None:
    """Note [a norm takes the residual add before it]: the kernel reads the prologue's inputs, computes the norm's
    input from them as it loads each pack, and writes it once (output 1): from the row cache, or in the first pass."""
    from forge_backend.search.templates import norm

    card = CARDS["norm_residual_mmdit_bf16"][0]()
    assert norm.matches(card) and [t.name for t in card.outputs] == ["out0", "out1"]
    root = norm.root_params(card)
    cand = norm.generate(card, root)
    assert cand.description.startswith("add(x0,mul(x1,x2)), then layer_norm block")
    assert "in:input" not in cand.launches[0].args and cand.launches[0].args[:5] == (
        "in:p0", "in:p1", "in:p2", "out:0", "out:1")
    src = cand.source
    assert "const XRow xr = x_row(p0, p1, p2, (ok ? row : 0));" in src and "c[i] = ldx<T, VEC>(xr + col);" in src
    assert src.count("stp<T, VEC>(rr + col, p);") == 1 and "mean_out" not in src and "rstd_out" not in src
    _compile_once(cand)
    again = norm.generate(card, {**root, "cache": "none"})  # written in the first of the passes over global memory
    assert again.source.count("stp<T, VEC>(rr + col, p);") == 1 and "ldx<T, VEC>(xr + col)" in again.source
    _compile_once(again)
    rms = CARDS["norm_residual_rms_odd"][0]()
    assert norm.matches(rms)
    plain = norm.generate(rms, {**norm.root_params(rms), "cache": "none"})  # RMS: its first pass is the squares
    # an epilogue with no inputs of its own (x0 * 2.0) is still applied: the eighth session's GPU test caught a
    # kernel that skipped it (the verifier rejected it: output half the reference)
    assert "ep(round_to<T>(" in plain.source and plain.description.endswith("then mul(x0,2.0)")
    _compile_once(plain)
    from dataclasses import replace

    from forge_backend.cards import build_card
    from forge_backend.signature import OpSignature

    sig = card.signature_obj()  # an fp32 output 1, where the bf16 prologue rounds to bf16: not this kernel's
    wrong = (sig.outputs[0], replace(sig.outputs[1], dtype="float32"))
    assert not norm.matches(build_card(OpSignature(sig.op, sig.args, wrong, (0, 1), sig.arch)))


def test_depthwise_conv1d_rows_in_pairs_shift_odd_rows_and_store_pairs() -> None:
    """Note [two positions per lane]: ``lp`` 2 reads float2 from an even row stride (2 mod 4), stores each lane's
    two outputs as one pair, and shifts the tiles of rows that start at an odd element; one knob away from the plain
    rows, and not with ``steps``."""
    from forge_backend.search.templates import conv

    card = CARDS["dwconv_qwen_bf16"][0]()  # output rows of 2051: every other row starts at an odd element
    rows = {"strategy": "rows", "tl": 128, "tc": 64, "block": 256, "vec": 8}
    pairs = {**rows, "lp": 2}
    assert conv.valid(card, pairs)
    cand = conv.generate(card, pairs)
    assert "constexpr int VEC = 8, RS = 134," in cand.source  # >= 128 + 4 + 2, even, 2 mod 4
    assert "constexpr bool ODD = ((YS0 | YS1) & 1) != 0;" in cand.source and "YS1 = 2051LL" in cand.source
    assert "*reinterpret_cast<const float2*>(sr + r * 64 + 2 * h)" in cand.source  # float2 reads
    assert "*reinterpret_cast<unsigned*>(yr + r * 64)" in cand.source  # one store per pair
    assert "2 positions per lane" in cand.description and cand.requires_align == 16
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert launches[0].kernel == "dwconv1d_rows2" and launches[0].grid == (17, 8192 // 64, 1)
    _compile_once(cand)
    assert "RS = 138," in conv.generate(tc.causal_conv1d(64, 300, k=7), pairs).source  # 128 + 9 -> 138
    # rows of 2048 outputs all start at even elements (no shift); rows of 2047 alternate, and their shifted tiles
    # still end inside the 16th
    for length in (2045, 2044):
        cc = tc.causal_conv1d(64, length, k=4)
        assert resolve_plan(conv.generate(cc, pairs), cc.sizes, cc.floats)[0][0].grid[0] == 16
        assert resolve_plan(conv.generate(cc, rows), cc.sizes, cc.floats)[0][0].grid[0] == 16
    acts = dict(conv.actions(card, rows))
    assert acts["lp 1 -> 2"] == pairs
    back = dict(conv.actions(card, pairs))
    assert back["lp 2 -> 1"] == rows and back["strategy rows -> tile"] == {**rows, "strategy": "tile"}
    assert back["steps 1 -> 2"] == {**rows, "steps": 2}  # steps are for one position per lane
    assert not conv.valid(card, {**pairs, "tl": 32})  # a warp's pairs cover 64 positions
    assert not conv.valid(card, {**pairs, "steps": 2}) and not conv.valid(card, {**rows, "lp": 1})
    assert not conv.valid(card, {**pairs, "strategy": "tile"}) and not conv.valid(card, {**rows, "lp": 4})
    small = tc.causal_conv1d(16, 40, dtype="float32", bias=True)  # fp32 pairs: 8-byte stores
    src = conv.generate(small, {**pairs, "tc": 16, "tl": 64, "block": 64, "vec": 4})
    assert "uint2" in src.source
    _compile_once(src)



def test_depthwise_conv1d_chunks_store_aligned_vectors_of_each_row() -> None:
    """Note [output chunks aligned per channel row]: a thread's channels each store one 16-byte vector of outputs,
    the row's chunks shifted by its phase (a constant per channel of a vector); only with 16-byte vectors in and out,
    rows of one phase per channel of a vector across samples, a window that fits in registers and a chunk for every
    thread; one action from the rows and back."""
    from forge_backend.search.templates import conv

    card = CARDS["dwconv_qwen_bf16"][0]()  # rows of 2051: phases (u * 2051) % 8 = 0, 3, 6, 1, ...
    chunks = {"strategy": "chunks", "tl": 256, "tc": 64, "block": 256, "vec": 8}
    assert conv.valid(card, chunks)
    cand = conv.generate(card, chunks)
    assert "constexpr int VEC = 8, NV = TC / VEC, NJ = TL / VEC, W = 2 * VEC + K - 2, TLI = TL + VEC + K - 2;" in \
        cand.source
    assert "const int sh = (int)((YS1 * u) % VEC), l = lb - sh;" in cand.source
    assert "store16(yr, a);" in cand.source and "win[w] = s[j * VEC + w][SWZ(j * VEC + w, v)];" in cand.source
    assert cand.requires_align == 16 and cand.launches[0].kernel == "dwconv1d_chunks"
    launches, _ = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert launches[0].grid == (9, 8192 // 64, 1)  # 2051 + 7 positions: 9 tiles of 256
    _compile_once(cand)
    direct = conv.generate(card, {**chunks, "direct": True}).source
    assert "win[w] = ldp<T, VEC>(xb + v * VEC + l * XS2);" in direct and "__shared__ Pack<T, VEC> s" not in direct
    _compile_once(conv.generate(card, {**chunks, "direct": True}))
    acts = dict(conv.actions(card, chunks))
    assert acts["direct False -> True"] == {**chunks, "direct": True}
    assert acts["rowfast False -> True"] == {**chunks, "rowfast": True}
    assert "strategy chunks -> rows" not in acts  # rows of 256 x 64 floats: past static shared memory
    half = {**chunks, "tl": 128}
    assert dict(conv.actions(card, half))["strategy chunks -> rows"] == {**half, "strategy": "rows"}
    rows = {"strategy": "rows", "tl": 128, "tc": 64, "block": 128, "vec": 8}  # 16 chunks x 8 vectors
    assert dict(conv.actions(card, rows))["strategy rows -> chunks"] == {**rows, "strategy": "chunks"}
    assert not conv.valid(card, {**chunks, "vec": 4})  # 8-byte vectors: a chunk is one 16-byte store
    assert not conv.valid(card, {**chunks, "tc": 16})  # 32 chunks x 2 vectors for 256 threads
    assert not conv.valid(card, {**chunks, "lp": 2}) and not conv.valid(card, {**chunks, "direct": False})
    assert not conv.valid(card, {**chunks, "tl": 512, "tc": 64})  # 518 rows x 128 bytes: past static shared memory
    assert conv.valid(card, {**chunks, "tl": 512, "tc": 64, "direct": True})  # no tile in shared memory
    assert not conv.valid(tc.causal_conv1d(8192, 2048, k=12), chunks)  # 2 * 8 + 10 = 26 vectors held
    assert not conv.valid(tc.causal_conv1d(64, 300, channels_fast=False), chunks)  # positions-fast input
    # two samples of a contiguous output: C is a multiple of 8, so is the sample stride, and rows keep their phase
    assert conv.valid(tc.causal_conv1d(64, 300, batch=2), {**chunks, "tc": 32, "block": 128})
    f32 = tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True)
    assert conv.valid(f32, {**chunks, "vec": 4, "tl": 32, "tc": 32, "block": 64})
    src = conv.generate(f32, {**chunks, "vec": 4, "tl": 32, "tc": 32, "block": 64})
    assert "to_f(b[c])" in src.source
    _compile_once(src)


def test_depthwise_conv1d_chunks_along_a_row_swizzle_their_tile() -> None:
    """Note [a warp's stores along one row]: ``rowfast`` runs a block's tasks chunk-fastest and swizzles the shared
    tile's columns by row; it needs the tile in shared memory and eight vectors and eight chunks a row; the chunks'
    seed."""
    from forge_backend.search.templates import conv

    card = CARDS["dwconv_qwen_bf16"][0]()
    p = conv.defaults(card, "chunks")
    assert p == {"strategy": "chunks", "tl": 128, "tc": 64, "block": 128, "vec": 8, "rowfast": True}
    src = conv.generate(card, p).source
    assert "#define SWZ(i, v) ((v) ^ (((i) / VEC) & (NV - 1)))" in src
    assert "const int j = e % NJ, v = e / NJ, cb = c0 + v * VEC;" in src
    assert "s[i][SWZ(i, e % NV)] = xv[t];" in src and "win[w] = s[j * VEC + w][SWZ(j * VEC + w, v)];" in src
    plain = conv.generate(card, {k: v for k, v in p.items() if k != "rowfast"}).source
    assert "#define SWZ(i, v) (v)" in plain and "const int v = threadIdx.x % NV" in plain
    _compile_once(conv.generate(card, p))
    assert "lanes along a row" in conv.generate(card, p).description
    assert not conv.valid(card, {**p, "direct": True})  # no shared tile to swizzle
    assert not conv.valid(card, {**p, "tc": 32})  # 4 vectors a row: the phase's rows would share columns
    assert not conv.valid(card, {**p, "tl": 32})  # 4 chunks a row
    assert not conv.valid(card, {**p, "rowfast": False})
    assert not conv.valid(card, {"strategy": "rows", "tl": 128, "tc": 64, "block": 128, "vec": 8, "rowfast": True})
    f32 = tc.causal_conv1d(40, 45, k=4, dtype="float32", batch=2)  # 4-element vectors: 32 channels are 8 of them
    assert conv.valid(f32, {**p, "vec": 4, "tl": 32, "tc": 32, "block": 64})


def test_relay_knob_once_evaluates_a_prologue_once() -> None:
    """``once`` (Note [a prologue evaluated once, into its slot]) is a relay knob of fused cards whose prologue's
    values are values of the input's type: the reduce evaluates the prologue and writes the values back into the
    slot, the sum and the write only widen them, and each lane fences its stores before the slot is freed."""
    from forge_backend.search.templates import softmax as sm

    card = CARDS["softmax_fused_softcap"][0]()
    once = sm.defaults(card, "relay")
    relay = {k: v for k, v in once.items() if k != "once"}
    assert once["once"] is True and sm.valid(card, relay) and sm.valid(card, once)
    src = sm.generate(card, once).source
    # into 16-bit packs two elements at a time (Note [a prologue two elements at a time] in fused.py)
    assert src.count("fx2(reinterpret_cast<const unsigned*>(pk[i].v)[j])") == 1 and "xv(pk[i].v[j])" not in src
    assert "const_cast<P*>(sp)[i * 32 + lane] = pk[i];" in src
    assert "fence.proxy.async.shared::cta" in src
    assert "__expf(to_f(p.v[j]) - m) * inv" in src and "sum += __expf(to_f(pk[i].v[j]) - m);" in src
    plain = sm.generate(card, relay).source
    assert plain.count("xv(pk[i].v[j])") == 2 and "__expf(xv(p.v[j]) - m) * inv" in plain
    assert "const_cast" not in plain and "fence.proxy.async" not in plain
    _compile_once(sm.generate(card, once))
    gemma = tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))", [((64, 262144), "bfloat16")])
    # the relay's actions keep the knob; the knob toggles
    acts = dict(sm.actions(card, once))
    assert acts["nw 16 -> 8"] == {**relay, "nw": 8, "once": True}
    assert acts["once True -> False"] == relay and dict(sm.actions(card, relay))["once False -> True"] == once
    assert "once False -> True" not in dict(sm.actions(gemma, sm.root_params(gemma)))  # a cluster: no slots
    # where it does not apply
    assert not sm.valid(card, {**sm.defaults(card, "cluster"), "once": True})  # a relay knob
    assert not sm.valid(card, {**relay, "once": 1}) and not sm.valid(card, {**relay, "once": False})
    plain_card = CARDS["softmax_logits_bf16"][0]()
    assert not sm.valid(plain_card, {**sm.root_params(plain_card), "once": True})  # no prologue
    half = tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))", [((64, 262144), "float16")])
    assert sm.valid(half, {**sm.defaults(half, "relay"), "once": True})  # fp16 values in an fp16 slot
    same = tc.softmax_fused("mul(x0,0.125)", [((64, 262144), "bfloat16")])
    assert sm.valid(same, {**sm.defaults(same, "relay"), "once": True})  # bf16 values of bf16 logits
    wide = tc.softmax_fused("mul(to_float32(x0),2.0)", [((64, 262144), "bfloat16")])
    assert not sm.valid(wide, {**sm.defaults(wide, "relay"), "once": True})  # fp32 products of bf16 logits
    other = tc.softmax_fused("to_float32(mul(x0,0.5))", [((64, 262144), "float16")], "float32")
    assert sm.valid(other, {**sm.defaults(other, "relay"), "once": True})


def test_resident_softmax_holds_a_tensor_that_fits_on_chip() -> None:
    """strategy=resident (Note [a tensor held on chip whole]): one cooperative block per SM takes a run of the
    flattened tensor, most of it in shared memory by bulk copies and the rest in registers; valid only where that fits
    and a block's run lies within two rows; an action of the search, not a seed (it lost every probe)."""
    from forge_backend.search.templates import softmax as sm
    from forge_backend.search.templates.common import SMEM_LIMIT

    card = tc.softmax((64, 262144), "bfloat16")
    p = sm.defaults(card, "resident")
    # 15888 packs a block; 2 x 1024 of them in registers leave 13840 (221,440 bytes) for shared memory
    assert p == {"strategy": "resident", "vec": 8, "nt": 1024, "rpt": 2, "ch": 1024} and sm.valid(card, p)
    assert not sm.valid(card, {**p, "rpt": 1})  # 14864 packs would not fit in shared memory
    cand = sm.generate(card, p)
    (l,), scratch = resolve_plan(cand, card.sizes, card.floats, SMS)
    assert l.cooperative and l.grid == (SMS, 1, 1) and l.block == (1024, 1, 1) and l.smem == 13840 * 16 <= SMEM_LIMIT
    assert [(s.nbytes, s.zero, s.persist) for s in scratch] == [(SMS * 16 + 8, True, True)]  # two words a block
    assert "narrow(xv(" not in cand.source and "constexpr int NCH = 14;" in cand.source
    assert all(q["strategy"] != "resident" for q in sm.seeds(card))
    assert dict(sm.actions(card, sm.root_params(card)))["strategy relay -> resident"] == p
    acts = dict(sm.actions(card, p))
    assert acts["depth None -> 2"] == {**p, "depth": 2} and acts["loader False -> True"] == {**p, "loader": True}
    assert acts["nt 1024 -> 512"] == {**p, "nt": 512, "rpt": 4}
    # a loader warp of its own: 992 threads fold, so 1984 packs are in registers
    loader = sm.generate(card, {**p, "loader": True, "depth": 4})
    assert "constexpr int NCT = 992;" in loader.source and "constexpr int DEPTH = 4;" in loader.source
    _compile_once(cand)
    _compile_once(loader)
    assert not sm.valid(card, {**p, "depth": 0}) and not sm.valid(card, {**p, "loader": False})
    assert not sm.valid(tc.softmax((64, 262144), "float32"), sm.defaults(tc.softmax((64, 262144), "float32"),
                                                                            "resident"))  # 64 MB: too big
    short = tc.softmax((4096, 256), "bfloat16")  # a block's run of 993 packs spans 32 rows of 32
    assert not sm.valid(short, sm.defaults(short, "resident"))
    # the soft cap, evaluated once where it lies; a second input (a mask) has no bulk copy of its own
    cap = tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))", [((1, 64, 262144), "bfloat16")])
    q = sm.defaults(cap, "resident")
    assert sm.valid(cap, q) and "narrow(xv(" in sm.generate(cap, q).source
    masked = CARDS["softmax_fused_attn_bf16"][0]()
    assert not sm.valid(masked, sm.defaults(masked, "resident"))


def test_relay_knob_ramp_issues_the_first_copies_a_few_at_a_time() -> None:
    """Note [the first copies a few at a time]: fewer than the slots; without it the loader's source is as before."""
    from forge_backend.search.templates import softmax as sm

    card = tc.softmax((64, 262144), "bfloat16")
    root = sm.root_params(card)
    assert root["ramp"] == 2
    assert "if (t >= RAMP) bar_wait(full + (t - RAMP), 0u);" in sm.generate(card, root).source
    plain = {k: v for k, v in root.items() if k != "ramp"}
    assert sm.valid(card, plain)
    assert "for (long long t = 0; t < K && t < n; ++t) issue(t);" in sm.generate(card, plain).source
    assert "RAMP" not in sm.generate(card, plain).source
    for bad in (0, root["k"], True, 1.5):
        assert not sm.valid(card, {**root, "ramp": bad})
    acts = dict(sm.actions(card, root))
    assert acts["ramp 2 -> 1"] == {**root, "ramp": 1} and acts["ramp 2 -> off"] == plain
