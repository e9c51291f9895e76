"""A softmax that takes its pointwise neighbours: one kernel for ``cast(softmax(expr(x0..xk), dim=-1))``.

Note [a softmax takes its neighbours]
Eager attention in the transformers models is ``softmax(q @ k^T * scale + mask, dim=-1, dtype=float32).to(bf16)``;
Gemma 4's sampling softmax is ``softmax(tanh(logits / 30) * 30)``. Inductor fuses the scale, the mask, the casts and
the soft-capping into its softmax kernel, so a kforge softmax on its own makes those tensors real and loses inside
Inductor (Note [what replacing a node costs inside Inductor]), however fast it is alone. Yet Inductor's fused
kernels are slow there: on the H200, Gemma 4 E2B (eager attention, 2048 tokens) under Inductor spends 317 us of its
2208 us of kernel time per forward in its three fused attention softmaxes, ~104 us each for [1, 8, 2048, 2048]
(bf16 in and out: 134 MB, a 31 us floor), and 64 us in the sampling softmax's three kernels
(benchmarks/results/h200/kernels_gemma4_inductor.txt).

So a ``_softmax`` over the last dim is captured with its neighbours as one candidate:

- its prologue: the connected pointwise nodes (expression.OPS; Inductor's ``prims.convert_element_type`` reads as
  a cast) that produce its input, each of the input's full shape and used only inside the group. Their other tensor
  operands are the group's inputs x0..xk, in their own layout as long as the softmax's dim is contiguous; one may
  broadcast over the leading dims (the [1, 1, S, S] mask) but not along the softmax's dim (``fusion.row_input``).
  At least one prologue node is required: a plain softmax is the ``aten._softmax`` signature;
- its epilogue: one cast of the result, when that cast is the softmax's only user.

The group's signature is op ``kforge.softmax`` with the prologue's printed expression (expression.py) and the
output's dtype. reference.py runs the expression, ``_softmax`` and the cast with ATen, so the verifier, the eager
baseline and Inductor's single-op baseline all compute what the graph computed. The plain ``_softmax`` node stays
a candidate too: where the group gets no kernel, the softmax alone still may.

Reads the graph only; rewrite.py replaces a group.
"""
from __future__ import annotations

import torch
import torch.fx

from .expression import SOFTMAX_OP, to_text
from .fusion import MAX_MEMBERS, Group, dense_float, describe, expression_of, node_call, row_input

_SOFTMAX = "aten._softmax.default"


def find_softmax_groups(graph: torch.fx.Graph) -> list[Group]:
    """Every softmax with a fusable prologue, in graph order."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    groups = []
    for node in graph.nodes:
        if node.op == "call_function" and str(node.target) == _SOFTMAX:
            group = _group_at(node, order)
            if group is not None:
                groups.append(group)
    return groups


def _last_dim(node: torch.fx.Node) -> bool:
    x, dim, half_to_float = (list(node.args) + [None, None, None])[:3]
    val = node.meta.get("val")
    if half_to_float or not isinstance(x, torch.fx.Node) or not dense_float(val) or val.dim() < 1:
        return False
    return isinstance(dim, int) and dim in (-1, val.dim() - 1)


def _prologue(x: torch.fx.Node, softmax: torch.fx.Node) -> set[torch.fx.Node]:
    """The pointwise nodes of the input's shape that feed ``softmax`` and nothing outside the group (to a fixed
    point, so a node used by two members joins once both have)."""
    shape = tuple(x.meta["val"].shape)
    members: set[torch.fx.Node] = set()
    changed = True
    while changed and len(members) < MAX_MEMBERS:
        changed = False
        frontier = [x] + [a for m in members for a in m.all_input_nodes]
        for n in frontier:
            if n in members:
                continue
            val = n.meta.get("val")
            if not isinstance(val, torch.Tensor) or tuple(val.shape) != shape or node_call(n, broadcast=True) is None:
                continue
            if all(u is softmax or u in members for u in n.users):
                members.add(n)
                changed = True
    return members


def _group_at(softmax: torch.fx.Node, order: dict[torch.fx.Node, int]) -> Group | None:
    if not _last_dim(softmax):
        return None
    x = softmax.args[0]
    members = sorted(_prologue(x, softmax), key=order.__getitem__)
    if not members or x not in members:
        return None
    described = expression_of(x, tuple(members), broadcast=True)
    if described is None:
        return None
    text, inputs = described
    full = tuple(softmax.meta["val"].shape)
    if not all(row_input(n, full) for n in inputs):
        return None
    output, tail = softmax, [softmax]
    users = list(softmax.users)
    if len(users) == 1:
        call = node_call(users[0])
        if call is not None and call.op.dtype is not None:
            output = users[0]
            tail.append(output)
    return Group(output, tuple(members + tail), tuple(inputs), text, op=SOFTMAX_OP, anchor=softmax)


def prologue_inputs(group: Group) -> list[torch.fx.Node]:
    """The group's inputs as the graph stands now (an earlier replacement may have re-pointed them)."""
    softmax = group.anchor
    prologue = group.members[:group.members.index(softmax)]
    root, inputs, _ = describe(softmax.args[0], prologue, broadcast=True)
    if to_text(root) != group.expr:
        raise RuntimeError(f"softmax group at {group.output.name} changed since capture: {group.expr}")
    return inputs
