"""The ``bands`` depthwise conv1d (Note [channel rows over a band of positions] in templates/conv_bands.py): a numpy
model of the kernel's index arithmetic (the window of lines, each row's phase and place in shared memory, the bands'
vectors, the rows' partial ends) checked against a float64 convolution on the CPU, the fill's banks, and what the
template accepts. The kernel itself is verified on the GPU (test_templates_gpu.py)."""
from __future__ import annotations

import collections

import numpy as np
import pytest

import template_cards as tc
from forge_backend.search.templates import conv, conv_bands
from test_conv_flat import assert_valid_and_compile, random_conv, reference


def bands_model(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pad: int, g: int, vec: int,
                lt: int, join: bool = False) -> tuple[np.ndarray, list[int]]:
    """The kernel's steps over every block, in numpy, with its constants (NW, RS, row_base, phase) and loops:
    x [N, C, L], w [C, K]. Returns the output and the flat starts of every whole-vector store. With ``join``
    (Note [a row's first vector whole]) a row's first band also computes the row before's last outputs of its first
    vector from that row's last 2 VEC inputs, and a row but the output's last skips the vector that holds its end."""
    n_, c_, l_in = x.shape
    k = w.shape[1]
    l_out = l_in + 2 * pad - k + 1
    dtype, isz = {8: ("bfloat16", 2), 4: ("float32", 4)}[vec]
    card = tc.causal_conv1d(c_, l_in, k=k, dtype=dtype, bias=b is not None, padding=pad, batch=n_)
    p = {"strategy": "bands", "g": g, "lt": lt, "block": 256, "ld": 4, "vec": vec} | ({"join": True} if join else {})
    rs, nw = conv_bands.row_stride(p), conv_bands.window(card, p)
    ws_elems = -(-(2 if join else 1) * g * (k + 1) * 4 // 16) * 16 // isz  # the weights before the rows
    flat_x = x.reshape(n_ * c_, l_in)  # rows of the whole input, as the output's rows follow each other
    flat_w = np.tile(w, (n_, 1))
    flat_b = np.tile(b, n_) if b is not None else np.zeros(n_ * c_)
    nb = -(-(l_out + vec - 1) // lt)
    nvg, nvr = g // vec, lt // vec
    flat = np.full(n_ * c_ * l_out, np.nan)
    stores: list[int] = []

    def phase(i: int) -> int:
        return (i % vec) * l_out % vec

    def row_base(i: int) -> int:
        return i * rs + (i // vec) * vec

    for n in range(n_):
        for c0 in range(0, c_, g):
            for t in range(nb):
                zs = np.full(conv_bands.smem_bytes(card, p) // isz - ws_elems, np.nan)  # the rows, after the weights
                owner = np.full(zs.shape, -1)
                for wp in range(nw):  # window line wp: input position t * LT - (VEC - 1) - PAD + wp
                    pos = t * lt - (vec - 1) - pad + wp
                    for vv in range(nvg):
                        line = x[n, c0 + vv * vec: c0 + (vv + 1) * vec, pos] if 0 <= pos < l_in else np.zeros(vec)
                        for v in range(vec):
                            at = row_base(vv * vec) + wp + 1 + v * rs + phase(v)
                            assert at < row_base(vv * vec + v) + rs, "a line past its row"
                            assert owner[at] in (-1, vv * vec + v), "two rows share a place"
                            owner[at] = vv * vec + v
                            zs[at] = line[v]
                for e in range(g * nvr):
                    i, j = divmod(e, nvr)
                    l0 = t * lt - phase(i) + j * vec
                    if l0 >= l_out:
                        continue
                    r = n * c_ + c0 + i  # the row in the whole output
                    if join and l0 + vec > l_out and r < n_ * c_ - 1:
                        continue  # the next row's first band stores this vector
                    zr = zs[row_base(i) + (j + 1) * vec: row_base(i) + (j + 3) * vec]
                    out = [b_ + sum(w[c0 + i, q] * zr[u + q] for q in range(k))
                           for u, b_ in zip(range(vec), [b[c0 + i] if b is not None else 0.0] * vec)]
                    mine = [0 <= l0 + u < l_out for u in range(vec)]
                    if join and l0 < 0:  # the row before's last outputs, from its last 2 VEC inputs
                        pos = [l_out - vec - pad + wp for wp in range(2 * vec)]
                        tz = [flat_x[r - 1, q] if 0 <= q < l_in else 0.0 for q in pos]
                        for u in range(-l0):
                            out[u] = flat_b[r - 1] + sum(flat_w[r - 1, q] * tz[vec + l0 + u + q] for q in range(k))
                            mine[u] = True
                    start = r * l_out + l0
                    for u in range(vec):
                        if mine[u]:
                            assert np.isnan(flat[start + u]), "an output written twice"
                            flat[start + u] = out[u]
                    if all(mine):
                        stores.append(start)
    return flat.reshape(n_, c_, l_out), stores


@pytest.mark.parametrize("n,c,l_in,k,pad,g,vec,lt,bias", [
    (1, 32, 61, 4, 3, 16, 8, 32, False),    # rows of 64 outputs: the last band holds a phase's few
    (2, 24, 37, 4, 3, 8, 8, 16, True),      # two samples, rows at every phase, a bias
    (1, 16, 13, 3, 2, 8, 4, 8, False),      # fp32 vectors, K 3
    (1, 16, 20, 3, 4, 8, 4, 16, True),      # padding past K - 1
    (3, 16, 9, 5, 4, 16, 8, 64, False),     # one band, rows shorter than two vectors
    (2, 8, 3, 2, 0, 8, 8, 8, True),         # rows shorter than a vector: three rows share one
    (1, 32, 40, 9, 8, 32, 8, 16, False),    # K = VEC + 1: the output vector's inputs reach the next one's end
    (1, 128, 21, 4, 3, 128, 8, 16, False),  # 16 groups of rows: their shifts must not overlap rows
])
@pytest.mark.parametrize("join", [False, True])
def test_bands_model_matches_a_float64_convolution(n, c, l_in, k, pad, g, vec, lt, bias, join):
    x, w, b = random_conv(n, c, l_in, k, bias)
    if join and l_in + 2 * pad - k + 1 < vec:
        pytest.skip("rows shorter than a vector: join is not valid there")
    got, stores = bands_model(x, w, b, pad, g, vec, lt, join)
    np.testing.assert_allclose(got, reference(x, w, b, pad), rtol=1e-12, atol=1e-12)
    assert all(s % vec == 0 for s in stores)  # every whole vector is an aligned store


def test_bands_model_stores_whole_vectors_but_at_row_ends():
    """Rows of 67 outputs: each row's only partial vectors are the ones that hold its start or its end."""
    x, w, _ = random_conv(1, 16, 64, 4, False, seed=1)
    _, stores = bands_model(x, w, None, 3, 16, 8, 32)
    ph = [(c * 67) % 8 for c in range(16)]
    assert len(stores) == sum((67 - (8 - p) % 8) // 8 for p in ph)
    # Note [a row's first vector whole]: every vector whole (C is a multiple of VEC, so the output ends on a vector's
    # end)
    _, joined = bands_model(x, w, None, 3, 16, 8, 32, join=True)
    assert sorted(joined) == list(range(0, 16 * 67, 8))


@pytest.mark.parametrize("g,vec,isz", [(64, 8, 2), (32, 4, 4)])
def test_bands_fill_is_free_of_bank_conflicts_at_a_line_a_position(g, vec, isz):
    """Note [channel rows over a band of positions]: the lanes of each scatter store fall in different banks (or
    share a 4-byte word) when a position's G channels are one 128-byte line; without the rows' shift, 8-way (bf16)
    or 4-way (fp32)."""
    p = {"g": g, "lt": 256, "vec": vec}
    rs, nvg = conv_bands.row_stride(p), g // vec

    def worst(shift: bool) -> int:
        most = 0
        for warp in range(8):
            for v in range(vec):
                banks: dict[int, set[int]] = collections.defaultdict(set)
                for lane in range(32):
                    e = warp * 32 + lane
                    wp, vv = divmod(e, nvg)
                    i = vv * vec + v
                    at = (i * rs + ((i // vec) * vec if shift else 0) + wp + 1 + (v * 2051) % vec) * isz
                    banks[at // 4 % 32].add(at // 4)
                most = max(most, max(len(s) for s in banks.values()))
        return most

    assert worst(True) == 1 and worst(False) == {2: 8, 4: 4}[isz]


def test_bands_compiles_for_sm90_at_every_knob():
    qwen = tc.causal_conv1d(8192, 2048)
    layouts = [(qwen, {"strategy": "bands", "g": g, "lt": lt, "block": blk, "ld": ld, "vec": 8})
               for g in (32, 64, 128) for lt in (128, 256, 512) for blk in (256, 512) for ld in (4, 8)]
    layouts += [(tc.causal_conv1d(96, 37, k=4, dtype="float32", bias=True),
                 {"strategy": "bands", "g": 32, "lt": 64, "block": 128, "ld": 4, "vec": 4}),
                (tc.causal_conv1d(48, 73, k=3, dtype="float16", bias=True, batch=3),
                 {"strategy": "bands", "g": 16, "lt": 128, "block": 256, "ld": 16, "vec": 8}),
                (tc.causal_conv1d(48, 61, k=5, dtype="float32", padding=6, batch=2),  # Note [a row's first vector whole]
                 {"strategy": "bands", "g": 16, "lt": 128, "block": 256, "ld": 2, "vec": 4, "join": True})]
    layouts += [(qwen, {**p, "join": True}) for _, p in layouts[:4]]
    assert_valid_and_compile(layouts)


def test_bands_is_valid_where_its_note_says():
    qwen = tc.causal_conv1d(8192, 2048)
    p = conv.defaults(qwen, "bands")
    assert p == {"strategy": "bands", "g": 32, "lt": 256, "block": 256, "ld": 8, "vec": 8, "bfirst": True}
    assert conv.valid(qwen, p) and conv.root_params(qwen) == conv.defaults(qwen, "lines")  # the root since session 51
    assert conv.seeds(qwen)[1:3] == [p, conv.defaults(qwen, "flat")]  # the first seed after it
    assert conv.root_params(tc.causal_conv1d(96, 37, dtype="bfloat16")) == {**p, "g": 32}  # no whole tile of 64
    cand = conv.generate(qwen, p)
    [launch] = cand.launches
    assert launch.grid == (9, 256, 1) and launch.smem == conv_bands.smem_bytes(qwen, p) and cand.requires_align == 16
    assert conv.generate(qwen, {k: v for k, v in p.items() if k != "bfirst"}).launches[0].grid == (256, 9, 1)
    assert conv_bands.min_blocks(qwen, p) == 4  # 64 registers a thread
    assert conv.root_params(tc.causal_conv1d(96, 37, dtype="float32"))["g"] == 16  # 64 bytes of fp32 channels
    assert conv.valid(tc.causal_conv1d(8192, 2048, k=5, padding=2), p)  # no padding rule: rows are apart
    assert conv.valid(tc.causal_conv1d(32, 4, k=2, padding=1), p)  # rows shorter than a vector
    assert not conv.valid(qwen, {**p, "vec": 4})  # 16-byte loads only
    assert not conv.valid(qwen, {**p, "bfirst": False})  # off is no key
    assert conv.valid(qwen, {**p, "join": True}) and not conv.valid(qwen, {**p, "join": False})
    assert not conv.valid(tc.causal_conv1d(32, 4, k=2, padding=1), {**p, "join": True})  # rows of 5: under a vector
    assert dict(conv.actions(qwen, p))["join False -> True"] == {**p, "join": True}
    assert not conv.valid(qwen, {**p, "lt": 96})
    assert not conv.valid(qwen, {**p, "extra": 1})
    assert not conv.valid(tc.causal_conv1d(8192, 2048, k=10, padding=9), p)  # K > VEC + 1
    assert not conv.valid(tc.causal_conv1d(96, 37, channels_fast=False), p)  # positions-fast input
    assert not conv.valid(tc.causal_conv1d(40, 30), p)  # 40 channels: no whole groups of 32
    acts = dict(conv.actions(qwen, p))
    assert acts["lt 256 -> 512"]["lt"] == 512 and acts["bfirst True -> False"] == {k: v for k, v in p.items()
                                                                                   if k != "bfirst"}
    assert acts["strategy bands -> flat"] == conv.defaults(qwen, "flat")
    assert dict(conv.actions(qwen, conv.defaults(qwen, "flat")))["strategy flat -> bands"] == p
