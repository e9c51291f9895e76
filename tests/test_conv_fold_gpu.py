"""Note [a batch norm folded into its convolution] on the GPU: the cuDNN calls (``cudnn_convolution_relu``,
``cudnn_convolution_add_relu``) match eager at each dtype on both paths, every chain of torchvision's ResNet-50
folds, and Inductor's CUDA graphs replay the folded chains."""
from __future__ import annotations

import pytest
import torch

from forge_backend import conv_fold
from forge_backend.backend import make_backend
from test_conv_fold import ON, block

pytestmark = pytest.mark.gpu
TOL = {torch.float16: dict(rtol=2e-2, atol=2e-2), torch.bfloat16: dict(rtol=8e-2, atol=8e-2),
       torch.float32: dict(rtol=1e-2, atol=1e-2)}  # fp32: cuDNN's TF32, as eager's own convolutions


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("inner", ["eager", "inductor"])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_a_folded_block_matches_eager_on_the_gpu(dtype, inner, layout):
    m = block().to("cuda", dtype).to(memory_format=layout)
    x = torch.randn(4, 8, 33, 31, device="cuda", dtype=dtype).contiguous(memory_format=layout)
    reports = []
    with torch.no_grad():
        expected = m(x)
        f = torch.compile(m, backend=make_backend(on_report=reports.append), options=ON | {"inner": inner})
        got = f(x)
        again = f(x)
    assert reports[-1].folded == 3, reports[-1].skipped
    assert conv_fold.cudnn_fusable(x.device)  # so the graph took cuDNN's fused calls, not the plain ops
    torch.testing.assert_close(got, expected, **TOL[dtype])
    assert torch.equal(got, again) and got.is_contiguous(memory_format=torch.channels_last)


def test_folded_chains_replay_in_inductors_cuda_graphs(monkeypatch):
    """mode="reduce-overhead": the folded constants are the graph's buffers and the cuDNN calls extern kernels, so
    Inductor's CUDA graphs capture and replay them, and an in-place update of a weight between replays is seen (the
    Refresher folds it into the same buffers before the replay)."""
    monkeypatch.setenv("KFORGE_FOLD_CONV_BN", "1")  # torch.compile takes a mode or options, not both
    m = block().to("cuda", torch.float16)
    reports = []
    with torch.no_grad():
        f = torch.compile(m, backend=make_backend(on_report=reports.append), mode="reduce-overhead")
        for i in range(4):
            if i == 3:
                m.bn2.running_mean.add_(0.25)
            x = torch.randn(4, 8, 33, 31, device="cuda", dtype=torch.float16)
            got = f(x).clone()
            torch.testing.assert_close(got, m(x), **TOL[torch.float16])
    assert reports[-1].folded == 3


def test_every_chain_of_resnet50_folds_and_the_model_matches_eager():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = torchvision.models.resnet50(weights=None).eval()
    for mod in m.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.75, 1.25)
    m = m.to("cuda", torch.float16)
    x = torch.randn(4, 3, 224, 224, device="cuda", dtype=torch.float16)
    reports = []
    with torch.no_grad():
        expected = m(x).float()
        got = torch.compile(m, backend=make_backend(on_report=reports.append), options=ON)(x).float()
    assert sum(r.folded for r in reports) == 53  # the stem, 16 blocks x 3, 4 downsamples
    assert float((got - expected).abs().max() / expected.abs().max()) < 2e-2
