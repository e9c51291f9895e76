"""Note [a record timed on another GPU model] (store/reverified.py), on the CPU: which record this machine keeps after
re-verifying a kernel, and how the re-verification times it (the worker and the compiler replaced by fakes)."""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_backend.config import KforgeConfig
from forge_backend.runtime import cuda_provider
from forge_backend.store import ShippedStore, TieredStore
from forge_backend.store.reverified import Reverified, taken_here, timed_elsewhere

from test_store import make_record  # noqa: E402 (tests/ is on sys.path under pytest's default import mode)

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


def shipped_record(**timings):
    """An H200's record (make_record: 4.1 us, 1.29x eager there), as a shipped copy with Inductor's time too."""
    rec = make_record().marked(source="shipped", trusted=False)
    return rec.replace(timings={**rec.timings, "inductor_us": 6.0, **timings})


def test_a_record_of_this_gpu_model_is_kept_as_it_is():
    rec = shipped_record()
    kept, why = taken_here(rec, Reverified(True, "verified; 4.05 us, 1.31x eager", H200, (4.05,), 5.3, 4200.0), 0.03)
    assert kept.trusted and kept.source == "local" and kept.provenance["reverified"] is True
    assert kept.timings == rec.timings and kept.provenance["gpu"] == H200 and why == "verified; 4.05 us, 1.31x eager"


def test_a_record_of_another_model_is_kept_with_this_gpus_times():
    rec = shipped_record()
    found = Reverified(True, "verified; 4.24 us, 1.25x eager", H100, (4.3, 4.2, 4.24), 5.3, 3000.0)
    kept, why = taken_here(rec, found, 0.03)
    floor = rec.card_obj().floor_us(3000.0)
    assert kept.trusted and kept.source == "local" and kept.provenance["reverified"] is True
    timings = dict(kept.timings)
    assert timings.pop("remeasured_us") == [4.3, 4.2, 4.24]
    assert timings == pytest.approx({"kforge_us": 4.24, "eager_us": 5.3, "speedup_vs_eager": 5.3 / 4.24,
                                     "bandwidth_gbps": 3000.0, "floor_us": floor, "pct_bw": 100.0 * floor / 4.24})
    assert "inductor_us" not in kept.timings  # the H200's Inductor time: the gate times Inductor's op here instead
    assert kept.provenance["gpu"] == H100
    assert kept.provenance["first_timed_on"] == {"gpu": H200, "kforge_us": 4.1, "speedup_vs_eager": 1.29,
                                                 "pct_bw": 4.2}
    assert why == f"verified; 4.24 us, 1.25x eager; re-timed here, it was timed on {H200} at 1.29x"
    assert kept.card == rec.card and kept.candidate == rec.candidate and kept.key == rec.key


@pytest.mark.parametrize("margin,taken", [(0.03, False), (0.0, True)])
def test_a_record_of_another_model_is_taken_only_beating_eager_by_the_margin(margin, taken):
    found = Reverified(True, "verified", H100, (5.25, 5.2, 5.3), 5.3, 3000.0)  # 1.01x eager on the H100
    kept, why = taken_here(shipped_record(), found, margin)
    assert (kept is not None) is taken
    if not taken:
        assert why == f"slower here: 1.01x eager on {H100} (timed on {H200} at 1.29x), short of the 3% margin"


def test_a_record_of_an_unnamed_gpu_counts_as_another_models():
    rec = shipped_record().marked(gpu="")
    assert timed_elsewhere(rec, H200) and not timed_elsewhere(shipped_record(), H200)
    kept, why = taken_here(rec, Reverified(True, "verified", H200, (2.0,), 5.3, 4000.0), 0.03)
    assert kept.timings["kforge_us"] == 2.0 and "timed on an unnamed GPU at 1.29x" in why


def test_a_failed_kernel_is_not_taken_and_a_pass_without_times_is_refused():
    kept, why = taken_here(shipped_record(), Reverified(False, "values: max_rel_err 0.5", H100), 0.03)
    assert kept is None and why == "failed re-verification: values: max_rel_err 0.5"
    with pytest.raises(ValueError, match="carries no times"):
        taken_here(shipped_record(), Reverified(True, "verified", H100), 0.03)


def test_pytorchs_decision_is_not_retimed():
    rec = make_record(decision="pytorch").marked(source="shipped", trusted=False)
    kept, _ = taken_here(rec, Reverified(True, "decision 'pytorch': nothing to verify", H100), 0.03)
    assert kept.trusted and kept.decision == "pytorch" and kept.provenance["gpu"] == H200


# --------------------------------------------------------------------------------------------------------------------
# reverify_record: what it asks the worker


class FakeWorker:
    """Answers ``evaluate`` and ``remeasure`` as a search worker on ``gpu`` would, recording the commands."""

    def __init__(self, evaluation: dict, remeasured: list[float]):
        self.evaluation, self.remeasured, self.asked, self.device_index = evaluation, remeasured, [], 0

    def call(self, req: dict, timeout_s: float | None = None) -> dict:
        self.asked.append((req["cmd"], req.get("runs")))
        if req["cmd"] == "evaluate":
            return self.evaluation
        return {"times_us": self.remeasured, "eager_us": self.evaluation.get("eager_us")}


@pytest.fixture
def on_gpu(monkeypatch):
    """Pretend this machine has one GPU named ``name`` (set by the test); NVRTC replaced by a fake cubin."""
    gpu = SimpleNamespace(name=H100)
    monkeypatch.setattr(cuda_provider.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda_provider.torch.cuda, "get_device_name", lambda index=None: gpu.name)
    monkeypatch.setattr(cuda_provider, "compile_candidate", lambda cand, arch, cache_dir: SimpleNamespace(cubin=b"x"))
    return gpu


PASSED = {"ok": True, "time_us": 4.0, "eager_us": 5.3, "speedup": 5.3 / 4.0, "bandwidth_gbps": 3000.0,
          "verify_report": {}}


def test_reverify_times_a_record_of_another_model_in_fresh_runs(on_gpu, tmp_path):
    worker = FakeWorker(PASSED, [4.3, 4.2, 4.24])
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path)}, env={})
    found = cuda_provider.reverify_record(shipped_record(), worker, cfg)
    assert worker.asked == [("evaluate", None), ("remeasure", 3)]
    assert found.ok and found.gpu == H100 and found.times_us == (4.3, 4.2, 4.24) and found.kforge_us == 4.24
    assert found.why == f"verified; 4.24 us, 1.25x eager on {H100}"


def test_reverify_of_a_record_of_this_model_takes_one_timing(on_gpu, tmp_path):
    on_gpu.name = H200
    worker = FakeWorker(PASSED, [9.9])
    found = cuda_provider.reverify_record(shipped_record(), worker, KforgeConfig.load({"cache_dir": str(tmp_path)},
                                                                                      env={}))
    assert worker.asked == [("evaluate", None)] and found.times_us == (4.0,) and found.gpu == H200


def test_reverify_reports_the_failed_check_without_timing(on_gpu, tmp_path):
    worker = FakeWorker({"ok": False, "verify_report": {"failed_check": "values", "message": "0.5 off"}}, [])
    found = cuda_provider.reverify_record(shipped_record(), worker, KforgeConfig.load({"cache_dir": str(tmp_path)},
                                                                                      env={}))
    assert worker.asked == [("evaluate", None)] and not found.ok and found.why == "values: 0.5 off"


# --------------------------------------------------------------------------------------------------------------------
# a compile's lookup


def provider_over(tmp_path: Path, rec, monkeypatch, found: Reverified, search: str = "off"):
    """A provider whose shipped tier holds ``rec``; re-verification answers ``found``; loading a kernel records it."""
    shipped_dir = tmp_path / "shipped"
    shipped_dir.mkdir()
    (shipped_dir / f"{rec.key}.json").write_text(rec.dumps(indent=1))
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path / "cache"), "search": search}, env={})
    provider = cuda_provider.CudaProvider(cfg)
    provider.store = TieredStore(provider.local, ShippedStore(shipped_dir))
    provider._client = object()
    loaded = []
    monkeypatch.setattr(cuda_provider, "reverify_record", lambda record, client, cfg_: found)
    monkeypatch.setattr(cuda_provider, "impl_from_record", lambda card, record, cfg_: loaded.append(record) or record)
    return provider, cfg, loaded


def test_a_compile_uses_a_shipped_kernel_with_this_gpus_times(tmp_path, monkeypatch):
    rec = make_record()
    found = Reverified(True, "verified", H100, (4.3, 4.2, 4.24), 5.3, 3000.0)
    provider, cfg, loaded = provider_over(tmp_path, rec, monkeypatch, found)
    impl = provider._kernel_for(rec.card_obj(), cfg, time.monotonic() + 60)
    assert impl is loaded[0] and impl.timings["kforge_us"] == 4.24 and impl.provenance["gpu"] == H100
    assert provider.local.get(rec.key).timings["kforge_us"] == 4.24  # the next compile starts from these times


def test_a_compile_leaves_a_shipped_kernel_slower_here_to_pytorch(tmp_path, monkeypatch, caplog):
    rec = make_record()
    found = Reverified(True, "verified", H100, (5.3, 5.2, 5.25), 5.3, 3000.0)
    provider, cfg, loaded = provider_over(tmp_path, rec, monkeypatch, found)
    with caplog.at_level("WARNING", logger="kforge"):
        assert provider._kernel_for(rec.card_obj(), cfg, time.monotonic() + 60) is None
    assert loaded == [] and provider.local.get(rec.key) is None
    assert f"not used on this GPU (slower here: 1.01x eager on {H100}" in caplog.text and "left to PyTorch" in caplog.text
