"""Template families: parameterised CUDA generators per op family, and the proposer that walks their knobs.

Each family module exposes the same functions over an OperatorCard:

* ``matches(card) -> bool``: the family can generate a correct kernel for this signature
* ``root_params(card) -> dict``: a good starting point for the card's shape
* ``seeds(card) -> list[dict]``: root params first, then the starting point of every other valid strategy
* ``valid(card, params) -> bool``
* ``actions(card, params) -> list[(label, params)]``: one-knob changes, all valid, none equal to ``params``
* ``generate(card, params) -> Candidate``: device source + launch plan

Dependency direction: proposer -> family modules (softmax, reduce, norm, group_norm, pool, fused, elementwise, conv)
-> their strategy and source modules (softmax -> softmax_relay -> softmax_rows -> softmax_card; group_norm ->
gn_kernels, gn_lag, gn_shared; conv -> conv_kernels, conv_bands, conv_flat, conv_shared; relay and relay_pipeline ->
relay_held; resident) -> common -> contract, cards; fused also takes elementwise's knobs, and softmax and norm
(through epilogue) reuse fused's expression code for the prologue / epilogue of kforge.softmax / kforge.norm. No
module here imports torch._dynamo or the runtime.
"""
from __future__ import annotations

from types import ModuleType

from ...cards import OperatorCard
from . import conv, elementwise, fused, group_norm, norm, pool, reduce, softmax

# Order matters where ops overlap: a 4-D mean over (2, 3) is a pool (both layouts), other means are row reductions.
FAMILIES: tuple[ModuleType, ...] = (softmax, pool, reduce, norm, group_norm, fused, elementwise, conv)


def family_for(card: OperatorCard) -> ModuleType | None:
    """The family module that handles this card, or None (the op is left to PyTorch)."""
    for fam in FAMILIES:
        if fam.matches(card):
            return fam
    return None


def family_name(fam: ModuleType) -> str:
    return fam.__name__.rsplit(".", 1)[-1]


from .proposer import TemplateProposer  # noqa: E402  (needs family_for)

__all__ = ["FAMILIES", "TemplateProposer", "family_for", "family_name"]
