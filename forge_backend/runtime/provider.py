"""The kernel provider behind ``backend="kforge"``: cache lookup, search on a miss, kernels for the rewrite."""
from __future__ import annotations

import logging

from ..cards import OperatorCard
from ..config import KforgeConfig
from ..registry import KernelImpl

log = logging.getLogger("kforge")


class NoGpuProvider:
    """Serves nothing: CPU graphs (or machines without CUDA) keep every op with PyTorch."""

    serves_nothing = True  # inside Inductor: compile once, with Inductor's own decompositions

    def kernels_for(self, cards: list[OperatorCard], cfg: KforgeConfig) -> dict[str, KernelImpl]:
        return {}


def default_provider(cfg: KforgeConfig):
    import torch

    if not torch.cuda.is_available():
        return NoGpuProvider()
    from .cuda_provider import CudaProvider

    return CudaProvider.shared(cfg)


def reverify_record(record) -> tuple[bool, str]:
    """Re-verify a stored record's kernel on this GPU (used by ``kforge cache verify --gpu``)."""
    import torch

    if not torch.cuda.is_available():
        return False, "no CUDA GPU visible"
    from .cuda_provider import reverify_record as _reverify

    return _reverify(record)
