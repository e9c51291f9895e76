"""On the eager path, a kernel's outputs take the strides that PyTorch's own op gives them on the same inputs.

Note [outputs laid out as eager lays them out]
A card's output strides come from the traced graph's fake tensors. Where a dimension has size 1 its stride is
arbitrary, and fake tensors and the real ops choose it differently: on the H200, the SD3.5 VAE's residual sum
``add(channels-last, contiguous)`` really returns [1, 512, 128, 128] with strides (512, 1, 65536, 512), and
``div(that, 1.0)`` keeps them (a Python scalar sends TensorIterator down its general path); the traced graph says
(8388608, 1, 65536, 512) for both. The two describe the same memory, and a kernel writes either alike. But PyTorch's
later ops read the size-1 strides: ``suggest_memory_format`` calls the second channels-last and the first not, so
after kforge's division ``upsample_nearest2d`` ran its NHWC kernel and returned channels-last, cuDNN's convolutions
followed, and every ``.contiguous()`` and residual add after them became a permuting copy. The eager path ran 61.9
ms of GPU time per decode against 39.1 ms without that one kernel, itself 11 us
(benchmarks/results/h200/ab_vae_div_session15.json: 12 more copies, 19.2 ms; mixed-layout adds, 5.7 ms).

So on the eager path each replaced node is called through :class:`LaidOutAsEager`. The first call with a given set
of input strides runs PyTorch's op (the kernel's own fallback, ``KernelImpl.eager``) and returns its outputs; their
strides are kept for that set. Every later call runs the kernel into outputs with those strides. Where PyTorch lays
an output out in a way the kernel cannot write (another order of the dimensions that are not size 1), that set of
strides stays with PyTorch's op: the model keeps eager's layouts either way. A kernel remembers up to MAX_PLANS
sets of strides; inputs with new strides after that run PyTorch's op. Inside Inductor nothing changes: its
generated code was built for the traced strides, which the kernel returns there (``registry.conform``).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch._dynamo.utils import counters

from .registry import KernelImpl
from .signature import layout_key_of

_PYTORCH = None  # a stride set whose outputs the kernel cannot lay out as PyTorch does
_UNSEEN = object()  # a stride set not asked of PyTorch yet
MAX_PLANS = 256  # stride sets remembered per kernel; later new ones run PyTorch's op, unremembered


class LaidOutAsEager:
    """Calls ``impl``'s kernel with its outputs laid out as PyTorch's op lays them out for the same input strides
    (Note [outputs laid out as eager lays them out]). ``impl`` must have ``run_strided`` and ``eager``."""

    def __init__(self, impl: KernelImpl) -> None:
        if impl.run_strided is None or impl.eager is None:
            raise ValueError(f"kernel {impl.key[:12]} has no strided launcher or no PyTorch op to follow")
        self.impl = impl
        self._writable = [s.layout_key() for s in impl.outputs]
        self._plans: dict[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...] | None] = {}

    def plan(self, inputs: Sequence[torch.Tensor]) -> tuple[tuple[int, ...], ...] | None:
        """The output strides kept for these inputs' strides (None: PyTorch's op runs), or KeyError if not seen."""
        return self._plans[tuple(t.stride() for t in inputs)]

    def __call__(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        strides = tuple(t.stride() for t in inputs)
        plan = self._plans.get(strides, _UNSEEN)
        if plan is _UNSEEN:  # first call with these strides: PyTorch's op answers, and says how it lays outputs out
            outputs = list(self.impl.eager(inputs))
            if len(self._plans) < MAX_PLANS:  # inputs whose strides change on every call must not grow it forever
                self._plans[strides] = self._writable_plan(outputs)
            counters["kforge"]["eager_layout_probe"] += 1
            return outputs
        if plan is _PYTORCH:
            counters["kforge"]["eager_layout_kept_pytorch"] += 1
            return list(self.impl.eager(inputs))
        return self.impl.run_strided(inputs, plan)

    def _writable_plan(self, outputs: Sequence[torch.Tensor]) -> tuple[tuple[int, ...], ...] | None:
        if len(outputs) != len(self._writable):
            return _PYTORCH
        for out, want, spec in zip(outputs, self._writable, self.impl.outputs):
            # the same place for every element the kernel writes: the strides differ on size-1 dimensions at most
            if tuple(out.shape) != tuple(spec.shape) or layout_key_of(out) != want:
                return _PYTORCH
        return tuple(tuple(o.stride()) for o in outputs)


def eager_call(impl: KernelImpl):
    """What an eager-path graph calls for ``impl``: laid out as eager where the impl can be, else its ``run``."""
    if impl.run_strided is not None and impl.eager is not None:
        return LaidOutAsEager(impl)
    return impl.run
