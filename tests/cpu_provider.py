"""A kernel provider for CPU tests only: it 'serves' kernels that call the ATen op itself on the CPU.

It stands in for the GPU runtime so that the capture -> card -> rewrite -> run path can be tested where CI runs.
Each impl counts its calls, so tests can prove that the rewritten graph really calls it.
"""
from __future__ import annotations

import uuid
from collections import Counter
from typing import Sequence

import torch

from forge_backend.cards import OperatorCard
from forge_backend.reference import call_aten
from forge_backend.registry import KernelImpl, conform
from forge_backend.signature import OpSignature

DEFAULT_OPS = (
    "aten._softmax.default",
    "aten.native_layer_norm.default",
    "aten.native_group_norm.default",
    "aten._adaptive_avg_pool2d.default",
    "aten.mean.dim",
)


class CpuProvider:
    def __init__(self, ops: Sequence[str] = DEFAULT_OPS, fail_on: str | None = None,
                 reads_signature_layout: bool = False, strided: bool = False) -> None:
        self.ops = set(ops)
        # like the CUDA provider: impls that can run into outputs of given strides, and name PyTorch's op
        self.strided = strided
        self.strided_calls: Counter[str] = Counter()
        self.eager_calls: Counter[str] = Counter()
        self.fail_on = fail_on
        # like a CUDA kernel: index each input's memory with the strides of the signature, never the real ones
        self.reads_signature_layout = reads_signature_layout
        self.calls: Counter[str] = Counter()
        self.cards_seen: list[OperatorCard] = []
        self.served: dict[str, OpSignature] = {}
        self.loads: list[str] = []
        self.generation = 0  # tests bump it to stand for a change in the cache's contents
        self.fingerprinting = True
        self.token = uuid.uuid4().hex  # Inductor's caches outlive a test: only this provider may hit its graphs

    def fingerprint(self, cfg) -> str | None:
        """Like CudaProvider.fingerprint: what the compiled graph depends on (here: the ops served, a generation)."""
        return f"cpu-test:{self.token}:{sorted(self.ops)}:{self.generation}" if self.fingerprinting else None

    def load(self, key: str) -> KernelImpl | None:
        """Like CudaProvider.load: a kernel by key for code that Inductor's cache served."""
        sig = self.served.get(key)
        if sig is None:
            return None
        self.loads.append(key)
        return self._impl(key, sig)

    def kernels_for(self, cards, cfg):
        impls = {}
        for card in cards:
            self.cards_seen.append(card)
            if self.fail_on is not None and card.op == self.fail_on:
                raise RuntimeError(f"planted failure for {card.op}")
            if card.op not in self.ops:
                continue
            sig = card.signature_obj()
            self.served[card.key] = sig
            impls[card.key] = self._impl(card.key, sig)
        return impls

    def _impl(self, key: str, sig: OpSignature) -> KernelImpl:
        run = self._runner(sig)
        if not self.strided:
            return KernelImpl(key, sig.op, tuple(sig.outputs[i] for i in sig.used_outputs), run, "cpu test impl", 1.0)

        def run_strided(inputs: Sequence[torch.Tensor], strides) -> list[torch.Tensor]:
            self.strided_calls[sig.op] += 1
            return [torch.empty_strided(o.shape, st, dtype=o.dtype).copy_(o) for o, st in zip(run(inputs), strides)]

        def eager(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
            self.eager_calls[sig.op] += 1
            return call_aten(sig, inputs)

        return KernelImpl(key, sig.op, tuple(sig.outputs[i] for i in sig.used_outputs), run, "cpu test impl", 1.0,
                          run_strided=run_strided, eager=eager)

    def _runner(self, sig: OpSignature):
        specs = [t for _, t in sig.tensor_args()]

        def run(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
            self.calls[sig.op] += 1
            if self.reads_signature_layout:
                inputs = [x.as_strided(s.shape, s.stride) for x, s in zip(inputs, specs)]
            return conform([o.clone() for o in call_aten(sig, inputs)], [sig.outputs[i] for i in sig.used_outputs])

        return run
