"""The ``lines`` depthwise conv1d (Note [whole lines, 8 x 8 blocks turned in registers] in templates/conv_lines.py):
a numpy model of the kernel's index arithmetic (the tiles' walk, the window, the swizzled chunks, each channel's
phase and lines, the aligned vectors and the rows' partial ends) checked against a float64 convolution on the CPU,
the banks of the shared loads, and what the template accepts. The kernel itself is verified on the GPU
(test_templates_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest

import template_cards as tc
from forge_backend.search.templates import conv, conv_lines
from test_conv_flat import assert_valid_and_compile, random_conv, reference


def lines_model(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pad: int, p: dict,
                grid: int = 7) -> tuple[np.ndarray, list[int]]:
    """The kernel's steps for every block of a grid of ``grid`` blocks, in numpy, with the module's sizes: x [N, C,
    L_in], w [C, K]. Returns the flat output and the flat starts of every whole-vector store. Every output must be
    written exactly once."""
    n_, c_, l_in = x.shape
    k = w.shape[1]
    card = tc.causal_conv1d(c_, l_in, k=k, dtype="bfloat16", bias=b is not None, padding=pad, batch=n_)
    assert conv.valid(card, p), p
    l_out = l_in + 2 * pad - k + 1
    tp, tcs, vo = p["tp"], p["tc"], p["vo"]
    cpr, g_, nr = tcs // 8, tp // vo, conv_lines.item_lines(card, p)
    wrows, hb, nb, nct = conv_lines.window_rows(card, p), conv_lines.halo(card, p), conv_lines.bands(card, p), c_ // tcs
    assert conv_lines.tiles(card, p) == n_ * nct * nb
    flat = np.full(n_ * c_ * l_out, np.nan)
    stores: list[int] = []

    def coords(t: int) -> tuple[int, int, int]:
        if p.get("cfirst"):
            return t // nct // nb, (t % nct) * tcs, (t // nct) % nb
        return t // nb // nct, ((t // nb) % nct) * tcs, t % nb

    for block in range(grid):
        for t in range(block, n_ * nct * nb, grid):
            n, c0, band = coords(t)
            st = np.zeros((wrows * cpr, 8))  # the swizzled chunks of the window, 8 channels each
            for r in range(wrows):
                q = band * tp - hb + r
                for kk in range(cpr):
                    if 0 <= q < l_in:
                        st[r * cpr + (kk ^ ((r // vo) & 7))] = x[n, c0 + 8 * kk:c0 + 8 * kk + 8, q]
            for it in range(cpr * g_):
                g, kk = it % g_, it // g_
                lines = [st[(vo * g + i) * cpr + (kk ^ (((vo * g + i) // vo) & 7))] for i in range(nr)]
                for q in range(8):
                    ph = q * l_out % vo
                    ci = 8 * kk + q
                    c = c0 + ci
                    assert (n * c_ + c) * l_out % vo == ph  # the phase is the chunk's channel's
                    inp = [lines[vo - 1 - ph + j][q] for j in range(vo - 1 + k)]
                    # the weights as the stage holds them (the tile's TC x K, flat), read by 16-bit word halves
                    words = w[c0:c0 + tcs].reshape(-1, 2)
                    wk = [words[4 * k * kk + ((q * k + j) >> 1)][(q * k + j) & 1] for j in range(k)]
                    if b is not None:  # the tile's biases follow its weights
                        words = np.concatenate([w[c0:c0 + tcs].reshape(-1), b[c0:c0 + tcs]]).reshape(-1, 2)
                        bias = words[tcs * k // 2 + 4 * kk + (q >> 1)][q & 1]
                    o = [(bias if b is not None else 0.0) + sum(wk[j] * inp[i + j] for j in range(k))
                         for i in range(vo)]
                    t0 = band * tp - ph + vo * g
                    base = (n * c_ + c) * l_out + t0
                    if t0 >= 0 and t0 + vo <= l_out:
                        assert base % vo == 0
                        assert np.isnan(flat[base:base + vo]).all(), "an output written twice"
                        flat[base:base + vo] = o
                        stores.append(base)
                    elif t0 < l_out:
                        for i in range(vo):
                            if 0 <= t0 + i < l_out:
                                assert np.isnan(flat[base + i]), "an output written twice"
                                flat[base + i] = o[i]
    return flat, stores


LAYOUTS = [
    (1, 64, 300, 4, 3, {"tp": 128, "tc": 64, "block": 256, "stages": 3, "vo": 8}, False),  # Qwen's rows: L_out 303
    (2, 128, 131, 4, 3, {"tp": 64, "tc": 64, "block": 256, "stages": 4, "vo": 8}, True),  # samples follow each other
    (1, 128, 77, 7, 6, {"tp": 128, "tc": 128, "block": 128, "stages": 2, "cfirst": True, "vo": 8}, True),
    (3, 64, 61, 8, 6, {"tp": 64, "tc": 64, "block": 256, "stages": 3, "vo": 8}, False),
    (1, 64, 99, 5, 2, {"tp": 256, "tc": 64, "block": 256, "stages": 5, "vo": 8}, True),
    (1, 64, 5, 2, 0, {"tp": 64, "tc": 64, "block": 128, "stages": 2, "vo": 8}, False),  # rows of 4: under a vector
    (2, 64, 3, 4, 3, {"tp": 64, "tc": 64, "block": 256, "stages": 6, "cfirst": True, "vo": 8}, False),
    # bands of any multiple of 8 (Note [whole lines, 8 x 8 blocks turned in registers], bands balanced)
    (1, 64, 300, 4, 3, {"tp": 208, "tc": 64, "block": 256, "stages": 3, "vo": 8}, False),  # Qwen's balanced band
    (2, 128, 131, 5, 2, {"tp": 72, "tc": 128, "block": 128, "stages": 2, "cfirst": True, "vo": 8}, True),
    (1, 64, 141, 4, 3, {"tp": 136, "tc": 64, "block": 256, "stages": 4, "vo": 4}, False),
    # four outputs a work item: phases mod 4, 8-byte stores
    (1, 64, 300, 4, 3, {"tp": 128, "tc": 64, "block": 256, "stages": 3, "vo": 4}, False),
    (2, 128, 131, 4, 3, {"tp": 64, "tc": 64, "block": 128, "stages": 4, "vo": 4}, True),
    (1, 128, 77, 7, 6, {"tp": 256, "tc": 128, "block": 256, "stages": 2, "cfirst": True, "vo": 4}, True),
    (3, 64, 61, 8, 6, {"tp": 64, "tc": 64, "block": 256, "stages": 3, "vo": 4}, False),
    (1, 64, 4, 1, 0, {"tp": 64, "tc": 64, "block": 256, "stages": 2, "vo": 4}, True),  # rows of one vector, K 1
    (2, 64, 2, 2, 0, {"tp": 64, "tc": 64, "block": 128, "stages": 5, "vo": 4}, False),  # rows of 1
    (2, 64, 9, 3, 1, {"tp": 128, "tc": 64, "block": 256, "stages": 6, "cfirst": True, "vo": 4}, False),
]


@pytest.mark.parametrize("n,c,l_in,k,pad,p,bias", LAYOUTS)
def test_the_model_of_the_kernel_computes_the_convolution(n, c, l_in, k, pad, p, bias):
    x, w, b = random_conv(n, c, l_in, k, bias, seed=l_in)
    flat, stores = lines_model(x, w, b, pad, {"strategy": "lines", **p})
    assert not np.isnan(flat).any(), "an output never written"
    want = reference(x, w, b, pad)
    np.testing.assert_allclose(flat.reshape(want.shape), want, rtol=1e-12, atol=1e-12)
    assert all(s % p["vo"] == 0 for s in stores)
    assert stores or want.shape[2] < 2 * p["vo"]  # rows of 2 VO or more hold a whole vector


@pytest.mark.parametrize("vo", [8, 4])
def test_most_outputs_go_out_as_whole_vectors(vo):
    """Only a row's first and last vectors may be partial: at Qwen's rows of 2051 (scaled down to 64 channels) at
    least (2051 - 2 (VO - 1)) / 2051 of the outputs are stored VO at a time."""
    x, w, b = random_conv(1, 64, 2048, 4, False)
    flat, stores = lines_model(x, w, b, 3, {"strategy": "lines", **conv_lines.defaults(None), "vo": vo})
    assert vo * len(stores) >= flat.size * (2051 - 2 * (vo - 1)) / 2051


@pytest.mark.parametrize("vo", [8, 4])
def test_the_items_shared_loads_meet_no_bank_conflict(vo):
    """Eight lanes on eight consecutive groups of outputs (a quarter warp's 16-byte loads) read eight different
    chunk places of their line for every line of their item (up to K = 8) and every chunk, and eight consecutive
    threads copying one window line write eight different places."""
    for cpr in (8, 16):
        for kk in range(cpr):
            for i in range(2 * vo + conv_lines.MAX_K - 2):
                for g0 in range(0, 64, 8):
                    places = {(kk ^ (((vo * g + i) // vo) & 7)) % 8 for g in range(g0, g0 + 8)}
                    assert len(places) == 8
        for r in range(64):
            for k0 in range(0, cpr, 8):
                assert len({(k ^ ((r // vo) & 7)) % 8 for k in range(k0, k0 + 8)}) == 8


def test_qwens_conv_takes_lines_and_compiles():
    card = tc.causal_conv1d(8192, 2048)
    root = conv.root_params(card)
    assert root == {"strategy": "lines", "tp": 128, "tc": 64, "block": 256, "stages": 3, "vo": 8}
    assert conv.seeds(card)[1]["strategy"] == "bands"  # the previous root stays a seed
    acts = dict(conv.actions(card, root))
    assert acts["strategy lines -> bands"]["strategy"] == "bands"
    assert "strategy bands -> lines" in dict(conv.actions(card, conv.defaults(card, "bands")))
    assert_valid_and_compile([(card, root)] + [(card, q) for label, q in acts.items() if q["strategy"] == "lines"])
    cand = conv.generate(card, root)
    assert cand.launches[0].grid[0] == "num_sms * 2"  # resident blocks: two an SM hold the 18 lines' registers
    four = acts["vo 8 -> 4"]
    assert four == {**root, "vo": 4}
    assert conv.generate(card, four).launches[0].grid[0] == "num_sms * 3"  # its 10 lines: three an SM


@pytest.mark.parametrize("card", [
    tc.causal_conv1d(96, 37, k=4, dtype="float32"),  # 4-byte elements
    tc.causal_conv1d(96, 37, k=4, dtype="bfloat16"),  # 96 channels: no whole tiles of 64
    tc.causal_conv1d(64, 37, k=9, dtype="bfloat16"),  # more than MAX_K taps
    tc.causal_conv1d(64, 37, k=4, dtype="bfloat16", channels_fast=False),  # positions-fast input
])
def test_lines_refuses_what_it_cannot_run(card):
    assert not conv.valid(card, conv.defaults(card, "lines"))
    assert conv.root_params(card)["strategy"] != "lines"


def test_knobs_outside_their_values_are_refused():
    card = tc.causal_conv1d(128, 131)
    base = conv.defaults(card, "lines")
    assert conv.valid(card, base)
    for bad in ({"tp": 32}, {"tp": 56}, {"tp": 132}, {"tp": 264}, {"tc": 32}, {"block": 512}, {"stages": 1},
                {"stages": 7}, {"cfirst": False}, {"vo": 2}, {"vo": 16}, {"vec": 8}):
        assert not conv.valid(card, {**base, **bad}), bad
    assert not conv.valid(card, {k: v for k, v in base.items() if k != "vo"})


def test_the_balanced_band_loads_the_busiest_block_least():
    """Qwen's conv: 17 bands of 128 make 2176 tiles, nine for some of the 264 blocks; 208 makes 10 bands, 1280 tiles,
    five at most; every other valid band loads the busiest block at least as much. The search reaches it in one
    action; a layout whose band is already the best gets no such action."""
    card = tc.causal_conv1d(8192, 2048)
    root = conv.root_params(card)
    assert conv_lines.tiles(card, root) == 2176 and conv_lines.tiles(card, {**root, "tp": 208}) == 1280
    tp = conv_lines.balanced_tp(card, root)
    assert tp == 208
    load = conv_lines.tile_load(card, {**root, "tp": tp})
    assert load == 5 * (218 + 208) and load < conv_lines.tile_load(card, root) == 9 * (138 + 128)
    assert all(conv_lines.tile_load(card, {**root, "tp": t}) >= load for t in conv_lines.TP_RANGE)
    assert dict(conv.actions(card, root))["tp 128 -> 208 (bands balanced over the grid)"] == {**root, "tp": 208}
    small = tc.causal_conv1d(64, 100)  # fewer tiles than blocks: the narrowest band spreads them over the most
    base = conv.defaults(small, "lines")
    assert conv_lines.balanced_tp(small, base) == 64
    narrow = {**base, "tp": 64}
    assert not any("balanced" in label for label, _ in conv.actions(small, narrow))
