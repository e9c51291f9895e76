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
    tp, tcs = p["tp"], p["tc"]
    cpr, g_, nr = tcs // 8, tp // 8, 14 + k
    wrows, hb, nb, nct = conv_lines.window_rows(card, p), conv_lines.halo(card), conv_lines.bands(card, p), c_ // tcs
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
                        st[r * cpr + (kk ^ ((r >> 3) & 7))] = x[n, c0 + 8 * kk:c0 + 8 * kk + 8, q]
            for it in range(cpr * g_):
                g, kk = it % g_, it // g_
                lines = [st[(8 * g + i) * cpr + (kk ^ (((8 * g + i) >> 3) & 7))] for i in range(nr)]
                for q in range(8):
                    ph = q * l_out % 8
                    ci = 8 * kk + q
                    c = c0 + ci
                    assert (n * c_ + c) * l_out % 8 == ph  # the phase is the chunk's channel's
                    inp = [lines[7 - ph + j][q] for j in range(7 + k)]
                    o = [(b[c] if b is not None else 0.0) + sum(w[c, j] * inp[i + j] for j in range(k))
                         for i in range(8)]
                    t0 = band * tp - ph + 8 * g
                    base = (n * c_ + c) * l_out + t0
                    if t0 >= 0 and t0 + 8 <= l_out:
                        assert base % 8 == 0
                        assert np.isnan(flat[base:base + 8]).all(), "an output written twice"
                        flat[base:base + 8] = o
                        stores.append(base)
                    elif t0 < l_out:
                        for i in range(8):
                            if 0 <= t0 + i < l_out:
                                assert np.isnan(flat[base + i]), "an output written twice"
                                flat[base + i] = o[i]
    return flat, stores


LAYOUTS = [
    (1, 64, 300, 4, 3, {"tp": 128, "tc": 64, "block": 256, "stages": 3}, False),  # Qwen's rows, smaller: L_out 303
    (2, 128, 131, 4, 3, {"tp": 64, "tc": 64, "block": 256, "stages": 4}, True),  # samples follow each other
    (1, 128, 77, 7, 6, {"tp": 128, "tc": 128, "block": 128, "stages": 2, "cfirst": True}, True),
    (3, 64, 61, 8, 6, {"tp": 64, "tc": 64, "block": 256, "stages": 3}, False),
    (1, 64, 99, 5, 2, {"tp": 256, "tc": 64, "block": 256, "stages": 5}, True),
    (1, 64, 5, 2, 0, {"tp": 64, "tc": 64, "block": 128, "stages": 2}, False),  # rows of 4: shorter than a vector
    (2, 64, 3, 4, 3, {"tp": 64, "tc": 64, "block": 256, "stages": 6, "cfirst": True}, False),
]


@pytest.mark.parametrize("n,c,l_in,k,pad,p,bias", LAYOUTS)
def test_the_model_of_the_kernel_computes_the_convolution(n, c, l_in, k, pad, p, bias):
    x, w, b = random_conv(n, c, l_in, k, bias, seed=l_in)
    flat, stores = lines_model(x, w, b, pad, {"strategy": "lines", **p})
    assert not np.isnan(flat).any(), "an output never written"
    want = reference(x, w, b, pad)
    np.testing.assert_allclose(flat.reshape(want.shape), want, rtol=1e-12, atol=1e-12)
    assert all(s % 8 == 0 for s in stores)
    assert stores or want.shape[2] < 16  # rows of 16 or more hold a whole vector


def test_most_outputs_go_out_as_whole_vectors():
    """Only a row's first and last vectors may be partial: at Qwen's rows of 2051 (scaled down to 64 channels) at
    least (2051 - 14) / 2051 of the outputs are stored 8 at a time."""
    x, w, b = random_conv(1, 64, 2048, 4, False)
    flat, stores = lines_model(x, w, b, 3, {"strategy": "lines", **conv_lines.defaults(None)})
    assert 8 * len(stores) >= flat.size * (2051 - 14) / 2051


def test_the_items_shared_loads_meet_no_bank_conflict():
    """Eight lanes on eight consecutive groups of outputs (a quarter warp's 16-byte loads) read eight different
    chunk places of their line for every line of their item and every chunk."""
    for cpr in (8, 16):
        for kk in range(cpr):
            for i in range(18):
                for g0 in range(0, 64, 8):
                    places = {(kk ^ (((8 * g + i) >> 3) & 7)) % 8 for g in range(g0, g0 + 8)}
                    assert len(places) == 8


def test_qwens_conv_takes_lines_and_compiles():
    card = tc.causal_conv1d(8192, 2048)
    root = conv.root_params(card)
    assert root == {"strategy": "lines", "tp": 128, "tc": 64, "block": 256, "stages": 3}
    assert conv.seeds(card)[1]["strategy"] == "bands"  # the previous root stays a seed
    acts = dict(conv.actions(card, root))
    assert acts["strategy lines -> bands"]["strategy"] == "bands"
    assert "strategy bands -> lines" in dict(conv.actions(card, conv.defaults(card, "bands")))
    assert_valid_and_compile([(card, root)] + [(card, q) for label, q in acts.items() if q["strategy"] == "lines"])
    cand = conv.generate(card, root)
    assert cand.launches[0].grid[0] == "num_sms * 2"  # resident blocks: two an SM hold the 18 lines' registers


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
    for bad in ({"tp": 32}, {"tc": 32}, {"block": 512}, {"stages": 1}, {"stages": 7}, {"cfirst": False},
                {"vec": 8}):
        assert not conv.valid(card, {**base, **bad}), bad
