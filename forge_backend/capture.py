"""Read an ATen graph: which nodes are candidates, their signatures and cards.

Graph capture itself (Dynamo graph -> AOTAutograd inference graph) happens in backend.py; this module only reads
an ATen ``GraphModule`` and never changes it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.fx

from .cards import OperatorCard, cards_for_graph
from .errors import UnsupportedNode
from .rewrite import is_getitem
from .selection import is_candidate
from .signature import OpSignature, signature_of

log = logging.getLogger("kforge")


@dataclass(frozen=True)
class CandidateNode:
    node: torch.fx.Node
    signature: OpSignature


@dataclass
class GraphScan:
    candidates: list[CandidateNode]
    skipped: list[tuple[str, str]]  # (node name, reason)
    ops_seen: int

    def cards(self) -> list[OperatorCard]:
        return cards_for_graph([c.signature for c in self.candidates])


def scan(gm: torch.fx.GraphModule, families: tuple[str, ...] = (), inner: str = "eager") -> GraphScan:
    """Find candidate nodes and describe each. Nodes that cannot be described are skipped with a reason."""
    candidates: list[CandidateNode] = []
    skipped: list[tuple[str, str]] = []
    ops_seen = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        ops_seen += 1
        if not is_candidate(str(node.target), families, inner):
            continue
        try:
            sig = signature_of(node)
            if len(sig.outputs) > 1 and not all(is_getitem(u) for u in node.users):
                raise UnsupportedNode("a multi-output node is consumed whole")
        except UnsupportedNode as e:
            log.info("kforge: leaving %s (%s) to PyTorch: %s", node.name, node.target, e)
            skipped.append((node.name, str(e)))
            continue
        candidates.append(CandidateNode(node, sig))
    return GraphScan(candidates, skipped, ops_seen)
