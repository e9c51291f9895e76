"""Search records: JSON round-trip, atomic save/load, corrupt files, and the summaries the UI reads."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forge_backend.contract import Candidate
from forge_backend.search.records import CorruptRecord, NodeRecord, SearchRecord

SRC = 'extern "C" __global__ void k(float* x){}'
PLAN = {"launches": [{"kernel": "k", "grid": [1], "block": [32], "args": ["out:0"]}]}


def make_record() -> SearchRecord:
    cand = Candidate.from_parts(SRC, PLAN, "block 256", {"block": 256}).to_json()
    nodes = [
        NodeRecord(0, None, "eager", "PyTorch's own kernel", status="root", time_us=100.0, speedup=1.0, reward=0.5,
                   visits=4, value_sum=1.9, best_reward=0.8),
        NodeRecord(1, 0, "templates", "block 256", {"block": 256}, cand, "ok", time_us=40.0, pct_bw=50.0,
                   speedup=2.5, reward=0.78, visits=2, value_sum=1.58, best_reward=0.8, created_at=1.0,
                   finished_at=2.0, iteration=1, verify_report={"max_abs": 1e-6, "trials": 3}),
        NodeRecord(2, 1, "llm", "fuse the two passes", {}, cand, "ok", time_us=38.0, speedup=100 / 38, reward=0.8,
                   visits=1, value_sum=0.8, best_reward=0.8, iteration=3, extra={"tokens": 1234, "cost_usd": 0.01}),
        NodeRecord(3, 0, "llm", "warp shuffles", {}, cand, "failed", failure_stage="compile",
                   failure_reason="identifier 'x' is undefined", compile_log="k.cu(3): error: identifier x",
                   visits=1, iteration=2),
        NodeRecord(4, 0, "templates", "vec4 loads", {"vec": 4}, None, "failed", failure_stage="verify",
                   failure_reason="max abs error 0.5", verify_report={"max_abs": 0.5}, visits=1, iteration=4),
        NodeRecord(5, 2, "templates", "block 512", {"block": 512}, cand, "pending"),
    ]
    return SearchRecord("ab" * 32, "aten._softmax.default", {"op": "aten._softmax.default", "sizes": {"rows": 4}},
                        eager_us=100.0, floor_us=20.0, bandwidth_gbps=3000.0, nodes=nodes, winner_id=2,
                        remeasured_id=2, winner_remeasured_us=[38.5, 38.1, 39.0], decision="kernel",
                        reason="node 2 re-measured at 38.5 us", stop_reason="iterations", iterations=4,
                        iterations_to_best=3, started_at=1.0, finished_at=9.0, config={"iterations": 4})


def test_json_round_trip():
    rec = make_record()
    d = rec.to_json()
    assert json.loads(json.dumps(d)) == d  # plain JSON, nothing live
    back = SearchRecord.from_json(d)
    assert back == rec
    assert Candidate.from_json(back.node(1).candidate).params == (("block", 256),)
    assert NodeRecord.from_json(rec.nodes[3].to_json()) == rec.nodes[3]


def test_newer_fields_are_ignored_when_reading():
    d = make_record().to_json()
    d["added_by_a_newer_kforge"] = 1
    d["nodes"][1]["also_new"] = "x"
    assert SearchRecord.from_json(d) == make_record()


def test_save_and_load(tmp_path: Path):
    rec = make_record()
    path = rec.save(tmp_path / "sub" / "search.json")
    assert SearchRecord.load(path) == rec
    assert os.listdir(path.parent) == ["search.json"]  # no temp file left behind


def test_save_replaces_atomically_and_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch):
    path = tmp_path / "search.json"
    old = make_record()
    old.save(path)
    new = make_record()
    new.reason = "changed"

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        new.save(path)
    monkeypatch.undo()
    assert SearchRecord.load(path) == old and os.listdir(tmp_path) == ["search.json"]
    new.save(path)
    assert SearchRecord.load(path).reason == "changed"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"key": "k"}', "\xff\xfe"])
def test_corrupt_files_raise_corrupt_record(tmp_path: Path, text: str):
    path = tmp_path / "bad.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(CorruptRecord, match="bad.json"):
        SearchRecord.load(path)


def test_missing_file_is_not_corrupt(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        SearchRecord.load(tmp_path / "absent.json")


def test_invalid_status_or_decision_is_rejected():
    with pytest.raises(ValueError, match="status"):
        NodeRecord(1, 0, "t", "a", status="great")
    with pytest.raises(ValueError, match="decision"):
        SearchRecord("k", "op", {}, 1.0, 1.0, decision="maybe")
    d = make_record().to_json()
    d["nodes"][1]["status"] = "great"
    with pytest.raises(ValueError):
        SearchRecord.from_json(d)


def test_summaries_explain_the_winner_and_the_failures():
    rec = make_record()
    assert rec.best_node().id == 2 and rec.winner().id == 2
    assert [n.id for n in rec.lineage(2)] == [0, 1, 2]
    assert [n.action for n in rec.lineage(2)][1:] == ["block 256", "fuse the two passes"]
    assert [n.id for n in rec.children(0)] == [1, 3, 4]
    assert rec.failures_by_stage() == {"compile": 1, "verify": 1}
    assert [n.id for n in rec.failed_nodes("compile")] == [3]
    assert rec.nodes[1].mean_value == pytest.approx(0.79) and rec.nodes[5].mean_value == 0.0
    s = rec.summary()
    assert s["best_id"] == 2 and s["ok"] == 2 and s["failed"] == {"compile": 1, "verify": 1}
    assert s["best_pct_roofline"] == pytest.approx(100 * 20 / 38) and s["decision"] == "kernel"
    assert json.dumps(s)


def test_empty_record_summaries():
    rec = SearchRecord("k", "op", {}, 10.0, 2.0)
    assert rec.best_node() is None and rec.winner() is None and rec.failures_by_stage() == {}
    assert rec.summary()["best_speedup"] is None
    assert SearchRecord.from_json(rec.to_json()) == rec
