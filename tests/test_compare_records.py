"""benchmarks/compare_records.py on the CPU: which records it pairs, and how a row sums up the rounds."""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import compare_records as cr  # noqa: E402

SHIPPED = ROOT / "kernels_cache"


def _kernel_and_decision() -> tuple[Path, Path]:
    kernel = decision = None
    for path in sorted(SHIPPED.glob("*.json")):
        d = json.loads(path.read_text())
        if d["decision"] == "kernel" and kernel is None:
            kernel = path
        if d["decision"] == "pytorch" and decision is None:
            decision = path
    assert kernel and decision
    return kernel, decision


def test_only_kernels_on_both_sides_are_paired(tmp_path: Path):
    kernel, decision = _kernel_and_decision()
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    for path in (kernel, decision):
        shutil.copy(path, old)
        shutil.copy(path, new)
    (new / "index.json").write_text("{}")  # an exported bundle's index is not a record
    keys = cr.common_keys(cr.kernel_records(old), cr.kernel_records(new))
    assert keys == [kernel.stem]
    (new / kernel.name).unlink()
    assert cr.common_keys(cr.kernel_records(old), cr.kernel_records(new)) == []


def test_a_signature_that_differs_under_one_key_is_refused_and_a_card_may_differ():
    kernel, _ = _kernel_and_decision()
    recs = cr.kernel_records(SHIPPED)
    card = json.loads(json.dumps(recs[kernel.stem].card))
    card["sizes"]["rows"] = -1  # a card carries each run's baselines: not compared
    assert cr.common_keys(recs, {**recs, kernel.stem: dataclasses.replace(recs[kernel.stem], card=card)})
    signature = {**recs[kernel.stem].signature, "arch": "sm_80"}
    with pytest.raises(SystemExit, match="signatures differ"):
        cr.common_keys(recs, {**recs, kernel.stem: dataclasses.replace(recs[kernel.stem], signature=signature)})


def test_a_row_takes_medians_and_their_ratio_or_the_failure():
    card = {"op": "aten._softmax.default", "inputs": [{"dtype": "float32", "shape": [1, 64, 262144]}]}
    old = [{"time_us": 36.0, "pct_bw": 87.0}, {"time_us": 36.4, "pct_bw": 86.0}, {"time_us": 40.0, "pct_bw": 80.0}]
    new = [{"time_us": 35.0, "pct_bw": 89.0}, {"time_us": 34.0, "pct_bw": 91.0}, {"time_us": 35.2, "pct_bw": 88.0}]
    row = cr.summarise(card, old, new, {"k": 6}, {"k": 7})
    assert row["old_us"] == 36.4 and row["new_us"] == 35.0 and row["old_over_new"] == pytest.approx(36.4 / 35.0)
    assert row["input"] == "float32[1, 64, 262144]" and row["new_pct_bw"] == 89.0
    failed = cr.summarise(card, old, [{"failed": "poison: output untouched"}] + new[1:], {}, {})
    assert failed["new_failed"] == "poison: output untouched"
    assert "new_us" not in failed and "old_over_new" not in failed
