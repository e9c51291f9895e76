"""The ``flat`` depthwise conv1d (Note [a block's channel rows as one flat run] in templates/conv_flat.py): a numpy
model of the kernel's index arithmetic (the shared run with its zeros, the phase, rows that end inside a vector, the
run's ends) checked against a float64 convolution on the CPU, and what the template accepts. The kernel itself is
verified on the GPU (test_templates_gpu.py)."""
from __future__ import annotations

import numpy as np
import pytest

import template_cards as tc
from forge_backend.search.templates import conv


def flat_model(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pad: int, g: int, vec: int,
               base: int = 0) -> tuple[np.ndarray, list[int]]:
    """The kernel's steps over every block, in numpy: x [N, C, L], w [C, K]; the output lies contiguous from flat
    element ``base`` (its phase). Returns the output and the flat starts of every vector store, written once each."""
    n_, c_, l_in = x.shape
    k = w.shape[1]
    l_out = l_in + 2 * pad - k + 1
    reg = g * l_out
    zs_len = -(-(reg + k - 1 + 3 * vec) // vec) * vec
    flat = np.full(base + n_ * c_ * l_out, np.nan)
    stores: list[int] = []
    for n in range(n_):
        for c0 in range(0, c_, g):
            f0 = base + (n * c_ + c0) * l_out
            ph = f0 % vec
            zs = np.full(zs_len, np.nan)
            for i in range(g):  # zeros, then the scattered loads, each at its place in the run
                for j in range(l_out - l_in):
                    zs[ph + i * l_out + (j if j < pad else l_in + j)] = 0.0
                zs[ph + i * l_out + pad: ph + i * l_out + pad + l_in] = x[n, c0 + i]
            zs[:ph] = 0.0
            zs[ph + reg:] = 0.0
            assert not np.isnan(zs).any(), "a place of the run that nothing wrote"
            ws = np.concatenate([w[c0:c0 + g], (b[c0:c0 + g] if b is not None else np.zeros(g))[:, None]], axis=1)
            for t in range(-(-(ph + reg) // vec)):
                v = zs[t * vec: t * vec + 2 * vec]
                f = t * vec - ph
                ca = f // l_out if f >= 0 else -1  # element 0's row; the kernel's two rows a vector
                split = (ca + 1) * l_out - f
                wk, wn = ws[max(ca, 0)], ws[min(ca + 1, g - 1)]
                out = np.empty(vec)
                for u in range(vec):
                    wc = wk if u < split else wn
                    out[u] = wc[k] + sum(wc[q] * v[u + q] for q in range(k))
                start = f0 - ph + t * vec
                for u in range(vec):
                    if 0 <= f + u < reg:
                        assert np.isnan(flat[start + u]), "an output written twice"
                        flat[start + u] = out[u]
                if f >= 0 and f + vec <= reg:
                    stores.append(start)
    return flat[base:].reshape(n_, c_, l_out), stores


def random_conv(n: int, c: int, l_in: int, k: int, bias: bool,
                seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A random input [N, C, L_in], weight [C, K] and, if asked, bias [C]."""
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((n, c, l_in)), rng.standard_normal((c, k))
    return x, w, (rng.standard_normal(c) if bias else None)


def assert_valid_and_compile(layouts: list) -> None:
    """Every (card, params) is valid and compiles for sm_90 through NVRTC."""
    from forge_backend.runtime.nvrtc import compile_candidate

    for card, p in layouts:
        assert conv.valid(card, p), p
        assert compile_candidate(conv.generate(card, p), "sm_90").cubin


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pad: int) -> np.ndarray:
    n_, c_, l_in = x.shape
    k = w.shape[1]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    l_out = l_in + 2 * pad - k + 1
    y = sum(w[None, :, q, None] * xp[:, :, q:q + l_out] for q in range(k))
    return y + (b[None, :, None] if b is not None else 0.0)


@pytest.mark.parametrize("n,c,l_in,k,pad,g,vec,bias,base", [
    (1, 32, 29, 4, 3, 16, 8, False, 0),     # Qwen's shape of rows, smaller: odd rows, the run's sectors whole
    (2, 24, 37, 4, 3, 8, 8, True, 0),       # two samples, runs at every phase, a bias
    (1, 16, 13, 3, 2, 8, 4, False, 0),      # fp32 vectors, K 3
    (1, 16, 20, 3, 4, 8, 4, True, 0),       # padding past K - 1: zeros after each row's inputs too
    (3, 16, 9, 5, 4, 16, 8, False, 3),      # an output starting mid-vector, rows shorter than two vectors
    (2, 8, 7, 2, 1, 8, 8, True, 5),         # rows exactly a vector long, runs at odd phases
])
def test_flat_model_matches_a_float64_convolution(n, c, l_in, k, pad, g, vec, bias, base):
    x, w, b = random_conv(n, c, l_in, k, bias)
    got, stores = flat_model(x, w, b, pad, g, vec, base)
    np.testing.assert_allclose(got, reference(x, w, b, pad), rtol=1e-12, atol=1e-12)
    assert all(s % vec == 0 for s in stores)  # every whole vector is an aligned store


def test_flat_model_stores_whole_vectors_where_the_runs_allow():
    """At Qwen's row length a run of 16 rows is a whole number of 32-byte sectors: every store is a whole vector."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 32, 61)), rng.standard_normal((32, 4))  # rows of 64: 16 of them, whole sectors
    _, stores = flat_model(x, w, None, 3, 16, 8)
    assert len(stores) * 8 == 32 * 64


def test_flat_compiles_for_sm90_at_every_knob():
    """Every group, block and loads-per-thread setting at Qwen's conv, and the GPU tests' odd layouts, through NVRTC."""
    qwen = tc.causal_conv1d(8192, 2048)
    layouts = [(qwen, {"strategy": "flat", "g": g, "block": b, "ld": ld, "vec": 8})
               for g in (8, 16, 32) for b in (128, 256, 512) for ld in (4, 8, 16)]
    layouts += [(tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True),
                 {"strategy": "flat", "g": 16, "block": 256, "ld": 8, "vec": 4}),
                (tc.causal_conv1d(40, 73, k=3, dtype="float16", bias=True, batch=3),
                 {"strategy": "flat", "g": 8, "block": 512, "ld": 16, "vec": 8})]
    assert_valid_and_compile(layouts)


def test_flat_is_valid_where_its_note_says():
    qwen = tc.causal_conv1d(8192, 2048)
    p = conv.defaults(qwen, "flat")
    assert conv.valid(qwen, p) and p == {"strategy": "flat", "g": 16, "block": 512, "ld": 8, "vec": 8}
    assert conv.seeds(qwen)[2] == p  # after the lines' root and the bands (Note [channel rows over a band of positions])
    cand = conv.generate(qwen, p)
    [launch] = cand.launches
    assert launch.grid == (512, 1, 1) and launch.smem == conv._flat_smem(qwen, p) and cand.requires_align == 16
    assert conv._flat_min_blocks(qwen, p) == 2  # two blocks of 66 KB an SM: 64 registers a thread
    assert conv._flat_min_blocks(qwen, {**p, "block": 256}) == 3  # three by shared memory
    assert not conv.valid(qwen, {**p, "vec": 4})  # 16-byte loads only
    assert not conv.valid(qwen, {**p, "g": 24})
    assert not conv.valid(qwen, {**p, "extra": 1})
    assert not conv.valid(tc.causal_conv1d(8192, 2048, k=5, padding=2), p)  # the kernel reaches past the zeros
    assert not conv.valid(tc.causal_conv1d(96, 37, channels_fast=False), p)  # positions-fast input
    assert not conv.valid(tc.causal_conv1d(8192, 65536), p)  # a run past shared memory
    assert not conv.valid(tc.causal_conv1d(40, 30), p)  # 40 channels: no whole groups of 16
    assert not conv.valid(tc.causal_conv1d(32, 4, k=2, padding=1), p)  # rows of 4: a vector would span three
    assert conv.valid(tc.causal_conv1d(40, 30), {**p, "g": 8})
    acts = dict(conv.actions(qwen, p))
    pairs = conv.seeds(qwen)[3]  # Note [two positions per lane], after the root (lines), the bands and the flat runs
    assert acts["g 16 -> 8"]["g"] == 8 and acts["strategy flat -> rows"] == pairs and pairs["lp"] == 2
    assert dict(conv.actions(qwen, pairs))["strategy rows -> flat"] == p
    # Note [the next run's loads in flight]: a knob of its own, every load of a run at once instead of LD
    piped = acts["pipe False -> True"]
    assert piped == {"strategy": "flat", "g": 16, "block": 512, "pipe": True, "vec": 8} and conv.valid(qwen, piped)
    assert conv._flat_loads(qwen, piped) == 8 and conv._flat_grid(qwen, piped) == 132  # one block an SM walks runs
    assert dict(conv.actions(qwen, piped))["pipe True -> False"] == p
    assert not conv.valid(qwen, {**piped, "ld": 8}) and not conv.valid(qwen, {**piped, "g": 32})  # 2 runs: 263 KB
