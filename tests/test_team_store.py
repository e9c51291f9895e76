"""The team store (store/team.py): a shared directory of records, read untrusted, published by this machine's searches
under Note [what a publish replaces], never breaking a search when it cannot be reached (Note [a team store that
cannot be reached]). CPU only: no GPU, no timing; re-verification and the worker are faked."""
from __future__ import annotations

import json
import os
import stat
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from torch._dynamo.utils import counters
from typer.testing import CliRunner

from forge_backend.cli_cache import cache_app
from forge_backend.config import KforgeConfig
from forge_backend.errors import BadOption
from forge_backend.runtime import cuda_provider
from forge_backend.store import (BadKey, LocalStore, Published, ShippedStore, TeamStore, TeamStoreUnavailable,
                                 TieredStore, publish_found, team_store)
from forge_backend.store import team as team_mod
from forge_backend.store.reverified import Reverified
from forge_backend.store.team import not_publishable, publish_verdict

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)

runner = CliRunner()


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    """Each test as a new process: no warnings given yet, counters at zero, no team store from the environment."""
    monkeypatch.setattr(team_mod, "_warned", set())
    monkeypatch.delenv("KFORGE_TEAM_STORE", raising=False)
    counters.clear()


@pytest.fixture
def team(tmp_path: Path) -> TeamStore:
    (tmp_path / "team").mkdir()
    return TeamStore(tmp_path / "team")


def timed(rec, us: float, gpu: str = "NVIDIA H200"):
    """``rec`` measured at ``us`` on ``gpu`` (another search's winner: its kernel's description differs too)."""
    cand = dict(rec.candidate, description=f"a kernel of {us} us") if rec.candidate else None
    return rec.replace(candidate=cand, timings={**rec.timings, "kforge_us": us},
                       provenance={**rec.provenance, "gpu": gpu})


# --------------------------------------------------------------------------------------------------------------------
# reading and writing


def test_round_trip_reads_back_untrusted_from_the_team(team: TeamStore):
    rec = make_record()
    assert rec.trusted and rec.source == "local"
    team.write(rec)
    got = team.get(rec.key)
    assert got.trusted is False and got.source == "team"  # whatever the file says (it says trusted, local)
    assert got.candidate == rec.candidate and got.timings == rec.timings and got.signature == rec.signature
    assert team.keys() == [rec.key] and rec.key in team and len(team) == 1
    assert '"trusted": true' in team.path(rec.key).read_text()  # the file is the record as made; the reader decides


def test_a_file_claiming_another_source_is_still_a_team_record(team: TeamStore):
    rec = make_record().marked(source="shipped", trusted=True)
    team.path(rec.key).write_text(rec.dumps(indent=1))
    assert team.get(rec.key).source == "team" and not team.get(rec.key).trusted


def test_writes_are_atomic_readable_by_others_and_leave_no_temp_files(team: TeamStore, monkeypatch):
    a, b = make_record(64), make_record(128, decision="pytorch")
    team.write(a)
    team.write(b)
    team.write(timed(a, 3.0))
    assert sorted(p.name for p in team.directory.iterdir()) == sorted([f"{a.key}.json", f"{b.key}.json"])
    assert stat.S_IMODE(team.path(a.key).stat().st_mode) == 0o644  # not mkstemp's 0600: teammates read it

    def refused(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(TeamStoreUnavailable, match="cannot write to the team store"):
        team.write(timed(a, 2.0))
    assert sorted(p.name for p in team.directory.iterdir()) == sorted([f"{a.key}.json", f"{b.key}.json"])
    assert team.get(a.key).timings["kforge_us"] == 3.0  # the old file, whole


def test_a_corrupt_file_is_a_reported_miss(team: TeamStore, caplog):
    rec = make_record()
    team.path(rec.key).write_text(rec.dumps(indent=1)[:300])  # a writer that died half way (not through the store)
    with caplog.at_level("WARNING", logger="kforge.store"):
        assert team.get(rec.key) is None
        assert team.get(rec.key) is None
    assert caplog.text.count("ignoring corrupt cache entry") == 1 and "not valid JSON" in caplog.text
    assert counters["kforge"]["corrupt_entries"] == 1
    assert list(team.check().corrupt) == [rec.key] and list(team.items()) == []


def test_a_file_too_big_for_a_record_is_a_reported_miss_and_is_not_read_whole(team: TeamStore, monkeypatch):
    from forge_backend.store import record as record_mod

    rec = make_record()
    text = rec.dumps(indent=1)
    team.path(rec.key).write_text(text)
    assert team.get(rec.key) is not None
    monkeypatch.setattr(record_mod, "MAX_RECORD_BYTES", len(text.encode()) - 1)
    assert team.get(rec.key) is None
    assert "bytes a record file may have" in team.check().corrupt[rec.key]


def test_a_file_holding_another_keys_record_is_a_reported_miss(team: TeamStore, caplog):
    a, b = make_record(64), make_record(128)
    team.path(a.key).write_text(b.dumps(indent=1))
    with caplog.at_level("WARNING", logger="kforge.store"):
        assert team.get(a.key) is None
    assert "holds the record of key" in caplog.text and counters["kforge"]["corrupt_entries"] == 1


def test_bad_keys_are_refused_and_name_no_file(team: TeamStore):
    with pytest.raises(BadKey):
        team.get("../../etc/passwd")
    with pytest.raises(BadKey):
        team.write(make_record().replace(key="../outside"))
    assert "../outside" not in team and not (team.directory.parent / "outside.json").exists()
    (team.directory / "notes.json").write_text("{}")  # not a key: not listed
    assert team.keys() == []


# --------------------------------------------------------------------------------------------------------------------
# tiers


def test_lookup_order_is_local_then_team_then_shipped(tmp_path: Path, team: TeamStore):
    shipped_dir = tmp_path / "shipped"
    shipped_dir.mkdir()
    rec = make_record()
    (shipped_dir / f"{rec.key}.json").write_text(timed(rec, 9.0).dumps(indent=1))
    only_shipped = make_record(256)
    (shipped_dir / f"{only_shipped.key}.json").write_text(only_shipped.dumps(indent=1))
    with LocalStore(tmp_path / "cache") as local:
        tiered = TieredStore(local, ShippedStore(shipped_dir), team)
        assert [type(t).__name__ for t in tiered.tiers] == ["LocalStore", "TeamStore", "ShippedStore"]
        assert tiered.get(rec.key).source == "shipped"
        team.write(timed(rec, 5.0))
        assert tiered.get(rec.key).source == "team" and tiered.get(rec.key).timings["kforge_us"] == 5.0
        tiered.put(timed(rec, 4.0))
        assert tiered.get(rec.key).source == "local" and tiered.get(rec.key).trusted
        assert tiered.get(only_shipped.key).source == "shipped"
        assert tiered.keys() == sorted([rec.key, only_shipped.key]) and only_shipped.key in tiered


def test_the_provider_looks_up_the_configured_team_between_local_and_shipped(tmp_path: Path, team: TeamStore):
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "team_store": str(team.directory)}, env={})
    provider = cuda_provider.CudaProvider(cfg)
    assert [type(t).__name__ for t in provider.store.tiers] == ["LocalStore", "TeamStore", "ShippedStore"]
    assert provider.store.team.directory == team.directory
    none = cuda_provider.CudaProvider(KforgeConfig.load({"cache_dir": str(tmp_path / "c2")}, env={}))
    assert [type(t).__name__ for t in none.store.tiers] == ["LocalStore", "ShippedStore"]


def test_the_shared_provider_follows_a_compile_that_names_another_team_store(tmp_path: Path, monkeypatch):
    """One provider serves a cache directory for the whole process; a later compile's team_store option is used."""
    monkeypatch.setattr(cuda_provider, "_SHARED", {})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cache = str(tmp_path / "cache")
    first = cuda_provider.CudaProvider.shared(KforgeConfig.load({"cache_dir": cache, "team_store": str(tmp_path / "a")},
                                                                env={}))
    assert first.store.team.directory == tmp_path / "a"
    again = cuda_provider.CudaProvider.shared(KforgeConfig.load({"cache_dir": cache, "team_store": str(tmp_path / "b")},
                                                                env={}))
    assert again is first and again.store.team.directory == tmp_path / "b"
    assert [type(t).__name__ for t in again.store.tiers] == ["LocalStore", "TeamStore", "ShippedStore"]
    off = cuda_provider.CudaProvider.shared(KforgeConfig.load({"cache_dir": cache}, env={}))
    assert [type(t).__name__ for t in off.store.tiers] == ["LocalStore", "ShippedStore"]


def test_prewarm_plans_a_team_record_before_the_shipped_one(tmp_path: Path, team: TeamStore):
    from forge_backend.prewarm import plan

    rec = make_record()
    shipped_dir = tmp_path / "shipped"
    shipped_dir.mkdir()
    (shipped_dir / f"{rec.key}.json").write_text(timed(rec, 9.0).dumps(indent=1))
    team.write(timed(rec, 5.0))
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "team_store": str(team.directory)}, env={})
    with LocalStore(tmp_path / "cache") as local:
        [item] = plan([rec.card_obj()], {rec.key: 5.3}, cfg, local, shipped=ShippedStore(shipped_dir))
    assert item.status == "shipped" and item.shipped.source == "team" and item.shipped.timings["kforge_us"] == 5.0


# --------------------------------------------------------------------------------------------------------------------
# what a publish replaces


@pytest.mark.parametrize("held_rec,new_rec,written,why", [
    (None, make_record(), True, "new to the team"),
    (None, make_record(decision="pytorch"), True, "new to the team"),
    (make_record(), make_record(decision="pytorch"), False, "PyTorch's decision does not replace it"),
    (make_record(decision="pytorch"), make_record(decision="pytorch"), False, "PyTorch's decision already"),
    (make_record(decision="pytorch"), make_record(), True, "a kernel replaces the team's PyTorch decision"),
    (timed(make_record(), 4.1), timed(make_record(), 3.5), True, "faster on NVIDIA H200: 3.50 us"),
    (timed(make_record(), 3.5), timed(make_record(), 4.1), False, "as fast or faster on NVIDIA H200"),
    (timed(make_record(), 3.5), timed(make_record(), 3.5).replace(
        candidate=dict(make_record().candidate, description="another kernel")), False, "as fast or faster"),
    (timed(make_record(), 4.1), timed(make_record(), 2.0, gpu=""), False, "not on this one"),
    (make_record(), make_record(), False, "holds this kernel already"),
], ids=["new-kernel", "new-pytorch", "pytorch-never-replaces-kernel", "pytorch-over-pytorch", "kernel-over-pytorch",
        "faster-same-gpu", "slower-same-gpu", "as-fast-same-gpu", "faster-unnamed-gpu",
        "same-kernel"])
def test_publish_rule(team: TeamStore, held_rec, new_rec, written, why):
    if held_rec is not None:
        team.write(held_rec)
    assert publish_verdict(new_rec, team.get(new_rec.key))[0] is written
    done = team.publish(new_rec)
    assert done.written is written and why in done.why, done.why
    kept = team.get(new_rec.key)
    assert kept.integrity() == (new_rec if written else held_rec).marked(source="team", trusted=False).integrity()


@pytest.mark.parametrize("rec,why", [
    (make_record().replace(trusted=False), "untrusted here"),
    (make_record().marked(source="imported", trusted=True), "source imported"),
    (make_record().marked(source="imported", trusted=False), "source imported"),
    (make_record().marked(source="shipped", trusted=True), "source shipped"),
    (make_record().marked(source="local", trusted=True, reverified=True), "re-verified here"),
], ids=["untrusted", "imported-trusted", "imported", "shipped-verified", "reverified"])
def test_records_from_elsewhere_are_not_published(team: TeamStore, rec, why):
    assert why in not_publishable(rec)
    done = team.publish(rec)
    assert not done.written and why in done.why and team.keys() == []
    assert not_publishable(make_record()) == ""


# --------------------------------------------------------------------------------------------------------------------
# a team store that cannot be reached


def cfg_for(tmp_path: Path, team_dir: Path) -> KforgeConfig:
    return KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "team_store": str(team_dir)}, env={})


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="chmod does not stop root from writing")
def test_a_read_only_team_directory_warns_once_and_does_not_raise(tmp_path: Path, team: TeamStore):
    team.directory.chmod(0o555)
    try:
        with pytest.warns(UserWarning, match="cannot write to the team store"):
            assert publish_found(make_record(64), cfg_for(tmp_path, team.directory)) is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second failure is counted, not warned again
            assert publish_found(make_record(128), cfg_for(tmp_path, team.directory)) is None
    finally:
        team.directory.chmod(0o755)
    assert counters["kforge"]["team_unavailable"] == 2 and team.keys() == []


def test_a_refused_write_warns_once_is_counted_and_does_not_raise(tmp_path: Path, team: TeamStore, monkeypatch):
    """The read-only case where chmod cannot make it (as root): the filesystem refuses the write."""
    def refused(path, data, mode=None):
        raise PermissionError(30, "Read-only file system", str(path))

    monkeypatch.setattr(team_mod, "atomic_write", refused)
    with pytest.warns(UserWarning, match="Read-only file system") as seen:
        assert publish_found(make_record(64), cfg_for(tmp_path, team.directory)) is None
        assert publish_found(make_record(128), cfg_for(tmp_path, team.directory)) is None
    assert len(seen) == 1 and "KFORGE_TEAM_STORE" in str(seen[0].message)
    assert counters["kforge"]["team_unavailable"] == 2 and counters["kforge"]["team_published"] == 0


def test_a_missing_team_directory_is_warned_about_and_never_created(tmp_path: Path):
    gone = tmp_path / "unmounted" / "share"
    with pytest.warns(UserWarning, match="is not a directory"):
        assert publish_found(make_record(), cfg_for(tmp_path, gone)) is None
    assert not gone.exists() and counters["kforge"]["team_unavailable"] == 1
    assert TeamStore(gone).get(make_record().key) is None and TeamStore(gone).keys() == []


def test_an_unreadable_team_file_is_a_miss_with_a_warning(team: TeamStore, monkeypatch):
    rec = make_record()
    team.write(rec)

    def refused(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", refused)
    with pytest.warns(UserWarning, match="cannot read the team store"):
        assert team.get(rec.key) is None
    assert counters["kforge"]["team_unavailable"] == 1


def test_no_team_store_configured_publishes_nothing(tmp_path: Path):
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path)}, env={})
    assert team_store(cfg) is None and publish_found(make_record(), cfg) is None


def test_publish_found_counts_what_it_wrote_and_kept(tmp_path: Path, team: TeamStore):
    cfg = cfg_for(tmp_path, team.directory)
    assert publish_found(timed(make_record(), 4.0), cfg).written
    assert not publish_found(timed(make_record(), 5.0), cfg).written
    assert (counters["kforge"]["team_published"], counters["kforge"]["team_kept"]) == (1, 1)


# --------------------------------------------------------------------------------------------------------------------
# the config option


def test_team_store_option_and_env_var(tmp_path: Path):
    assert KforgeConfig.load({}, env={}).team_store == ""
    assert KforgeConfig.load({}, env={"KFORGE_TEAM_STORE": str(tmp_path)}).team_store == str(tmp_path)
    explicit = KforgeConfig.load({"team_store": tmp_path / "x"}, env={"KFORGE_TEAM_STORE": str(tmp_path)})
    assert explicit.team_store == str(tmp_path / "x")  # an explicit option beats the environment
    assert KforgeConfig.load({"team_store": str(tmp_path / "not-yet")}, env={}).team_store  # mounted later: allowed


def test_a_team_store_that_is_a_file_or_padded_is_refused(tmp_path: Path):
    f = tmp_path / "a_file"
    f.write_text("")
    with pytest.raises(BadOption, match="team_store=.* is a file; it must name a directory"):
        KforgeConfig.load({}, env={"KFORGE_TEAM_STORE": str(f)})
    with pytest.raises(BadOption, match="spaces around it"):
        KforgeConfig.load({"team_store": f" {tmp_path} "}, env={})


# --------------------------------------------------------------------------------------------------------------------
# re-verification before first use


def test_a_team_record_is_reverified_on_this_gpu_before_use_and_kept_locally(tmp_path: Path, team: TeamStore,
                                                                            monkeypatch):
    rec = make_record()
    team.write(rec)
    asked, loaded = [], []

    def fake_reverify(record, client, cfg_):
        asked.append((record.source, record.trusted))
        return Reverified(True, "verified; 4.00 us, 1.30x eager", "NVIDIA H200", (4.0,), 5.2, 3000.0)

    monkeypatch.setattr(cuda_provider, "reverify_record", fake_reverify)
    monkeypatch.setattr(cuda_provider, "impl_from_record",
                        lambda card, record, cfg_: loaded.append((record.source, record.trusted)) or record)
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "team_store": str(team.directory),
                             "search": "off"}, env={})
    provider = cuda_provider.CudaProvider(cfg)
    provider._client = object()  # no worker process: the re-verification is faked
    impl = provider._kernel_for(rec.card_obj(), cfg, time.monotonic() + 60)
    assert asked == [("team", False)] and loaded == [("local", True)] and impl.key == rec.key
    local = provider.local.get(rec.key)
    assert local.trusted and local.source == "local" and local.provenance["reverified"] is True
    assert "re-verified here" in not_publishable(local)  # and so never published back to the team

    again = cuda_provider.CudaProvider(cfg)  # the next process: the local copy, no second re-verification
    again._kernel_for(rec.card_obj(), cfg, time.monotonic() + 60)
    assert asked == [("team", False)]


def test_a_team_record_that_fails_here_is_not_used(tmp_path: Path, team: TeamStore, monkeypatch, caplog):
    rec = make_record()
    team.write(rec)
    monkeypatch.setattr(cuda_provider, "reverify_record",
                        lambda record, client, cfg_: Reverified(False, "values: 0.5 off", "NVIDIA H200"))
    monkeypatch.setattr(cuda_provider, "impl_from_record", lambda *a: pytest.fail("an unverified kernel was loaded"))
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "team_store": str(team.directory),
                             "search": "off"}, env={})
    provider = cuda_provider.CudaProvider(cfg)
    provider._client = object()
    with caplog.at_level("WARNING", logger="kforge"):
        assert provider._kernel_for(rec.card_obj(), cfg, time.monotonic() + 60) is None
    assert "record from team not used on this GPU (failed re-verification: values: 0.5 off)" in caplog.text
    assert provider.local.get(rec.key) is None


# --------------------------------------------------------------------------------------------------------------------
# a search publishes its winner


def test_a_search_publishes_its_record_to_the_team(tmp_path: Path, team: TeamStore, monkeypatch):
    from template_cards import softmax
    from test_mcts import EAGER, FLOOR, KnobTree, SimEvaluator

    from forge_backend.runtime import search_runner

    class FakeClient:
        def call(self, request: dict[str, Any]) -> dict[str, Any]:
            return {"eager_us": EAGER, "floor_us": FLOOR, "bandwidth_gbps": 4000.0}

    monkeypatch.setattr(search_runner, "WorkerEvaluator", lambda client, arch, cache_dir: SimEvaluator())
    cfg = cfg_for(tmp_path, team.directory)
    card = softmax([8, 1024])
    with LocalStore(tmp_path / "cache") as local:
        out = search_runner.run_search(card, cfg, FakeClient(), local, 6, 600.0, proposers=[KnobTree(depth=2)])
        search = local.get_search(card.key)
    assert out.record is not None and out.record.decision == "kernel" and team.keys() == [card.key]
    assert team.get(card.key).integrity() == out.record.marked(source="team", trusted=False).integrity()
    assert counters["kforge"]["team_published"] == 1
    # Note [a search tree beside a team's kernel]: the tree that found it goes along, readable by teammates
    assert json.loads(team.search_path(card.key).read_text()) == search
    assert stat.S_IMODE(team.search_path(card.key).stat().st_mode) == 0o644


def test_a_search_that_keeps_pytorch_publishes_nothing(tmp_path: Path, team: TeamStore, monkeypatch):
    """Note [what a publish replaces]: a "pytorch" record in the team would stop every teammate's search of it."""
    from template_cards import softmax
    from test_mcts import EAGER, FLOOR, KnobTree, SimEvaluator

    from forge_backend.runtime import search_runner

    class FakeClient:
        def call(self, request: dict[str, Any]) -> dict[str, Any]:
            return {"eager_us": EAGER, "floor_us": FLOOR, "bandwidth_gbps": 4000.0}

    slow = SimEvaluator(time_fn=lambda p: 2 * EAGER)  # every candidate loses to eager
    monkeypatch.setattr(search_runner, "WorkerEvaluator", lambda client, arch, cache_dir: slow)
    cfg = cfg_for(tmp_path, team.directory)
    card = softmax([8, 1024])
    with LocalStore(tmp_path / "cache") as local:
        out = search_runner.run_search(card, cfg, FakeClient(), local, 6, 600.0, proposers=[KnobTree(depth=2)])
        assert out.record.decision == "pytorch" and local.get(card.key) is not None
    assert team.keys() == [] and counters["kforge"]["team_published"] == 0
    assert not team.searches_dir.exists(), "no tree without its kernel"


def tree_of(rec, source: str | None = None) -> dict:
    """A search record's JSON reduced to what found_by reads: a winner whose source is ``source`` (``rec``'s)."""
    return {"winner_id": 1, "nodes": [{"candidate": None},
                                      {"candidate": {"source": source or rec.candidate["source"]}}]}


def test_a_publish_takes_only_the_tree_that_found_its_kernel(team: TeamStore):
    rec = make_record()
    later = tree_of(rec, source="// the key's last search, which found another kernel")
    assert team.publish(rec, later) == Published(rec.key, True, "new to the team", tree=False)
    assert not team.search_path(rec.key).exists()
    team.path(rec.key).unlink()
    done = team.publish(rec, tree_of(rec))
    assert done.written and done.tree and json.loads(team.search_path(rec.key).read_text()) == tree_of(rec)


def test_a_publish_that_replaces_nothing_writes_no_tree(team: TeamStore):
    fast, slow = timed(make_record(), 2.0), timed(make_record(), 3.0)
    team.write(fast)
    done = team.publish(slow, tree_of(slow))
    assert not done.written and not done.tree and not team.search_path(slow.key).exists()


# --------------------------------------------------------------------------------------------------------------------
# the command line


@pytest.fixture
def cli_env(tmp_path: Path, team: TeamStore, monkeypatch) -> dict:
    monkeypatch.setenv("KFORGE_SHIPPED_DIR", str(tmp_path / "no-shipped"))
    monkeypatch.setenv("COLUMNS", "200")
    cache = tmp_path / "cache"
    mine, pytorch = timed(make_record(64), 4.0), make_record(128, decision="pytorch")
    imported = make_record(256).marked(source="imported", trusted=False)
    with LocalStore(cache) as store:
        for rec in (mine, pytorch, imported):
            store.put(rec)
    return {"cache": str(cache), "team": team, "mine": mine, "pytorch": pytorch, "imported": imported}


def invoke(*args: str):
    return runner.invoke(cache_app, list(args))


def test_cli_publish_pushes_this_machines_records_and_says_what_it_skipped(cli_env, monkeypatch):
    team = cli_env["team"]
    monkeypatch.setenv("KFORGE_TEAM_STORE", str(team.directory))
    r = invoke("publish", "--cache-dir", cli_env["cache"])
    assert r.exit_code == 0, r.output
    assert f"published 1 of 2 records to {team.directory}, skipped 1" in r.output  # kernels only, unless named
    assert f"published {cli_env['mine'].key[:16]}" in r.output and "new to the team" in r.output
    assert f"skipped   {cli_env['imported'].key[:16]}" in r.output and "source imported" in r.output
    assert team.keys() == [cli_env["mine"].key]
    again = invoke("publish", cli_env["mine"].key[:10], "--cache-dir", cli_env["cache"])
    assert again.exit_code == 0 and "published 0 of 1 records" in again.output
    assert "holds this kernel already" in again.output


def test_cli_publish_takes_the_tree_that_found_each_kernel(cli_env, monkeypatch):
    team, mine = cli_env["team"], cli_env["mine"]
    with LocalStore(cli_env["cache"]) as store:
        store.put_search(mine.key, tree_of(mine))
    r = invoke("publish", "--cache-dir", cli_env["cache"], "--team", str(team.directory))
    assert r.exit_code == 0, r.output
    assert f"published {mine.key[:16]}" in r.output and "(with its search tree)" in r.output
    assert json.loads(team.search_path(mine.key).read_text()) == tree_of(mine)


def test_cli_publish_to_a_named_directory_by_prefix(cli_env, tmp_path: Path):
    other = tmp_path / "other-team"
    other.mkdir()
    r = invoke("publish", cli_env["pytorch"].key[:12], "--team", str(other), "--cache-dir", cli_env["cache"])
    assert r.exit_code == 0, r.output
    assert "published 1 of 1 records" in r.output and TeamStore(other).keys() == [cli_env["pytorch"].key]
    assert cli_env["team"].keys() == []


@pytest.mark.parametrize("setup,needle", [
    ("none", "no team store is configured: set KFORGE_TEAM_STORE"),
    ("missing", "is not a directory (kforge does not create it"),
    ("refused", "cannot write to the team store"),
], ids=["not-configured", "missing", "not-writable"])
def test_cli_publish_errors_are_one_line(cli_env, tmp_path: Path, monkeypatch, setup, needle):
    args = ["publish", "--cache-dir", cli_env["cache"]]
    if setup == "missing":
        args += ["--team", str(tmp_path / "nope")]
    if setup == "refused":
        args += ["--team", str(cli_env["team"].directory)]

        def refused(*a, **k):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(team_mod.tempfile, "mkstemp", refused)
    r = invoke(*args)
    assert r.exit_code == 1 and needle in r.output and "Traceback" not in r.output, r.output
    assert cli_env["team"].keys() == []


def test_cli_ls_lists_the_team_tier_after_local(cli_env, monkeypatch):
    team = cli_env["team"]
    only_team = make_record(512)
    team.write(only_team)
    team.write(timed(cli_env["mine"], 3.0))  # local holds this key too: the local record is listed
    r = invoke("ls", "--cache-dir", cli_env["cache"], "--team-dir", str(team.directory))
    assert r.exit_code == 0, r.output
    assert only_team.key[:16] in r.output and "team (untrusted)" in r.output
    assert r.output.count("team (untrusted)") == 1 and str(team.directory) in r.output
    assert "team (untrusted)" not in invoke("ls", "--cache-dir", cli_env["cache"]).output
    monkeypatch.setenv("KFORGE_TEAM_STORE", str(team.directory))
    assert "team (untrusted)" in invoke("ls", "--cache-dir", cli_env["cache"], "--team").output
    monkeypatch.delenv("KFORGE_TEAM_STORE")
    r = invoke("ls", "--cache-dir", cli_env["cache"], "--team")
    assert r.exit_code == 1 and "no team store is configured" in r.output


def test_cli_publish_of_many_records_runs_behind_a_progress_bar(tmp_path: Path, team: TeamStore):
    cache = tmp_path / "many"
    with LocalStore(cache) as store:
        for rows in range(1, 26):  # past MANY: the rich progress bar is on
            store.put(make_record(rows))
    r = invoke("publish", "--cache-dir", str(cache), "--team", str(team.directory))
    assert r.exit_code == 0, r.output
    assert "published 25 of 25 records" in r.output and len(team.keys()) == 25


def test_cli_show_finds_a_team_record_after_local(cli_env, monkeypatch):
    team = cli_env["team"]
    only_team = make_record(512)
    team.write(only_team)
    monkeypatch.setenv("KFORGE_TEAM_STORE", str(team.directory))
    r = invoke("show", only_team.key[:12], "--cache-dir", cli_env["cache"])
    assert r.exit_code == 0, r.output
    assert "source: team   trusted: False" in r.output
    team.write(timed(cli_env["mine"], 3.0))  # the local record of this key answers first, as in a compile
    r = invoke("show", cli_env["mine"].key[:12], "--cache-dir", cli_env["cache"])
    assert "source: local   trusted: True" in r.output
    monkeypatch.delenv("KFORGE_TEAM_STORE")
    r = invoke("show", only_team.key[:12], "--cache-dir", cli_env["cache"])
    assert r.exit_code == 1, "without a team store the key is unknown"


def test_cli_verify_checks_the_team_tier(cli_env):
    team = cli_env["team"]
    team.write(make_record(512))
    r = invoke("verify", "--cache-dir", cli_env["cache"], "--team-dir", str(team.directory))
    assert r.exit_code == 0, r.output
    assert f"team ({team.directory}): 1 ok, 0 corrupt" in r.output
    (team.directory / f"{make_record(1024).key}.json").write_text("{ torn")
    r = invoke("verify", "--cache-dir", cli_env["cache"], "--team-dir", str(team.directory))
    assert r.exit_code == 1 and "1 ok, 1 corrupt" in r.output


def test_doctor_reports_the_team_store(tmp_path: Path, team: TeamStore, monkeypatch):
    from forge_backend import doctor

    assert doctor._team(KforgeConfig.load({}, env={})) is None, "no team store configured: no line"
    team.write(make_record(512))
    check = doctor._team(KforgeConfig.load({"team_store": str(team.directory)}, env={}))
    assert check.ok and "1 records, writable" in check.detail
    missing = doctor._team(KforgeConfig.load({"team_store": str(tmp_path / "unmounted")}, env={}))
    assert not missing.ok and not missing.warn and "not a directory" in missing.detail

    def refuse(self):
        raise TeamStoreUnavailable(f"cannot write to the team store {self.directory}: Read-only file system")

    monkeypatch.setattr(TeamStore, "check_writable", refuse)
    ro = doctor._team(KforgeConfig.load({"team_store": str(team.directory)}, env={}))
    assert not ro.ok and ro.warn and "Read-only" in ro.detail and "will not be published" in ro.detail


def test_cli_verify_gpu_reverifies_the_team_kernels_too(cli_env, monkeypatch):
    import sys
    import types

    import forge_backend.cli_cache as cli_cache

    team = cli_env["team"]
    only_team = make_record(512)
    team.write(only_team)
    team.write(timed(cli_env["mine"], 3.0))  # the local record of this key is the one re-verified
    asked = []
    fake = types.ModuleType("forge_backend.runtime.provider")
    found = Reverified(True, "verified", "NVIDIA H200", (4.0,), 5.2, 3000.0)
    fake.reverify_records = lambda recs: ((asked.append((r.key, r.source)) or r, found, "verified") for r in recs)
    monkeypatch.setitem(sys.modules, "forge_backend.runtime.provider", fake)
    monkeypatch.setattr(cli_cache, "_cuda_available", lambda: True)
    r = invoke("verify", "--cache-dir", cli_env["cache"], "--team-dir", str(team.directory), "--gpu")
    assert r.exit_code == 0, r.output
    assert sorted(asked) == sorted([(cli_env["mine"].key, "local"), (cli_env["imported"].key, "imported"),
                                    (only_team.key, "team")])
    assert "GPU re-verification: 3 passed, 0 failed" in r.output
    copy = LocalStore(cli_env["cache"]).get(only_team.key)
    assert copy.trusted and copy.source == "team"
    assert not_publishable(copy), "a verified copy of a teammate's kernel is not published back"


WRITER = """
import sys
from pathlib import Path
from forge_backend.store import TeamStore
from test_store import make_record
team, n, salt = TeamStore(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
base = make_record(64)
for i in range(n):  # a different record text each time: another kernel description and time
    cand = dict(base.candidate, description=f"writer {salt}, round {i}: " + "x" * (i * 37 % 2000))
    team.write(base.replace(candidate=cand, timings={**base.timings, "kforge_us": 1.0 + i}))
"""


def test_readers_never_see_half_a_file_while_machines_publish(team: TeamStore):
    """Two processes rewrite one key's file as fast as they can while this one reads it: every read is a whole,
    valid record (atomic_write: a temp file, then a rename), never a torn one."""
    import subprocess
    import sys as _sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    writers = [subprocess.Popen([_sys.executable, "-c", WRITER, str(team.directory), "150", str(i)], env=env)
               for i in range(2)]
    key, reads = make_record(64).key, 0
    while any(w.poll() is None for w in writers):
        rec = team.read(key)  # raises CorruptRecord on a torn file
        reads += rec is not None
    assert [w.wait() for w in writers] == [0, 0]
    assert reads > 0 and team.read(key).candidate["description"].startswith("writer ")
    assert [p.name for p in team.directory.iterdir()] == [f"{key}.json"], "no temp file left behind"
