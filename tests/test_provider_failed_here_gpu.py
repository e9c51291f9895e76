"""GPU: Note [a record that fails here is searched] (runtime/cuda_provider.py) with the real re-verification and
search: a shipped record whose kernel cheats (a planted kernel that leaves stale outputs) fails on this GPU, and the
signature is searched in the worker like a miss."""
from __future__ import annotations

import time

import pytest
import torch
from torch._dynamo.utils import counters

from forge_backend.config import KforgeConfig
from forge_backend.runtime.cuda_provider import CudaProvider
from forge_backend.store import KernelRecord, ShippedStore, TieredStore, make_provenance
from planted import candidate, unary_card

pytestmark = pytest.mark.gpu


def test_a_shipped_kernel_that_fails_here_is_searched_and_the_winner_is_kept_locally(tmp_path):
    card = unary_card("aten.relu.default", 1 << 22)
    cheat = candidate("bad_stale_output")
    shipped = KernelRecord.create(
        card.signature_obj(), card, "kernel", cheat,
        verification={"trials": 5, "checks_passed": 5, "max_abs_err": 0.0, "max_rel_err": 0.0, "tolerance": 0.0},
        timings={"kforge_us": 1.0, "eager_us": 20.0, "floor_us": 1.0, "pct_bw": 99.0, "speedup_vs_eager": 20.0},
        provenance=make_provenance("templates", gpu="another GPU"))
    folder = tmp_path / "shipped"
    folder.mkdir()
    (folder / f"{shipped.key}.json").write_text(shipped.dumps(indent=1))
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "search": "on_miss", "search_iterations": 4},
                            env={})
    provider = CudaProvider(cfg)
    provider.store = TieredStore(provider.local, ShippedStore(folder))
    counters.clear()
    try:
        impl = provider._kernel_for(card, cfg, time.monotonic() + 120)
    finally:
        provider.client.close()
    assert counters["kforge"]["reverify_failed"] == 1 and counters["kforge"]["searches"] == 1
    local = provider.local.get(card.key)
    assert local is not None and local.trusted and local.source == "local" and local.candidate != shipped.candidate
    assert provider.store.get(card.key) == local  # the local tier now answers before the shipped one
    if local.decision == "kernel":
        x = torch.randn(1 << 22, device="cuda")
        (y,) = impl.run([x])
        torch.testing.assert_close(y, torch.relu(x))
    else:
        assert impl is None
