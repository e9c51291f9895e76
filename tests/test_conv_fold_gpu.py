"""Note [a batch norm folded into its convolution] on the GPU: the cuDNN calls (``cudnn_convolution_relu``,
``cudnn_convolution_add_relu``) match eager at each dtype on both paths, every chain of torchvision's ResNet-50
folds, and under CUDA graphs nothing folds."""
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
    assert conv_fold._cudnn(x)  # so the op took cuDNN's fused calls, not the plain-op fallback
    torch.testing.assert_close(got, expected, **TOL[dtype])
    assert torch.equal(got, again) and got.is_contiguous(memory_format=torch.channels_last)


def test_under_cuda_graphs_nothing_folds_and_the_model_still_matches():
    """mode="reduce-overhead": Inductor's CUDA-graph trees warm up inside their pool, where a kept fold would be an
    allocation they refuse (this test failed so before the fold stepped aside), so nothing folds."""
    m = block().to("cuda", torch.float16)
    reports = []
    with torch.no_grad():
        f = torch.compile(m, backend=make_backend(on_report=reports.append), mode="reduce-overhead", options=ON)
        for _ in range(3):
            x = torch.randn(4, 8, 33, 31, device="cuda", dtype=torch.float16)
            got = f(x).clone()
            torch.testing.assert_close(got, m(x), **TOL[torch.float16])
    assert reports and all(r.folded == 0 for r in reports)
    assert ("kforge::conv_bn_act", "not under CUDA graphs") in reports[-1].skipped


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
