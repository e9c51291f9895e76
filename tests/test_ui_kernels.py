"""``kforge ui``'s kernels view (ui/kernels.py and its routes in ui/server.py): the records a compile here can use,
local, team and shipped, which tier answers each key, and one record whole. CPU only."""
from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from forge_backend.cli import app
from forge_backend.store import LocalStore, TeamStore
from forge_backend.store.local import searches_dir
from forge_backend.ui.kernels import KernelTiers
from forge_backend.ui.server import UiServer

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)


def faster(rec, us: float):
    """``rec`` as another machine's search found it: another kernel, measured at ``us``."""
    return rec.replace(candidate=dict(rec.candidate, description=f"a kernel of {us} us"),
                       timings={**rec.timings, "kforge_us": us, "inductor_us": 2 * us})


@pytest.fixture
def tiers(tmp_path: Path):
    """A local cache holding A (with its search record), a team holding A (faster), B and a corrupt C, and a shipped
    directory holding B and D."""
    a, b, c, d = make_record(64), make_record(128), make_record(256), make_record(512, decision="pytorch")
    with LocalStore(tmp_path / "cache") as local:
        local.put(a)
    searches_dir(tmp_path / "cache").mkdir()
    (searches_dir(tmp_path / "cache") / f"{a.key}.json").write_text("{}")
    team = TeamStore(tmp_path / "team")
    team.directory.mkdir()
    team.write(faster(a, 2.0))
    team.write(b)
    team.path(c.key).write_text("{ not json")
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for rec in (b, d):
        (shipped / f"{rec.key}.json").write_text(rec.dumps(indent=1))
    view = KernelTiers(tmp_path / "cache", tmp_path / "team", shipped)
    yield view, {"a": a, "b": b, "c": c, "d": d}
    view.close()


def rows_by(listing, key):
    return {r["tier"]: r for r in listing["kernels"] if r["key"] == key}


def test_every_tier_is_listed_in_lookup_order_with_the_tier_that_answers(tiers):
    view, rec = tiers
    listing = view.listing()
    assert [t["name"] for t in listing["tiers"]] == ["local", "team", "shipped"]
    assert [(t["records"], t["corrupt"]) for t in listing["tiers"]] == [(1, 0), (2, 1), (2, 0)]
    assert [r["tier"] for r in listing["kernels"]] == ["local", "team", "team", "team", "shipped", "shipped"]
    a = rows_by(listing, rec["a"].key)
    assert a["local"]["answers"] and not a["team"]["answers"]  # this machine's own record comes first
    assert a["team"]["kforge_us"] == 2.0 and a["team"]["speedup_vs_inductor"] == 2.0
    assert a["local"]["has_search"] and a["local"]["trusted"] and a["local"]["source"] == "local"
    assert not a["team"]["trusted"] and a["team"]["source"] == "team"  # untrusted whatever the file says
    b = rows_by(listing, rec["b"].key)
    assert b["team"]["answers"] and not b["shipped"]["answers"] and not b["team"]["has_search"]
    d = rows_by(listing, rec["d"].key)["shipped"]
    assert d["answers"] and d["decision"] == "pytorch" and d["speedup_vs_inductor"] is None
    c = rows_by(listing, rec["c"].key)["team"]
    assert c["corrupt"] and not c["answers"] and c["decision"] == ""
    assert a["local"]["op"] == "aten._softmax.default" and "float32[64, " in a["local"]["tensors"]


def test_a_corrupt_record_does_not_answer_and_the_next_tier_does(tiers, tmp_path):
    view, rec = tiers
    b = rec["b"]
    TeamStore(tmp_path / "team").path(b.key).write_text("[]")
    assert rows_by(view.listing(), b.key)["shipped"]["answers"]
    assert view.record_view("shipped", b.key)["answers"] == "shipped"


def test_one_record_whole_says_which_tier_answers_and_which_hold_it(tiers):
    view, rec = tiers
    a = rec["a"]
    got = view.record_view("team", a.key)
    assert got["answers"] == "local" and got["in_tiers"] == ["local", "team"]
    assert got["row"]["tier"] == "team" and not got["row"]["answers"]
    assert got["description"] == "a kernel of 2.0 us" and got["source"] == a.candidate["source"]
    assert got["plan"] == a.candidate["plan"] and got["params"] == a.candidate["params"]
    assert got["verification"] == a.verification and got["provenance"]["gpu"] == "NVIDIA H200"
    assert "rows" in got["card_text"] and got["signature"] == a.signature
    assert view.record_view("local", a.key)["row"]["answers"]
    assert view.record_view("shipped", a.key) == f"the shipped tier ({view.shipped.directory}) holds no record of " \
                                                  f"{a.key[:16]}"


def test_a_cache_directory_without_a_store_is_read_without_creating_one(tmp_path):
    view = KernelTiers(tmp_path / "cache", None, tmp_path / "no_shipped")
    listing = view.listing()
    assert listing["kernels"] == []
    local, team, shipped = listing["tiers"]
    assert not local["readable"] and "no local cache yet" in local["problem"]
    assert not team["readable"] and "no team store is configured" in team["problem"]
    assert not shipped["readable"] and "missing" in shipped["problem"]
    assert not (tmp_path / "cache").exists(), "the view created the cache directory"
    assert view.record_view("local", "0" * 64) == local["problem"]


def test_a_missing_team_directory_is_reported_and_not_created(tmp_path):
    view = KernelTiers(tmp_path / "cache", tmp_path / "unmounted")
    team = view.listing()["tiers"][1]
    assert not team["readable"] and "kforge does not create it" in team["problem"]
    assert not (tmp_path / "unmounted").exists()


def test_a_record_file_is_parsed_again_only_when_it_changes(tiers, tmp_path, monkeypatch):
    from forge_backend.store import directory

    view, rec = tiers
    view.listing()
    reads = []
    real = directory.read_record_file
    monkeypatch.setattr(directory, "read_record_file", lambda path: reads.append(path.name) or real(path))
    view.listing()
    assert reads == [f"{rec['c'].key}.json"], "only the corrupt file, which has no row to keep, is read again"
    team = TeamStore(tmp_path / "team")
    team.write(faster(rec["b"], 1.5))  # a teammate's newer kernel: a new file
    reads.clear()
    b = rows_by(view.listing(), rec["b"].key)["team"]
    assert sorted(reads) == sorted([f"{rec['b'].key}.json", f"{rec['c'].key}.json"]) and b["kforge_us"] == 1.5


def test_listing_twice_writes_no_record(tiers, tmp_path):
    view, rec = tiers
    before = {p.name: p.read_bytes() for p in (tmp_path / "team").iterdir()}
    view.listing()
    view.record_view("team", rec["a"].key)
    assert {p.name: p.read_bytes() for p in (tmp_path / "team").iterdir()} == before
    with LocalStore(tmp_path / "cache") as local:
        assert local.keys() == [rec["a"].key] and local.read(rec["a"].key) == rec["a"]


# ---- the routes ---------------------------------------------------------------------------------------------------

@pytest.fixture
def served(tiers, tmp_path):
    view, rec = tiers
    server = UiServer(tmp_path / "cache", "127.0.0.1", 0, team_dir=tmp_path / "team",
                      shipped_dir=view.shipped.directory)
    server.start()
    yield server, rec
    server.shutdown()
    server.server_close()


def get(server: UiServer, path: str):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    conn.request("GET", path)
    r = conn.getresponse()
    body = json.loads(r.read())
    conn.close()
    return r.status, body


def test_the_kernels_routes(served):
    server, rec = served
    status, body = get(server, "/api/kernels")
    assert status == 200 and len(body["kernels"]) == 6 and body["tiers"][1]["records"] == 2
    status, body = get(server, f"/api/kernels/team/{rec['a'].key}")
    assert status == 200 and body["answers"] == "local" and body["source"] == rec["a"].candidate["source"]


@pytest.mark.parametrize("path,code,needle", [
    ("/api/kernels/elsewhere/" + "0" * 64, 404, "is not a tier"),
    ("/api/kernels/team/../../etc", 404, "no such page"),
    ("/api/kernels/team/ABC", 400, "is not a signature key"),
    ("/api/kernels/local/" + "0" * 64, 404, "holds no record of 0000000000000000"),
])
def test_the_kernels_routes_refuse_what_is_not_a_record(served, path, code, needle):
    server, _ = served
    status, body = get(server, path)
    assert status == code and needle in body["error"], body


def test_a_corrupt_team_record_is_422(served):
    server, rec = served
    status, body = get(server, f"/api/kernels/team/{rec['c'].key}")
    assert status == 422 and "corrupt" in body["error"]


def test_ui_takes_the_team_store_from_its_flag_or_the_environment(tmp_path, monkeypatch):
    made = []

    def interrupted(self, poll_interval=0.5):
        made.append(None if self.kernels.team is None else self.kernels.team.directory)
        raise KeyboardInterrupt

    monkeypatch.setattr(UiServer, "serve_forever", interrupted)
    monkeypatch.setenv("KFORGE_TEAM_STORE", str(tmp_path / "from_env"))
    r = CliRunner().invoke(app, ["ui", "--cache-dir", str(tmp_path), "--port", "0"])
    assert r.exit_code == 0 and f"team store {tmp_path / 'from_env'}" in r.output, r.output
    r = CliRunner().invoke(app, ["ui", "--cache-dir", str(tmp_path), "--port", "0", "--team-dir", str(tmp_path / "f")])
    assert r.exit_code == 0, r.output
    monkeypatch.delenv("KFORGE_TEAM_STORE")
    r = CliRunner().invoke(app, ["ui", "--cache-dir", str(tmp_path), "--port", "0"])
    assert r.exit_code == 0 and "team store" not in r.output
    assert made == [tmp_path / "from_env", tmp_path / "f", None]


# ---- a teammate's search tree (Note [a search tree beside a team's kernel] in store/team.py) -------------------------

def sim_search() -> dict:
    from test_mcts import KnobTree, SimEvaluator, run

    return run([KnobTree(depth=2)], SimEvaluator(), iterations=6, seed=3).record.to_json()


def test_a_team_row_links_to_the_tree_the_team_holds(tiers, tmp_path):
    view, rec = tiers
    team = TeamStore(tmp_path / "team")
    team.write_search(rec["b"].key, sim_search())
    listing = view.listing()
    assert rows_by(listing, rec["b"].key)["team"]["has_search"]
    assert not rows_by(listing, rec["b"].key)["shipped"]["has_search"]  # shipped records come without trees
    assert not rows_by(listing, rec["a"].key)["team"]["has_search"]  # the local tree is not the team record's
    assert view.record_view("team", rec["b"].key)["row"]["has_search"]


def test_a_team_tree_is_served_with_from_team(served, tmp_path):
    server, rec = served
    key = rec["b"].key
    TeamStore(tmp_path / "team").write_search(key, sim_search())
    status, body = get(server, f"/api/searches/{key}?from=team")
    assert status == 200 and len(body["nodes"]) > 1 and body["listing"]["state"] == "finished"
    status, node = get(server, f"/api/searches/{key}/nodes/1?from=team&against=0")
    assert status == 200 and node["id"] == 1 and node["diff_against"] == 0
    status, body = get(server, f"/api/searches/{key}")
    assert status == 404 and "no search record" in body["error"], "the local cache holds no tree of it"
    status, body = get(server, f"/api/searches/{key}?from=elsewhere")
    assert status == 400 and "read from local, team or team@<model>" in body["error"]


def test_from_team_without_a_team_store_is_404(tmp_path):
    server = UiServer(tmp_path, "127.0.0.1", 0)
    server.start()
    try:
        status, body = get(server, f"/api/searches/{'a' * 64}?from=team")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 404 and "no team store is configured" in body["error"]


def test_a_search_record_too_big_is_refused_unread(tmp_path, monkeypatch):
    from forge_backend.search.records import CorruptRecord
    from forge_backend.ui import data

    (tmp_path / f"{'a' * 64}.json").write_text(json.dumps(sim_search()))
    data.load(tmp_path, "a" * 64)
    monkeypatch.setattr(data, "MAX_SEARCH_BYTES", 100)
    with pytest.raises(CorruptRecord, match="bytes, over the 100 a search record may have"):
        data.load(tmp_path, "a" * 64)


# ---- a team GPU model's folder (Note [a team of several GPU models] in store/team.py) -------------------------------

H100 = "NVIDIA H100 80GB HBM3"


def on_h100(rec, us: float):
    return faster(rec, us).replace(provenance={**rec.provenance, "gpu": H100})


def test_a_team_models_folder_is_a_tier_of_its_own_that_answers_nothing(tiers, tmp_path):
    view, rec = tiers
    team = TeamStore(tmp_path / "team")
    h100 = on_h100(rec["b"], 1.5)
    assert team.publish(h100, {"winner_id": 0, "nodes": [{"candidate": {"source": h100.candidate["source"]}}]}).written
    listing = view.listing()
    assert [t["name"] for t in listing["tiers"]] == ["local", "team", "shipped", "team@nvidia-h100-80gb-hbm3"]
    rows = rows_by(listing, rec["b"].key)
    assert rows["team"]["answers"] and not rows["team@nvidia-h100-80gb-hbm3"]["answers"]
    assert rows["team@nvidia-h100-80gb-hbm3"]["gpu"] == H100 and rows["team@nvidia-h100-80gb-hbm3"]["has_search"]
    whole = view.record_view("team@nvidia-h100-80gb-hbm3", rec["b"].key)
    assert whole["row"]["kforge_us"] == 1.5 and whole["answers"] == "team"
    assert whole["in_tiers"] == ["team", "shipped", "team@nvidia-h100-80gb-hbm3"]


def test_a_team_models_folder_is_served_with_its_tree(served, tmp_path):
    server, rec = served
    team = TeamStore(tmp_path / "team")
    h100 = on_h100(rec["b"], 1.5)
    tree = sim_search()
    tree["nodes"][tree["winner_id"]]["candidate"]["source"] = h100.candidate["source"]
    assert team.publish(h100, tree).tree
    status, body = get(server, f"/api/kernels/team@nvidia-h100-80gb-hbm3/{rec['b'].key}")
    assert status == 200 and body["row"]["tier"] == "team@nvidia-h100-80gb-hbm3" and body["row"]["gpu"] == H100
    status, body = get(server, f"/api/searches/{rec['b'].key}?from=team%40nvidia-h100-80gb-hbm3")
    assert status == 200 and len(body["nodes"]) > 1
    for tier in ("team@nvidia-a100", "team@..", "team@"):  # no such folder: only folders that exist are tiers
        status, body = get(server, f"/api/kernels/{tier}/{rec['b'].key}")
        assert status == 404 and "is not a tier" in body["error"], body
    status, body = get(server, f"/api/searches/{rec['b'].key}?from=team@nvidia-a100")
    assert status == 400 and "team@<model>" in body["error"]
