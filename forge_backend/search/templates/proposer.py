"""TemplateProposer: the built-in, offline proposer. It walks the parameter space of the template families.

At the root (PyTorch's kernel, no candidate) it proposes the family's root params first, then the starting point of
each other strategy, then the one-knob neighbours of the seeds whose nodes *failed* (labelled with the seed they
come from). The MCTS never expands a failed node, so without them a card whose seeds all fail verification had
nothing left to try: on the H200, group_norm [1,128,1024,1024] fp32 has one valid strategy, its root failed a
tolerance check on one output, and the search stopped "exhausted" after one iteration. A seed that passed is
expanded as usual (its neighbours are its children), so a normal search spends its iterations as before; offering
every seed's neighbours at the root spread 8-iteration searches thin (group norms 3-14% slower in one H200 run).
Below a template node it proposes one untried one-knob action of the parent's params, picked with the search's rng.
Params already proposed for the card anywhere in the tree, and actions the parent's children already took, are
skipped; when nothing is left it returns None. Below a node without template params (an LLM candidate) it offers
only the untried seeds: they lead back into the template space, and the seeds' neighbours are already offered at the
root (each params is proposed once per card). Ops no family matches get None (left to PyTorch or the LLM)."""
from __future__ import annotations

import random
from types import ModuleType
from typing import Any

from ...cards import OperatorCard
from ..proposer import ParentView, Proposal
from . import family_for, family_name
from .common import freeze
from .target import target_of


class TemplateProposer:
    name = "templates"

    def __init__(self) -> None:
        self._proposed: dict[str, set[tuple]] = {}  # card key -> params proposed so far (frozen)

    def options(self, card: OperatorCard, parent: ParentView) -> list[tuple[str, dict[str, Any]]]:
        """Every (action, params) this proposer could still offer below ``parent``, in preference order."""
        fam = family_for(card)
        if fam is None or not target_of(card).served:  # Note [templates for the card's architecture] in target.py
            return []
        if parent.candidate is None:
            opts = _root_options(card, fam, {f.get("action") for f in parent.failed_children})
        elif not parent.params:
            seeds = fam.seeds(card)
            opts = [(f"template {n}", p) for n, p in zip(seed_labels(seeds, root=False), seeds)]
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


def _root_options(card: OperatorCard, fam: ModuleType, failed: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The seeds in order, then the one-knob neighbours of each seed whose node failed, labelled with their seed:
    the search never expands a failed node, so its neighbours are offered from the root. A seed that passed keeps
    its neighbours to itself (they are its children), so a normal search spends its iterations as before."""
    seeds = fam.seeds(card)
    names = seed_labels(seeds)
    opts = [(f"template {n}", p) for n, p in zip(names, seeds)]
    opts += [(f"{a} (from {n})", q) for n, p in zip(names, seeds) if f"template {n}" in failed
             for a, q in fam.actions(card, p)]
    return _first_of_each(opts)


def _first_of_each(opts: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Drops options whose params an earlier option already has (a strategy switch from the root is another seed)."""
    seen: set[tuple] = set()
    out = []
    for action, params in opts:
        if freeze(params) not in seen:
            seen.add(freeze(params))
            out.append((action, params))
    return out


def _strategy(p: dict[str, Any]) -> str:
    s = p.get("strategy") or p.get("mode") or "params"
    return f"strategy {s}"


def seed_labels(seeds: list[dict[str, Any]], root: bool = True) -> list[str]:
    """One distinct label per seed: ``root`` (when ``root``), then ``strategy NAME``; a seed whose strategy an earlier
    seed or the root already has (the group norm's kept-in-part cluster beside its plain cluster, its relay without
    writers of their own beside the root with them) also names the knobs it sets differently from that one
    (``keep=None`` where it leaves out one that one sets). The search skips an action its
    parent's children already took, so two seeds under one label would lose the second."""
    out: list[str] = []
    first: dict[str, dict[str, Any]] = {}
    for i, p in enumerate(seeds):
        if root and i == 0:
            out.append("root")
            first[_strategy(p)] = p
            continue
        name = _strategy(p)
        if name in first:
            other = first[name]
            diff = " ".join(f"{k}={p.get(k)}" for k in sorted(set(p) | set(other)) if other.get(k) != p.get(k))
            out.append(f"{name} ({diff})")
        else:
            first[name] = p
            out.append(name)
    return out
