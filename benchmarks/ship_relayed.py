"""A MODEL_SPEC holding the shipped relay kernels' signatures, so that `kforge prewarm` can search them again.

kernels_cache/ ships relayed softmaxes (Gemma 4's and Qwen 3.5's sampling softmaxes, fp32 and bf16 -> fp32, the
soft cap fused) and relayed group norms (the SD3.5 VAE decoder's seven). Their sources are the templates' of the
session that searched them; a later relay (a leaner reduce, a prologue two elements at a time, other slots) is only
found by searching them again. This module runs exactly those ops at exactly those shapes, so that

    KFORGE_SHIPPED_DIR=/empty kforge prewarm benchmarks/ship_relayed.py --iterations 12 --seconds-per-op 8 \
        --min-share 0 --cache-dir DIR

searches every one of them (the models themselves take minutes to load for eleven signatures), and
`kforge cache export` writes the records under the same keys. `kforge cards benchmarks/ship_relayed.py --json F`
prints the keys; tests/test_ship_relayed.py checks on the CPU that they are the shipped files' names.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SOFT_CAP = 30.0  # Gemma 4's final_logit_softcapping
# (kind, shape, dtype) of each sampling softmax: "softcap" is Gemma's soft-capped bf16 logits, "float" bf16 logits
# widened to fp32, "plain" fp32 logits
SOFTMAXES = (("softcap", (1, 64, 262144), torch.bfloat16), ("float", (1, 64, 248320), torch.bfloat16),
             ("plain", (1, 64, 262144), torch.float32), ("plain", (1, 64, 248320), torch.float32))
# the VAE decoder's group norms: 32 groups, eps 1e-6, bf16 weight and bias
GROUP_NORMS = ((1, 512, 128, 128), (1, 512, 256, 256), (1, 512, 512, 512), (1, 256, 512, 512),
               (1, 256, 1024, 1024), (1, 128, 1024, 1024), (1, 512, 16384))
GROUPS, EPS = 32, 1e-6


class Relayed(torch.nn.Module):
    """One op per shipped relay signature; returns every output, so that none is dead."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = torch.nn.ModuleList(torch.nn.GroupNorm(GROUPS, shape[1], eps=EPS) for shape in GROUP_NORMS)

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = []
        for (kind, _, _), x in zip(SOFTMAXES, xs):
            if kind == "softcap":
                x = (torch.tanh(x / SOFT_CAP) * SOFT_CAP).float()
            elif kind == "float":
                x = x.float()
            outs.append(F.softmax(x, dim=-1))
        for norm, x in zip(self.norms, xs[len(SOFTMAXES):]):
            outs.append(norm(x))
        return tuple(outs)


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def get_model() -> torch.nn.Module:
    return Relayed().eval().to(_device(), torch.bfloat16)


def get_inputs() -> tuple[torch.Tensor, ...]:
    device = _device()
    g = torch.Generator(device=device).manual_seed(0)
    xs = [torch.randn(shape, generator=g, device=device).to(dtype) * 4 for _, shape, dtype in SOFTMAXES]
    return tuple(xs + [torch.randn(shape, generator=g, device=device).to(torch.bfloat16) for shape in GROUP_NORMS])
