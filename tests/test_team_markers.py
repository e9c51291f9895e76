"""Note [a search a teammate is running] (store/team_markers.py): markers of the searches a team's machines run, and a
prewarm that leaves a signature another machine is searching for after the others and takes its record. CPU only:
a temporary team directory, another machine played by markers with another host name, the search faked."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_backend import prewarm as pw
from forge_backend.config import KforgeConfig
from forge_backend.prewarm import PlanItem
from forge_backend.store import TeamStore
from forge_backend.store import team_markers as tm
from forge_backend.store.claims import ClaimBusy
from forge_backend.store.reverified import Reverified
from forge_backend.store.team_markers import MarkedElsewhere, TeamMarkers

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)


@pytest.fixture
def team(tmp_path: Path) -> TeamStore:
    (tmp_path / "team").mkdir()
    return TeamStore(tmp_path / "team")


def elsewhere(team: TeamStore) -> TeamMarkers:
    """The markers as another machine sees and writes them."""
    return TeamMarkers(team, me=("another-host", 4242))


def left_in(team: TeamStore) -> list[str]:
    """What is left in the markers' directory: markers, and temp or stale files a marker's taking forgot."""
    return sorted(p.name for p in (team.directory / "claims").iterdir())


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
    monkeypatch.setattr(tm.os, "link", refused)
    ran = []
    with TeamMarkers(team).searching(make_record().key, "x"):
        ran.append(True)
    assert ran == [True] and left_in(team) == []


# ---- one machine at a time ------------------------------------------------------------------------------------------

def test_a_marker_is_held_by_one_machine_at_a_time(team: TeamStore):
    first, second, key = TeamMarkers(team, me=("host-a", 1)), TeamMarkers(team, me=("host-b", 2)), make_record().key
    with first.searching(key, "host a's search"):
        with pytest.raises(MarkedElsewhere) as e:
            with second.searching(key, "host b's search"):
                pytest.fail("host b searched what host a holds")
        assert isinstance(e.value, ClaimBusy)
        assert (e.value.marker.host, e.value.marker.pid, e.value.marker.what) == ("host-a", 1, "host a's search")
        assert "a teammate is searching it (host a's search on host-a (pid 1)" in str(e.value)
        assert second.running_elsewhere(key).host == "host-a", "host b's attempt left host a's marker alone"
    with second.searching(key, "host b's search"):
        assert first.running_elsewhere(key).host == "host-b"
    assert left_in(team) == []


def test_machines_that_look_at_once_search_once(team: TeamStore):
    """The lockstep race: every machine looks, finds no marker and marks at once. One searches; the others meet its
    marker (a rename over the marker, as before, let all of them search)."""
    n = 8
    for round_ in range(5):
        key, entered, refused = make_record(64 * (round_ + 1)).key, [], []
        start, done = threading.Barrier(n, timeout=10), threading.Barrier(n, timeout=10)

        def machine(i: int) -> None:
            markers = TeamMarkers(team, me=(f"host-{i}", 1000 + i))
            assert markers.running_elsewhere(key) is None
            start.wait()
            try:
                with markers.searching(key, f"search {i}"):
                    entered.append(i)
                    done.wait()  # holds its marker until every other machine has tried
            except MarkedElsewhere as e:
                refused.append(e.marker.host)
                done.wait()

        with ThreadPoolExecutor(n) as pool:
            for f in [pool.submit(machine, i) for i in range(n)]:
                f.result()
        assert len(entered) == 1, f"round {round_}: {len(entered)} machines searched {key[:16]} at once"
        assert refused == [f"host-{entered[0]}"] * (n - 1)
        assert left_in(team) == []


def test_a_stale_marker_is_taken_over(team: TeamStore):
    here, key = TeamMarkers(team), make_record().key
    path = here.path(key)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"host": "a-dead-host", "pid": 7, "what": "a search that died", "since": 0}))
    old = here.now() - tm.STALE_S - 5
    os.utime(path, (old, old))
    with here.searching(key, "mine"):
        seen = elsewhere(team).running_elsewhere(key)
        assert (seen.host, seen.pid, seen.what) == (socket.gethostname(), os.getpid(), "mine")
    assert left_in(team) == []


def test_a_corrupt_marker_is_taken_over(team: TeamStore):
    here, key = TeamMarkers(team), make_record().key
    here.path(key).parent.mkdir(exist_ok=True)
    here.path(key).write_text('{"host": "half a')
    with here.searching(key, "mine"):
        assert elsewhere(team).running_elsewhere(key).what == "mine"
    assert left_in(team) == []


def test_a_marker_this_process_left_is_its_own(team: TeamStore):
    here, key = TeamMarkers(team), make_record().key
    here.path(key).parent.mkdir(exist_ok=True)
    here.path(key).write_text(json.dumps({"host": here.me[0], "pid": here.me[1], "what": "an earlier search here",
                                          "since": 0}))
    old = here.now() - tm.STALE_S - 5
    os.utime(here.path(key), (old, old))
    with here.searching(key, "mine"):
        assert elsewhere(team).running_elsewhere(key) is not None, "taken again, and fresh"
    assert left_in(team) == []


def test_a_stale_marker_a_teammate_took_over_first_is_left_to_it(team: TeamStore, monkeypatch):
    """Both see the stale marker; the teammate takes it over and marks it between this machine's look and its
    rename. What this machine moved is fresh: it is linked back, and this machine leaves the key to the teammate."""
    here, teammate, key = TeamMarkers(team), elsewhere(team), make_record().key
    path = here.path(key)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"host": "a-dead-host", "pid": 7, "what": "a search that died", "since": 0}))
    old = here.now() - tm.STALE_S - 5
    os.utime(path, (old, old))
    read, raced = here._read, []

    def read_then_teammate_takes_over(p: Path):
        m = read(p)
        if p == path and not raced:
            raced.append(True)
            teammate._take(path, "the teammate's search")
        return m

    monkeypatch.setattr(here, "_read", read_then_teammate_takes_over)
    with pytest.raises(MarkedElsewhere) as e:
        with here.searching(key, "mine"):
            pytest.fail("this machine searched what the teammate took over")
    assert e.value.marker.what == "the teammate's search"
    assert TeamMarkers(team).running_elsewhere(key).what == "the teammate's search"
    assert left_in(team) == [path.name]


def test_a_marker_that_keeps_going_stale_is_given_up_on(team: TeamStore, monkeypatch):
    here, key = TeamMarkers(team), make_record().key
    here.path(key).parent.mkdir(exist_ok=True)
    here.path(key).write_text("not a marker")
    monkeypatch.setattr(here, "_take_over", lambda path: None)  # as if teammates kept taking it over first
    with pytest.raises(ClaimBusy, match="taken over or went 3 times"):
        with here.searching(key, "mine"):
            pytest.fail("searched without a marker of its own")


class Raced(TeamMarkers):
    """Markers where, before this machine marks ``key``, a teammate does: ``races`` are called in turn, one a time
    (nothing once they run out), just before the marker is taken: the window between a look and a marker."""

    def __init__(self, team: TeamStore, key: str, races: list) -> None:
        super().__init__(team)
        self.key, self.races = key, list(races)

    @contextlib.contextmanager
    def searching(self, key: str, what: str):
        if key == self.key and self.races:
            self.races.pop(0)()
        with super().searching(key, what):
            yield


class Teammate:
    """Another machine's searches of ``key``: ``mark`` starts one; ``finish`` ends it, publishing ``record`` if
    given, at once or ``after_s`` later in a thread (``join`` waits for those)."""

    def __init__(self, team: TeamStore, key: str, what: str = "a teammate's search that began just now") -> None:
        self.team, self.key, self.what, self.marker, self.threads = team, key, what, None, []

    def mark(self) -> None:
        self.marker = elsewhere(self.team).searching(self.key, self.what)
        self.marker.__enter__()

    def finish(self, record=None, after_s: float = 0.0) -> None:
        def end(marker=self.marker) -> None:
            time.sleep(after_s)
            if record is not None:
                self.team.write(record)
            marker.__exit__(None, None, None)
        if not after_s:
            return end()
        self.threads.append(threading.Thread(target=end))
        self.threads[-1].start()

    def join(self) -> None:
        for t in self.threads:
            t.join()


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
    return Reverified(True, "re-verified here (fake)", "NVIDIA H200")


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


def raced_prewarm(tmp_path, team, monkeypatch, races, then, wait_s: float = 30.0):
    """A prewarm of a and b in which a teammate marks a, by ``races``, just before this machine would (Raced);
    ``then`` runs as this machine searches a card. The results by key, the searches made, the progress, on_done's."""
    cfg, a, b, items = setup(tmp_path, team, monkeypatch)
    monkeypatch.setattr(pw, "_team_markers", lambda cfg_: Raced(team, a.key, races))
    calls, progress, done = [], [], []
    results = pw.run(items, cfg, 4, 10.0, 1, on_progress=progress.append, on_done=done.append,
                     search=searching(calls, then), make_client=lambda g: FakeClient(), reverify=reverified,
                     wait_s=wait_s)
    return {r.card.key: r for r in results}, calls, progress, [r.card.key for r in done]


def test_a_prewarm_leaves_for_last_what_a_teammate_marked_after_it_looked(tmp_path, team, monkeypatch):
    """The teammate marks a between running_elsewhere's look (nothing there) and this machine's marker: a is left
    for after the others like one whose marker was seen, and ends with the teammate's kernel."""
    a, b = make_record(64), make_record(128)
    teammate = Teammate(team, a.key)
    by_key, calls, progress, done = raced_prewarm(tmp_path, team, monkeypatch, [teammate.mark],
                                                  then=lambda key: teammate.finish(a))
    assert calls == [b.key], "a was the teammate's: this machine searched b only"
    assert by_key[a.key].status == "shipped" and "team, re-verified here" in by_key[a.key].reason
    assert any("a teammate's search that began just now on another-host" in p.waiting and
               "(after the others)" in p.waiting for p in progress if p.key == a.key)
    assert done == [b.key, a.key], "on_done heard of a once, when it was taken"
    assert left_in(team) == []


def test_a_prewarm_waits_again_for_a_teammate_that_marks_it_again(tmp_path, team, monkeypatch):
    """Left for last, a is found unmarked and without a record; the teammate marks it again just before this
    machine does, and publishes it 0.3 s later: this machine waits again and takes it."""
    a, b = make_record(64), make_record(128)
    teammate = Teammate(team, a.key)

    def marks_again_and_publishes() -> None:
        teammate.mark()
        teammate.finish(a, after_s=0.3)

    by_key, calls, _, _ = raced_prewarm(tmp_path, team, monkeypatch, [teammate.mark, marks_again_and_publishes],
                                        then=lambda key: teammate.finish())
    teammate.join()
    assert calls == [b.key] and by_key[a.key].status == "shipped"


def test_a_prewarm_reports_a_teammate_that_marks_it_again_past_its_wait(tmp_path, team, monkeypatch):
    a, b = make_record(64), make_record(128)
    teammate = Teammate(team, a.key, "a very long search")
    by_key, calls, _, _ = raced_prewarm(tmp_path, team, monkeypatch, [teammate.mark, teammate.mark],
                                        then=lambda key: teammate.finish(), wait_s=0.3)
    teammate.finish()
    assert calls == [b.key] and by_key[a.key].status == "busy"
    assert "a teammate was still searching it" in by_key[a.key].reason and "a very long search" in by_key[a.key].reason


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
    monkeypatch.setattr(cuda_provider, "reverify_record",
                        lambda record, client, cfg_: Reverified(True, "re-verified (fake)", "NVIDIA H200"))
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


def raced_compile(team: TeamStore, monkeypatch, key: str, race) -> None:
    """The compile's markers: a teammate marks ``key``, by ``race``, between record_after's look and its marker."""
    from forge_backend.runtime import cuda_provider

    monkeypatch.setattr(cuda_provider, "markers_of", lambda team_: Raced(team, key, [race]))


def test_a_compile_takes_the_kernel_of_a_teammate_that_marked_it_after_it_looked(compile_with_team, team, monkeypatch):
    provider, miss, log, counters = compile_with_team
    rec = make_record()
    teammate = Teammate(team, rec.key)

    def marks_and_publishes() -> None:
        teammate.mark()
        teammate.finish(rec, after_s=0.3)

    raced_compile(team, monkeypatch, rec.key, marks_and_publishes)
    impl = miss(rec.card_obj())
    teammate.join()
    assert log == [] and impl.key == rec.key and impl.src == "local"
    assert counters["kforge"]["searched_elsewhere"] == 1 and provider.queue.get(rec.key) is None


def test_a_compile_queues_a_miss_a_teammate_marked_after_it_looked_past_its_budget(compile_with_team, team,
                                                                                     monkeypatch):
    provider, miss, log, _ = compile_with_team
    rec = make_record()
    teammate = Teammate(team, rec.key, "a long prewarm")
    raced_compile(team, monkeypatch, rec.key, teammate.mark)
    assert miss(rec.card_obj(), seconds_left=0.3) is None
    teammate.finish()
    why = provider.queue.get(rec.key).why
    assert log == [] and "a teammate was still searching it" in why and "a long prewarm on another-host" in why


def test_a_compile_queues_a_miss_a_teammate_searched_without_a_record(compile_with_team, team, monkeypatch):
    provider, miss, log, _ = compile_with_team
    rec = make_record()
    teammate = Teammate(team, rec.key, "a search that found nothing")

    def marks_and_ends() -> None:
        teammate.mark()
        teammate.finish(after_s=0.2)

    raced_compile(team, monkeypatch, rec.key, marks_and_ends)
    assert miss(rec.card_obj()) is None
    teammate.join()
    why = provider.queue.get(rec.key).why
    assert log == [] and "a teammate searched it (a search that found nothing on another-host" in why
    assert "left no record usable here" in why
