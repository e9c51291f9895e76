"""GPU models as the store names them: this process's GPU, and a model's folder name.

GPUs of one arch share a signature key (an H100 and an H200 are both sm_90), so a store that machines of several
models use keeps each model's own records in a folder of its own, ``gpus/<model>/`` (Note [a team of several GPU
models] in team.py, Note [a cache directory that GPU models share] in local.py).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .record import KernelRecord

GPUS_DIR = "gpus"


def gpu_slug(gpu: str) -> str:
    """A GPU model's name as a folder's: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3" ("" for no name)."""
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")


def this_gpu() -> str:
    """The name of this process's current GPU, as records name it (``provenance["gpu"]``); "" without CUDA."""
    import torch  # late: the store does not need torch to read records

    return torch.cuda.get_device_name() if torch.cuda.is_available() else ""


def timed_on_another_model(record: "KernelRecord", gpu: str) -> bool:
    """Whether ``record`` names the GPU model it was timed on, and it is not ``gpu`` (named)."""
    timed_on = str(record.provenance.get("gpu") or "")
    return bool(timed_on and gpu and timed_on != gpu)
