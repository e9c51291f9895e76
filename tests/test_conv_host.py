"""The depthwise conv1d's generated CUDA sources, run on the CPU by tests/host_emulator.py (every thread an OS thread,
``cp.async`` copies landing as late, or as early, as PTX allows) under the project's own verifier (verify.py: fresh
inputs of five distributions, poisoned outputs, guard bands, inputs unchanged, a repeat run that agrees, a changed
input followed), against PyTorch's float64 convolution: their index arithmetic, their pipelines' copy groups, their
aligned vector stores, nothing written outside the output. Above all the ``lines`` strategy, which no GPU has run
yet (the numpy model in test_conv_lines.py re-states that kernel; this runs its own text); then every seed of the
family. The GPU verifier cases are in test_templates_gpu.py."""
from __future__ import annotations

import pytest
import torch

import host_emulator
import template_cards as tc
from forge_backend.search.templates import conv

pytestmark = pytest.mark.skipif(host_emulator.compiler() is None, reason="no host C++ compiler")


def check(card, p: dict, tmp_path, **emulator) -> None:
    """``p`` (a whole params dict) of ``card`` passes the verifier, run on the host."""
    assert conv.valid(card, p), p
    rep = host_emulator.verify_on_host(card, conv.generate(card, p), tmp_path, **emulator)
    assert rep.ok, (p, rep.failed_check, rep.message)


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


def _id(v) -> str:
    if isinstance(v, dict):
        return "-".join(f"{k}{v[k]}" for k in v)
    return "x".join(map(str, v.inputs[0].spec.shape)) + f"-{v.inputs[0].spec.dtype}"


@pytest.mark.parametrize("card,p", CASES, ids=_id)
def test_lines_passes_the_verifier_on_the_host(card, p, tmp_path):
    check(card, {"strategy": "lines", **p}, tmp_path)


@pytest.mark.parametrize("vo", [8, 4])
def test_copies_that_land_as_soon_as_issued_give_the_same_outputs(vo, tmp_path):
    """The other end of PTX's window for a copy: landing at issue would show a slot refilled while it is read."""
    check(tc.causal_conv1d(64, 300, k=4), {"strategy": "lines", "tp": 64, "tc": 64, "block": 256, "stages": 2,
                                           "vo": vo}, tmp_path, early_copies=True)


def test_a_grid_of_one_block_walks_every_tile(tmp_path):
    check(tc.causal_conv1d(128, 200, k=4, batch=2), {"strategy": "lines", "tp": 64, "tc": 64, "block": 128,
                                                     "stages": 3, "vo": 4}, tmp_path, num_sms=1)


SEED_CARDS = [  # each layout's seeds: the strategies a search starts from
    tc.causal_conv1d(64, 300, k=4),  # Qwen's layout, smaller
    tc.causal_conv1d(96, 37, k=4, dtype="float16", bias=True, batch=2),  # no whole tiles of 64 channels
    tc.causal_conv1d(64, 77, k=3, dtype="float32"),  # 4-byte elements
    tc.causal_conv1d(64, 77, k=4, channels_fast=False),  # a contiguous input
]


@pytest.mark.parametrize("card,p", [(card, p) for card in SEED_CARDS for p in conv.seeds(card)],
                         ids=lambda v: v["strategy"] if isinstance(v, dict) else _id(v))
def test_every_seed_passes_the_verifier_on_the_host(card, p, tmp_path):
    check(card, p, tmp_path)


@pytest.mark.parametrize("vo", [8, 4])
def test_lines_at_qwens_own_size_and_grid_passes_one_trial(vo, tmp_path):
    """Qwen 3.5's conv itself ([1, 8192, 2048] bf16 seen channels-fast) with the H200's grid (132 SMs): one trial of
    the verifier (a run, its repeat in the other thread order, a changed input followed)."""
    from forge_backend.verify import prepare_trials

    card = tc.causal_conv1d(8192, 2048)
    p = {**conv.root_params(card), "vo": vo}
    trials = prepare_trials(card, torch.device("cpu"), ("normal",))
    rep = host_emulator.verify_on_host(card, conv.generate(card, p), tmp_path, trials, num_sms=132)
    assert rep.ok, (p, rep.failed_check, rep.message)
