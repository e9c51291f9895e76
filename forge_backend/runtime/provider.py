"""The kernel provider behind ``backend="kforge"``: cache lookup, search on a miss, kernels for the rewrite."""
from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator

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


def reverify_records(records: Iterable[Any]) -> Iterator[tuple[Any, Any, str]]:
    """Re-verify stored records' kernels on this GPU (``kforge cache verify --gpu``), yielding (record, found,
    message) as each finishes: ``found`` the :class:`~..store.reverified.Reverified` (None for a record made for
    another arch, which no signature here can match), ``message`` what it says. One worker process serves them all:
    starting one costs seconds (it imports torch)."""
    import torch

    from ..store.reverified import Reverified

    if not torch.cuda.is_available():
        for rec in records:
            yield rec, Reverified(False, "no CUDA GPU visible"), "no CUDA GPU visible"
        return
    from ..signature import arch_of
    from .cuda_provider import reverify_record
    from .worker import WorkerClient

    cfg = KforgeConfig.load()
    device = torch.device("cuda", torch.cuda.current_device())
    here = arch_of(device)
    client = WorkerClient(cfg.cache_dir, device.index)
    try:
        for rec in records:
            arch = rec.signature.get("arch")
            if arch != here:
                yield rec, None, f"made for {arch}; this GPU is {here}"
                continue
            found = reverify_record(rec, client, cfg)
            yield rec, found, found.why
    finally:
        client.close()
