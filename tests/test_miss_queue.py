"""Note [a miss kept for later] (store/queue.py): misses a compile did not search, queued for `kforge prewarm
--queued`. CPU only: the provider's search and loading are replaced by recording fakes, as in
test_provider_failed_here.py."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch._dynamo.utils import counters
from typer.testing import CliRunner

from forge_backend.cli import app
from forge_backend.config import KforgeConfig
from forge_backend.errors import BadOption
from forge_backend.inspect_model import queued_cards
from forge_backend.runtime import cuda_provider, search_runner
from forge_backend.store import BadKey, LocalStore, ShippedStore, TieredStore
from forge_backend.store.queue import MissQueue

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)


def card(rows: int = 64):
    return make_record(rows).card_obj()


# ---- the queue ----------------------------------------------------------------------------------------------------

def test_a_queued_miss_keeps_its_card_and_counts_the_processes_that_missed_it(tmp_path):
    q = MissQueue(tmp_path)
    c = card()
    q.add(c, "first", now=100.0)
    again = q.add(c, "second", now=250.0)
    assert (again.first_seen, again.last_seen, again.misses, again.why) == (100.0, 250.0, 2, "second")
    back = q.get(c.key)
    assert back == again and back.card_obj().to_json() == c.to_json()
    assert list(tmp_path.joinpath("queue").iterdir()) == [tmp_path / "queue" / f"{c.key}.json"], "no temp files left"


def test_misses_come_most_missed_first(tmp_path):
    q = MissQueue(tmp_path)
    once, twice = card(64), card(128)
    q.add(once, "x", now=5.0)
    q.add(twice, "x", now=1.0)
    q.add(twice, "x", now=2.0)
    assert [m.key for m in q.misses()] == [twice.key, once.key]


def test_a_corrupt_or_mismatched_entry_is_a_reported_miss(tmp_path, caplog):
    q = MissQueue(tmp_path)
    good, bad = card(64), card(128)
    q.add(good, "x")
    q.directory.joinpath(f"{bad.key}.json").write_text("{ nope")
    wrong = card(256)
    entry = json.loads(q.directory.joinpath(f"{good.key}.json").read_text())
    entry["key"] = wrong.key
    q.directory.joinpath(f"{wrong.key}.json").write_text(json.dumps(entry))  # the card of another key
    with caplog.at_level(logging.WARNING):
        assert [m.key for m in q.misses()] == [good.key]
    text = caplog.text
    assert bad.key[:16] in text and "holds the card of" in text


def test_a_bad_key_names_no_file(tmp_path):
    with pytest.raises(BadKey):
        MissQueue(tmp_path).get("../../etc/passwd")


def test_prune_removes_what_the_cache_decided(tmp_path):
    q = MissQueue(tmp_path / "cache")
    decided, open_ = make_record(64), make_record(128)
    q.add(decided.card_obj(), "x")
    q.add(open_.card_obj(), "x")
    store = LocalStore(tmp_path / "cache")
    store.put(make_record(64, decision="pytorch"))  # PyTorch kept is a decision too
    assert q.prune(store) == [decided.key] and q.keys() == [open_.key]
    assert q.clear() == 1 and q.keys() == []


# ---- the provider -------------------------------------------------------------------------------------------------

@pytest.fixture
def provider_for(tmp_path: Path, monkeypatch):
    """A provider over empty stores whose search is a recording fake; ``found`` is what the fake search returns."""
    def make(search: str, proposer: str = "templates", template: bool = True, found: str | None = "kernel"):
        cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "search": search, "proposer": proposer},
                                env={})
        provider = cuda_provider.CudaProvider(cfg)
        provider.store = TieredStore(provider.local, ShippedStore(tmp_path / "no-shipped"))
        provider._client = object()
        log: list[str] = []

        def run_search(card_, cfg_, client, local, iterations, seconds):
            log.append("search")
            rec = None if found is None else make_record(decision=found).marked(source="local", trusted=True)
            return SimpleNamespace(record=rec, seconds=0.1,
                                   result=SimpleNamespace(record=SimpleNamespace(reason="searched")))

        monkeypatch.setattr(search_runner, "run_search", run_search)
        monkeypatch.setattr(search_runner, "has_template", lambda c: template)
        monkeypatch.setattr(cuda_provider, "impl_from_record", lambda c, r, cfg_: SimpleNamespace(key=r.key))
        return provider, cfg, log

    counters.clear()
    return make


def miss(provider, cfg, c, seconds_left: float = 60.0):
    return provider._kernel_for(c, cfg, time.monotonic() + seconds_left)


def test_search_queue_queues_a_miss_once_a_process_and_searches_nothing(provider_for, tmp_path):
    c = card()
    provider, cfg, log = provider_for("queue")
    assert miss(provider, cfg, c) is None and miss(provider, cfg, c) is None
    assert log == [] and counters["kforge"]["queued"] == 1
    queued = provider.queue.get(c.key)
    assert queued.misses == 1 and "search='queue'" in queued.why
    again, cfg2, _ = provider_for("queue")  # another process
    miss(again, cfg2, c)
    assert again.queue.get(c.key).misses == 2


def test_search_off_records_nothing(provider_for):
    provider, cfg, log = provider_for("off")
    assert miss(provider, cfg, card()) is None and log == [] and provider.queue.keys() == []


def test_on_miss_searches_within_the_budget_and_queues_what_it_leaves(provider_for):
    provider, cfg, log = provider_for("on_miss")
    assert miss(provider, cfg, card(64)).key == make_record().key and log == ["search"]
    assert provider.queue.keys() == []
    left = card(128)
    assert miss(provider, cfg, left, seconds_left=-1.0) is None and log == ["search"]
    assert "budget" in provider.queue.get(left.key).why


def test_on_miss_queues_a_search_cut_short_before_any_verdict(provider_for):
    provider, cfg, log = provider_for("on_miss", found=None)
    c = card()
    assert miss(provider, cfg, c) is None and log == ["search"]
    assert "before any verdict" in provider.queue.get(c.key).why


def test_only_misses_a_prewarm_could_search_are_queued(provider_for):
    provider, cfg, _ = provider_for("queue", template=False)  # the templates cannot search it
    assert miss(provider, cfg, card()) is None and provider.queue.keys() == []
    provider, cfg, log = provider_for("on_miss", proposer="llm", template=False)  # the LLM can, in a prewarm
    c = card()
    assert miss(provider, cfg, c) is None and log == []
    assert "no template family" in provider.queue.get(c.key).why


def test_a_queue_that_cannot_be_written_warns_once_and_never_fails_a_compile(provider_for, monkeypatch, caplog):
    provider, cfg, _ = provider_for("queue")

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(provider.queue, "add", refuse)
    with caplog.at_level(logging.WARNING, logger="kforge"):
        for rows in (64, 128):
            assert miss(provider, cfg, card(rows)) is None
    assert counters["kforge"]["queue_failed"] == 2
    assert sum("could not queue" in r.getMessage() for r in caplog.records) == 1


def test_the_search_option_takes_queue():
    assert KforgeConfig.load({"search": "queue"}, env={}).search == "queue"
    with pytest.raises(BadOption, match="on_miss"):
        KforgeConfig.load({"search": "later"}, env={})


# ---- prewarm --queued and `kforge cache queue` --------------------------------------------------------------------

def test_queued_cards_are_the_queue_as_a_models_cards(tmp_path):
    q = MissQueue(tmp_path)
    c = card()
    c.occurrences = 3
    q.add(c, "x")
    found = queued_cards(tmp_path)
    assert [x.key for x in found.cards] == [c.key] and found.candidates == 3 and found.bandwidth_gbps > 0


def test_prewarm_queued_lists_the_queue_and_needs_a_gpu_to_search(tmp_path):
    q = MissQueue(tmp_path)
    q.add(card(64), "x")
    q.add(card(128), "x")
    r = CliRunner().invoke(app, ["prewarm", "--queued", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "2 signatures queued by compiles" in r.output and "searching needs a GPU" in r.output
    assert q.keys(), "nothing searched, nothing taken off the queue"


@pytest.mark.parametrize("args, needle", [([], "needs a MODEL_SPEC, or --queued"),
                                          (["examples/quickstart.py", "--queued"], "not both")])
def test_prewarm_wants_a_model_or_the_queue(args, needle, tmp_path):
    r = CliRunner().invoke(app, ["prewarm", *args, "--cache-dir", str(tmp_path)])
    assert r.exit_code == 1 and needle in r.output


def test_prewarm_of_an_empty_queue_says_so(tmp_path):
    r = CliRunner().invoke(app, ["prewarm", "--queued", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0 and "0 signatures queued by compiles" in r.output
    assert "operator signatures" not in r.output and "GPU" not in r.output, "no empty table, no GPU talk"


def test_cache_queue_lists_and_clears(tmp_path):
    q = MissQueue(tmp_path)
    c = card()
    q.add(c, "the compile's search budget (search_seconds) was spent on other signatures")
    r = CliRunner().invoke(app, ["cache", "queue", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert c.key[:12] in r.output and "kforge prewarm --queued" in r.output and "search_seconds" in r.output
    r = CliRunner().invoke(app, ["cache", "queue", "--clear", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0 and "removed 1 queued misses" in r.output and q.keys() == []
    r = CliRunner().invoke(app, ["cache", "queue", "--cache-dir", str(tmp_path)])
    assert "no queued misses" in r.output


def test_doctor_says_how_many_misses_wait_in_the_queue(tmp_path):
    from forge_backend import doctor

    cfg = KforgeConfig.load({"cache_dir": str(tmp_path)}, env={})
    assert "queued" not in doctor._cache(cfg).detail
    assert "no records yet, 0 search trees" in doctor._cache(cfg).detail
    assert not (tmp_path / "records").exists(), "doctor created no store"
    MissQueue(tmp_path).add(card(), "x")
    check = doctor._cache(cfg)
    assert check.ok and "1 missed signatures queued" in check.detail and "kforge prewarm --queued" in check.detail


def test_doctor_says_what_the_cache_holds(tmp_path):
    from forge_backend import doctor

    with LocalStore(tmp_path) as store:
        store.put(make_record(64))
        store.put(make_record(128, decision="pytorch"))
        store.put_search(make_record(64).key, {"nodes": []})
    detail = doctor._cache(KforgeConfig.load({"cache_dir": str(tmp_path)}, env={})).detail
    assert "2 records (1 kernels, 1 kept PyTorch), 1 search trees" in detail
    size = sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file())
    assert f", {size / 1e3:.1f} KB on disk" in detail or f", {size / 1e6:.1f} MB on disk" in detail, (detail, size)
