"""GPU: Note [a miss kept for later] (store/queue.py) end to end: a compile with search="queue" runs PyTorch's op and
queues its miss, a prewarm of the queue (the real worker and search) decides it and takes it off the queue, and the
next compile is served from the cache. The search record written as it grows (runtime/live_record.py) is there too,
as `kforge ui` reads it."""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from forge_backend import prewarm as pw
from forge_backend.config import KforgeConfig
from forge_backend.inspect_model import queued_cards
from forge_backend.store.local import LocalStore, searches_dir
from forge_backend.store.queue import MissQueue
from forge_backend.ui import data

pytestmark = pytest.mark.gpu


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 0.5, dim=-1)


def test_a_queued_miss_is_searched_by_a_prewarm_and_serves_the_next_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("KFORGE_SHIPPED_DIR", str(tmp_path / "no-shipped"))  # a miss, whatever kforge ships
    cache = tmp_path / "cache"
    x = torch.randn(48, 3000, device="cuda")
    want = torch.softmax(x * 0.5, dim=-1)
    options = {"cache_dir": str(cache), "inner": "eager"}
    torch._dynamo.reset()
    counters.clear()
    y = torch.compile(Model(), backend="kforge", options={**options, "search": "queue"})(x)
    torch.testing.assert_close(y, want)
    queue = MissQueue(cache)
    assert queue.keys() and counters["kforge"]["searches"] == 0, "queued, not searched"

    cfg = KforgeConfig.load(options, env={})
    found = queued_cards(cache)
    device = torch.device("cuda", torch.cuda.current_device())
    store = LocalStore(cache)
    items = pw.plan(found.cards, pw.profile_cards(found.cards, device), cfg, store)
    results = pw.run(items, cfg, iterations=6, seconds_per_op=60, gpus=1)
    assert results and all(store.get(r.card.key) is not None for r in results if r.status == "search")
    assert sorted(queue.prune(store)) == sorted(r.card.key for r in results)
    for r in results:  # the tree kforge ui shows, finished
        view = data.search_view(searches_dir(cache), r.card.key)
        assert view["listing"]["state"] == "finished" and len(view["nodes"]) > 1

    torch._dynamo.reset()
    counters.clear()
    y = torch.compile(Model(), backend="kforge", options={**options, "search": "off"})(x)
    torch.testing.assert_close(y, want)
    assert counters["kforge"]["cache_hit"] >= 1 and counters["kforge"]["cache_miss"] == 0
    assert queue.keys() == []
