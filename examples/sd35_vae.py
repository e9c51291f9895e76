"""Stable Diffusion 3.5 Medium VAE decoder (diffusers AutoencoderKL, random weights): eager vs Inductor vs kforge.

The config is SD3.5-Medium's VAE, written out here (nothing is downloaded): 16 latent channels, blocks
(128, 256, 512, 512) with 2 layers each, GroupNorm with 32 groups, no quant convs. Every layer is kept. The
forward decodes a latent to an image: ``vae.decode(z).sample``; GroupNorm (30 of them) is the kforge-relevant op.

Settings: bf16_1024 (default; latent [1, 16, 128, 128] -> 1024x1024 image), bf16_512 (latent 64x64 -> 512x512).
Without a GPU the latent is 32x32 in fp32, for smoke runs only (and torch.compile of it at batch 1 fails inside
PyTorch on the CPU: tests/test_models_cpu.py::test_vae_batch1_group_norm_pytorch_bug).

    python examples/sd35_vae.py --setting bf16_512
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when loaded as a MODEL_SPEC file
from _common import main_of, on_gpu, placement  # noqa: E402

SETTINGS = ["bf16_1024", "bf16_512"]

# SD3.5-Medium vae/config.json, field by field.
SD35_VAE_CONFIG: dict[str, Any] = dict(
    in_channels=3,
    out_channels=3,
    latent_channels=16,
    block_out_channels=(128, 256, 512, 512),
    down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4,
    layers_per_block=2,
    act_fn="silu",
    norm_num_groups=32,
    sample_size=1024,
    scaling_factor=1.5305,
    shift_factor=0.0609,
    force_upcast=True,
    use_quant_conv=False,
    use_post_quant_conv=False,
    mid_block_add_attention=True,
)


class Decode(torch.nn.Module):
    """``vae.decode(z).sample`` as a module, so that torch.compile sees the decoder alone."""

    def __init__(self, vae: torch.nn.Module) -> None:
        super().__init__()
        self.vae = vae

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.vae.decode(z).sample


def build_decoder(device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                  **overrides: Any) -> Decode:
    """SD3.5-M's VAE with ``overrides`` applied to the config (tests shrink it); returns the decode wrapper.
    Defaults: the GPU in bf16 when there is one, else the CPU in fp32."""
    from diffusers import AutoencoderKL

    dev, dt = placement(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    vae = AutoencoderKL(**{**SD35_VAE_CONFIG, **overrides})
    return Decode(vae).eval().to(device=dev, dtype=dt)


def build_latent(side: int, batch: int = 1, channels: int = SD35_VAE_CONFIG["latent_channels"],
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    dev, dt = placement(device, dtype, torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch, channels, side, side, generator=g).to(device=dev, dtype=dt)


def _side(gpu_side: int) -> int:
    return gpu_side if on_gpu() else 32


def get_model_bf16_1024():
    return build_decoder()


def get_inputs_bf16_1024():
    return build_latent(_side(128))  # the VAE upsamples by 8: 128 -> 1024


def get_model_bf16_512():
    return build_decoder()


def get_inputs_bf16_512():
    return build_latent(_side(64))


get_model, get_inputs = get_model_bf16_1024, get_inputs_bf16_1024

if __name__ == "__main__":
    main_of(__name__)
