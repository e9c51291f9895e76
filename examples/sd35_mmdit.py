"""Stable Diffusion 3.5 Medium MMDiT (diffusers SD3Transformer2DModel, random weights): eager vs Inductor vs kforge.

The config is SD3.5-Medium's transformer, written out here (nothing is downloaded): 24 heads of 64 (width 1536),
patch 2 over a 128x128 latent (4096 image tokens), T5/CLIP text width 4096 projected to 1536, pooled text 2048,
RMS qk-norm, and MMDiT-X dual attention in the first 13 layers. Depth is cut to ``NUM_LAYERS`` (the real model has
24): every width, and the dual-attention flag of each kept layer, stay as in SD3.5-M. One forward is one denoising
step; LayerNorm (adaLN) and the RMS norms' means are the kforge-relevant ops, attention runs through SDPA.

Settings: bf16_txt333 (default; 256 T5 + 77 CLIP tokens, as the SD3 pipeline with max_sequence_length=256),
bf16_txt154 (77 + 77 tokens), bf16_txt333_cfg (batch 2: classifier-free guidance, as pipelines run it).

    python examples/sd35_mmdit.py --setting bf16_txt333_cfg
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when loaded as a MODEL_SPEC file
from _common import main_of, on_gpu, placement  # noqa: E402

SETTINGS = ["bf16_txt333", "bf16_txt154", "bf16_txt333_cfg"]
NUM_LAYERS = 2
SD35M_DUAL_ATTENTION_LAYERS = tuple(range(13))

# SD3.5-Medium transformer/config.json, field by field, except num_layers (24 there).
SD35_MMDIT_CONFIG: dict[str, Any] = dict(
    sample_size=128,
    patch_size=2,
    in_channels=16,
    num_layers=24,
    attention_head_dim=64,
    num_attention_heads=24,
    joint_attention_dim=4096,
    caption_projection_dim=1536,
    pooled_projection_dim=2048,
    out_channels=16,
    pos_embed_max_size=384,
    dual_attention_layers=SD35M_DUAL_ATTENTION_LAYERS,
    qk_norm="rms_norm",
)


class DenoiseStep(torch.nn.Module):
    """One transformer call with positional inputs, returning the predicted noise/velocity tensor."""

    def __init__(self, transformer: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor,
                pooled_projections: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        return self.transformer(hidden_states=hidden_states, encoder_hidden_states=encoder_hidden_states,
                                pooled_projections=pooled_projections, timestep=timestep, return_dict=True).sample


def build_transformer(num_layers: int = NUM_LAYERS, device: torch.device | str | None = None,
                      dtype: torch.dtype | None = None, **overrides: Any) -> DenoiseStep:
    """SD3.5-M's MMDiT cut to ``num_layers``, with ``overrides`` applied to the config (tests shrink it).
    Defaults: the GPU in bf16 when there is one, else the CPU in fp32."""
    from diffusers import SD3Transformer2DModel

    cfg = {**SD35_MMDIT_CONFIG, **overrides, "num_layers": num_layers}
    cfg["dual_attention_layers"] = tuple(i for i in cfg["dual_attention_layers"] if i < num_layers)
    dev, dt = placement(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    model = SD3Transformer2DModel(**cfg)
    return DenoiseStep(model).eval().to(device=dev, dtype=dt)


def build_inputs(text_tokens: int, batch: int = 1, latent_side: int = 128,
                 channels: int = SD35_MMDIT_CONFIG["in_channels"],
                 text_dim: int = SD35_MMDIT_CONFIG["joint_attention_dim"],
                 pooled_dim: int = SD35_MMDIT_CONFIG["pooled_projection_dim"],
                 device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> tuple[torch.Tensor, ...]:
    """(latent, text embeddings, pooled text embedding, timestep) as the SD3 pipeline passes them."""
    dev, dt = placement(device, dtype, torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    latent = torch.randn(batch, channels, latent_side, latent_side, generator=g)
    text = torch.randn(batch, text_tokens, text_dim, generator=g)
    pooled = torch.randn(batch, pooled_dim, generator=g)
    # the SD3 pipeline passes the scheduler's t in [0, 1000] as one fp32 value per sample, whatever the model dtype
    timestep = torch.full((batch,), 500.0, device=dev)
    return (*(t.to(device=dev, dtype=dt) for t in (latent, text, pooled)), timestep)


def _side() -> int:
    return 128 if on_gpu() else 32  # 32x32 latent on the CPU: smoke runs only


def get_model_bf16_txt333():
    return build_transformer()


def get_inputs_bf16_txt333():
    return build_inputs(333, latent_side=_side())


def get_model_bf16_txt154():
    return build_transformer()


def get_inputs_bf16_txt154():
    return build_inputs(154, latent_side=_side())


def get_model_bf16_txt333_cfg():
    return build_transformer()


def get_inputs_bf16_txt333_cfg():
    return build_inputs(333, batch=2, latent_side=_side())


get_model, get_inputs = get_model_bf16_txt333, get_inputs_bf16_txt333

if __name__ == "__main__":
    main_of(__name__)
