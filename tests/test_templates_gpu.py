"""GPU: the template library's first kernels pass the verifier at every anchor shape, and a sample of each
family's space passes at odd sizes (tails that are not multiples of any tile)."""
import random

import pytest
import torch

import template_cards as tc
from forge_backend.reference import call_aten
from forge_backend.runtime.launch import Launcher
from forge_backend.runtime.nvrtc import compile_candidate
from forge_backend.search.templates import family_for
from forge_backend.search.templates.target import SM90_STRATEGIES
from forge_backend.signature import arch_of
from forge_backend.verify import make_inputs, verify

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0) if torch.cuda.is_available() else None


def check(card, params=None, arch=None):
    """``params`` (the root by default) of ``card`` passes the verifier, compiled for ``arch`` (the card's)."""
    fam = family_for(card)
    assert fam is not None, card.op
    params = params if params is not None else fam.root_params(card)
    assert fam.valid(card, params), params
    cand = fam.generate(card, params)
    run = Launcher(card, cand, compile_candidate(cand, arch or card.arch).cubin, DEV)
    rep = verify(card, run.launch_into, run.allocate_outputs, DEV)
    assert rep.ok, (card.op, params, rep.failed_check, rep.message)


def with_defaults(card, strategy: str, knobs: dict, drop=()) -> dict:
    """A case's params: the card's defaults of ``strategy`` without the keys ``drop``, then the case's ``knobs``."""
    return {**{k: v for k, v in family_for(card).defaults(card, strategy).items() if k not in drop}, **knobs}


ANCHOR_CARDS = (
    [tc.spatial_mean((b, 2048, 7, 7), dt) for b in (1, 32, 256) for dt in ("float32", "float16")]
    + [tc.group_norm(*s, dtype=dt, used=(0,)) for s in ((1, 512, 128, 128), (1, 512, 256, 256), (1, 256, 512, 512),
                                                         (1, 128, 1024, 1024), (2, 1536, 64, 64))
       for dt in ("float32", "bfloat16")]
    + [tc.softmax(s, dt) for s in ((1, 8, 2048, 2048), (64, 262144), (4096, 256), (1, 16, 4096, 4096),
                                   (64, 248320), (8192, 1024)) for dt in ("float32", "bfloat16", "float16")]
    + [tc.layer_norm(s, (s[-1],), "bfloat16", used=(0,)) for s in ((4096, 2048), (16384, 4096))]
    + [tc.rms_norm(s, (s[-1],), "bfloat16", used=(0,)) for s in ((4096, 2048), (16384, 4096))]
    + [tc.adaptive_pool((32, 2048, 7, 7), "float16")]
    # Gemma 4's attention softmax with its scale, mask and casts, and its soft-capped sampling softmax
    + [tc.softmax_fused("to_float32(add(mul(x0,1.0),x1))",
                        [((1, 8, 2048, 2048), "bfloat16"), ((1, 1, 2048, 2048), "bfloat16")], "bfloat16"),
       tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))", [((1, 64, 262144), "bfloat16")])]
    # Qwen 3.5's causal conv1d over its linear-attention channels (a transposed view)
    + [tc.causal_conv1d(8192, 2048)]
)


@pytest.mark.parametrize("card", ANCHOR_CARDS, ids=lambda c: f"{c.op.removeprefix('aten.')}-"
                         f"{'x'.join(map(str, c.inputs[0].spec.shape))}-{c.inputs[0].spec.dtype}")
def test_first_kernel_passes_at_anchor_shape(card):
    check(card)


# Note [templates for the card's architecture] (target.py): where the H200's first kernel needs sm_90 (a relay, a
# cluster), the roots and seeds an A100's card (sm_80) and an RTX 5090's (sm_120: 99 KB of shared memory a block,
# clusters of at most 8) get instead, compiled for this GPU
OTHER_ARCH_CASES = [(card, arch) for card in ANCHOR_CARDS for arch in ("sm_80", "sm_120")
                    if family_for(card).root_params(card).get("strategy") in SM90_STRATEGIES]


@pytest.mark.parametrize("card,arch", OTHER_ARCH_CASES, ids=lambda v: v if isinstance(v, str) else
                         f"{v.op.removeprefix('aten.')}-{'x'.join(map(str, v.inputs[0].spec.shape))}-"
                         f"{v.inputs[0].spec.dtype}")
def test_other_archs_first_kernels_pass_here(card, arch):
    other = tc.for_arch(card, arch)
    seeds = family_for(other).seeds(other)
    assert seeds[0]["strategy"] != family_for(card).root_params(card)["strategy"]
    for params in seeds:
        check(other, params, arch=arch_of(DEV))


ODD_CARDS = tc.odd_cards()


@pytest.mark.parametrize("card", ODD_CARDS, ids=lambda c: f"{c.op.removeprefix('aten.')}-"
                         f"{'x'.join(map(str, c.inputs[0].spec.shape))}-{c.inputs[0].spec.dtype}")
def test_sample_of_family_space_at_odd_sizes(card):
    fam = family_for(card)
    if fam is None:
        pytest.skip(f"no template family covers {card.op} at this signature")
    rng = random.Random(card.key)
    params = [fam.root_params(card)]
    for seed in fam.seeds(card):
        params.append(seed)
        actions = fam.actions(card, seed)
        params += [p for _, p in rng.sample(actions, min(2, len(actions)))]
    seen = []
    for p in params:
        if p not in seen:
            seen.append(p)
            check(card, p)


# Note [a chunk kept in part]: chunks whose kept packs end inside the chunk, in the last pack, or past the row's end
KEPT_IN_PART = [
    (tc.softmax((3, 70001), "float32"), {"strategy": "cluster", "vec": 1, "block": 256, "cs": 16, "cache": "smem",
                                         "keep": 5, "stream": True}),
    (tc.softmax((5, 40000), "bfloat16"), {"strategy": "cluster", "vec": 8, "block": 128, "cs": 4, "cache": "smem",
                                          "keep": 9, "stream": False}),
    (tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))", [((1, 3, 70000), "bfloat16")]),
     {"strategy": "cluster", "vec": 4, "block": 128, "cs": 8, "cache": "smem", "keep": 3, "stream": True}),
    (tc.group_norm(1, 96, 13, 17, dtype="bfloat16"), {"strategy": "cluster", "vec": 1, "block": 128, "cs": 2,
                                                      "cache": "smem", "keep": 1, "stream": True}),
    (tc.group_norm(2, 96, 37, 33, dtype="float32"), {"strategy": "cluster", "vec": 1, "block": 128, "cs": 4,
                                                     "cache": "smem", "keep": 2, "stream": False}),
    (tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,)),
     {"strategy": "cluster", "vec": 8, "block": 512, "cs": 16, "cache": "smem", "keep": 6, "stream": True}),
]


# Note [a chunk fetched by the copy engine]: whole chunks and kept parts, last chunks shorter than the others
KEPT_IN_PART += [
    (tc.softmax((5, 40000), "bfloat16"), {"strategy": "cluster", "vec": 8, "block": 128, "cs": 4, "cache": "smem",
                                          "stream": False, "tma": True}),
    (tc.softmax((3, 70004), "float32"), {"strategy": "cluster", "vec": 4, "block": 256, "cs": 16, "cache": "smem",
                                         "keep": 2, "stream": True, "tma": True}),
    (tc.group_norm(2, 96, 40, 40, dtype="bfloat16"), {"strategy": "cluster", "vec": 8, "block": 128, "cs": 4,
                                                      "cache": "smem", "stream": True, "tma": True}),
    (tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,)),
     {"strategy": "cluster", "vec": 4, "block": 256, "cs": 16, "cache": "smem", "keep": 8, "stream": True,
      "tma": True}),
]


@pytest.mark.parametrize("case", KEPT_IN_PART, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-"
                         f"{'x'.join(map(str, c[0].inputs[0].spec.shape))}-keep{c[1].get('keep', 'all')}"
                         f"{'-tma' if c[1].get('tma') else ''}")
def test_chunk_kept_in_part_passes_the_verifier(case):
    check(*case)


# Note [rows that share a broadcast row run together]: an input broadcasting over the outer and inner leading dims
# (launched as [5, 3, 7] rows), a last block of rows partly past the end (group), a log-free masked softmax into fp16,
# Gemma's mask at its shape
ORDERED = [
    (tc.softmax_fused("add(mul(x0,0.125),x1)", [((3, 5, 7, 1000), "float32"), ((5, 1, 1000), "float32")], "float16"),
     {"strategy": "block", "vec": 4, "block": 128, "cache": "reg", "order": "bcast"}),
    (tc.softmax_fused("add(mul(x0,0.125),x1)", [((3, 5, 7, 1000), "float32"), ((5, 1, 1000), "float32")], "float16"),
     {"strategy": "group", "vec": 4, "block": 256, "tpr": 32, "cache": "reg", "order": "bcast"}),
    (tc.softmax_fused("to_float32(add(x0,x1))", [((2, 3, 5, 4104), "bfloat16"), ((2, 1, 5, 4104), "bfloat16")],
                      "bfloat16"), {"strategy": "block", "vec": 8, "block": 256, "cache": "none", "online": True,
                                    "order": "bcast"}),
    (tc.softmax_fused("to_float32(add(mul(x0,1.0),x1))",
                      [((1, 8, 2048, 2048), "bfloat16"), ((1, 1, 2048, 2048), "bfloat16")], "bfloat16"),
     {"strategy": "group", "vec": 8, "block": 256, "tpr": 32, "cache": "reg", "order": "bcast"}),
]


@pytest.mark.parametrize("case", ORDERED, ids=lambda c: f"{'x'.join(map(str, c[0].inputs[0].spec.shape))}-"
                         f"{c[1]['strategy']}")
def test_rows_launched_by_broadcast_row_pass_the_verifier(case):
    check(*case)


# Note [rows relayed through global memory]: last pieces shorter than the others (warps past the row's end),
# log_softmax, fp16 and bf16, one packed word per lane (fp16, nw=2, 128 pieces a row), one row, slots reused many
# times (k=3), one to four control warps, the anchor shapes
RELAY = [
    (tc.softmax((3, 70000), "float32", log=True), {"pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 2}),
    (tc.softmax((5, 33000), "bfloat16"), {"pe": 4096, "nw": 8, "nc": 2, "k": 4, "lag": 2}),
    (tc.softmax((7, 65536), "float16"), {"pe": 512, "nw": 2, "nc": 3, "k": 3, "lag": 1}),
    (tc.softmax((1, 131072), "float32"), {"pe": 2048, "nw": 4, "nc": 1, "k": 5, "lag": 3}),
    (tc.softmax((64, 262144), "float32"), {"pe": 4096, "nw": 16, "nc": 4, "k": 8, "lag": 3}),
    (tc.softmax((64, 248320), "bfloat16", log=True), {"pe": 8192, "nw": 8, "nc": 2, "k": 8, "lag": 4}),
    # more pieces a row than blocks: 538 pieces, up to 5 of them in one block's run (lag 4); 256 in a group norm
    (tc.softmax((2, 1100000), "float32"), {"pe": 2048, "nw": 16, "nc": 1, "k": 7, "lag": 4}),
    (tc.group_norm(1, 64, 512, 512, groups=8, dtype="float32"), {"pe": 8192, "nw": 16, "nc": 2, "k": 6, "lag": 2}),
    # group norms: last pieces of 520 and 512 elements, channels that end inside pieces, mean and rstd stored, no
    # affine, the anchor shapes
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="float32"), {"pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 3}),
    # 32 packs a lane: the weights loaded at each pack (Note [weights loaded before the wait]: past 8, not early)
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="float32"), {"pe": 8192, "nw": 2, "nc": 1, "k": 6, "lag": 3}),
    (tc.group_norm(1, 32, 136, 136, groups=4, dtype="bfloat16"), {"pe": 8192, "nw": 8, "nc": 2, "k": 8, "lag": 4}),
    (tc.group_norm(1, 32, 136, 136, groups=4, dtype="float16", affine=False), {"pe": 4096, "nw": 4, "nc": 1, "k": 5,
                                                                               "lag": 2}),
    (tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,)), {"pe": 16384, "nw": 16, "nc": 1, "k": 6,
                                                                    "lag": 3}),
    (tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,)), {"pe": 8192, "nw": 16, "nc": 2, "k": 6, "lag": 2}),
    # Note [a prologue run from the relay's slots]: the soft cap over bf16 logits into fp32 (32-byte output packs),
    # a last piece of 4464 elements; a scaled fp16 input into fp16
    (tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))", [((3, 70000), "bfloat16")]),
     {"pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 2}),
    (tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))", [((1, 64, 262144), "bfloat16")]),
     {"pe": 16384, "nw": 16, "nc": 1, "k": 6, "lag": 3}),
    (tc.softmax_fused("mul(x0,0.125)", [((5, 40000), "float16")]), {"pe": 4096, "nw": 8, "nc": 2, "k": 4, "lag": 2}),
]


SOFTCAP = "to_float32(mul(tanh(div(x0,30.0)),30.0))"
# Note [a prologue evaluated once, into its slot] (softmax_relay.py): the soft cap with a last piece of 4464 elements,
# at Gemma's shape in 32 and 48 KB pieces, an fp16 soft cap, and a bf16 prologue into bf16
RELAY_ONCE = [
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]),
     {"pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 2, "once": True}),
    (tc.softmax_fused(SOFTCAP, [((1, 64, 262144), "bfloat16")]),
     {"pe": 16384, "nw": 16, "nc": 1, "k": 6, "lag": 3, "once": True}),
    (tc.softmax_fused(SOFTCAP, [((1, 64, 262144), "bfloat16")]),
     {"pe": 24576, "nw": 16, "nc": 1, "k": 4, "lag": 2, "once": True}),
    (tc.softmax_fused(SOFTCAP, [((4, 65536), "float16")]), {"pe": 8192, "nw": 8, "nc": 2, "k": 5, "lag": 2, "once": True}),
    (tc.softmax_fused("mul(x0,0.125)", [((5, 40000), "bfloat16")]),
     {"pe": 4096, "nw": 8, "nc": 2, "k": 4, "lag": 2, "once": True}),
]


@pytest.mark.parametrize("case", RELAY_ONCE, ids=lambda c: "x".join(map(str, c[0].inputs[0].spec.shape)) +
                         f"-{c[0].inputs[0].spec.dtype}-pe{c[1]['pe']}-lag{c[1]['lag']}")
def test_relay_evaluating_the_prologue_once_passes_the_verifier(case):
    card, knobs = case
    check(card, with_defaults(card, "relay", knobs))


# Note [stores of whole sectors] (softmax_relay.py): the write reads half packs, so a lane stores 16 bytes of fp32: the
# soft cap with a last piece of 4464 elements (the prologue evaluated once and three times), at Gemma's shape in the
# root's layout and in 32 KB pieces, over fp16, with writers of their own, and the plain sampling softmax's widening;
# the same cards' 32-byte stores, the defaults' before the knob
RELAY_HALVES = [
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]),
     {"pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 2, "once": True, "halves": True}),
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]), {"pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 2,
                                                             "halves": True}),
    (tc.softmax_fused(SOFTCAP, [((1, 64, 262144), "bfloat16")]),
     {"pe": 8192, "nw": 16, "nc": 1, "k": 10, "lag": 4, "ramp": 2, "once": True, "halves": True}),
    (tc.softmax_fused(SOFTCAP, [((1, 64, 262144), "bfloat16")]),
     {"pe": 16384, "nw": 16, "nc": 1, "k": 6, "lag": 3, "once": True, "halves": True}),
    (tc.softmax_fused(SOFTCAP, [((4, 65536), "float16")]),
     {"pe": 8192, "nw": 8, "nc": 2, "k": 5, "lag": 2, "once": True, "halves": True}),
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]),
     {"pe": 8192, "nw": 8, "nc": 1, "k": 6, "once": True, "writers": True, "halves": True}),
    (tc.softmax_fused("to_float32(x0)", [((5, 40000), "bfloat16")]),
     {"pe": 4096, "nw": 8, "nc": 2, "k": 4, "lag": 2, "once": True, "halves": True}),
    # and without it, two 16-byte stores of a 32-byte pack a lane
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]),
     {"pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 2, "once": True}),
    (tc.softmax_fused(SOFTCAP, [((4, 65536), "float16")]), {"pe": 8192, "nw": 8, "nc": 2, "k": 5, "lag": 2}),
]


@pytest.mark.parametrize("case", RELAY_HALVES, ids=lambda c: "x".join(map(str, c[0].inputs[0].spec.shape)) +
                         f"-{c[0].inputs[0].spec.dtype}-pe{c[1]['pe']}" +
                         "".join(f"-{key}" for key in ("writers", "once", "halves") if key in c[1]))
def test_relay_storing_whole_sectors_passes_the_verifier(case):
    card, knobs = case
    check(card, with_defaults(card, "relay", knobs, ("lag", "once", "halves")))


@pytest.mark.parametrize("case", RELAY, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-" +
                         "x".join(map(str, c[0].inputs[0].spec.shape)) +
                         f"-{c[0].inputs[0].spec.dtype}-pe{c[1]['pe']}-nw{c[1]['nw']}")
def test_relay_passes_the_verifier(case):
    card, knobs = case
    check(card, with_defaults(card, "relay", knobs))


# Note [writers of their own]: writer warps beside reducers (no lag) over short last pieces, log_softmax, fp16 and bf16,
# more pieces a row than blocks (538: five of one row in a block's slots at once), one writer warp, group norms with
# mean and rstd stored and without affine, the weights loaded by the writers, a prologue evaluated once into its slot
# (the reducers' stores fenced before the writers read them); Note [a row's last piece before the next row's first]:
# the loader holding a row's first piece, with one and many pieces of a row in a block
RELAY_WRITERS = [
    (tc.softmax((3, 70000), "float32", log=True), {"pe": 8192, "nw": 8, "nc": 1, "k": 6, "writers": True}),
    (tc.softmax((5, 33000), "bfloat16"), {"pe": 4096, "nw": 4, "nc": 2, "k": 4, "writers": True}),
    (tc.softmax((7, 65536), "float16"), {"pe": 512, "nw": 1, "nc": 3, "k": 3, "writers": True}),
    (tc.softmax((2, 1100000), "float32"), {"pe": 2048, "nw": 8, "nc": 1, "k": 7, "writers": True}),
    (tc.softmax((64, 262144), "bfloat16"), {"pe": 16384, "nw": 8, "nc": 1, "k": 6, "writers": True}),
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="float32"), {"pe": 8192, "nw": 8, "nc": 1, "k": 6,
                                                                  "writers": True}),
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="float32"), {"pe": 8192, "nw": 2, "nc": 1, "k": 6,
                                                                  "writers": True}),
    (tc.group_norm(1, 32, 136, 136, groups=4, dtype="float16", affine=False), {"pe": 4096, "nw": 2, "nc": 1, "k": 5,
                                                                               "writers": True}),
    (tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,)), {"pe": 16384, "nw": 8, "nc": 1, "k": 6,
                                                                    "writers": True}),
    # seven slots, the group norms' root (group_norm.own_writers), at odd sizes in both widths
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="bfloat16"), {"pe": 16384, "nw": 8, "nc": 1, "k": 7,
                                                                   "writers": True}),
    (tc.group_norm(2, 32, 300, 300, groups=4, dtype="float32"), {"pe": 8192, "nw": 8, "nc": 1, "k": 7,
                                                                  "writers": True}),
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]),
     {"pe": 8192, "nw": 8, "nc": 1, "k": 6, "once": True, "writers": True}),
    (tc.softmax_fused(SOFTCAP, [((1, 64, 262144), "bfloat16")]),
     {"pe": 16384, "nw": 8, "nc": 1, "k": 6, "once": True, "writers": True}),
    (tc.softmax_fused("mul(x0,0.125)", [((5, 40000), "float16")]), {"pe": 4096, "nw": 4, "nc": 2, "k": 4,
                                                                    "writers": True}),
    (tc.softmax((2, 1100000), "float32"), {"pe": 2048, "nw": 16, "nc": 1, "k": 7, "lag": 4, "hold": True}),
    (tc.softmax((7, 65536), "float16"), {"pe": 512, "nw": 2, "nc": 3, "k": 3, "lag": 1, "hold": True}),
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="float32"), {"pe": 8192, "nw": 16, "nc": 1, "k": 6, "lag": 3,
                                                                  "hold": True}),
    (tc.softmax_fused(SOFTCAP, [((1, 64, 262144), "bfloat16")]),
     {"pe": 16384, "nw": 16, "nc": 1, "k": 6, "lag": 3, "once": True, "hold": True}),
]


@pytest.mark.parametrize("case", RELAY_WRITERS, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-" +
                         "x".join(map(str, c[0].inputs[0].spec.shape)) + f"-{c[0].inputs[0].spec.dtype}-nw{c[1]['nw']}"
                         + "".join(f"-{key}" for key in ("writers", "hold", "once") if key in c[1]))
def test_relay_with_writers_or_hold_passes_the_verifier(case):
    card, knobs = case
    check(card, with_defaults(card, "relay", knobs, ("lag",)))


def test_relay_is_captured_and_replayed_by_a_cuda_graph():
    """A relay kernel's cooperative launch, with its zeroed scratch, is captured by a CUDA graph (as Inductor's
    cudagraph trees would) and gives the right answer when replayed on new data."""
    card = tc.softmax((64, 262144), "float32")
    fam = family_for(card)
    params = fam.root_params(card)
    assert params["strategy"] == "relay"
    cand = fam.generate(card, params)
    run = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, DEV)
    x = torch.randn(64, 262144, device=DEV) * 4
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run([x])  # warm-up off the capture, as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = run([x])
    for _ in range(2):  # every replay zeroes the graph's own scratch (Note [scratch kept between launches])
        x.copy_(torch.randn(64, 262144, device=DEV) * 4)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, torch.softmax(x, -1), rtol=1e-3, atol=1e-9)


@pytest.mark.parametrize("case", [RELAY[1], RELAY[13], RELAY[-1], RELAY_WRITERS[10]],
                         ids=["softmax", "group_norm", "fused", "group_norm_writers"])
def test_relay_launches_in_a_row_share_one_kept_scratch(case):
    """Note [rows relayed through global memory], marks: launches one after another on one launcher reuse its
    scratch without a fill; each is right on new data, and each advances the epoch once and rearms the count."""
    card, knobs = case
    fam = family_for(card)
    base = {key: v for key, v in fam.defaults(card, "relay").items() if key != "lag" or "writers" not in knobs}
    launches_in_a_row(card, {**base, **knobs}, 100)


def launches_in_a_row(card, params, seed: int) -> None:
    """Four launches of ``params`` on one launcher and its kept scratch: each right on new data, each advancing the
    epoch (the scratch's last two words) once and rearming the count."""
    cand = family_for(card).generate(card, params)
    run = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, DEV)
    assert run.kept_scratch() == {}
    sig = card.signature_obj()
    for i in range(1, 5):
        inputs = make_inputs(card, "normal", seed + i, DEV)
        outs = run(inputs)
        for o, r in zip(outs, call_aten(sig, inputs)):
            torch.testing.assert_close(o.float(), r.float(), rtol=2e-2, atol=1e-3 * float(r.float().abs().mean()))
        (buf,) = run.kept_scratch().values()
        epoch, count = buf[-8:].view(torch.int32).tolist()
        assert (epoch, count) == (i, 0)


# Note [the first copies a few at a time]: the first copies issued one or two at a time, with the joint relay and
# with writers of their own, a prologue evaluated once, a group norm, more pieces a row than blocks
RELAY_RAMP = [
    (tc.softmax((64, 262144), "bfloat16"), {"pe": 16384, "nw": 16, "nc": 1, "k": 6, "lag": 3, "ramp": 1}),
    (tc.softmax((5, 33000), "float16", log=True), {"pe": 4096, "nw": 8, "nc": 2, "k": 4, "lag": 2, "ramp": 2}),
    (tc.softmax((2, 1100000), "float32"), {"pe": 2048, "nw": 8, "nc": 1, "k": 7, "writers": True, "ramp": 2}),
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]),
     {"pe": 8192, "nw": 16, "nc": 1, "k": 10, "lag": 4, "once": True, "ramp": 2}),
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="bfloat16"), {"pe": 16384, "nw": 8, "nc": 1, "k": 7,
                                                                   "writers": True, "ramp": 3}),
]


@pytest.mark.parametrize("case", RELAY_RAMP, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-" +
                         "x".join(map(str, c[0].inputs[0].spec.shape)) + f"-ramp{c[1]['ramp']}")
def test_relay_with_a_ramp_passes_the_verifier(case):
    card, knobs = case
    check(card, with_defaults(card, "relay", knobs, ("lag",)))


# Note [the GPU's SM count in a plan] (contract.py): relay roots launched as GPUs with fewer SMs would launch them (an
# H100 PCIe's 114, an H20's 78, 100), one block per SM: the joint relay, a prologue evaluated once, writers of their
# own, pieces held in registers (512 pieces a group: up to 7 a block at 78)
RELAY_FEWER_SMS = [
    (tc.softmax((64, 262144), "bfloat16"), None, 114),
    (tc.softmax((64, 262144), "bfloat16"), None, 78),
    (tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")]), None, 100),
    (tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,)), None, 114),
    (tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,)), None, 78),
]


@pytest.mark.parametrize("case", RELAY_FEWER_SMS, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-" +
                         "x".join(map(str, c[0].inputs[0].spec.shape)) + f"-{c[2]}sms")
def test_relay_launched_on_fewer_sms_passes_the_verifier(case):
    card, params, sms = case
    fam = family_for(card)
    params = params or fam.root_params(card)
    assert params["strategy"] == "relay", params
    cand = fam.generate(card, params)
    run = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, DEV, num_sms=sms)
    assert run.launches[0].grid == (sms, 1, 1)
    rep = verify(card, run.launch_into, run.allocate_outputs, DEV)
    assert rep.ok, (card.op, params, sms, rep.failed_check, rep.message)


def test_relay_with_too_few_sms_for_its_layout_returns_instead_of_waiting():
    """538 pieces a row over 66 blocks puts up to 9 of a row in one block, which a lag of 5 does not cover: every
    block returns as it starts, the outputs stay unwritten and the verifier refuses the kernel (it would wait forever
    for pieces its own consumers cannot reach); at 132 blocks the same kernel passes."""
    card, params = tc.relay_from_90_blocks()
    cand = family_for(card).generate(card, params)
    cubin = compile_candidate(cand, card.arch).cubin
    few = Launcher(card, cand, cubin, DEV, num_sms=66)
    rep = verify(card, few.launch_into, few.allocate_outputs, DEV)
    assert not rep.ok and rep.failed_check == "unwritten", (rep.failed_check, rep.message)
    torch.cuda.synchronize()  # the context is still usable: nothing trapped
    run = Launcher(card, cand, cubin, DEV, num_sms=132)
    assert verify(card, run.launch_into, run.allocate_outputs, DEV).ok


# Note [pieces held in the writers' registers] (relay_held.py): the 16 MB fp32 groups (the knob's target), 1 MB and
# 768 KB groups with half the reducers, bf16, odd sizes with short last pieces, fp16 without affine, log_softmax,
# a prologue evaluated once into its slot, a ramp, and the progress rule at its limit (538 pieces a row over two
# slots and three held pieces)
RELAY_HELD = [
    (tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,)), {"pe": 8192, "nw": 8, "k": 7, "regs": 1}),
    (tc.group_norm(2, 1536, 64, 64, dtype="float32"), {"pe": 8192, "nw": 4, "k": 7, "regs": 2}),
    (tc.group_norm(1, 512, 128, 128, dtype="float32"), {"pe": 8192, "nw": 8, "k": 7, "regs": 1, "ramp": 2}),
    (tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,)), {"pe": 16384, "nw": 4, "k": 7, "regs": 1}),
    (tc.group_norm(2, 32, 300, 300, groups=4, dtype="float32"), {"pe": 8192, "nw": 4, "k": 5, "regs": 2}),
    (tc.group_norm(1, 32, 136, 136, groups=4, dtype="float16", affine=False), {"pe": 4096, "nw": 2, "k": 5,
                                                                               "regs": 3}),
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="bfloat16"), {"pe": 16384, "nw": 4, "k": 7, "regs": 1,
                                                                   "ramp": 3}),
    (tc.softmax((3, 70000), "float32", log=True), {"pe": 8192, "nw": 4, "nc": 2, "k": 6, "regs": 1}),
    (tc.softmax((7, 65536), "float16"), {"pe": 512, "nw": 1, "nc": 3, "k": 3, "regs": 2}),
    (tc.softmax((2, 1100000), "float32"), {"pe": 2048, "nw": 8, "k": 2, "regs": 3, "ramp": 1}),  # ramp < k
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]), {"pe": 8192, "nw": 4, "k": 6, "once": True, "regs": 1}),
    (tc.softmax((64, 262144), "bfloat16"), {"pe": 16384, "nw": 4, "k": 6, "regs": 1, "ramp": 1}),
]


def held(card, knobs):
    # no lag (writers of their own) and no halves (the held writers read whole packs: Note [stores of whole sectors])
    return with_defaults(card, "relay", {"nc": 1, "writers": True, **knobs}, ("lag", "halves"))


@pytest.mark.parametrize("case", RELAY_HELD, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-" +
                         "x".join(map(str, c[0].inputs[0].spec.shape)) + f"-{c[0].inputs[0].spec.dtype}" +
                         "".join(f"-{key}{v}" for key, v in c[1].items() if key != "pe"))
def test_relay_with_pieces_held_in_registers_passes_the_verifier(case):
    check(case[0], held(*case))


@pytest.mark.parametrize("case", [RELAY_HELD[1], RELAY_HELD[9]], ids=["group_norm", "softmax-limit"])
def test_relay_with_pieces_held_launches_in_a_row_share_one_kept_scratch(case):
    launches_in_a_row(case[0], held(*case), 400)


# Note [a tensor held on chip whole] (resident.py): the anchor shapes in both 16-bit types and as log_softmax, a last
# block whose register packs run out inside its threads ([60, 270000] fp16), blocks with no packs at all ([1, 1064]:
# two packs a block over 67 blocks), copies of 64 packs (up to 64 mbarriers), packs a block in two rows and in one,
# 512 threads with four register packs, three register packs (spilling), the soft cap and a plain widening evaluated
# once, in place
RESIDENT = [
    (tc.softmax((64, 262144), "bfloat16"), {}),
    (tc.softmax((64, 262144), "float16", log=True), {}),
    (tc.softmax((64, 248320), "bfloat16"), {}),
    (tc.softmax((60, 270000), "float16"), {}),
    (tc.softmax((1, 1064), "bfloat16"), {}),
    (tc.softmax((3, 40008), "bfloat16", log=True), {"ch": 64}),
    (tc.softmax((5, 70000), "float32"), {"ch": 128}),
    (tc.softmax((64, 262144), "bfloat16"), {"nt": 512, "rpt": 4}),
    (tc.softmax((64, 262144), "bfloat16"), {"rpt": 3, "ch": 2048}),
    (tc.softmax((64, 262144), "bfloat16"), {"ch": 256}),
    (tc.softmax_fused(SOFTCAP, [((1, 64, 262144), "bfloat16")]), {}),
    (tc.softmax_fused(SOFTCAP, [((3, 70000), "bfloat16")]), {"nt": 256}),
    (tc.softmax_fused("to_float32(x0)", [((7, 123456), "float16")]), {}),
]


@pytest.mark.parametrize("case", RESIDENT, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-" +
                         "x".join(map(str, c[0].inputs[0].spec.shape)) + f"-{c[0].inputs[0].spec.dtype}" +
                         "".join(f"-{k}{v}" for k, v in c[1].items()))
def test_resident_softmax_passes_the_verifier(case):
    card, knobs = case
    check(card, with_defaults(card, "resident", knobs))


@pytest.mark.parametrize("case", [RESIDENT[0], RESIDENT[9]], ids=["softmax", "softcap"])
def test_resident_launches_in_a_row_share_one_kept_scratch(case):
    """Note [a tensor held on chip whole]: launches one after another reuse the kept scratch's marked partials; each
    is right on new data, and each advances the epoch once and rearms the count."""
    card, knobs = case
    launches_in_a_row(card, {**family_for(card).defaults(card, "resident"), **knobs}, 200)


def test_resident_softmax_is_captured_and_replayed_by_a_cuda_graph():
    """The resident kernel's cooperative launch and its zeroed scratch inside a CUDA graph: right on new data at
    every replay."""
    card = tc.softmax((64, 262144), "bfloat16")
    fam = family_for(card)
    cand = fam.generate(card, fam.defaults(card, "resident"))
    run = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, DEV)
    x = (torch.randn(64, 262144, device=DEV) * 4).bfloat16()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run([x])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (out,) = run([x])
    for _ in range(3):
        x.copy_(torch.randn(64, 262144, device=DEV) * 4)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), torch.softmax(x.float(), -1), rtol=1e-2, atol=1e-6)


# Note [a warp per output row]: channel tiles past C, position tails, a 7-tap halo, a bias, 2 and 4 vectors per
# position group of a warp's load, every vector width
CONV_ROWS = [
    (tc.causal_conv1d(100, 130, k=4, dtype="bfloat16"), {"tl": 64, "tc": 64, "block": 128, "vec": 4}),
    (tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True), {"tl": 32, "tc": 32, "block": 64, "vec": 4}),
    (tc.causal_conv1d(34, 70, k=7, dtype="float16", bias=True), {"tl": 64, "tc": 16, "block": 128, "vec": 2}),
    (tc.causal_conv1d(24, 50, k=3, dtype="bfloat16"), {"tl": 32, "tc": 16, "block": 64, "vec": 8}),
    (tc.causal_conv1d(40, 301, k=4, dtype="bfloat16", bias=True), {"tl": 256, "tc": 32, "block": 256, "vec": 8,
                                                                   "cfirst": True}),
    # Note [the next tile's loads in flight]: a last block with fewer tiles than its steps, and one past the end
    (tc.causal_conv1d(40, 301, k=4, dtype="bfloat16", bias=True), {"tl": 64, "tc": 32, "block": 128, "vec": 8,
                                                                   "steps": 2}),
    (tc.causal_conv1d(100, 130, k=7, dtype="float16"), {"tl": 32, "tc": 16, "block": 64, "vec": 4, "steps": 4,
                                                        "cfirst": True}),
    (tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True), {"tl": 32, "tc": 32, "block": 64, "vec": 4,
                                                                 "steps": 8}),
    # Note [two positions per lane]: odd output rows (133, 53, 303, 99 long: every other row shifted), even ones
    # (40, 76), a channel tail, fp32 and fp16 pairs, odd and even K, a centred window, tiles with and without tests
    (tc.causal_conv1d(100, 130, k=4, dtype="bfloat16"), {"tl": 64, "tc": 64, "block": 128, "vec": 4, "lp": 2}),
    (tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True), {"tl": 64, "tc": 32, "block": 64, "vec": 4,
                                                                 "lp": 2}),
    (tc.causal_conv1d(34, 73, k=7, dtype="float16", bias=True), {"tl": 64, "tc": 16, "block": 128, "vec": 2,
                                                                 "lp": 2}),
    (tc.causal_conv1d(24, 51, k=3, dtype="bfloat16"), {"tl": 64, "tc": 16, "block": 64, "vec": 8, "lp": 2}),
    (tc.causal_conv1d(40, 300, k=4, dtype="bfloat16", bias=True), {"tl": 64, "tc": 32, "block": 256, "vec": 8,
                                                                   "cfirst": True, "lp": 2}),
    (tc.causal_conv1d(40, 99, k=5, dtype="bfloat16", padding=2), {"tl": 128, "tc": 8, "block": 64, "vec": 8,
                                                                  "lp": 2}),
]


@pytest.mark.parametrize("case", CONV_ROWS, ids=lambda c: "x".join(map(str, c[0].inputs[0].spec.shape)))
def test_conv_rows_pass_the_verifier(case):
    card, params = case
    check(card, {"strategy": "rows", **params})


# Note [output chunks aligned per channel row]: rows of odd lengths (every phase of a vector), a channel tail past C,
# chunks partly outside their row at both ends, fp32 and fp16 vectors, K of 3, 4 and 7, a centred window, a bias,
# two samples whose rows keep their phase, windows read from global memory, channel tiles first, more chunks than
# threads, a tile of 512 positions
CONV_CHUNKS = [
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"tl": 256, "tc": 64, "block": 256}),
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"tl": 256, "tc": 64, "block": 256, "direct": True}),
    (tc.causal_conv1d(104, 131, k=4, dtype="bfloat16"), {"tl": 64, "tc": 64, "block": 64}),
    (tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True), {"tl": 32, "tc": 32, "block": 64}),
    (tc.causal_conv1d(40, 73, k=7, dtype="float16", bias=True), {"tl": 256, "tc": 16, "block": 64,
                                                                 "direct": True}),
    (tc.causal_conv1d(24, 51, k=3, dtype="bfloat16"), {"tl": 256, "tc": 16, "block": 64, "cfirst": True}),
    (tc.causal_conv1d(40, 99, k=5, dtype="bfloat16", padding=2, bias=True), {"tl": 512, "tc": 8, "block": 64}),
    (tc.causal_conv1d(64, 300, k=4, dtype="bfloat16", batch=2), {"tl": 128, "tc": 32, "block": 64}),
    (tc.causal_conv1d(48, 61, k=4, dtype="float32", batch=3), {"tl": 64, "tc": 16, "block": 64, "direct": True}),
    # Note [a warp's stores along one row]: lanes along a row's chunks, the swizzled tile
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"tl": 256, "tc": 64, "block": 256, "rowfast": True}),
    (tc.causal_conv1d(104, 131, k=4, dtype="bfloat16", bias=True), {"tl": 64, "tc": 64, "block": 64,
                                                                    "rowfast": True}),
    (tc.causal_conv1d(136, 77, k=7, dtype="float16"), {"tl": 128, "tc": 128, "block": 128, "rowfast": True}),
    (tc.causal_conv1d(40, 45, k=4, dtype="float32", batch=2), {"tl": 32, "tc": 32, "block": 64, "rowfast": True}),
]


# Note [a block's channel rows as one flat run]: Qwen's rows, odd rows at every phase of a vector and two samples
# (runs that start mid-vector), rows shorter than a vector, fp32 and fp16 vectors, a bias, K of 2, 3 and 4, padding
# past K - 1 (zeros after a row's inputs), groups of 8 and 32, every block size and loads per thread
CONV_FLAT = [
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"g": 16, "block": 256, "ld": 8}),
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"g": 32, "block": 512, "ld": 16}),
    (tc.causal_conv1d(104, 131, k=4, dtype="bfloat16", batch=2), {"g": 8, "block": 128, "ld": 4}),
    (tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True), {"g": 16, "block": 256, "ld": 8}),
    (tc.causal_conv1d(40, 73, k=3, dtype="float16", bias=True, batch=3), {"g": 8, "block": 512, "ld": 16}),
    (tc.causal_conv1d(64, 5, k=2, dtype="bfloat16", padding=3), {"g": 32, "block": 128, "ld": 8}),
    (tc.causal_conv1d(48, 61, k=3, dtype="float32", padding=4, batch=2), {"g": 8, "block": 256, "ld": 4}),
    # Note [the next run's loads in flight]: blocks that walk several runs, a grid with a last walk shorter than the
    # others, runs at every phase in one block's two spaces
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"g": 16, "block": 512, "pipe": True}),
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"g": 8, "block": 256, "pipe": True}),
    (tc.causal_conv1d(104, 131, k=4, dtype="bfloat16", batch=3), {"g": 8, "block": 128, "pipe": True}),
    (tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True), {"g": 8, "block": 128, "pipe": True}),
]


@pytest.mark.parametrize("case", CONV_FLAT, ids=lambda c: "x".join(map(str, c[0].inputs[0].spec.shape)) +
                         f"-g{c[1]['g']}" + ("-pipe" if c[1].get("pipe") else ""))
def test_conv_flat_passes_the_verifier(case):
    card, params = case
    check(card, {"strategy": "flat", "vec": 16 // (4 if card.inputs[0].spec.dtype == "float32" else 2), **params})


# Note [channel rows over a band of positions]: Qwen's rows at every band length and group, odd rows at every phase
# and two samples, rows shorter than a vector (three rows in one), fp32 and fp16 vectors, a bias, K of 2-5 and
# padding past K - 1, a window longer than the row, every block size and loads per thread (several batches)
CONV_BANDS = [
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"g": 64, "lt": 256, "block": 256, "ld": 8}),
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"g": 128, "lt": 512, "block": 512, "ld": 4}),
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"g": 32, "lt": 128, "block": 128, "ld": 2}),
    (tc.causal_conv1d(128, 131, k=4, dtype="bfloat16", batch=2), {"g": 64, "lt": 64, "block": 256, "ld": 16}),
    (tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True), {"g": 32, "lt": 64, "block": 128, "ld": 4}),
    (tc.causal_conv1d(48, 73, k=3, dtype="float16", bias=True, batch=3), {"g": 16, "lt": 128, "block": 512, "ld": 8}),
    (tc.causal_conv1d(64, 5, k=2, dtype="bfloat16", padding=0), {"g": 32, "lt": 64, "block": 128, "ld": 2}),
    (tc.causal_conv1d(48, 61, k=5, dtype="float32", padding=6, batch=2), {"g": 16, "lt": 128, "block": 256, "ld": 2}),
    # Note [bands first]
    (tc.causal_conv1d(128, 131, k=4, dtype="bfloat16", batch=2), {"g": 32, "lt": 64, "block": 128, "ld": 4,
                                                                    "bfirst": True}),
    # Note [a row's first vector whole]: rows joined across channel tiles and samples, fp32 and fp16, a bias, K of 3-5
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"g": 32, "lt": 256, "block": 256, "ld": 8, "bfirst": True,
                                                           "join": True}),
    (tc.causal_conv1d(128, 131, k=4, dtype="bfloat16", batch=2), {"g": 32, "lt": 64, "block": 128, "ld": 4,
                                                                    "join": True}),
    (tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True), {"g": 32, "lt": 64, "block": 128, "ld": 4,
                                                                  "bfirst": True, "join": True}),
    (tc.causal_conv1d(48, 61, k=5, dtype="float32", padding=6, batch=2), {"g": 16, "lt": 128, "block": 256, "ld": 2,
                                                                           "join": True}),
    (tc.causal_conv1d(48, 73, k=3, dtype="float16", bias=True, batch=3), {"g": 16, "lt": 128, "block": 512, "ld": 8,
                                                                           "join": True}),
]


@pytest.mark.parametrize("case", CONV_BANDS, ids=lambda c: "x".join(map(str, c[0].inputs[0].spec.shape)) +
                         f"-g{c[1]['g']}-lt{c[1]['lt']}" + ("-bfirst" if c[1].get("bfirst") else "") +
                         ("-join" if c[1].get("join") else ""))
def test_conv_bands_pass_the_verifier(case):
    card, params = case
    check(card, {"strategy": "bands", "vec": 16 // (4 if card.inputs[0].spec.dtype == "float32" else 2), **params})


# Note [whole lines, 8 x 8 blocks turned in registers] (conv_lines.py): Qwen's conv, every phase, batches, biases,
# fp16, K of 2-8, paddings of 0-6, rows shorter than a vector and than a band, each knob's other values
CONV_LINES = [
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"tp": 128, "tc": 64, "block": 256, "stages": 3}),
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"tp": 256, "tc": 128, "block": 128, "stages": 2,
                                                           "cfirst": True}),
    (tc.causal_conv1d(128, 131, k=4, dtype="bfloat16", batch=2), {"tp": 64, "tc": 64, "block": 256, "stages": 4}),
    (tc.causal_conv1d(64, 99, k=5, dtype="bfloat16", padding=2, bias=True), {"tp": 128, "tc": 64, "block": 128,
                                                                             "stages": 2}),
    (tc.causal_conv1d(192, 73, k=3, dtype="float16", bias=True, batch=3), {"tp": 64, "tc": 64, "block": 256,
                                                                           "stages": 6, "cfirst": True}),
    (tc.causal_conv1d(128, 77, k=7, dtype="float16", bias=True), {"tp": 128, "tc": 128, "block": 256, "stages": 3}),
    (tc.causal_conv1d(64, 5, k=2, dtype="bfloat16", padding=0), {"tp": 64, "tc": 64, "block": 128, "stages": 2}),
    (tc.causal_conv1d(64, 61, k=8, dtype="bfloat16", padding=6, batch=2), {"tp": 256, "tc": 64, "block": 256,
                                                                           "stages": 3}),
    (tc.causal_conv1d(64, 3, k=4, dtype="float16"), {"tp": 64, "tc": 64, "block": 256, "stages": 5}),
]
CONV_LINES += [  # bands of any multiple of 8 (the balanced band: Qwen's 208)
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"tp": 208, "tc": 64, "block": 256, "stages": 3}),
    (tc.causal_conv1d(128, 131, k=5, dtype="float16", padding=2, bias=True, batch=2),
     {"tp": 72, "tc": 128, "block": 128, "stages": 2, "cfirst": True}),
]
CONV_LINES = [(card, {"vo": 8, **p}) for card, p in CONV_LINES] + [  # four outputs a work item
    (tc.causal_conv1d(64, 141, k=4, dtype="bfloat16"), {"tp": 136, "tc": 64, "block": 256, "stages": 4, "vo": 4}),
    (tc.causal_conv1d(8192, 2048, k=4, dtype="bfloat16"), {"tp": 128, "tc": 64, "block": 256, "stages": 3, "vo": 4}),
    (tc.causal_conv1d(128, 131, k=4, dtype="float16", bias=True, batch=2), {"tp": 64, "tc": 128, "block": 128,
                                                                           "stages": 4, "vo": 4, "cfirst": True}),
    (tc.causal_conv1d(64, 61, k=8, dtype="bfloat16", padding=6, batch=2), {"tp": 256, "tc": 64, "block": 256,
                                                                           "stages": 2, "vo": 4}),
    (tc.causal_conv1d(64, 2, k=2, dtype="bfloat16", padding=0, batch=3), {"tp": 64, "tc": 64, "block": 256,
                                                                          "stages": 6, "vo": 4}),
    (tc.causal_conv1d(64, 9, k=3, dtype="float16", padding=1), {"tp": 128, "tc": 64, "block": 128, "stages": 3,
                                                                "vo": 4}),
]


@pytest.mark.parametrize("case", CONV_LINES, ids=lambda c: "x".join(map(str, c[0].inputs[0].spec.shape)) +
                         f"-k{c[0].inputs[1].spec.shape[2]}-tp{c[1]['tp']}-tc{c[1]['tc']}-s{c[1]['stages']}" +
                         f"-vo{c[1]['vo']}" +
                         ("-cfirst" if c[1].get("cfirst") else ""))
def test_conv_lines_pass_the_verifier(case):
    card, params = case
    check(card, {"strategy": "lines", **params})


@pytest.mark.parametrize("case", CONV_CHUNKS, ids=lambda c: "x".join(map(str, c[0].inputs[0].spec.shape)) +
                         "".join(f"-{k}" for k in ("direct", "rowfast") if c[1].get(k)))
def test_conv_chunks_pass_the_verifier(case):
    card, params = case
    check(card, {"strategy": "chunks", "vec": 16 // (4 if card.inputs[0].spec.dtype == "float32" else 2), **params})


# Note [a group re-read from the L2, a few groups later] (gn_lag.py): the anchor rows it is made for, 2-byte packs of
# odd planes, no affine, empty warp runs (more warps than packs), lags of 1-3, every re-read and the kept first read,
# blocks of 128-1024 threads
GN_LAG = [
    (tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,)), {}),
    (tc.group_norm(1, 128, 1024, 1024, dtype="bfloat16", used=(0,)), {"lag": 2, "keep": True}),
    (tc.group_norm(2, 1536, 64, 64, dtype="float32"), {"lag": 3, "again": "first"}),
    (tc.group_norm(2, 96, 37, 41, groups=8, dtype="float16", affine=False), {"again": "ld", "unroll": 1}),
    (tc.group_norm(1, 64, 200, 200, groups=8, dtype="bfloat16"), {"block": 1024, "bpb": 1, "lag": 2}),
    (tc.group_norm(4, 64, 8, 8, groups=32, dtype="float32"), {"block": 128, "bpb": 8, "lag": 3}),
    (tc.group_norm(3, 48, 33, 32, groups=6, dtype="bfloat16", used=(0,)), {"block": 256, "bpb": 4, "keep": True,
                                                                            "again": "cs"}),
    # Note [a statistic published before the wait]
    (tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,)), {"early": True, "block": 1024, "bpb": 1}),
    (tc.group_norm(2, 96, 37, 41, groups=8, dtype="float16", affine=False), {"early": True, "lag": 3, "again": "ld"}),
    (tc.group_norm(4, 64, 8, 8, groups=32, dtype="float32"), {"early": True, "block": 128, "bpb": 8, "lag": 2}),
]


@pytest.mark.parametrize("case", GN_LAG, ids=lambda c: "x".join(map(str, c[0].inputs[0].spec.shape)) +
                         f"-{c[0].inputs[0].spec.dtype}" + "".join(f"-{k}{v}" for k, v in c[1].items()))
def test_group_norm_lag_passes_the_verifier(case):
    card, knobs = case
    check(card, with_defaults(card, "lag", knobs))


@pytest.mark.parametrize("case", [GN_LAG[2], GN_LAG[5], GN_LAG[9]], ids=["lag3", "small", "early"])
def test_group_norm_lag_launches_in_a_row_share_one_kept_scratch(case):
    """Its counts and epoch carry from launch to launch (the Note): each launch right, each advancing the epoch once
    and rearming the exit count."""
    card, knobs = case
    launches_in_a_row(card, {**family_for(card).defaults(card, "lag"), **knobs}, 300)


def replays_right(card, params) -> None:
    """``params``' kernel captured by a CUDA graph (after a warm-up off the capture, as torch.cuda.graphs asks) and
    replayed on three sets of new inputs: right every time, against ATen."""
    fam = family_for(card)
    cand = fam.generate(card, params)
    run = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, DEV)
    inputs = make_inputs(card, "normal", 7, DEV)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run(inputs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run(inputs)
    sig = card.signature_obj()
    for seed in range(3):
        for dst, src in zip(inputs, make_inputs(card, "normal", 20 + seed, DEV)):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        ref = call_aten(sig, inputs)[0]
        torch.testing.assert_close(outs[0], ref, rtol=1e-4, atol=1e-4)


def test_group_norm_lag_is_captured_and_replayed_by_a_cuda_graph():
    card = tc.group_norm(2, 1536, 64, 64, dtype="float32", used=(0,))
    replays_right(card, family_for(card).defaults(card, "lag"))


def test_group_norm_held_root_is_captured_and_replayed_by_a_cuda_graph():
    """Note [pieces held in the writers' registers]: the root of 8 MB fp32 groups (group_norm.held_root)."""
    card = tc.group_norm(1, 256, 512, 512, dtype="float32", used=(0,))
    params = family_for(card).root_params(card)
    assert params.get("regs") == 2
    replays_right(card, params)


# Note [row norms walked with the next rows' loads in flight]: walks of several steps (fewer blocks than row groups),
# a last row group cut short, a block a row and rows of a group, statistics written per row, adaLN's broadcast extras,
# prologues
ROW_NORM_WALKS = [
    (tc.layer_norm((3001, 1001), (1001,), "float32"), {"vec": 1, "tpr": 32, "block": 64, "bps": 1}),
    (tc.rms_norm((2050, 777), (777,), "bfloat16", used=(0,)), {"vec": 1, "tpr": 32, "block": 96, "bps": 2}),
    (tc.layer_norm((7, 4097), (4097,), "float16", bias=False, used=(0, 2)), {"vec": 1, "tpr": 256, "block": 256,
                                                                          "bps": 4}),
    (tc.norm_fused("add(mul(x0,x1),x2)", (2, 1000, 1536), [((2, 1, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16")]),
     {"vec": 8, "tpr": 64, "block": 64, "bps": 2}),
    (tc.norm_fused("add(mul(x0,x1),x2)", (2, 1000, 1536), [((2, 1, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16")]),
     {"vec": 8, "tpr": 32, "block": 128, "bps": 1}),
    (tc.norm_fused("mul(x0,sigmoid(x1))", (3, 700, 1000), [((3, 700, 1000), "float32")], "float32", norm="rms_norm",
                   weight=True), {"vec": 4, "tpr": 128, "block": 128, "bps": 1}),
    # a prologue: each input's packs prefetched, the residual computed as they move into the cache, written as output 1
    (tc.norm_residual("add(x0,mul(x1,x2))", [((2, 1000, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16"),
                                             ((2, 1000, 1536), "bfloat16")],
                      "add(mul(x0,x1),x2)", [((2, 1, 1536), "bfloat16"), ((2, 1, 1536), "bfloat16")], (2, 1000, 1536)),
     {"vec": 8, "tpr": 64, "block": 64, "bps": 2}),
    (tc.norm_residual("add(x0,x1)", [((3, 701, 999), "float16"), ((3, 701, 999), "float16")], "mul(x0,2.0)", [],
                      (3, 701, 999), "float16", norm="rms_norm", weight=True), {"vec": 1, "tpr": 32, "block": 128,
                                                                                  "bps": 1}),
]


@pytest.mark.parametrize("case", ROW_NORM_WALKS, ids=lambda c: f"{c[0].op.split('.')[1]}-" +
                         "x".join(map(str, c[0].outputs[0].spec.shape)) + f"-tpr{c[1]['tpr']}-b{c[1]['block']}"
                         f"-bps{c[1]['bps']}")
def test_row_norm_walk_passes_the_verifier(case):
    card, params = case
    check(card, {"strategy": "walk", "cache": "reg", **params})
