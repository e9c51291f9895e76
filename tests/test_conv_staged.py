"""A CPU model of the conv1d ``staged`` strategy's index arithmetic (Note [channels in lanes, rows staged for the copy
engine] in templates/conv_staged.py): the funnel's byte permutes and selects, and that every output of the
contiguous output is written exactly once, by a whole staged vector or by its own row's lane, from the right
positions, with every input the window holds."""
from __future__ import annotations

import random

import pytest

import template_cards as tc
from forge_backend.cards import OperatorCard
from forge_backend.search.templates import conv_staged
from forge_backend.search.templates.conv_shared import dims


def _byte_perm(x: int, y: int, s: int) -> int:
    src = (y << 32) | x
    return sum(((src >> (8 * ((s >> (4 * n)) & 0x7))) & 0xFF) << (8 * n) for n in range(4))


def _funnel(p: list[int], a: int) -> list[int]:
    """The kernel's funnel, step by step."""
    sel = 0x5432 if a & 1 else 0x3210
    q = [_byte_perm(p[i], p[i + 1], sel) for i in range(7)]
    r = [q[i + 1] if a & 2 else q[i] for i in range(6)]
    return [r[i + 2] if a & 4 else r[i] for i in range(4)]


def _halves(words: list[int]) -> list[int]:
    return [h for w in words for h in (w & 0xFFFF, w >> 16)]


@pytest.mark.parametrize("a", range(8))
def test_funnel_takes_elements_a_to_a_plus_7(a):
    rng = random.Random(a)
    for _ in range(50):
        p = [rng.getrandbits(32) for _ in range(8)]
        assert _halves(_funnel(p, a)) == _halves(p)[a:a + 8]


def _card(n: int, c: int, l_in: int, k: int, pad: int) -> OperatorCard:
    return tc.causal_conv1d(c, l_in, k=k, padding=pad, batch=n)


def _writes(card: OperatorCard, p: dict) -> dict[int, tuple[int, int]]:
    """Each flat output index the kernel writes -> (row, output position) of the value written there, following the
    kernel's loops: the groups' window positions, the funnel, the staged vectors' bulk ranges and the partial ones."""
    n, c, _, l_out, k, pad = dims(card)
    nv, w = conv_staged.nv(p), conv_staged.window(card, p)
    out: dict[int, tuple[int, int]] = {}

    def put(flat: int, what: tuple[int, int]) -> None:
        assert flat not in out, f"output {flat} written twice"
        out[flat] = what

    for s in range(n):
        for b in range(conv_staged.bands(card, p)):
            q0 = 8 * (b * nv - 1) - pad
            for c0 in range(0, c, conv_staged.TC):
                for ch in range(conv_staged.TC):
                    r = s * c + c0 + ch
                    a = (8 - (r * l_out) % 8) % 8
                    assert (r * l_out + a) % 8 == 0
                    staged = set()
                    for warp in range(p["warps"]):
                        for g in range(1, p["r"] + 1):
                            kk = warp * p["r"] + g - 1
                            # group kk reads window rows 8 (kk + 1) + i: output position 8 (b NV + kk) + e takes
                            # input position q0 + 8 (kk + 1) + e + t, which is that position - PAD + t
                            assert 8 * (kk + 1) + 8 + k - 2 < w
                            assert q0 + 8 * (kk + 1) == 8 * (b * nv + kk) - pad
                            j0 = 8 * (b * nv + kk - 1) + a
                            if j0 >= 0 and j0 + 8 <= l_out:
                                staged.add(kk)
                            else:
                                for e in range(8):
                                    if 0 <= j0 + e < l_out:
                                        put(r * l_out + j0 + e, (r, j0 + e))
                    kf, ke = (1 if b == 0 else 0), min(nv, (l_out - a) // 8 - b * nv + 1)
                    assert staged == set(range(kf, ke))
                    for kk in range(kf, ke):
                        j0 = 8 * (b * nv + kk - 1) + a
                        assert (r * l_out + j0) % 8 == 0  # a whole 16-byte vector
                        for e in range(8):
                            put(r * l_out + j0 + e, (r, j0 + e))
    return out


@pytest.mark.parametrize("n,c,l_in,k,pad,warps,r", [
    (1, 64, 29, 4, 3, 1, 1),
    (1, 128, 61, 4, 3, 2, 3),
    (2, 64, 40, 3, 1, 4, 1),
    (1, 64, 8, 4, 3, 1, 2),
    (2, 128, 100, 9, 4, 2, 2),
    (1, 64, 130, 1, 0, 2, 4),
])
def test_every_output_written_once_from_its_own_row_and_position(n, c, l_in, k, pad, warps, r):
    card = _card(n, c, l_in, k, pad)
    p = {"strategy": "staged", "warps": warps, "r": r, "vec": 8}
    assert conv_staged.valid(card, p)
    l_out = dims(card)[3]
    writes = _writes(card, p)
    assert sorted(writes) == list(range(n * c * l_out))
    assert all(writes[f] == divmod(f, l_out) for f in writes)


def test_valid_refuses_what_the_kernel_cannot_take():
    card = _card(1, 64, 29, 4, 3)
    p = {"strategy": "staged", "warps": 4, "r": 4, "vec": 8}
    assert conv_staged.valid(card, p)
    assert not conv_staged.valid(card, {**p, "warps": 3})
    assert not conv_staged.valid(card, {**p, "r": 0})
    assert not conv_staged.valid(card, {**p, "tl": 64})
    assert not conv_staged.valid(_card(1, 96, 29, 4, 3), p)  # not whole tiles of 64 channels
    assert not conv_staged.valid(_card(1, 64, 29, 10, 3), p)  # a halo over 8
