"""Note [one search of a signature at a time] (store/claims.py): a process that meets a signature another process is
searching waits for that search and takes its record; searches on one GPU take turns. CPU only: flock claims in a
temporary cache, the provider's and the prewarm's search replaced by recording fakes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from torch._dynamo.utils import counters

from forge_backend.config import KforgeConfig
from forge_backend.prewarm import PlanItem
from forge_backend.prewarm import run as run_prewarm
from forge_backend.store import LocalStore
from forge_backend.store.claims import Claim, ClaimBusy, search_claims

from test_miss_queue import miss, provider_for  # noqa: F401 (a fixture) E402
from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)


def test_a_claim_is_exclusive_and_says_who_holds_it(tmp_path):
    a, b = Claim(tmp_path, "key-x", "a search of aten.softmax"), Claim(tmp_path, "key-x", "another")
    assert a.try_acquire() and a.held
    assert not b.try_acquire() and not b.held
    holder = b.holder()
    assert holder.pid == os.getpid() and holder.what == "a search of aten.softmax"
    with pytest.raises(ClaimBusy, match=f"key-x for longer than 0.3 s \\(pid {os.getpid()} on .*aten.softmax"):
        b.acquire(0.3)
    a.release()
    assert b.try_acquire() and b.holder().what == "another"
    b.release()
    assert Claim(tmp_path, "key-y", "x").try_acquire(), "claims of other names are apart"


def test_a_waiter_takes_the_claim_when_its_holder_lets_go(tmp_path):
    a = Claim(tmp_path, "gpu-0", "first")
    assert a.try_acquire()
    threading.Timer(0.3, a.release).start()
    seen = []
    with Claim(tmp_path, "gpu-0", "second") as b:
        assert b.acquire(30.0, on_wait=seen.append) is False  # False: it waited
        assert b.held
    assert len(seen) == 1 and seen[0].what == "first"


def test_a_killed_holder_leaves_no_stale_claim(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
        from forge_backend.store.claims import Claim
        c = Claim({str(tmp_path)!r}, "key-k", "a search that will be killed")
        assert c.try_acquire()
        print("held", flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = Claim(tmp_path, "key-k", "the next search")
        assert not waiter.try_acquire() and waiter.holder().pid == holder.pid
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert waiter.acquire(10.0) in (True, False), "the kernel dropped the dead process's claim"
        waiter.release()
    finally:
        holder.kill()
        holder.stdout.close()


def test_search_claims_wait_for_the_signature_and_take_turns_on_a_gpu(tmp_path):
    with search_claims(tmp_path, "a" * 64, "uuid0", "first", 1.0) as waited:
        assert waited is False
        with search_claims(tmp_path, "b" * 64, "uuid1", "another GPU", 1.0) as other:
            assert other is False  # another signature on another GPU: at once
        with pytest.raises(ClaimBusy, match="gpu-"):
            with search_claims(tmp_path, "b" * 64, "uuid0", "same GPU", 0.2):
                pass
        with pytest.raises(ClaimBusy, match="key-a"):
            with search_claims(tmp_path, "a" * 64, "uuid1", "same signature", 0.2):
                pass
    with search_claims(tmp_path, "b" * 64, "uuid0", "after", 0.2) as waited:  # both claims were let go
        assert waited is False


def hold_then_store(cache: Path, key: str, rec=None, after_s: float = 0.3) -> threading.Thread:
    """Another process's search of ``key``: holds its claim, stores ``rec`` (None: nothing), lets go."""
    claim = Claim(cache, f"key-{key}", "another process's search")
    assert claim.try_acquire()

    def finish() -> None:
        time.sleep(after_s)
        if rec is not None:
            with LocalStore(cache) as store:
                store.put(rec)
        claim.release()

    t = threading.Thread(target=finish)
    t.start()
    return t


def test_a_compile_takes_the_record_of_the_search_it_waited_for(provider_for):  # noqa: F811
    provider, cfg, log = provider_for("on_miss")
    rec = make_record()
    t = hold_then_store(cfg.cache_dir, rec.key, rec)
    impl = miss(provider, cfg, rec.card_obj(), seconds_left=30.0)
    t.join()
    assert impl is not None and impl.key == rec.key
    assert log == [], "the compile did not search what the other process had just searched"
    assert counters["kforge"]["searched_elsewhere"] == 1 and counters["kforge"]["searches"] == 0


def test_a_compile_searches_when_the_process_it_waited_for_stored_nothing(provider_for):  # noqa: F811
    provider, cfg, log = provider_for("on_miss")
    c = make_record().card_obj()
    t = hold_then_store(cfg.cache_dir, c.key)  # e.g. its search was cut short before any verdict
    assert miss(provider, cfg, c, seconds_left=30.0) is not None
    t.join()
    assert log == ["search"] and counters["kforge"]["searched_elsewhere"] == 0


def test_a_compile_queues_a_miss_that_another_process_searches_past_its_budget(provider_for, tmp_path):  # noqa: F811
    provider, cfg, log = provider_for("on_miss")
    rec = make_record()
    claim = Claim(cfg.cache_dir, f"key-{rec.key}", "a long prewarm")
    assert claim.try_acquire()
    try:
        assert miss(provider, cfg, rec.card_obj(), seconds_left=0.3) is None
    finally:
        claim.release()
    assert log == []
    why = provider.queue.get(rec.key).why
    assert why.startswith("not searched by this compile: another process held key-") and "a long prewarm" in why


def prewarm_item(rec) -> PlanItem:
    return PlanItem(rec.card_obj(), 10.0, 1.0, "search")


class FakeClient:
    def close(self) -> None:
        pass


def fake_search(calls: list):
    def search(card, cfg_, client, store, iterations, seconds, on_progress=None):
        calls.append(card.key)
        rec = SimpleNamespace(nodes=[], eager_us=10.0, floor_us=1.0, iterations=iterations, iterations_to_best=1,
                              reason="fake")
        return SimpleNamespace(result=SimpleNamespace(record=rec), seconds=0.0,
                               record=SimpleNamespace(decision="kernel", timings={"kforge_us": 5.0}))
    return search


def test_a_prewarm_takes_the_record_of_the_search_it_waited_for(tmp_path):
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path), "inner": "eager"}, env={})
    rec, calls, progress = make_record(), [], []
    t = hold_then_store(cfg.cache_dir, rec.key, rec)
    [res] = run_prewarm([prewarm_item(rec)], cfg, 4, 10.0, 1, on_progress=progress.append,
                        search=fake_search(calls), make_client=lambda g: FakeClient(), wait_s=30.0)
    t.join()
    assert calls == [] and res.status == "cached" and res.decision == "kernel"
    assert res.kforge_us == rec.timings["kforge_us"] and "another process" in res.reason
    assert [p.waiting for p in progress if p.waiting] and "another process's search" in progress[0].waiting


def test_a_prewarm_leaves_a_signature_busy_past_its_wait_for_a_rerun(tmp_path):
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path), "inner": "eager"}, env={})
    rec, calls = make_record(), []
    claim = Claim(cfg.cache_dir, f"key-{rec.key}", "a compile's search")
    assert claim.try_acquire()
    try:
        [res] = run_prewarm([prewarm_item(rec)], cfg, 4, 10.0, 1, search=fake_search(calls),
                            make_client=lambda g: FakeClient(), wait_s=0.3)
    finally:
        claim.release()
    assert calls == [] and res.status == "busy" and res.decision is None and "a compile's search" in res.reason
    assert LocalStore(cfg.cache_dir).get(rec.key) is None
