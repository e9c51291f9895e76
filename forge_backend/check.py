"""Note [checking inside a model]
The verifier proves a kernel on fresh random inputs. If a model's output still disagrees with eager, ``check=True``
(``KFORGE_CHECK=1``) finds the operator: every call of a kforge kernel is followed by PyTorch's own op on the same
inputs and a float64 reference, compared with the verifier's tolerances. A disagreement is logged with the op,
the shapes and the worst element, and counted in ``counters["kforge"]["check_mismatch"]``; with ``strict`` it is
raised. Outputs with the very bits of PyTorch's op are counted in ``check_bitwise_equal``: a model whose output
matches eager exactly is explained by it, or by a kernel that is not being used. It costs two extra op calls per
kernel call: a debugging mode, off by default.
"""
from __future__ import annotations

import logging
from typing import Callable, Sequence

import torch
from torch._dynamo.utils import counters

from .cards import OperatorCard
from .errors import KforgeError
from .reference import call_aten

log = logging.getLogger("kforge")
RunFn = Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]


class KernelMismatch(KforgeError, RuntimeError):
    """A kforge kernel disagreed with PyTorch on a model's real inputs (raised by ``check`` under ``strict``)."""


def checked(card: OperatorCard, run: RunFn, strict: bool = False) -> RunFn:
    """``run`` followed by a comparison with PyTorch on the same inputs (Note [checking inside a model])."""
    from .verify import _compare, reference_outputs, stat_floor

    sig = card.signature_obj()
    shapes = [list(t.spec.shape) for t in card.inputs]

    def run_checked(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        outs = run(inputs)
        eager, ref = call_aten(sig, list(inputs)), reference_outputs(card, inputs)
        for i, (o, e, r) in enumerate(zip(outs, eager, ref)):
            rep = _compare(o, r, e, f"output {i}", stat_floor(card, card.outputs[i].name, inputs))
            counters["kforge"]["checked_calls"] += 1
            counters["kforge"]["check_bitwise_equal"] += int(torch.equal(o, e))  # same bits as PyTorch's own op
            if not rep.ok:
                counters["kforge"]["check_mismatch"] += 1
                msg = f"kforge check: {card.op} {shapes} (key {card.key[:12]}) disagrees with PyTorch: {rep.message}"
                if strict:
                    raise KernelMismatch(msg)
                log.warning(msg)
        return outs

    return run_checked
