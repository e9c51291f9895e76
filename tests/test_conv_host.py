"""The depthwise conv1d's generated CUDA sources, run on the CPU by tests/host_emulator.py (every thread an OS thread,
``cp.async`` copies landing as late, or as early, as PTX allows) against a float64 convolution: their index
arithmetic, their pipelines' copy groups, their aligned vector stores, and nothing written outside the output. Above
all the ``lines`` strategy, which no GPU has run yet (the numpy model in test_conv_lines.py re-states that kernel;
this runs its own text); then every seed of the family. The GPU verifier cases are in test_templates_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest

import host_emulator
import template_cards as tc
from forge_backend.search.templates import conv
from forge_backend.search.templates.common import input_spec, output_spec
from forge_backend.signature import TensorSpec

pytestmark = pytest.mark.skipif(host_emulator.compiler() is None, reason="no host C++ compiler")

POISON = {"bfloat16": (0x7FC0, np.uint16), "float16": (0x7E00, np.uint16), "float32": (0x7FC00000, np.uint32)}


def storage(spec: TensorSpec) -> int:
    return 1 + sum((n - 1) * s for n, s in zip(spec.shape, spec.stride))


def random_bits(rng: np.random.Generator, n: int, dtype: str) -> np.ndarray:
    """``n`` random values of ``dtype`` as their bits, with a few edge values among them."""
    v = rng.standard_normal(n).astype(np.float32) * 2
    v[rng.integers(0, n, max(1, n // 50))] = 0.0
    v[rng.integers(0, n, max(1, n // 50))] = -1e-3
    if dtype == "float16":
        return v.astype(np.float16).view(np.uint16)
    if dtype == "float32":
        return v.view(np.uint32)
    return (v.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16: exact


def decode(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float16":
        return bits.view(np.float16).astype(np.float64)
    if dtype == "float32":
        return bits.view(np.float32).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def logical(flat: np.ndarray, spec: TensorSpec) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(flat, spec.shape, [s * flat.itemsize for s in spec.stride])


def run_and_check(card, p: dict, tmp_path, early: bool = False, num_sms: int = 2) -> None:
    """``p`` (a whole params dict, its strategy included) of ``card`` run on the host and checked."""
    rng = np.random.default_rng(sum(card.inputs[0].spec.shape) + len(p))
    dtype = card.inputs[0].spec.dtype
    x, w, b, y = (input_spec(card, "input"), input_spec(card, "weight"), input_spec(card, "bias"),
                  output_spec(card, 0))
    bufs = {"in:input": random_bits(rng, storage(x), dtype), "in:weight": random_bits(rng, storage(w), dtype),
            "out:0": np.full(storage(y), *POISON[dtype])}
    if b is not None:
        bufs["in:bias"] = random_bits(rng, storage(b), dtype)
    assert conv.valid(card, p), p
    run = host_emulator.run_launch(card, conv.generate(card, p), bufs, tmp_path, num_sms=num_sms,
                                   early_copies=early)
    xs = decode(logical(bufs["in:input"], x), dtype)  # [N, C, L_in]
    ws = decode(bufs["in:weight"], dtype).reshape(w.shape[0], w.shape[2])
    pad = card.scalars["padding"][0]
    k, l_out = ws.shape[1], y.shape[2]
    xp = np.pad(xs, ((0, 0), (0, 0), (pad, pad)))
    want = sum(ws[None, :, j, None] * xp[:, :, j:j + l_out] for j in range(k))
    if b is not None:
        want = want + decode(bufs["in:bias"], dtype)[None, :, None]
    got = decode(run.buffers["out:0"], dtype).reshape(y.shape)
    assert not np.isnan(got).any(), f"{int(np.isnan(got).sum())} outputs never written"
    eps = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -20}[dtype]
    bound = eps * np.abs(want) + 1e-6 * np.sum(np.abs(ws)) * np.max(np.abs(xs))
    bad = np.abs(got - want) > bound
    assert not bad.any(), f"{int(bad.sum())} outputs wrong, first at {np.argwhere(bad)[0].tolist()}"


CASES = [  # (card, params): both work items, every knob, batches, biases, fp16, K 1-8, rows under a vector
    (tc.causal_conv1d(64, 300, k=4), {"tp": 128, "tc": 64, "block": 256, "stages": 3, "vo": 8}),
    (tc.causal_conv1d(64, 300, k=4), {"tp": 128, "tc": 64, "block": 256, "stages": 3, "vo": 4}),
    (tc.causal_conv1d(128, 131, k=4, dtype="float16", bias=True, batch=2),
     {"tp": 64, "tc": 128, "block": 128, "stages": 4, "vo": 4, "cfirst": True}),
    (tc.causal_conv1d(128, 77, k=7, bias=True, padding=6),
     {"tp": 128, "tc": 128, "block": 128, "stages": 2, "vo": 8, "cfirst": True}),
    (tc.causal_conv1d(64, 61, k=8, padding=6, batch=3), {"tp": 64, "tc": 64, "block": 256, "stages": 5, "vo": 4}),
    (tc.causal_conv1d(64, 99, k=5, dtype="float16", padding=2), {"tp": 256, "tc": 64, "block": 256, "stages": 6,
                                                                 "vo": 8}),
    (tc.causal_conv1d(64, 5, k=2, padding=0, batch=2), {"tp": 64, "tc": 64, "block": 128, "stages": 2, "vo": 8}),
    (tc.causal_conv1d(64, 2, k=1, padding=0, bias=True), {"tp": 64, "tc": 64, "block": 256, "stages": 3, "vo": 4}),
]


@pytest.mark.parametrize("card,p", CASES, ids=lambda v: "-".join(f"{k}{v[k]}" for k in v) if isinstance(v, dict)
                         else "x".join(map(str, v.inputs[0].spec.shape)) + f"-{v.inputs[0].spec.dtype}")
def test_lines_computes_the_convolution_on_the_host(card, p, tmp_path):
    run_and_check(card, {"strategy": "lines", **p}, tmp_path)


@pytest.mark.parametrize("vo", [8, 4])
def test_copies_that_land_as_soon_as_issued_give_the_same_outputs(vo, tmp_path):
    """The other end of PTX's window for a copy: landing at issue would show a slot refilled while it is read."""
    run_and_check(tc.causal_conv1d(64, 300, k=4), {"strategy": "lines", "tp": 64, "tc": 64, "block": 256,
                                                   "stages": 2, "vo": vo}, tmp_path, early=True)


def test_a_grid_of_one_block_walks_every_tile(tmp_path):
    run_and_check(tc.causal_conv1d(128, 200, k=4, batch=2), {"strategy": "lines", "tp": 64, "tc": 64, "block": 128,
                                                             "stages": 3, "vo": 4}, tmp_path, num_sms=1)


SEED_CARDS = [  # each layout's seeds: the strategies a search starts from
    tc.causal_conv1d(64, 300, k=4),  # Qwen's layout, smaller
    tc.causal_conv1d(96, 37, k=4, dtype="float16", bias=True, batch=2),  # no whole tiles of 64 channels
    tc.causal_conv1d(64, 77, k=3, dtype="float32"),  # 4-byte elements
    tc.causal_conv1d(64, 77, k=4, channels_fast=False),  # a contiguous input
]


@pytest.mark.parametrize("card,p", [(card, p) for card in SEED_CARDS for p in conv.seeds(card)],
                         ids=lambda v: v["strategy"] if isinstance(v, dict)
                         else "x".join(map(str, v.inputs[0].spec.shape)) + f"-{v.inputs[0].spec.dtype}")
def test_every_seed_computes_the_convolution_on_the_host(card, p, tmp_path):
    run_and_check(card, p, tmp_path)
