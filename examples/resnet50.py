"""ResNet-50 (torchvision, random weights) inference: eager vs Inductor vs kforge.

Settings: fp16_b1 (default), fp16_b32, fp32_b1, fp32_b32, and fp16_b32_channels_last (model and input in
channels_last). Inputs are 224x224 images on the GPU; without one they are on the CPU in fp32.

    python examples/resnet50.py --setting fp16_b32
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when loaded as a MODEL_SPEC file
from _common import main_of, placement  # noqa: E402

SETTINGS = ["fp16_b1", "fp16_b32", "fp32_b1", "fp32_b32", "fp16_b32_channels_last"]
IMAGE_SIZE = 224


def _memory_format(channels_last: bool) -> torch.memory_format:
    return torch.channels_last if channels_last else torch.contiguous_format


def build_model(dtype: torch.dtype = torch.float16, channels_last: bool = False) -> torch.nn.Module:
    try:
        from torchvision.models import resnet50
    except ImportError as e:
        raise ImportError("examples/resnet50.py needs torchvision: pip install torchvision") from e
    dev, dt = placement(None, None, dtype)
    torch.manual_seed(0)
    return resnet50(weights=None).eval().to(device=dev, dtype=dt, memory_format=_memory_format(channels_last))


def build_inputs(batch: int, dtype: torch.dtype = torch.float16, channels_last: bool = False) -> torch.Tensor:
    dev, dt = placement(None, None, dtype)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    return x.to(device=dev, dtype=dt, memory_format=_memory_format(channels_last))


def get_model_fp16_b1():
    return build_model(torch.float16)


def get_inputs_fp16_b1():
    return build_inputs(1, torch.float16)


def get_model_fp16_b32():
    return build_model(torch.float16)


def get_inputs_fp16_b32():
    return build_inputs(32, torch.float16)


def get_model_fp32_b1():
    return build_model(torch.float32)


def get_inputs_fp32_b1():
    return build_inputs(1, torch.float32)


def get_model_fp32_b32():
    return build_model(torch.float32)


def get_inputs_fp32_b32():
    return build_inputs(32, torch.float32)


def get_model_fp16_b32_channels_last():
    return build_model(torch.float16, channels_last=True)


def get_inputs_fp16_b32_channels_last():
    return build_inputs(32, torch.float16, channels_last=True)


get_model, get_inputs = get_model_fp16_b1, get_inputs_fp16_b1

if __name__ == "__main__":
    main_of(__name__)
