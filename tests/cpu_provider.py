"""A kernel provider for CPU tests only: it 'serves' kernels that call the ATen op itself on the CPU.

It stands in for the GPU runtime so that the capture -> card -> rewrite -> run path can be tested where CI runs.
Each impl counts its calls, so tests can prove that the rewritten graph really calls it.
"""
from __future__ import annotations

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
    def __init__(self, ops: Sequence[str] = DEFAULT_OPS, fail_on: str | None = None) -> None:
        self.ops = set(ops)
        self.fail_on = fail_on
        self.calls: Counter[str] = Counter()
        self.cards_seen: list[OperatorCard] = []

    def kernels_for(self, cards, cfg):
        impls = {}
        for card in cards:
            self.cards_seen.append(card)
            if self.fail_on is not None and card.op == self.fail_on:
                raise RuntimeError(f"planted failure for {card.op}")
            if card.op not in self.ops:
                continue
            sig = card.signature_obj()
            impls[card.key] = KernelImpl(card.key, card.op, tuple(sig.outputs[i] for i in sig.used_outputs),
                                         self._runner(sig), "cpu test impl", 1.0)
        return impls

    def _runner(self, sig: OpSignature):
        def run(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
            self.calls[sig.op] += 1
            return conform([o.clone() for o in call_aten(sig, inputs)], [sig.outputs[i] for i in sig.used_outputs])

        return run
