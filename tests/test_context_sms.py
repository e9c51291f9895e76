"""The SM count a launcher resolves its plan with (CPU, a faked driver): a current green context's share of its own
GPU, else the GPU's; the GPU test with torch's green contexts is in test_green_context_gpu.py."""
from types import SimpleNamespace

import pytest
import torch

from forge_backend.runtime import launch

OK = 0


class FakeDriver:
    CUdevResourceType = SimpleNamespace(CU_DEV_RESOURCE_TYPE_SM=1)

    def __init__(self, ctx: int, device: int, sms: int | None) -> None:
        self.ctx, self.device, self.sms = ctx, device, sms

    def cuCtxGetCurrent(self):
        return OK, self.ctx

    def cuCtxGetDevice(self):
        return OK, self.device

    def cuCtxGetDevResource(self, ctx, kind):
        assert ctx == self.ctx and kind == 1
        if self.sms is None:  # a driver without green contexts
            return 801, None
        return OK, SimpleNamespace(sm=SimpleNamespace(smCount=self.sms))


@pytest.fixture
def gpu_of_132(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(multi_processor_count=132))

    def use(driver):
        monkeypatch.setattr(launch, "_driver", lambda: driver)
    return use


def test_a_green_context_of_the_gpu_gives_its_share(gpu_of_132):
    gpu_of_132(FakeDriver(ctx=7, device=1, sms=112))
    assert launch.context_sm_count(1) == 112


def test_a_context_of_another_gpu_is_not_asked(gpu_of_132):
    gpu_of_132(FakeDriver(ctx=7, device=0, sms=112))
    assert launch.context_sm_count(1) == 132


def test_no_current_context_gives_the_gpus_count(gpu_of_132):
    gpu_of_132(FakeDriver(ctx=0, device=0, sms=112))
    assert launch.context_sm_count(0) == 132


def test_a_driver_without_the_query_gives_the_gpus_count(gpu_of_132):
    gpu_of_132(FakeDriver(ctx=7, device=0, sms=None))
    assert launch.context_sm_count(0) == 132
    gpu_of_132(SimpleNamespace(cuCtxGetCurrent=lambda: (OK, 7), cuCtxGetDevice=lambda: (OK, 0)))  # bindings < 12.4
    assert launch.context_sm_count(0) == 132
