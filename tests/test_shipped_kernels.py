"""The records shipped in kernels_cache/: each one reads back whole, says what it was measured against, and compiles.

A shipped record is re-verified on the user's GPU before its first use (cuda_provider.reverify_record), so these
checks guard the shipment itself: a truncated or hand-edited file, a record under the wrong name, a kernel record
whose own timings do not beat eager by the margin, or source that no longer passes the screen and NVRTC.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from forge_backend.config import KforgeConfig
from forge_backend.runtime.nvrtc import compile_candidate
from forge_backend.store import ShippedStore

SHIPPED = Path(__file__).resolve().parent.parent / "kernels_cache"


@pytest.fixture(scope="module")
def shipped() -> ShippedStore:
    return ShippedStore(SHIPPED)


def test_every_shipped_file_is_a_record_under_its_own_key(shipped: ShippedStore):
    files = sorted(p.name for p in SHIPPED.iterdir() if p.name != "README.md")
    assert files, "kernels_cache/ holds no records"
    assert files == [f"{k}.json" for k in shipped.keys()], "a file that is not <key>.json"
    report = shipped.check()
    assert report.corrupt == {} and len(report.ok) == len(files)


def test_shipped_records_are_untrusted_and_say_where_they_were_measured(shipped: ShippedStore):
    for key in shipped.keys():
        rec = shipped.read(key)
        assert rec.trusted is False and rec.source == "shipped"
        assert rec.decision in ("kernel", "pytorch")
        assert rec.card["arch"] == rec.signature["arch"]
        assert rec.provenance.get("gpu") and rec.provenance.get("torch"), key


def test_a_shipped_kernel_beat_eager_by_the_margin_when_it_was_measured(shipped: ShippedStore):
    margin = KforgeConfig().margin
    kernels = [shipped.read(k) for k in shipped.keys()]
    kernels = [r for r in kernels if r.decision == "kernel"]
    assert kernels
    for rec in kernels:
        t = rec.timings
        assert rec.verification.get("ok") is True, rec.key
        assert t["kforge_us"] * (1 + margin) <= t["eager_us"], (rec.key, t["kforge_us"], t["eager_us"])


def test_every_shipped_kernel_passes_the_screen_and_compiles_for_its_arch(shipped: ShippedStore, tmp_path: Path):
    compiled = 0
    for key in shipped.keys():
        rec = shipped.read(key)
        cand = rec.candidate_obj()
        if cand is None:
            continue
        assert compile_candidate(cand, rec.signature["arch"], tmp_path).cubin[:4] == b"\x7fELF", key
        compiled += 1
    assert compiled > 0


def test_benchmarks_search_instead_of_reading_the_shipment(monkeypatch):
    """Note [a run that searches sees no shipped records]: after harness.without_shipped_records() this process's
    shipped tier is empty, while the repository's kernels_cache/ is not."""
    import sys

    sys.path.insert(0, str(SHIPPED.parent / "benchmarks"))
    import harness

    monkeypatch.delenv("KFORGE_SHIPPED_DIR", raising=False)
    assert ShippedStore().keys() == ShippedStore(SHIPPED).keys() != []
    folder = harness.without_shipped_records()
    assert ShippedStore().keys() == [] and str(ShippedStore().directory) == folder


@pytest.mark.gpu
def test_every_shipped_kernel_passes_reverification_on_this_gpu(shipped: ShippedStore):
    """What a user's first compile does with a shipped kernel, for all of them, on one worker: each passes the
    verifier on this GPU (records made for another arch are skipped, as `kforge cache verify --gpu` skips them). On
    a GPU of another model than the H200 that timed them, each is also timed in fresh runs (Note [a record timed on
    another GPU model] in store/reverified.py): the artifact lists which of them a compile there would not use."""
    import torch

    from forge_backend.config import KforgeConfig
    from forge_backend.runtime.provider import reverify_records
    from forge_backend.store.reverified import taken_here, timed_elsewhere

    kernels = [shipped.read(k) for k in shipped.keys()]
    results = list(reverify_records(r for r in kernels if r.decision == "kernel"))
    ran = [(rec, found) for rec, found, _ in results if found is not None]
    margin = KforgeConfig.load({}, env={}).margin
    if os.environ.get("TEST_ARTIFACTS_DIR"):  # the re-measured times, beside the shipped ones, for the record
        lines = [f"{rec.key[:12]} {rec.signature['op']} {'ok' if found.ok else 'FAIL'}: "
                 f"{taken_here(rec, found, margin)[1]}" for rec, found in ran]
        Path(os.environ["TEST_ARTIFACTS_DIR"], "shipped_reverify.txt").write_text("\n".join(lines) + "\n")
    failed = [(rec.key[:12], rec.signature["op"], found.why) for rec, found in ran if not found.ok]
    assert not failed, failed
    gpu = torch.cuda.get_device_name()
    elsewhere = [rec for rec, found in ran if timed_elsewhere(rec, gpu)]
    assert all(len(found.times_us) == (3 if timed_elsewhere(rec, gpu) else 1) for rec, found in ran)
    if torch.cuda.get_device_capability() == (9, 0):
        assert len(ran) == len(results) > 0
        assert (elsewhere == []) is (gpu == "NVIDIA H200")  # every shipped record was timed on an H200
