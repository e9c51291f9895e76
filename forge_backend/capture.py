"""Read an ATen graph: which nodes are candidates, their signatures and cards.

Graph capture itself (Dynamo graph -> AOTAutograd inference graph) happens in backend.py; this module only reads
an ATen ``GraphModule`` and never changes it. With ``fuse=True`` each pointwise group (fusion.py) is one candidate
with a ``kforge.pointwise`` signature, and its member nodes are not candidates on their own. With
``fuse_softmax=True`` each softmax with a pointwise prologue (softmax_fusion.py) is one ``kforge.softmax`` candidate.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.fx

from .cards import OperatorCard, cards_for_graph
from .errors import UnsupportedNode
from .expression import FUSED_OP, NORM_OP
from .fusion import Group, find_groups, group_signature
from .rewrite import is_getitem
from .norm_fusion import find_norm_groups, norm_group_signature
from .selection import CONVOLUTION, depthwise_conv1d, is_candidate
from .signature import OpSignature, node_arguments, signature_of
from .softmax_fusion import find_softmax_groups

log = logging.getLogger("kforge")


def _depthwise_conv1d(node: torch.fx.Node) -> bool:
    """Note [the one convolution kforge takes by default] in selection.py, read off an ``aten.convolution`` node."""
    if str(node.target) != CONVOLUTION:
        return False
    args = dict(node_arguments(node))
    weight = args["weight"].meta.get("val") if isinstance(args.get("weight"), torch.fx.Node) else None
    return isinstance(weight, torch.Tensor) and depthwise_conv1d(tuple(weight.shape), args)


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
         fuse: bool = False, fuse_softmax: bool = False, fuse_norm: bool = False) -> GraphScan:
    """Find candidate nodes (with ``fuse``, pointwise groups; with ``fuse_softmax``, softmaxes with their pointwise
    neighbours; with ``fuse_norm``, layer/rms norms with their pointwise epilogue) and describe each. Nodes that
    cannot be described are skipped with a reason. A softmax or norm group may overlap a pointwise group, and its
    own nodes stay candidates (Note [a softmax takes its neighbours]): the rewrite takes softmax and norm groups
    first, then pointwise groups, then single nodes, each only if none of its nodes was taken."""
    candidates: list[CandidateNode] = []
    skipped: list[tuple[str, str]] = []
    ops_seen = 0
    groups: dict[torch.fx.Node, list[Group]] = {}
    for g in find_groups(gm.graph) if fuse else []:
        groups.setdefault(g.output, []).append(g)
    if fuse_softmax and is_candidate("aten._softmax.default", families, inner):
        for g in find_softmax_groups(gm.graph):
            groups.setdefault(g.output, []).append(g)
    if fuse_norm:
        for g in find_norm_groups(gm.graph):
            if is_candidate(str(g.anchor.target), families, inner):
                groups.setdefault(g.output, []).append(g)
    members = {m for gs in groups.values() for g in gs if g.op == FUSED_OP for m in g.members}
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        ops_seen += 1
        for g in groups.get(node, ()):
            try:
                sig = norm_group_signature(g) if g.op == NORM_OP else group_signature(g)
            except UnsupportedNode as e:
                skipped.append((node.name, str(e)))
                continue
            candidates.append(CandidateNode(node, sig, g))
        if node in members or not is_candidate(str(node.target), families, inner, _depthwise_conv1d(node)):
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
