"""What would ResNet-50 gain from each batch norm folded into its convolution, the ReLU (and the residual add) run in
cuDNN's epilogue?

    python benchmarks/probe_resnet_fold.py [--out DIR] [--settings fp16_b32,fp16_b32_cl,fp32_b32]

In inference a batch norm is a per-channel scale and shift: conv(x, w) * s + t == conv(x, w * s) + t, with s and t
from the norm's weight, bias and running statistics. Inductor (without freezing) runs every convolution through
cuDNN and then one fused pointwise kernel for the norm, the ReLU and the residual add, which reads and writes the
whole activation once more. cuDNN's fused ``cudnn_convolution_relu`` and ``cudnn_convolution_add_relu`` take the bias,
the residual and the ReLU into the convolution's epilogue, so that pass disappears. This probe measures whether that
pays on the H200 before kforge builds anything on it: GPU time of one forward by CUDA graph replay (the Timer of every
benchmark: events, a 512 MiB read before each replay, median of 30) for eager, Inductor, the folded model in eager and
the folded model through Inductor, and each one's error against the same model in float32 with TF32 off
(``max_rel_err``: max |out - ref| / max |ref|).
The batch norms get random running statistics and affine parameters first, so the fold is not the identity.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from harness import environment  # noqa: E402

SETTINGS = {"fp16_b32": (torch.float16, 32, False), "fp16_b32_cl": (torch.float16, 32, True),
            "fp32_b32": (torch.float32, 32, False), "fp32_b32_cl": (torch.float32, 32, True),
            "fp16_b1": (torch.float16, 1, False)}


def randomize_norms(model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(c, generator=g) * 0.5 + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=g) * 0.1)


def fold(conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d, memory_format) -> tuple[torch.Tensor, torch.Tensor]:
    s = bn.weight.float() / torch.sqrt(bn.running_var.float() + bn.eps)
    w = (conv.weight.float() * s[:, None, None, None]).to(conv.weight.dtype).contiguous(memory_format=memory_format)
    b = (bn.bias.float() - bn.running_mean.float() * s).to(conv.weight.dtype)
    return w, b


class FoldedConv(torch.nn.Module):
    """conv + bn [+ residual] [+ relu] as one cuDNN call with the folded weight and bias."""

    def __init__(self, conv, bn, relu: bool, memory_format) -> None:
        super().__init__()
        w, b = fold(conv, bn, memory_format)
        self.register_buffer("w", w)
        self.register_buffer("b", b)
        self.args = (list(conv.stride), list(conv.padding), list(conv.dilation), conv.groups)
        self.relu = relu

    def forward(self, x, residual=None):
        if residual is not None:
            return torch.ops.aten.cudnn_convolution_add_relu(x, self.w, residual, 1.0, self.b, *self.args)
        if self.relu:
            return torch.ops.aten.cudnn_convolution_relu(x, self.w, self.b, *self.args)
        return torch.ops.aten.convolution(x, self.w, self.b, *self.args[:2], self.args[2], False, [0, 0],
                                          self.args[3])


class FoldedBottleneck(torch.nn.Module):
    def __init__(self, blk, mf) -> None:
        super().__init__()
        self.c1 = FoldedConv(blk.conv1, blk.bn1, True, mf)
        self.c2 = FoldedConv(blk.conv2, blk.bn2, True, mf)
        self.c3 = FoldedConv(blk.conv3, blk.bn3, True, mf)
        self.down = FoldedConv(blk.downsample[0], blk.downsample[1], False, mf) if blk.downsample is not None else None

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        return self.c3(self.c2(self.c1(x)), idt)


class FoldedResNet(torch.nn.Module):
    def __init__(self, m, mf) -> None:
        super().__init__()
        self.stem = FoldedConv(m.conv1, m.bn1, True, mf)
        self.maxpool = m.maxpool
        self.blocks = torch.nn.Sequential(*[FoldedBottleneck(b, mf) for layer in (m.layer1, m.layer2, m.layer3,
                                                                                 m.layer4) for b in layer])
        self.avgpool, self.fc = m.avgpool, m.fc

    def forward(self, x):
        x = self.blocks(self.maxpool(self.stem(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def graph_ms(timer, fn, x) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(x)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        held = fn(x)
    t = timer.time(g.replay, warmup=3, repeats=30).median_us / 1e3
    del held, g
    return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--settings", default="fp16_b32,fp16_b32_cl,fp32_b32,fp16_b1")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("probe_resnet_fold needs a GPU")
        return 0
    from torchvision.models import resnet50

    from forge_backend.measure import Timer

    timer = Timer(torch.device("cuda"))
    rows = []
    for name in args.settings.split(","):
        dtype, batch, cl = SETTINGS[name]
        mf = torch.channels_last if cl else torch.contiguous_format
        torch.manual_seed(0)
        base = resnet50(weights=None).eval()
        randomize_norms(base)
        ref_model = base.to("cuda").float()
        x32 = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(0)).cuda()
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        with torch.no_grad():
            ref = ref_model(x32).double()
        torch.backends.cudnn.allow_tf32 = True
        model = ref_model.to(dtype=dtype, memory_format=mf)
        x = x32.to(dtype=dtype, memory_format=mf)
        row = {"setting": name}
        with torch.no_grad():
            folded = FoldedResNet(model, mf).eval()
            variants = {"eager": model, "folded_eager": folded}
            for vname, m in list(variants.items()):
                torch._dynamo.reset()
                c = torch.compile(m)
                t0 = time.perf_counter()
                try:
                    c(x)
                    variants["inductor" if vname == "eager" else "folded_inductor"] = c
                except Exception as e:  # report, keep the others
                    row[f"{vname}_compile_error"] = f"{type(e).__name__}: {str(e)[:300]}"
                row[f"{vname}_compile_s"] = time.perf_counter() - t0
            for vname, m in variants.items():
                try:
                    out = m(x).double()
                    row[f"{vname}_max_rel_err"] = float((out - ref).abs().max() / ref.abs().max())
                    row[f"{vname}_gpu_ms"] = graph_ms(timer, m, x)
                except Exception as e:
                    row[f"{vname}_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        if "inductor_gpu_ms" in row and "folded_inductor_gpu_ms" in row:
            row["folded_inductor_x_inductor"] = row["inductor_gpu_ms"] / row["folded_inductor_gpu_ms"]
        if "eager_gpu_ms" in row and "folded_eager_gpu_ms" in row:
            row["folded_eager_x_eager"] = row["eager_gpu_ms"] / row["folded_eager_gpu_ms"]
        print(json.dumps(row), flush=True)
        rows.append(row)
        del model, folded, variants, ref_model
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "probe_resnet_fold.json").write_text(json.dumps(
        {"environment": environment(" ".join(sys.argv)), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
