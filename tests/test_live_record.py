"""A search's record written as the search grows (Note [a search record written as it grows] in
runtime/live_record.py): visible while it runs, kept when it is cut short. CPU only: a fake worker client, the MCTS
tests' simulated proposer and evaluator, no GPU and no timing."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from template_cards import softmax
from test_mcts import EAGER, FLOOR, KnobTree, SimEvaluator

from forge_backend.config import KforgeConfig
from forge_backend.runtime import live_record, search_runner
from forge_backend.runtime.live_record import INTERRUPTED, LiveRecord
from forge_backend.search.mcts import SearchProgress
from forge_backend.search.records import NodeRecord, SearchRecord
from forge_backend.store.local import LocalStore
from forge_backend.ui import data


class FakeClient:
    """The worker's answer to "baseline", which is all run_search asks of the client itself."""

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        assert request["cmd"] == "baseline"
        return {"eager_us": EAGER, "floor_us": FLOOR, "bandwidth_gbps": 4000.0}


def search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evaluator: SimEvaluator, iterations: int = 6):
    card = softmax([8, 1024])
    cfg = KforgeConfig.load({"cache_dir": tmp_path})
    store = LocalStore(tmp_path)
    monkeypatch.setattr(search_runner, "WorkerEvaluator", lambda client, arch, cache_dir: evaluator)
    monkeypatch.setattr(live_record, "EVERY_S", 0.0)  # a snapshot after every candidate: no clock in the test
    seen: list[int] = []
    outcome = search_runner.run_search(card, cfg, FakeClient(), store, iterations, 600.0,
                                       proposers=[KnobTree(depth=2)], on_progress=lambda p: seen.append(p.iteration))
    return card, store, outcome, seen


def read(store: LocalStore, key: str) -> dict[str, Any]:
    return json.loads((store.searches_dir / f"{key}.json").read_text())


def test_the_record_is_on_disk_while_the_search_runs(tmp_path, monkeypatch):
    snapshots: list[dict[str, Any]] = []
    card = softmax([8, 1024])
    store_dir = LocalStore(tmp_path).searches_dir

    def look() -> None:  # called as each candidate is evaluated: what would `kforge ui` read now?
        snapshots.append(json.loads((store_dir / f"{card.key}.json").read_text()))

    _, store, outcome, seen = search(tmp_path, monkeypatch, SimEvaluator(on_evaluate=look))
    assert seen == list(range(1, len(seen) + 1)) and seen, "the caller's own on_progress still runs"
    assert snapshots, "the record existed before the first candidate was evaluated"
    assert all(s["finished_at"] is None for s in snapshots)
    assert snapshots[0]["nodes"][0]["status"] == "root"
    assert max(len(s["nodes"]) for s in snapshots) > 1, "later snapshots hold the candidates evaluated so far"
    final = read(store, card.key)
    assert final["finished_at"] is not None and final["decision"] == outcome.result.record.decision
    assert len(final["nodes"]) == len(outcome.result.record.nodes)


def test_a_search_that_raises_keeps_its_tree_marked_interrupted(tmp_path, monkeypatch):
    calls = {"n": 0}

    def broken_worker() -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("the worker process died")

    card = softmax([8, 1024])
    with pytest.raises(RuntimeError, match="worker process died"):
        search(tmp_path, monkeypatch, SimEvaluator(on_evaluate=broken_worker))
    store = LocalStore(tmp_path)
    saved = SearchRecord.from_json(read(store, card.key))
    assert saved.stop_reason == INTERRUPTED and saved.finished_at is None
    assert "RuntimeError: the worker process died" in saved.reason
    assert sum(n.status == "ok" for n in saved.nodes) >= 2, "the two candidates evaluated before the crash"
    mtime = (store.searches_dir / f"{card.key}.json").stat().st_mtime
    assert data.search_state(saved, mtime, mtime) == "interrupted"
    assert store.get(card.key) is None, "no kernel record: the search made no decision"


def progress(iteration: int, budget: int, record: SearchRecord | None) -> SearchProgress:
    last = NodeRecord(iteration, 0, "templates", f"step {iteration}", status="ok")
    return SearchProgress(iteration, budget, iteration + 1, 0.0, None, None, None, last, record)


class CountingStore:
    def __init__(self, error: OSError | None = None) -> None:
        self.writes: list[int] = []
        self.error = error

    def put_search(self, key: str, d: dict[str, Any]) -> None:
        if self.error is not None:
            raise self.error
        self.writes.append(d["iterations"])


def test_writes_are_at_most_one_a_period_and_the_last_iteration_always(tmp_path):
    now = {"t": 0.0}
    store = CountingStore()
    live = LiveRecord(store, "a" * 64, every_s=1.0, clock=lambda: now["t"])  # type: ignore[arg-type]
    record = SearchRecord("a" * 64, "aten._softmax.default", {}, EAGER, FLOOR)
    for i, t in enumerate([0.0, 0.4, 0.9, 1.1, 1.5, 1.6], start=1):
        now["t"], record.iterations = t, i
        live(progress(i, 6, record))
    assert store.writes == [1, 4, 6]  # t=0 (the first), t=1.1 (a period after it), and the budget's last iteration


def test_a_refused_write_warns_once_and_the_search_goes_on(caplog):
    store = CountingStore(PermissionError(13, "Permission denied"))
    seen = []
    live = LiveRecord(store, "b" * 64, then=lambda p: seen.append(p.iteration), every_s=0.0)  # type: ignore[arg-type]
    record = SearchRecord("b" * 64, "aten._softmax.default", {}, EAGER, FLOOR)
    with caplog.at_level(logging.WARNING, logger="kforge"):
        for i in (1, 2, 3):
            live(progress(i, 3, record))
    assert seen == [1, 2, 3]
    assert sum("could not write the search record" in r.getMessage() for r in caplog.records) == 1
