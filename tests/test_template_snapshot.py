"""benchmarks/template_snapshot.py: the snapshot that shows a template refactor left every generated kernel as it was.
It must be the same from run to run, and it must see a change in one candidate's source."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import template_cards as tc  # noqa: E402
import template_snapshot as ts  # noqa: E402
from forge_backend.search.templates import softmax  # noqa: E402


def _cards() -> dict:
    return {"softmax": tc.softmax((3, 1000), "float16", log=True), "conv": tc.causal_conv1d(96, 37)}


def test_a_snapshot_is_the_same_from_run_to_run() -> None:
    first, second = ts.snapshot(_cards(), nodes=6), ts.snapshot(_cards(), nodes=6)
    assert first == second and ts.differences(first, second) == []
    entry = first["softmax"]
    assert entry["family"] == "softmax" and entry["root"] == entry["seeds"][0]
    assert len(entry["nodes"]) == 6 and all(len(n["candidate"]) == 16 for n in entry["nodes"])
    assert {f"defaults:{s}" for s in softmax.STRATEGIES} <= set(entry)


def test_a_changed_source_is_reported_with_its_params(monkeypatch) -> None:
    before = ts.snapshot(_cards(), nodes=4)
    generate = softmax.generate

    def changed(card, p):  # the same candidate with one more comment line in its source
        cand = generate(card, p)
        return dataclasses.replace(cand, source=cand.source + "// changed\n") if p.get("strategy") == "group" \
            else cand

    monkeypatch.setattr(softmax, "generate", changed)
    after = ts.snapshot(_cards(), nodes=4)
    diff = ts.differences(before, after)
    assert diff and all(line.startswith("softmax: params {") and "'strategy': 'group'" in line for line in diff)
    assert not any(line.startswith("conv") for line in diff)
