"""What a proposer is: something that, given an operator card and a parent node of the search tree, offers one
child candidate. Template and LLM proposers implement this; the MCTS engine only knows this protocol.
Leaf of the search package: no CUDA, no Dynamo.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

from ..cards import OperatorCard
from ..contract import Candidate
from ..errors import CandidateFailure


@dataclass(frozen=True)
class ParentView:
    """What a proposer may read about the node it expands (kept free of the engine's internals)."""

    node_id: int
    candidate: Candidate | None  # None at the root (PyTorch's own kernel)
    params: dict[str, Any]  # template knobs of the parent, {} at the root or for LLM nodes
    time_us: float | None
    speedup: float | None
    pct_bw: float | None
    failed_children: Sequence[dict[str, Any]] = ()  # {"action", "stage", "reason", "log"} of failed children
    sibling_actions: Sequence[str] = ()  # one-line actions of the parent's existing children
    eager_us: float | None = None
    floor_us: float | None = None


@dataclass(frozen=True)
class Proposal:
    candidate: Candidate | None  # None when the proposer produced nothing usable (then ``failure`` says why)
    action: str  # one line: what this child changes relative to its parent
    proposer: str
    params: dict[str, Any] = field(default_factory=dict)
    failure: CandidateFailure | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # tokens, cost, prompt hash, ...


class Proposer(Protocol):
    name: str

    def propose(self, card: OperatorCard, parent: ParentView, rng: random.Random) -> Proposal | None:
        """One new child of ``parent``, or None when this proposer has nothing (more) to offer there."""
        ...
