"""GPU: prewarm on a host with two GPUs runs one real search worker per GPU, at the same time, and every finished
search lands in the cache. Skips on a one-GPU host (the scheduling itself is CPU-tested in test_cli.py)."""
import json
import os
from pathlib import Path

import pytest
import torch

import template_cards as tc
from forge_backend.config import KforgeConfig
from forge_backend.prewarm import plan, run
from forge_backend.store.local import LocalStore

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (the nvidia-h200-x2 kind)")]


def test_two_gpus_search_at_once(tmp_path):
    cards = [tc.softmax((64, 262144), "bfloat16"), tc.group_norm(1, 512, 128, 128, dtype="bfloat16", used=(0,)),
             tc.layer_norm((4096, 2048), (2048,), "bfloat16", used=(0,)), tc.softmax((8192, 1024), "float32")]
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path)}, env={})
    store = LocalStore(tmp_path)
    items = plan(cards, {c.key: 1.0 for c in cards}, cfg, store)
    assert [i.status for i in items] == ["search"] * 4
    results = run(items, cfg, iterations=12, seconds_per_op=60, gpus=2)
    assert len(results) == 4 and {r.gpu for r in results} == {0, 1}
    spans = sorted((r.started, r.finished, r.gpu) for r in results)
    overlaps = sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1] and a[2] != b[2])
    assert overlaps >= 1, spans  # a search on one GPU ran while the other GPU's search was in flight
    for r in results:
        assert r.decision in ("kernel", "pytorch") and store.get(r.card.key) is not None
    if os.environ.get("TEST_ARTIFACTS_DIR"):
        t0 = min(r.started for r in results)
        Path(os.environ["TEST_ARTIFACTS_DIR"], "prewarm_two_gpus.json").write_text(json.dumps([
            {"op": r.card.op, "gpu": r.gpu, "start_s": round(r.started - t0, 2), "end_s": round(r.finished - t0, 2),
             "decision": r.decision, "speedup": r.speedup, "iterations": r.iterations} for r in results], indent=1))
