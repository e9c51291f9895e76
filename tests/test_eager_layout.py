"""The eager path lays a kernel's outputs out as PyTorch's op does (Note [outputs laid out as eager lays them out])."""
from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from cpu_provider import CpuProvider
from forge_backend.backend import make_backend
from forge_backend.eager_layout import LaidOutAsEager, eager_call
from forge_backend.registry import KernelImpl
from forge_backend.signature import TensorSpec

SHAPE = (1, 8, 4, 4)
CARD_CL = (128, 1, 32, 8)  # channels-last as a fake tensor writes it
REAL_CL = (8, 1, 32, 8)  # the same memory, batch stride as the real ops leave it


def _impl(eager_fn, out_stride=CARD_CL) -> tuple[KernelImpl, Counter]:
    calls: Counter = Counter()

    def run(inputs):
        calls["run"] += 1
        return [torch.empty_strided(SHAPE, out_stride).copy_(inputs[0] * 2)]

    def run_strided(inputs, strides):
        calls["strided"] += 1
        calls[("strides", tuple(strides[0]))] += 1
        return [torch.empty_strided(SHAPE, strides[0]).copy_(inputs[0] * 2)]

    def eager(inputs):
        calls["eager"] += 1
        return [eager_fn(inputs[0])]

    spec = TensorSpec(SHAPE, out_stride, "float32")
    return KernelImpl("k" * 64, "aten.mul.Tensor", (spec,), run, run_strided=run_strided, eager=eager), calls


def _input(stride) -> torch.Tensor:
    return torch.empty_strided(SHAPE, stride).normal_()


def test_first_call_runs_pytorch_then_the_kernel_with_its_strides():
    impl, calls = _impl(lambda x: x * 2)  # PyTorch's mul keeps the input's strides, size-1 ones included
    call = LaidOutAsEager(impl)
    x = _input(REAL_CL)
    first = call([x])[0]
    assert calls["eager"] == 1 and calls["strided"] == 0
    assert first.stride() == REAL_CL
    second = call([x])[0]
    assert calls["strided"] == 1 and calls["eager"] == 1
    assert second.stride() == REAL_CL  # not the card's (128, 1, 32, 8)
    torch.testing.assert_close(second, x * 2)
    assert call.plan([x]) == (REAL_CL,)


def test_each_set_of_input_strides_is_asked_once():
    impl, calls = _impl(lambda x: x * 2)
    call = LaidOutAsEager(impl)
    for _ in range(3):
        call([_input(REAL_CL)])
        call([_input(CARD_CL)])
    assert calls["eager"] == 2
    assert calls[("strides", REAL_CL)] == 2 and calls[("strides", CARD_CL)] == 2


def test_stride_sets_past_the_limit_run_pytorch_unremembered(monkeypatch):
    import forge_backend.eager_layout as el

    monkeypatch.setattr(el, "MAX_PLANS", 1)
    impl, calls = _impl(lambda x: x * 2)
    call = LaidOutAsEager(impl)
    x, y = _input(REAL_CL), _input(CARD_CL)
    call([x]), call([y]), call([y]), call([x])
    assert calls["eager"] == 3 and calls["strided"] == 1  # y's strides came second: PyTorch's op each time
    with pytest.raises(KeyError):
        call.plan([y])


def test_a_layout_the_kernel_cannot_write_stays_with_pytorch():
    # PyTorch returns NCHW where the kernel writes channels-last: every call runs PyTorch's op
    impl, calls = _impl(lambda x: (x * 2).contiguous())
    call = LaidOutAsEager(impl)
    x = _input(REAL_CL)
    for _ in range(3):
        out = call([x])[0]
        assert out.is_contiguous()
    assert calls["eager"] == 3 and calls["strided"] == 0 and calls["run"] == 0
    assert call.plan([x]) is None


def test_eager_call_without_a_strided_launcher_is_the_plain_run():
    impl, _ = _impl(lambda x: x * 2)
    bare = KernelImpl(impl.key, impl.op, impl.outputs, impl.run)
    assert eager_call(bare) is bare.run
    assert isinstance(eager_call(impl), LaidOutAsEager)
    with pytest.raises(ValueError):
        LaidOutAsEager(bare)


class _ResidualThenUpsample(torch.nn.Module):
    """The SD3.5 VAE's pattern in small: a transposed attention output viewed as channels-last, a residual add, the
    division by the output scale (1.0), then a nearest upsample, which picks its kernel by the input's strides."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = x.transpose(1, 2).view(SHAPE)
        return F.interpolate((h + y) / 1.0, scale_factor=2.0, mode="nearest")


@pytest.mark.parametrize("strided", [False, True])
def test_a_replaced_division_leaves_the_upsample_as_eager_runs_it(strided):
    model = _ResidualThenUpsample()
    x, y = torch.randn(1, 16, 8), torch.randn(SHAPE)
    want = model(x, y)
    provider = CpuProvider(ops=("aten.div.Tensor",), strided=strided)
    compiled = torch.compile(model, backend=make_backend(provider), options={"inner": "eager"})
    torch._dynamo.reset()
    outs = [compiled(x, y) for _ in range(3)]
    for out in outs:
        torch.testing.assert_close(out, want)
    if strided:  # the first call asks PyTorch, the others run the kernel into PyTorch's strides
        assert provider.eager_calls["aten.div.Tensor"] == 1
        assert provider.strided_calls["aten.div.Tensor"] == 2
        assert all(o.stride() == want.stride() for o in outs)
    else:  # the traced graph's strides: the upsample takes the channels-last path that eager does not
        assert provider.calls["aten.div.Tensor"] == 3
        assert outs[-1].stride() != want.stride()
