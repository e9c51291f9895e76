"""benchmarks/two_machines_summary.py on made-up prewarm results (the plan that makes real ones needs two GPUs)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
import two_machines_summary as tm  # noqa: E402

SHARD = "skipped: shard {}/2's (another machine's)"


def row(key: str, status: str, decision: str | None = "kernel") -> dict:
    return {"key": key, "op": "aten._softmax.default", "inputs": "4096x1024", "status": status, "decision": decision,
            "kforge_us": 3.0, "speedup_vs_eager": 2.0, "seconds": 1.5}


def as_promised() -> dict[int, list[dict]]:
    """Machines 0 and 1 each search their shard; 2 takes both kernels; 3 and 4 split k1, k2 by their markers."""
    return {0: [row("k1", "searched"), row("k2", SHARD.format(1), None)],
            1: [row("k1", SHARD.format(0), None), row("k2", "searched")],
            2: [row("k1", "shipped"), row("k2", "shipped")],
            3: [row("k1", "searched"), row("k2", "shipped")],
            4: [row("k1", "shipped"), row("k2", "searched")]}


def verdicts(results) -> dict[str, bool | None]:
    return {c.phase: c.ok for c in tm.checks(results)}


def test_every_phase_as_promised():
    assert verdicts(as_promised()) == {"A": True, "B": True, "C": True}


@pytest.mark.parametrize("machine,rows,phase", [
    (1, [row("k1", "searched"), row("k2", "searched")], "A"),  # a shard searched what the other searched
    (1, [row("k1", SHARD.format(0), None), row("k2", SHARD.format(0), None)], "A"),  # k2 left by both, searched by none
    (2, [row("k1", "searched"), row("k2", "shipped")], "B"),  # the third machine searched again
    (4, [row("k1", "searched"), row("k2", "searched")], "C"),  # the markers did not keep k1 from a second search
], ids=["shards-overlap", "shard-unsearched", "third-searched", "markers-overlap"])
def test_a_broken_promise_is_reported(machine, rows, phase):
    results = as_promised()
    results[machine] = rows
    assert verdicts(results)[phase] is False


def test_missing_results_leave_their_phases_unchecked_and_the_report_says_so(tmp_path):
    results = as_promised()
    for n, rows in results.items():
        if n != 4:
            (tmp_path / f"machine{n}.json").write_text(json.dumps({"results": rows}))
    loaded = tm.load(tmp_path)
    assert sorted(loaded) == [0, 1, 2, 3] and verdicts(loaded) == {"A": True, "B": True, "C": None}
    out = tmp_path / "two_machines.md"
    assert tm.main([str(tmp_path), "--out", str(out)]) == 0
    text = out.read_text()
    assert "- C: the markers split the searches: not checked (no results from machine(s) [4])" in text
    assert "### machine 4\n\n(no results: see its log)" in text and "| aten._softmax.default | 4096x1024 |" in text
