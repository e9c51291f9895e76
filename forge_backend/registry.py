"""The seam between the graph rewrite and the runtime: one torch.library custom op and the registry behind it.

Note [one generic custom op]
Every replaced node becomes ``torch.ops.kforge.kernel(key, inputs) -> list[Tensor]``. The key selects a
:class:`KernelImpl` from REGISTRY, which the runtime fills (CUDA launchers) and CPU tests fill with CPU
implementations. The fake implementation allocates outputs from the impl's output specs, so a rewritten graph
traces under FakeTensorMode, compiles under Inductor (as an extern call) and passes ``torch.library.opcheck``.
REGISTRY is the one piece of process-wide mutable state: torch's dispatcher calls the op by name, so the
implementations must be reachable from it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .signature import TensorSpec, to_dtype

log = logging.getLogger("kforge")

RunFn = Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
# the kernel with its outputs allocated with the given strides (they may differ from the card's on size-1 dims only)
StridedRunFn = Callable[[Sequence[torch.Tensor], Sequence[Sequence[int]]], list[torch.Tensor]]


@dataclass(frozen=True)
class KernelImpl:
    """A usable kernel for one signature key. ``run`` takes the op's tensor inputs in schema order (None skipped)
    and returns the used outputs in order. ``speedup`` is the verified speedup over eager, for reports. Where both
    are set, ``run_strided`` runs the kernel into outputs of given strides and ``eager`` runs PyTorch's own op on the
    same inputs: the eager path uses them to lay outputs out as eager does (eager_layout.py)."""

    key: str
    op: str
    outputs: tuple[TensorSpec, ...]
    run: RunFn
    description: str = ""
    speedup: float | None = None
    extra: dict = field(default_factory=dict, compare=False)
    run_strided: StridedRunFn | None = field(default=None, compare=False)
    eager: RunFn | None = field(default=None, compare=False)

    def empty_outputs(self, device: torch.device) -> list[torch.Tensor]:
        return [torch.empty_strided(s.shape, s.stride, dtype=to_dtype(s.dtype), device=device) for s in self.outputs]


def conform(outputs: Sequence[torch.Tensor], specs: Sequence[TensorSpec]) -> list[torch.Tensor]:
    """Outputs with exactly the strides the fake kernel promised. The ATen fallback may return another layout
    (a channels-last input can give a contiguous group_norm output), and Inductor checks extern outputs' strides
    against the fake ones; a copy into the promised layout keeps both honest."""
    out = []
    for o, s in zip(outputs, specs):
        if tuple(o.stride()) != s.stride and o.numel() > 1:
            o = torch.empty_strided(s.shape, s.stride, dtype=o.dtype, device=o.device).copy_(o)
        out.append(o)
    return out


class KernelRegistry:
    """Kernels by key. A key not registered in this process is asked of the loaders (the kernel providers): a graph
    that Inductor's cache served was compiled in another process, and its code calls kernels by key (Note [kforge
    and Inductor's caches] in backend.py)."""

    def __init__(self) -> None:
        self._impls: dict[str, KernelImpl] = {}
        self._loaders: list[Callable[[str], KernelImpl | None]] = []

    def register(self, impl: KernelImpl) -> None:
        self._impls[impl.key] = impl

    def add_loader(self, loader: Callable[[str], KernelImpl | None]) -> None:
        """Ask ``loader`` first from now on (the provider that compiled last knows the keys its graphs use)."""
        if loader in self._loaders:
            self._loaders.remove(loader)
        self._loaders.insert(0, loader)

    def get(self, key: str) -> KernelImpl:
        impl = self._impls.get(key)
        if impl is None:
            for load in self._loaders:
                impl = load(key)
                if impl is not None:
                    self._impls[key] = impl
                    break
        if impl is None:
            raise KeyError(f"kforge: no kernel for key {key[:16]}... ({len(self._impls)} registered, none of "
                           f"{len(self._loaders)} loader(s) has it); if this graph came from Inductor's cache, "
                           f"clear that cache (TORCHINDUCTOR_CACHE_DIR) or the kforge cache entry it names")
        return impl

    def __contains__(self, key: str) -> bool:
        return key in self._impls

    def keys(self) -> list[str]:
        return list(self._impls)


REGISTRY = KernelRegistry()


# Note [why a plain Library registration]
# torch.library.custom_op adds Python-level autograd and dispatch wrappers: on the H200 machine one call of a
# custom_op on a 1024-element tensor cost 42 us against 16.5 us for the launcher itself and 14.8 us for ATen's relu
# (benchmarks/results/h200/overhead.md). kforge's op is inference-only, so it is defined with a plain Library and one
# CompositeExplicitAutograd kernel (the dispatcher calls it directly for every backend), plus a fake kernel.
_LIB = torch.library.Library("kforge", "DEF")
_LIB.define("kernel(str key, Tensor[] inputs) -> Tensor[]")


def call_kernel(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run the verified kernel registered for ``key`` on ``inputs``; returns the used outputs. The op's kernel, and
    what Inductor's generated code calls in its place (Note [Inductor's code calls the kernel, not the op] in
    inductor_call.py)."""
    return REGISTRY.get(key).run(inputs)


def _kernel_fake(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return REGISTRY.get(key).empty_outputs(inputs[0].device)


_LIB.impl("kernel", call_kernel, "CompositeExplicitAutograd")
torch.library.register_fake("kforge::kernel", _kernel_fake, lib=_LIB)

KERNEL_OP = torch.ops.kforge.kernel.default
