"""``kforge ui``: the views of search records (ui/data.py), the read-only server over them (ui/server.py) and the
command. CPU only: records come from the MCTS tests' simulated search, the server runs on a loopback port of its own.
"""
from __future__ import annotations

import http.client
import json
import os
import socket
import time
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from test_mcts import KnobTree, SimEvaluator, run
from typer.testing import CliRunner

from forge_backend.cli import app
from forge_backend.runtime.live_record import INTERRUPTED
from forge_backend.search.records import SearchRecord
from forge_backend.store.local import LocalStore, searches_dir
from forge_backend.store.queue import MissQueue
from forge_backend.ui import data
from forge_backend.ui.server import UiServer, finite, host_name

ROOT = Path(__file__).resolve().parents[1]


def fails_at_1(p: dict[str, Any]) -> bool:
    return p.get("path", "").startswith("1")


def finished_record() -> SearchRecord:
    """A whole simulated search: a winner, verified losers and the failed branch "1"."""
    return run([KnobTree(depth=2)], SimEvaluator(eval_fails=fails_at_1), iterations=12, seed=3).record


def save(directory: Path, record: SearchRecord, key: str | None = None) -> str:
    key = key or record.key
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{key}.json").write_text(json.dumps(record.to_json()))
    return key


def age(directory: Path, key: str, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(directory / f"{key}.json", (t, t))


# ---- views --------------------------------------------------------------------------------------------------------

def test_the_ui_reads_where_the_store_writes(tmp_path):
    assert searches_dir(tmp_path) == LocalStore(tmp_path).searches_dir


def test_state_of_a_record():
    rec = finished_record()
    assert data.search_state(rec, mtime=0.0, now=1e9) == "finished"  # a decision is final, however old
    rec.finished_at = None
    assert data.search_state(rec, mtime=1000.0, now=1000.0 + 5) == "live"
    assert data.search_state(rec, mtime=1000.0, now=1000.0 + data.STALE_S + 1) == "interrupted"  # its process died
    rec.stop_reason = INTERRUPTED
    assert data.search_state(rec, mtime=1000.0, now=1000.0) == "interrupted"


def test_listing_puts_live_searches_first_and_shows_unreadable_files(tmp_path):
    done = finished_record()
    live = finished_record()
    live.finished_at = None
    k_done = save(tmp_path, done, "a" * 64)
    k_live = save(tmp_path, live, "b" * 64)
    age(tmp_path, k_live, 60)  # older than the finished one, and still first: it is live
    (tmp_path / ("c" * 64 + ".json")).write_text("{ not json")
    (tmp_path / "notes.json").write_text("{}")  # not a key: not a search record
    entries = data.Listings(tmp_path)()
    assert [e.key for e in entries][:1] == [k_live]
    assert {e.key: e.state for e in entries} == {k_live: "live", k_done: "finished", "c" * 64: "unreadable"}
    bad = next(e for e in entries if e.state == "unreadable")
    assert "not valid JSON" in bad.reason
    ok = next(e for e in entries if e.key == k_done)
    assert ok.decision == done.decision and ok.iterations == done.iterations
    assert ok.failed == len(done.failed_nodes()) > 0
    assert ok.iterations_budget == 12


def test_listings_parse_a_file_again_only_when_it_changed(tmp_path, monkeypatch):
    rec = finished_record()
    rec.finished_at = None
    key = save(tmp_path, rec)
    save(tmp_path, finished_record(), "a" * 64)
    loads = []
    real = data.SearchRecord.load
    monkeypatch.setattr(data.SearchRecord, "load", lambda path: loads.append(Path(path).stem) or real(path))
    listings = data.Listings(tmp_path)
    t0 = (tmp_path / f"{key}.json").stat().st_mtime
    assert {e.key: e.state for e in listings(now=t0)} == {key: "live", "a" * 64: "finished"}
    assert sorted(loads) == sorted([key, "a" * 64])
    loads.clear()
    later = listings(now=t0 + data.STALE_S + 1)  # nothing changed on disk, but time passed: no parse, a new state
    assert loads == [] and {e.key: e.state for e in later}[key] == "interrupted"
    rec.iterations += 1
    save(tmp_path, rec, key)  # the search wrote again
    os.utime(tmp_path / f"{key}.json", (t0 + 2, t0 + 2))  # a later mtime, even on a file system of coarse times
    assert [e.iterations for e in listings() if e.key == key] == [rec.iterations] and loads == [key]
    (tmp_path / f"{key}.json").unlink()
    assert [e.key for e in listings()] == ["a" * 64]


def test_listing_of_a_cache_without_searches_is_empty(tmp_path):
    assert data.Listings(tmp_path / "missing")() == []


def test_search_view_has_every_node_without_sources(tmp_path):
    rec = finished_record()
    key = save(tmp_path, rec)
    view = data.search_view(tmp_path, key)
    assert [n["id"] for n in view["nodes"]] == list(range(len(rec.nodes)))
    assert all("source" not in n and "candidate" not in n for n in view["nodes"])
    assert view["winner_id"] == rec.winner_id and view["best_id"] == rec.best_node().id
    assert view["failures_by_stage"] == {"verify": len(rec.failed_nodes())}


def test_node_view_diffs_against_the_parent_and_says_why(tmp_path):
    rec = finished_record()
    key = save(tmp_path, rec)
    child = next(n for n in rec.nodes if n.parent not in (None, 0) and n.status == "ok")
    parent = rec.node(child.parent)
    v = data.node_view(tmp_path, key, child.id)
    assert v["source"] == child.candidate["source"]
    assert f"--- node {parent.id}" in v["diff"] and f"+++ node {child.id}" in v["diff"]
    removed = [line[1:] for line in v["diff"].splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in v["diff"].splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed == parent.candidate["source"].splitlines() and added == child.candidate["source"].splitlines()
    assert v["params_changed"] == {"path": [parent.params["path"], child.params["path"]]}
    assert [s["id"] for s in v["lineage"]] == [0, parent.id, child.id]
    failed = rec.failed_nodes()[0]
    why = data.node_view(tmp_path, key, failed.id)["why"]
    assert why.startswith("failed at verify") and failed.failure_reason in why
    if rec.winner_id is not None:
        assert data.node_view(tmp_path, key, rec.winner_id)["why"] == rec.reason
    assert data.node_view(tmp_path, key, 0)["diff"] == ""  # the root has no source


def test_node_view_diffs_against_another_node_on_request(tmp_path):
    rec = finished_record()
    key = save(tmp_path, rec)
    best = rec.best_node()
    other = next(n for n in rec.nodes if n.status == "ok" and n.id != best.id)
    v = data.node_view(tmp_path, key, other.id, against=best.id)
    assert v["diff_against"] == best.id and f"--- node {best.id}" in v["diff"]
    assert v["params_changed"] == {"path": [best.params["path"], other.params["path"]]}
    assert v["best_id"] == best.id and v["winner_id"] == rec.winner_id
    assert data.node_view(tmp_path, key, other.id)["diff_against"] == other.parent
    with pytest.raises(IndexError):
        data.node_view(tmp_path, key, other.id, against=len(rec.nodes))


def test_node_view_of_a_node_the_record_lacks(tmp_path):
    key = save(tmp_path, finished_record())
    with pytest.raises(IndexError, match="nodes 0.."):
        data.node_view(tmp_path, key, 999)


# ---- the server ---------------------------------------------------------------------------------------------------

@pytest.fixture
def served(tmp_path):
    directory = searches_dir(tmp_path)
    rec = finished_record()
    key = save(directory, rec)
    server = UiServer(tmp_path, "127.0.0.1", 0)
    server.start()
    yield server, key, rec
    server.shutdown()
    server.server_close()


def get(server: UiServer, path: str, method: str = "GET", host: str | None = None):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=10)
    headers = {"Host": host} if host else {}
    conn.request(method, path, headers=headers)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r, body


def test_the_page_and_its_assets_are_served(served):
    server, _, _ = served
    r, body = get(server, "/")
    assert r.status == 200 and r.getheader("Content-Type").startswith("text/html")
    assert b'src="/app.js"' in body and b'href="/style.css"' in body
    for path, kind in (("/app.js", "text/javascript"), ("/style.css", "text/css")):
        r, body = get(server, path)
        assert r.status == 200 and r.getheader("Content-Type").startswith(kind) and body
    assert "script-src 'self'" in r.getheader("Content-Security-Policy")
    assert r.getheader("X-Content-Type-Options") == "nosniff"


def test_the_api_answers_with_the_records(served):
    server, key, rec = served
    r, body = get(server, "/api/searches")
    listing = json.loads(body)
    assert r.status == 200 and [s["key"] for s in listing["searches"]] == [key]
    assert listing["queued"] == []
    assert listing["searches_dir"] == str(server.searches_dir)
    r, body = get(server, f"/api/searches/{key}")
    assert r.status == 200 and len(json.loads(body)["nodes"]) == len(rec.nodes)
    r, body = get(server, f"/api/searches/{key}/nodes/1")
    assert r.status == 200 and json.loads(body)["source"] == rec.node(1).candidate["source"]


@pytest.mark.parametrize("path, status", [
    ("/api/searches/..%2F..%2Fetc%2Fpasswd", 400),
    ("/api/searches/not-a-key/nodes/1", 400),
    ("/api/searches/" + "e" * 64, 404),
    ("/api/nothing", 404),
])
def test_bad_requests_are_refused_with_a_message(served, path, status):
    r, body = get(served[0], path)
    assert r.status == status and json.loads(body)["error"]


def test_the_list_carries_the_misses_queued_for_prewarm(served):
    """Note [a miss kept for later] (store/queue.py): the searches still to come."""
    from test_store import make_record

    server, _, _ = served
    card = make_record(64).card_obj()
    MissQueue(server.cache_dir).add(card, "search='queue': kept for kforge prewarm --queued")
    [q] = json.loads(get(server, "/api/searches")[1])["queued"]
    assert q["key"] == card.key and q["processes"] == 1 and "search='queue'" in q["why"]
    assert q["tensors"].startswith(card.inputs[0].spec.dtype)


def test_a_diff_against_another_node(served):
    server, key, rec = served
    best = rec.best_node()
    r, body = get(server, f"/api/searches/{key}/nodes/1?against={best.id}")
    assert r.status == 200 and json.loads(body)["diff_against"] == best.id
    r, body = get(server, f"/api/searches/{key}/nodes/1?against=best")
    assert r.status == 400 and "a node id is a number" in json.loads(body)["error"]
    r, _ = get(server, f"/api/searches/{key}/nodes/1?against={len(rec.nodes)}")
    assert r.status == 404


def test_a_node_out_of_range_is_404(served):
    server, key, rec = served
    r, body = get(server, f"/api/searches/{key}/nodes/{len(rec.nodes)}")
    assert r.status == 404 and "nodes 0.." in json.loads(body)["error"]


def test_a_corrupt_record_is_422_with_why(served):
    server, _, _ = served
    (server.searches_dir / ("d" * 64 + ".json")).write_text("[1, 2")
    r, body = get(server, "/api/searches/" + "d" * 64)
    assert r.status == 422 and "not valid JSON" in json.loads(body)["error"]


def test_the_server_is_read_only(served):
    server, key, _ = served
    r, _ = get(server, f"/api/searches/{key}", method="DELETE")
    assert r.status == 405 and r.getheader("Allow") == "GET"
    assert (server.searches_dir / f"{key}.json").exists()


def test_a_foreign_host_header_is_refused(served):
    """Note [a local page that other sites cannot read]: a rebound name arrives with its own Host header."""
    server, key, _ = served
    r, _ = get(server, f"/api/searches/{key}", host="attacker.example:8686")
    assert r.status == 403
    port = server.server_address[1]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
        assert get(server, "/api/searches", host=host)[0].status == 200


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 here")
def test_the_server_listens_on_ipv6_loopback(tmp_path):
    try:
        server = UiServer(tmp_path, "::1", 0)
    except OSError as e:  # a kernel without IPv6 configured
        pytest.skip(f"::1 cannot be bound here: {e}")
    server.start()
    try:
        assert server.url.startswith("http://[::1]:") and server.check_host
        conn = http.client.HTTPConnection("::1", server.server_address[1], timeout=10)
        conn.request("GET", "/api/searches")
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        server.shutdown()
        server.server_close()


def test_host_name_strips_the_port():
    assert host_name("LocalHost:8686") == "localhost"
    assert host_name("[::1]:80") == "::1"
    assert host_name("127.0.0.1") == "127.0.0.1"
    assert host_name(None) == ""


def test_non_finite_numbers_become_null(served):
    """Python writes NaN and Infinity into JSON; a browser's JSON.parse refuses them."""
    assert finite({"a": [float("nan"), 1.5, {"b": float("inf")}]}) == {"a": [None, 1.5, {"b": None}]}
    server, key, rec = served
    rec.nodes[1].speedup = float("inf")
    save(server.searches_dir, rec, key)
    r, body = get(server, f"/api/searches/{key}/nodes/1")
    assert r.status == 200 and b"Infinity" not in body and json.loads(body)["speedup"] is None


# ---- the page's script and the package ---------------------------------------------------------------------------

def test_the_script_never_writes_markup():
    """Sources and failure messages can come from an LLM: the page sets text, never HTML."""
    script = resources.files("forge_backend.ui").joinpath("app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink


def test_every_asset_is_package_data():
    """An installed wheel has only what pyproject's package-data names (an editable install hides a miss)."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["forge_backend"]
    ui_dir = ROOT / "forge_backend" / "ui"
    assets = [p for p in ui_dir.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert assets
    for p in assets:
        assert any(p.relative_to(ROOT / "forge_backend").match(g) for g in globs), p.name


# ---- the command --------------------------------------------------------------------------------------------------

def test_ui_refuses_a_bad_port(tmp_path):
    r = CliRunner().invoke(app, ["ui", "--cache-dir", str(tmp_path), "--port", "70000"])
    assert r.exit_code == 1 and "--port must be 0..65535" in r.output


def test_ui_says_when_its_port_is_taken(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = CliRunner().invoke(app, ["ui", "--cache-dir", str(tmp_path), "--port", str(port)])
    assert r.exit_code == 1 and f"port {port}" in r.output and "--port 0" in r.output


def test_ui_prints_its_address_and_stops_on_ctrl_c(tmp_path, monkeypatch):
    def interrupted(self, poll_interval=0.5):
        raise KeyboardInterrupt

    monkeypatch.setattr(UiServer, "serve_forever", interrupted)
    r = CliRunner().invoke(app, ["ui", "--cache-dir", str(tmp_path), "--port", "0"])
    assert r.exit_code == 0, r.output
    assert "kforge ui: http://127.0.0.1:" in r.output and str(searches_dir(tmp_path)) in r.output
    assert "stopped" in r.output
    assert not (tmp_path / "records").exists(), "the UI opened no store: it writes nothing to the cache"
