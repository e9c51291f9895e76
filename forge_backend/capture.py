"""Read an ATen graph: which nodes are candidates, their signatures and cards.

Graph capture itself (Dynamo graph -> AOTAutograd inference graph) happens in backend.py; this module only reads
an ATen ``GraphModule`` and never changes it. With ``fuse=True`` each pointwise group (fusion.py) is one candidate
with a ``kforge.pointwise`` signature, and its member nodes are not candidates on their own.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.fx

from .cards import OperatorCard, cards_for_graph
from .errors import UnsupportedNode
from .fusion import Group, find_groups, group_signature
from .rewrite import is_getitem
from .selection import is_candidate
from .signature import OpSignature, signature_of

log = logging.getLogger("kforge")


@dataclass(frozen=True)
class CandidateNode:
    node: torch.fx.Node  # for a group, its output node
    signature: OpSignature
    group: Group | None = None


@dataclass
class GraphScan:
    candidates: list[CandidateNode]
    skipped: list[tuple[str, str]]  # (node name, reason)
    ops_seen: int

    def cards(self) -> list[OperatorCard]:
        return cards_for_graph([c.signature for c in self.candidates])


def scan(gm: torch.fx.GraphModule, families: tuple[str, ...] = (), inner: str = "eager",
         fuse: bool = False) -> GraphScan:
    """Find candidate nodes (and, with ``fuse``, pointwise groups) and describe each. Nodes that cannot be described
    are skipped with a reason."""
    candidates: list[CandidateNode] = []
    skipped: list[tuple[str, str]] = []
    ops_seen = 0
    groups = {g.output: g for g in find_groups(gm.graph)} if fuse else {}
    members = {m for g in groups.values() for m in g.members}
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        ops_seen += 1
        if node in groups:
            candidates.append(CandidateNode(node, group_signature(groups[node]), groups[node]))
        if node in members or not is_candidate(str(node.target), families, inner):
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
