"""Note [a search a teammate is running] (store/team_markers.py): markers of the searches a team's machines run, and a
prewarm that leaves a signature another machine is searching for after the others and takes its record. CPU only:
a temporary team directory, another machine played by markers with another host name, the search faked."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_backend import prewarm as pw
from forge_backend.config import KforgeConfig
from forge_backend.prewarm import PlanItem
from forge_backend.store import TeamStore
from forge_backend.store import team_markers as tm
from forge_backend.store.team_markers import TeamMarkers

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)


@pytest.fixture
def team(tmp_path: Path) -> TeamStore:
    (tmp_path / "team").mkdir()
    return TeamStore(tmp_path / "team")


def elsewhere(team: TeamStore) -> TeamMarkers:
    """The markers as another machine sees and writes them."""
    other = TeamMarkers(team)
    other.me = ("another-host", 4242)
    return other


def test_a_marker_is_seen_by_other_machines_only_while_its_search_runs(team: TeamStore):
    here, key = TeamMarkers(team), make_record().key
    with here.searching(key, "kforge prewarm's search of aten._softmax"):
        assert here.running_elsewhere(key) is None, "a process does not wait for itself"
        seen = elsewhere(team).running_elsewhere(key)
        assert seen.what == "kforge prewarm's search of aten._softmax" and seen.pid == os.getpid()
        assert seen.age_s < tm.STALE_S
    assert not here.path(key).exists() and elsewhere(team).running_elsewhere(key) is None



def test_a_marker_nobody_touches_is_stale(team: TeamStore):
    other, key = elsewhere(team), make_record().key
    with other.searching(key, "a search on a machine that will die"):
        path = other.path(key)
        now = TeamMarkers(team).now()
        os.utime(path, (now - tm.STALE_S - 5, now - tm.STALE_S - 5))
        assert TeamMarkers(team).running_elsewhere(key) is None
        os.utime(path, (now - 5, now - 5))
        assert TeamMarkers(team).running_elsewhere(key) is not None


def test_a_running_search_keeps_its_marker_fresh(team: TeamStore, monkeypatch):
    monkeypatch.setattr(tm, "HEARTBEAT_S", 0.05)
    here, key = TeamMarkers(team), make_record().key
    with here.searching(key, "a long search"):
        old = here.now() - 100
        os.utime(here.path(key), (old, old))
        time.sleep(0.4)
        assert here.path(key).stat().st_mtime > old + 50, "the heartbeat touched it"


def test_a_marker_another_machine_took_over_is_left_to_it(team: TeamStore):
    here, key = TeamMarkers(team), make_record().key
    with here.searching(key, "mine"):
        here.path(key).write_text(json.dumps({"host": "another-host", "pid": 1, "what": "theirs", "since": 0}))
    assert here.path(key).exists() and TeamMarkers(team).running_elsewhere(key).what == "theirs"


def test_a_marker_that_cannot_be_written_leaves_the_search_unmarked(team: TeamStore, monkeypatch):
    def refused(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tm, "atomic_write", refused)
    ran = []
    with TeamMarkers(team).searching(make_record().key, "x"):
        ran.append(True)
    assert ran == [True] and not list(team.directory.joinpath("claims").glob("*.json"))


# ---- a prewarm beside a teammate's --------------------------------------------------------------------------------

class FakeClient:
    def close(self) -> None:
        pass


def setup(tmp_path: Path, team: TeamStore, monkeypatch):
    monkeypatch.setattr(tm, "POLL_S", 0.05)
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "inner": "eager",
                             "team_store": str(team.directory)}, env={})
    a, b = make_record(64), make_record(128)
    return cfg, a, b, [PlanItem(a.card_obj(), 10.0, 0.6, "search"), PlanItem(b.card_obj(), 10.0, 0.4, "search")]


def searching(calls: list, then=None):
    def search(card, cfg_, client, store, iterations, seconds, on_progress=None):
        calls.append(card.key)
        if then is not None:
            then(card.key)
        rec = SimpleNamespace(nodes=[], eager_us=10.0, floor_us=1.0, iterations=iterations, iterations_to_best=1,
                              reason="fake")
        return SimpleNamespace(result=SimpleNamespace(record=rec), seconds=0.0,
                               record=SimpleNamespace(decision="kernel", timings={"kforge_us": 5.0}))
    return search


def reverified(record, client, cfg):
    return True, "re-verified here (fake)"


def test_a_prewarm_leaves_a_teammates_search_for_last_and_takes_its_kernel(tmp_path, team, monkeypatch):
    cfg, a, b, items = setup(tmp_path, team, monkeypatch)
    other = elsewhere(team)
    marker = other.searching(a.key, "kforge prewarm's search of aten._softmax")
    marker.__enter__()

    def teammate_finishes(key: str) -> None:  # while this machine searches b, the teammate publishes a
        team.write(a)
        marker.__exit__(None, None, None)

    calls, progress = [], []
    results = pw.run(items, cfg, 4, 10.0, 1, on_progress=progress.append, search=searching(calls, teammate_finishes),
                     make_client=lambda g: FakeClient(), reverify=reverified, wait_s=30.0)
    assert calls == [b.key], "a was the teammate's: this machine searched b only"
    by_key = {r.card.key: r for r in results}
    assert by_key[a.key].status == "shipped" and "team, re-verified here" in by_key[a.key].reason
    assert by_key[b.key].status == "searched"
    assert any("after the others" in p.waiting for p in progress if p.key == a.key)
    assert not TeamMarkers(team).path(b.key).exists(), "this machine's marker of b went when its search ended"


def test_a_prewarm_searches_what_the_teammate_left_without_a_kernel(tmp_path, team, monkeypatch):
    cfg, a, b, items = setup(tmp_path, team, monkeypatch)
    marker = elsewhere(team).searching(a.key, "a search that will find nothing")
    marker.__enter__()
    calls = []
    pw.run(items, cfg, 4, 10.0, 1, search=searching(calls, lambda key: marker.__exit__(None, None, None)),
           make_client=lambda g: FakeClient(), reverify=reverified, wait_s=30.0)
    assert calls == [b.key, a.key]


def test_a_prewarm_reports_a_teammates_search_that_outlasts_its_wait(tmp_path, team, monkeypatch):
    cfg, a, b, items = setup(tmp_path, team, monkeypatch)
    calls = []
    with elsewhere(team).searching(a.key, "a very long search"):
        results = pw.run(items, cfg, 4, 10.0, 1, search=searching(calls), make_client=lambda g: FakeClient(),
                         reverify=reverified, wait_s=0.3)
    by_key = {r.card.key: r for r in results}
    assert calls == [b.key] and by_key[a.key].status == "busy" and "a teammate" in by_key[a.key].reason


def test_without_a_team_store_nothing_is_marked_or_left(tmp_path, team, monkeypatch):
    cfg, a, b, items = setup(tmp_path, team, monkeypatch)
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "inner": "eager"}, env={})
    calls = []
    with elsewhere(team).searching(a.key, "a teammate's search this machine cannot see"):
        pw.run(items, cfg, 4, 10.0, 1, search=searching(calls), make_client=lambda g: FakeClient(),
               reverify=reverified, wait_s=1.0)
    assert calls == [a.key, b.key]


# ---- a compile beside a teammate's search ---------------------------------------------------------------------------

@pytest.fixture
def compile_with_team(tmp_path: Path, team: TeamStore, monkeypatch):
    """A provider with a team store, whose search, re-verification and loading are recording fakes."""
    import time as time_

    from torch._dynamo.utils import counters

    from forge_backend.runtime import cuda_provider, search_runner

    monkeypatch.setattr(tm, "POLL_S", 0.05)
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "team_store": str(team.directory),
                             "search": "on_miss", "inner": "eager"}, env={})
    provider = cuda_provider.CudaProvider(cfg)
    provider.store.shipped.directory = tmp_path / "no-shipped"
    provider._client = object()
    log: list[str] = []

    def run_search(card_, cfg_, client, local, iterations, seconds):
        log.append("search")
        assert TeamMarkers(team).path(card_.key).exists(), "a compile's search is marked for the team"
        rec = make_record(card_.sizes["rows"]).marked(source="local", trusted=True)
        return SimpleNamespace(record=rec, seconds=0.1,
                               result=SimpleNamespace(record=SimpleNamespace(reason="searched")))

    monkeypatch.setattr(search_runner, "run_search", run_search)
    monkeypatch.setattr(search_runner, "has_template", lambda c: True)
    monkeypatch.setattr(cuda_provider, "reverify_record", lambda record, client, cfg_: (True, "re-verified (fake)"))
    monkeypatch.setattr(cuda_provider, "impl_from_record", lambda c, r, cfg_: SimpleNamespace(key=r.key, src=r.source))
    counters.clear()

    def miss(card, seconds_left: float = 30.0):
        return provider._kernel_for(card, cfg, time_.monotonic() + seconds_left)

    return provider, miss, log, counters


def test_a_compile_takes_the_kernel_of_the_teammate_it_waited_for(compile_with_team, team):
    import threading

    provider, miss, log, counters = compile_with_team
    rec = make_record()
    marker = elsewhere(team).searching(rec.key, "kforge prewarm's search of aten._softmax")
    marker.__enter__()

    def teammate_finishes() -> None:
        time.sleep(0.3)
        team.write(rec)
        marker.__exit__(None, None, None)

    t = threading.Thread(target=teammate_finishes)
    t.start()
    impl = miss(rec.card_obj())
    t.join()
    assert log == [] and impl.key == rec.key and impl.src == "local"  # re-verified, kept as this machine's copy
    assert counters["kforge"]["searched_elsewhere"] == 1


def test_a_compile_queues_a_miss_a_teammate_searches_past_its_budget(compile_with_team, team):
    provider, miss, log, _ = compile_with_team
    rec = make_record()
    with elsewhere(team).searching(rec.key, "a long prewarm"):
        assert miss(rec.card_obj(), seconds_left=0.3) is None
    assert log == [] and "a long prewarm on another-host" in provider.queue.get(rec.key).why


def test_a_compile_marks_its_own_search_for_the_team(compile_with_team, team):
    provider, miss, log, _ = compile_with_team
    rec = make_record()
    assert miss(rec.card_obj()).key == rec.key and log == ["search"]
    assert not TeamMarkers(team).path(rec.key).exists(), "its marker went when its search ended"
