"""Note [a launch the driver refuses at call time] (CPU): which driver errors count as a refusal, and what a call does
after one. The launcher is built without a CUDA module and its launch replaced; the GPU test with the driver's own
refusal is in test_runtime_gpu.py."""
import enum
import logging

import pytest
import torch
from torch._dynamo.utils import counters

from forge_backend.errors import CandidateFailure
from forge_backend.runtime.launch import REFUSALS, Launcher, LaunchRefused, refuses
from planted import unary_card

FakeResult = enum.IntEnum("CUresult", {"CUDA_SUCCESS": 0, "CUDA_ERROR_INVALID_VALUE": 1,
                                       "CUDA_ERROR_ILLEGAL_ADDRESS": 700,
                                       "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE": 720})


def test_refusals_are_configuration_errors_and_not_sticky_ones():
    assert refuses(FakeResult.CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) and refuses(FakeResult.CUDA_ERROR_INVALID_VALUE)
    assert not refuses(FakeResult.CUDA_ERROR_ILLEGAL_ADDRESS) and not refuses(FakeResult.CUDA_SUCCESS)
    assert refuses("CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")  # a result without .name, by its text
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" not in REFUSALS and "CUDA_ERROR_LAUNCH_FAILED" not in REFUSALS


def test_the_drivers_names_are_spelled_as_the_bindings_spell_them():
    driver = pytest.importorskip("cuda.bindings.driver")
    for name in REFUSALS:
        assert refuses(getattr(driver.CUresult, name))
    assert not refuses(driver.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS)


def cpu_launcher(error: Exception | None, fallback=True) -> tuple[Launcher, list[int]]:
    """A launcher of relu over 8 floats whose launch raises ``error`` (or writes relu), on the CPU."""
    card = unary_card("aten.relu.default", 8)
    run = Launcher.__new__(Launcher)
    run.card, run._device_index, run.align, run.refused = card, -1, 1, None
    spec = card.outputs[0].spec
    run.out_specs, run._out_alloc = [spec], [(spec.shape, spec.stride, torch.float32)]
    run._in_strides, run._in_layouts = [spec.stride], [spec.layout_key()]
    run.device = torch.device("cpu")
    run.fallback = (lambda inputs: [torch.relu(inputs[0])]) if fallback else None
    launches = []

    def launch_into(inputs, outputs):
        launches.append(1)
        if error is not None:
            raise error
        outputs[0].copy_(torch.relu(inputs[0]))

    run.launch_into = launch_into
    return run, launches


@pytest.fixture(autouse=True)
def not_capturing(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    counters.clear()


def test_a_refused_launch_runs_pytorchs_op_then_and_on_every_later_call(caplog):
    run, launches = cpu_launcher(LaunchRefused("cuLaunchCooperativeKernel(k) failed: COOPERATIVE_LAUNCH_TOO_LARGE"))
    x = torch.randn(8)
    with caplog.at_level(logging.WARNING, logger="kforge"):
        ys = [run([x])[0] for _ in range(3)]
    for y in ys:
        assert torch.equal(y, torch.relu(x)) and y.stride() == (1,)
    assert launches == [1]  # tried once: the refusal is kept
    assert counters["kforge"]["launch_fallback"] == 3 and counters["kforge"]["kernel_calls"] == 0
    assert caplog.text.count("the driver refused kernel") == 1 and "COOPERATIVE_LAUNCH_TOO_LARGE" in caplog.text
    assert "COOPERATIVE_LAUNCH_TOO_LARGE" in run.refused


def test_a_launch_that_runs_is_counted_as_a_kernel_call():
    run, launches = cpu_launcher(None)
    x = torch.randn(8)
    assert torch.equal(run([x])[0], torch.relu(x))
    assert counters["kforge"]["kernel_calls"] == 1 and counters["kforge"]["launch_fallback"] == 0
    assert run.refused is None


def test_other_launch_errors_are_raised_not_hidden():
    run, _ = cpu_launcher(CandidateFailure("launch", "cuLaunchKernel(k) failed: CUDA_ERROR_ILLEGAL_ADDRESS"))
    with pytest.raises(CandidateFailure, match="ILLEGAL_ADDRESS"):
        run([torch.randn(8)])
    assert run.refused is None and counters["kforge"]["launch_fallback"] == 0


def test_a_refusal_without_a_fallback_is_raised():
    run, _ = cpu_launcher(LaunchRefused("too large"), fallback=False)
    with pytest.raises(LaunchRefused) as e:
        run([torch.randn(8)])
    assert e.value.stage == "launch" and run.refused is None


def test_a_first_refusal_under_a_graph_capture_is_raised(monkeypatch):
    run, launches = cpu_launcher(LaunchRefused("too large"))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(LaunchRefused):
        run([torch.randn(8)])
    assert run.refused is None
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    x = torch.randn(8)
    assert torch.equal(run([x])[0], torch.relu(x)) and run.refused == "too large"
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert torch.equal(run([x])[0], torch.relu(x))  # once refused, PyTorch's op is what a capture records
    assert launches == [1, 1]



# Note [a plan resolved for SMs it was not verified on]: the verification a launcher runs as it is built at an SM
# count its kernel was not verified at, with the verifier replaced
def at_count(monkeypatch, report, fallback=True):
    from forge_backend import verify as verify_mod
    from forge_backend.verify import VerifyReport

    run, launches = cpu_launcher(None, fallback)
    run._num_sms, run._verified_sms = 72, 132
    seen = []

    def fake_verify(card, launch_into, allocate, device):
        seen.append(card.op)
        return report if report is not None else VerifyReport(True, trials_passed=5)

    monkeypatch.setattr(verify_mod, "verify", fake_verify)
    return run, seen


def test_a_kernel_that_passes_at_the_new_count_is_used(monkeypatch):
    run, seen = at_count(monkeypatch, None)
    run._verify_at_this_count()
    assert seen == ["aten.relu.default"] and run.refused is None
    assert counters["kforge"]["verified_at_sm_count"] == 1
    x = torch.randn(8)
    assert torch.equal(run([x])[0], torch.relu(x)) and counters["kforge"]["kernel_calls"] == 1


def test_a_kernel_that_fails_at_the_new_count_runs_pytorchs_op(monkeypatch, caplog):
    from forge_backend.verify import VerifyReport

    run, seen = at_count(monkeypatch, VerifyReport(False, "unwritten", "3 outputs never written"))
    with caplog.at_level(logging.WARNING, logger="kforge"):
        run._verify_at_this_count()
    assert "verified on 132 SMs" in run.refused and "72 SMs" in run.refused and "unwritten" in run.refused
    assert caplog.text.count("is not used on the 72 SMs") == 1
    x = torch.randn(8)
    assert torch.equal(run([x])[0], torch.relu(x))
    assert counters["kforge"]["launch_fallback"] == 1 and counters["kforge"]["kernel_calls"] == 0


def test_without_a_fallback_a_kernel_that_fails_at_the_new_count_raises(monkeypatch):
    from forge_backend.verify import VerifyReport

    run, _ = at_count(monkeypatch, VerifyReport(False, "mismatch", "off"), fallback=False)
    with pytest.raises(CandidateFailure) as e:
        run._verify_at_this_count()
    assert e.value.stage == "verify" and "mismatch" in e.value.message


def test_under_a_capture_a_kernel_at_a_new_count_is_not_verified_and_not_used(monkeypatch):
    run, seen = at_count(monkeypatch, None)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    run._verify_at_this_count()
    assert seen == [] and "CUDA graph capture" in run.refused
