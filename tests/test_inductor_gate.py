"""Under inner="inductor" a cached kernel is used only where it beats Inductor's own single-op time (Note [the
baseline inside Inductor] in runtime/cuda_provider.py). The worker is a fake that answers with a chosen time."""
import pytest

from forge_backend.config import KforgeConfig
from forge_backend.inductor_gate import HOST_COST_US
from forge_backend.runtime.cuda_provider import CudaProvider
from test_store import make_record


class FakeClient:
    def __init__(self, inductor_us: float) -> None:
        self.inductor_us, self.calls = inductor_us, []

    def call(self, request, timeout_s=None):
        self.calls.append(request["cmd"])
        return {"inductor_us": self.inductor_us}


def provider_with(tmp_path, record, inductor_us):
    cfg = KforgeConfig.load({"cache_dir": str(tmp_path), "inner": "inductor"}, env={})
    prov = CudaProvider(cfg)
    prov.local.put(record)
    prov._client = FakeClient(inductor_us)
    return prov, cfg


@pytest.mark.parametrize("inductor_us,used", [(20.0, True), (4.1 * 1.03 + HOST_COST_US / 2, False),
                                              (4.1 * 1.03 + HOST_COST_US + 0.01, True),
                                              (4.1 * 1.03 + HOST_COST_US - 0.01, False)])
def test_kernel_must_beat_inductor_by_the_margin_and_the_call(tmp_path, inductor_us, used):
    rec = make_record()  # kforge_us 4.1
    prov, cfg = provider_with(tmp_path, rec, inductor_us)
    card = rec.card_obj()
    assert (prov._vs_inductor_times(card, cfg) is not None) is used


def test_inductor_time_is_measured_once_and_kept_in_the_record(tmp_path):
    rec = make_record()
    prov, cfg = provider_with(tmp_path, rec, 19.0)
    card = rec.card_obj()
    assert prov._vs_inductor_times(card, cfg) == (4.1, 19.0) and prov._client.calls == ["inductor_baseline"]
    assert prov.local.get(card.key).timings["inductor_us"] == 19.0
    fresh, _ = provider_with(tmp_path / "unused", rec, 1.0)  # a new process reads the stored time, no worker call
    fresh.local = prov.local
    fresh.store = prov.store
    assert fresh._vs_inductor_times(card, cfg) and fresh._client.calls == []


def test_a_pytorch_decision_is_never_used(tmp_path):
    rec = make_record(decision="pytorch")
    prov, cfg = provider_with(tmp_path, rec, 100.0)
    assert prov._vs_inductor_times(rec.card_obj(), cfg) is None and prov._client.calls == []
