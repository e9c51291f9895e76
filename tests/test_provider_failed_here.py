"""Note [a record that fails here is searched] (runtime/cuda_provider.py), on the CPU: the provider's lookup with the
re-verification, the search and the kernel loading replaced by recording fakes."""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch._dynamo.utils import counters

from forge_backend.config import KforgeConfig
from forge_backend.runtime import cuda_provider, search_runner
from forge_backend.store import ShippedStore, TieredStore

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)


@pytest.fixture
def world(tmp_path: Path, monkeypatch):
    """A provider over an empty local cache and a shipped tier that holds one (untrusted) record, and a function
    that installs fakes recording the re-verifications, searches and kernel loads."""
    shipped_dir = tmp_path / "shipped"
    shipped_dir.mkdir()
    rec = make_record()
    (shipped_dir / f"{rec.key}.json").write_text(rec.dumps(indent=1))

    def make(reverify_ok: bool, search: str = "on_miss", searched_decision: str = "kernel"):
        cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "search": search}, env={})
        provider = cuda_provider.CudaProvider(cfg)
        provider.store = TieredStore(provider.local, ShippedStore(shipped_dir))
        provider._client = object()  # no worker process: every use of it is faked below
        calls = SimpleNamespace(log=[])  # what the fakes were asked, in order

        def reverified_locally(record, client, cfg_, local, reverify=None):
            calls.log.append("reverify")
            if not reverify_ok:
                return None, "launch: cuLaunchCooperativeKernel(softmax_relay) failed: too large"
            trusted = record.marked(source="local", trusted=True, reverified=True)
            local.put(trusted)
            return trusted, "verified"

        def run_search(card, cfg_, client, local, iterations, seconds):
            calls.log.append("search")
            found = make_record(decision=searched_decision).marked(source="local", trusted=True)
            local.put(found)
            return SimpleNamespace(record=found, seconds=0.1,
                                   result=SimpleNamespace(record=SimpleNamespace(reason="searched")))

        def impl_from_record(card, record, cfg_):
            calls.log.append(f"load {record.source}")
            return SimpleNamespace(key=record.key, source=record.source)

        monkeypatch.setattr(cuda_provider, "reverified_locally", reverified_locally)
        monkeypatch.setattr(cuda_provider, "impl_from_record", impl_from_record)
        monkeypatch.setattr(search_runner, "run_search", run_search)
        monkeypatch.setattr(search_runner, "has_template", lambda card: True)
        return provider, cfg, calls

    counters.clear()
    return rec, make


def kernel_for(provider, cfg, rec):
    return provider._kernel_for(rec.card_obj(), cfg, time.monotonic() + 60)


def test_a_shipped_record_that_passes_here_is_used_without_a_search(world):
    rec, make = world
    provider, cfg, calls = make(reverify_ok=True)
    impl = kernel_for(provider, cfg, rec)
    assert calls.log == ["reverify", "load local"] and impl.key == rec.key
    assert provider.local.get(rec.key).trusted and counters["kforge"]["reverify_failed"] == 0


def test_a_shipped_record_that_fails_here_is_searched_and_the_local_winner_shadows_it(world):
    rec, make = world
    provider, cfg, calls = make(reverify_ok=False)
    impl = kernel_for(provider, cfg, rec)
    assert calls.log == ["reverify", "search", "load local"] and impl.source == "local"
    assert counters["kforge"]["reverify_failed"] == 1
    # the next compile (a new process: a new provider) takes the local winner; the failed record is not asked again
    again, cfg2, calls2 = make(reverify_ok=False)
    assert kernel_for(again, cfg2, rec).source == "local" and calls2.log == ["load local"]


def test_a_search_that_keeps_pytorch_leaves_the_op_to_pytorch_and_is_remembered(world):
    rec, make = world
    provider, cfg, calls = make(reverify_ok=False, searched_decision="pytorch")
    assert kernel_for(provider, cfg, rec) is None and calls.log == ["reverify", "search"]
    again, cfg2, calls2 = make(reverify_ok=False)
    assert kernel_for(again, cfg2, rec) is None and calls2.log == []  # the local "pytorch" record comes first


def test_without_a_search_a_failed_record_is_asked_once_a_process(world, caplog):
    rec, make = world
    provider, cfg, calls = make(reverify_ok=False, search="off")
    with caplog.at_level("WARNING", logger="kforge"):
        assert kernel_for(provider, cfg, rec) is None
        assert kernel_for(provider, cfg, rec) is None
    assert calls.log == ["reverify"] and counters["kforge"]["reverify_failed"] == 2
    assert "not used on this GPU" in caplog.text and "left to PyTorch" in caplog.text
    assert "too large" in caplog.text
    # a new process asks again (the record may have been replaced meanwhile)
    again, cfg2, calls2 = make(reverify_ok=False, search="off")
    assert kernel_for(again, cfg2, rec) is None and calls2.log == ["reverify"]


def test_a_trusted_local_record_is_neither_reverified_nor_searched(world):
    rec, make = world
    provider, cfg, calls = make(reverify_ok=False)
    provider.local.put(rec.marked(source="local", trusted=True))
    assert kernel_for(provider, cfg, rec).source == "local" and calls.log == ["load local"]


def test_a_card_of_another_gpus_arch_is_left_to_pytorch_and_never_searched(world, monkeypatch, caplog):
    """Note [a card of another GPU's arch]: the search would run on the current GPU and store PyTorch's decision under
    the other arch's key; the card is skipped instead, with one warning for the compile."""
    from forge_backend.cards import build_card

    from test_store import softmax_sig

    rec, make = world
    provider, cfg, calls = make(reverify_ok=True)
    monkeypatch.setattr(cuda_provider.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda_provider, "arch_of", lambda device: "sm_90")
    asked = []
    monkeypatch.setattr(provider, "_kernel_for", lambda card, cfg_, deadline: asked.append(card.arch))
    cards = [build_card(softmax_sig(rows, arch=arch)) for rows, arch in ((8, "sm_86"), (16, "sm_90"), (32, "sm_86"))]
    with caplog.at_level("WARNING", logger="kforge"):
        assert provider.kernels_for(cards, cfg) == {}
    assert asked == ["sm_90"] and counters["kforge"]["other_arch_cards"] == 2
    assert caplog.text.count("left to PyTorch") == 1 and "2 signature(s) run on a GPU of sm_86" in caplog.text
    assert "current GPU (sm_90)" in caplog.text and len(provider.local) == 0
