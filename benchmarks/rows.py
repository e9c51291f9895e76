"""The operator rows of ../shared/anchors/README.md, as data: (op name, model, builder of fn and inputs).

Each builder returns (fn, inputs, output bytes) for one shape and dtype; fn is what eager, Inductor and kforge run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Row:
    op: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    model: str

    @property
    def name(self) -> str:
        return f"{self.op} {list(self.shape)} {str(self.dtype).removeprefix('torch.')}"

    def build(self, device: torch.device) -> tuple[Callable, tuple[torch.Tensor, ...]]:
        g = torch.Generator(device=device).manual_seed(0)
        x = torch.randn(self.shape, generator=g, device=device, dtype=torch.float32).to(self.dtype)
        if self.op == "adaptive_avg_pool2d":
            return (lambda t: F.adaptive_avg_pool2d(t, 1)), (x,)
        if self.op == "group_norm":
            c = self.shape[1]
            w = torch.randn(c, device=device, dtype=self.dtype)
            b = torch.randn(c, device=device, dtype=self.dtype)
            return (lambda t, w, b: F.group_norm(t, 32, w, b)), (x, w, b)
        if self.op == "softmax":
            return (lambda t: torch.softmax(t, -1)), (x,)
        if self.op == "layer_norm":
            n = self.shape[-1]
            w = torch.randn(n, device=device, dtype=self.dtype)
            b = torch.randn(n, device=device, dtype=self.dtype)
            return (lambda t, w, b: F.layer_norm(t, (n,), w, b)), (x, w, b)
        if self.op == "rms_norm":
            n = self.shape[-1]
            w = torch.randn(n, device=device, dtype=self.dtype)
            return (lambda t, w: F.rms_norm(t, (n,), w)), (x, w)
        if self.op == "silu_mul":
            return (lambda t: F.silu(t) * t), (x,)
        if self.op == "attn_softmax":  # Gemma 4's eager attention: scale, causal mask, fp32 softmax, cast back
            s = self.shape[-1]
            causal = torch.ones(s, s, device=device, dtype=torch.bool).triu(1)
            mask = torch.zeros((1, 1, s, s), device=device, dtype=self.dtype).masked_fill(
                causal, torch.finfo(self.dtype).min)
            return (lambda t, m: torch.softmax(t * 1.0 + m, -1, dtype=torch.float32).to(t.dtype)), (x, mask)
        if self.op == "adaln_layer_norm":  # SD3.5 MMDiT's modulated layer norm (kforge.norm with fuse_norm)
            n = self.shape[-1]
            emb = torch.randn((self.shape[0], 2 * n), generator=g, device=device, dtype=torch.float32).to(self.dtype)

            def adaln(t, e):
                scale, shift = e.chunk(2, dim=-1)
                return F.layer_norm(t, (n,), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
            return adaln, (x, emb)
        if self.op == "residual_adaln_layer_norm":  # the same with the residual add before it, returning both
            n = self.shape[-1]
            attn = torch.randn(self.shape, generator=g, device=device, dtype=torch.float32).to(self.dtype)
            emb = torch.randn((self.shape[0], 3 * n), generator=g, device=device, dtype=torch.float32).to(self.dtype)

            def residual_adaln(h, a, e):
                gate, scale, shift = e.chunk(3, dim=-1)
                h = h + gate[:, None] * a
                return F.layer_norm(h, (n,), eps=1e-6) * (1 + scale[:, None]) + shift[:, None], h
            return residual_adaln, (x, attn, emb)
        if self.op == "causal_conv1d":  # Qwen 3.5's linear attention: [B, L, C] seen as [B, C, L], depthwise, k=4
            c = self.shape[-1]
            w = torch.randn((c, 1, 4), generator=g, device=device, dtype=torch.float32).to(self.dtype)
            return (lambda t, w: F.conv1d(t.transpose(1, 2), w, padding=3, groups=c)), (x, w)
        if self.op == "softcap_softmax":  # Gemma 4's sampling softmax over soft-capped logits
            return (lambda t: torch.softmax(torch.tanh(t / 30.0) * 30.0, -1, dtype=torch.float32)), (x,)
        raise ValueError(f"unknown op {self.op}")


def _rows() -> list[Row]:
    rows = []
    for dt in (torch.float32, torch.float16):
        for b in (1, 32, 256):
            rows.append(Row("adaptive_avg_pool2d", (b, 2048, 7, 7), dt, "ResNet-50"))
    for dt in (torch.float32, torch.bfloat16):
        for s in ((1, 512, 128, 128), (1, 512, 256, 256), (1, 256, 512, 512), (1, 128, 1024, 1024),
                  (2, 1536, 64, 64)):
            rows.append(Row("group_norm", s, dt, "SD3.5-M VAE"))
    for dt in (torch.float32, torch.bfloat16):
        for s, m in (((1, 8, 2048, 2048), "Gemma4-E2B attn"), ((64, 262144), "Gemma4-E2B logits"),
                     ((4096, 256), "Qwen3.5 router"), ((1, 16, 4096, 4096), "Qwen3.5 attn"),
                     ((64, 248320), "Qwen3.5 logits"), ((8192, 1024), "generic")):
            rows.append(Row("softmax", s, dt, m))
    for s in ((4096, 2048), (16384, 4096)):
        for op in ("layer_norm", "rms_norm", "silu_mul"):
            rows.append(Row(op, s, torch.bfloat16, "LLM"))
    # a softmax with its neighbours (kforge.softmax, Note [a softmax takes its neighbours])
    rows.append(Row("attn_softmax", (1, 8, 2048, 2048), torch.bfloat16, "Gemma4-E2B attn, fused"))
    rows.append(Row("softcap_softmax", (64, 262144), torch.bfloat16, "Gemma4-E2B sampling, fused"))
    # a layer norm with its modulation (kforge.norm, Note [a norm takes its epilogue])
    rows.append(Row("adaln_layer_norm", (1, 4096, 1536), torch.bfloat16, "SD3.5 MMDiT adaLN, fused"))
    # and with the residual add before it (Note [a norm takes the residual add before it])
    rows.append(Row("residual_adaln_layer_norm", (1, 4096, 1536), torch.bfloat16, "SD3.5 MMDiT add + adaLN, fused"))
    # the one convolution taken by default (Note [the one convolution kforge takes by default])
    rows.append(Row("causal_conv1d", (1, 2048, 8192), torch.bfloat16, "Qwen3.5 linear attention"))
    return rows


ROWS: list[Row] = _rows()
# The rows issue 4 names against the seed paper and Inductor: searched with the full 50 iterations.
SEED_ROWS = {
    "adaptive_avg_pool2d [256, 2048, 7, 7] float32", "adaptive_avg_pool2d [256, 2048, 7, 7] float16",
    "group_norm [1, 512, 256, 256] bfloat16", "softmax [64, 262144] float32", "softmax [64, 248320] bfloat16",
    "softmax [1, 16, 4096, 4096] bfloat16",
}
