"""The launcher's layout check (CPU): exact strides pass, size-1 dims may differ, another layout falls back.
The check itself needs no GPU, so the Launcher is built without loading a module."""
import torch

from forge_backend.runtime.launch import Launcher
from forge_backend.signature import TensorSpec


def launcher_for(*examples: torch.Tensor) -> Launcher:
    run = Launcher.__new__(Launcher)  # no CUDA module: only the layout fields are set
    specs = [TensorSpec.of(t) for t in examples]
    run._in_strides = [tuple(s.stride) for s in specs]
    run._in_layouts = [s.layout_key() for s in specs]
    return run


def test_same_strides_pass():
    x = torch.randn(2, 8, 4, 4)
    assert launcher_for(x).laid_out([torch.randn(2, 8, 4, 4)])


def test_size_one_dims_may_have_any_stride():
    x = torch.randn(1, 8, 4, 4)
    other = torch.randn(8, 1, 4, 4).transpose(0, 1)  # shape [1, 8, 4, 4], batch stride differs
    assert other.stride() != x.stride() and launcher_for(x).laid_out([other])


def test_channels_last_input_is_refused_for_an_nchw_kernel():
    x = torch.randn(2, 8, 4, 4)
    assert not launcher_for(x).laid_out([x.to(memory_format=torch.channels_last)])


def test_every_input_is_checked():
    x, w = torch.randn(2, 8, 4, 4), torch.randn(8)
    assert launcher_for(x, w).laid_out([x, w])
    assert not launcher_for(x, w).laid_out([x, torch.randn(16)[::2]])
