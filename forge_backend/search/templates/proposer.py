"""TemplateProposer: the built-in, offline proposer. It walks the parameter space of the template families.

At the root (PyTorch's kernel, no candidate) it proposes the family's root params first, then the starting point of
each other strategy. Below a template node it proposes one untried one-knob action of the parent's params, picked
with the search's rng. Params already proposed for the card anywhere in the tree, and actions the parent's children
already took, are skipped; when nothing is left it returns None. Below a node without template params (an LLM
candidate) it offers the untried seeds. Ops no family matches get None (left to PyTorch or the LLM).
"""
from __future__ import annotations

import random
from typing import Any

from ...cards import OperatorCard
from ..proposer import ParentView, Proposal
from . import family_for, family_name
from .common import freeze


class TemplateProposer:
    name = "templates"

    def __init__(self) -> None:
        self._proposed: dict[str, set[tuple]] = {}  # card key -> params proposed so far (frozen)

    def options(self, card: OperatorCard, parent: ParentView) -> list[tuple[str, dict[str, Any]]]:
        """Every (action, params) this proposer could still offer below ``parent``, in preference order."""
        fam = family_for(card)
        if fam is None:
            return []
        if parent.candidate is None or not parent.params:
            seeds = fam.seeds(card)
            opts = [("template root" if i == 0 and parent.candidate is None else f"template {_strategy(p)}", p)
                    for i, p in enumerate(seeds)]
        else:
            opts = fam.actions(card, dict(parent.params))
        done = self._proposed.get(card.key, set())
        siblings = set(parent.sibling_actions)
        return [(a, p) for a, p in opts if a not in siblings and freeze(p) not in done]

    def propose(self, card: OperatorCard, parent: ParentView, rng: random.Random) -> Proposal | None:
        opts = self.options(card, parent)
        if not opts:
            return None
        at_seeds = parent.candidate is None or not parent.params
        action, params = opts[0] if at_seeds else rng.choice(opts)
        fam = family_for(card)
        candidate = fam.generate(card, params)
        self._proposed.setdefault(card.key, set()).add(freeze(params))
        return Proposal(candidate, action, self.name, params=dict(params), extra={"family": family_name(fam)})


def _strategy(p: dict[str, Any]) -> str:
    s = p.get("strategy") or p.get("mode") or "params"
    return f"strategy {s}"
