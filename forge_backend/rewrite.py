"""Swap ATen nodes for calls of verified kernels; leave every other node as it was.

A replaced node ``y = aten.op(x, ...)`` becomes ``r = kforge.kernel(key, [x, ...]); y = r[0]``. For multi-output
ops (``native_layer_norm`` returns (out, mean, rstd)) each ``getitem(node, i)`` user is re-pointed at the position
of output i among the used outputs. With ``direct=True`` (the graph runs eagerly) the node calls the impl's launcher
directly instead of going through the dispatcher, which saves the custom op's host overhead on every call, and its
outputs are laid out as PyTorch's op lays them out (eager_layout.py).

A pointwise group (fusion.py), a softmax with its neighbours (softmax_fusion.py) or a norm with its epilogue
(norm_fusion.py) becomes one call on the group's
external inputs; its result replaces the group's output node, and the other members, whose users were all inside
the group, are erased last to first. A group's ``side`` member (a norm's prologue: Note [a norm takes the residual
add before it]) is the call's second output; its users outside the group are re-pointed to it first.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from .eager_layout import eager_call
from .expression import NORM_OP, SOFTMAX_OP, to_text
from .fusion import Group, describe
from .registry import KERNEL_OP, KernelImpl
from .signature import OpSignature
from .norm_fusion import epilogue_inputs
from .softmax_fusion import prologue_inputs


@dataclass(frozen=True)
class Replacement:
    node: torch.fx.Node
    signature: OpSignature
    impl: KernelImpl
    group: Group | None = None  # a pointwise group; ``node`` is its output


def tensor_input_nodes(node: torch.fx.Node, sig: OpSignature) -> list[torch.fx.Node]:
    """The node's tensor arguments in schema order, matching ``sig.tensor_args()``."""
    from .signature import node_arguments

    names = {n for n, _ in sig.tensor_args()}
    return [v for name, v in node_arguments(node) if name in names]


def group_input_nodes(group: Group) -> list[torch.fx.Node]:
    """The group's external inputs as the graph stands now (an earlier replacement may have re-pointed them)."""
    if group.op == SOFTMAX_OP:
        return prologue_inputs(group)
    if group.op == NORM_OP:
        return epilogue_inputs(group)
    root, inputs, _ = describe(group.output, group.members)
    if to_text(root) != group.expr:
        raise RuntimeError(f"pointwise group at {group.output.name} changed since capture: {group.expr}")
    return inputs


def _meta_outputs(node: torch.fx.Node, used: tuple[int, ...]) -> list[Any]:
    val = node.meta.get("val")
    vals = list(val) if isinstance(val, (list, tuple)) else [val]
    return [vals[i] for i in used]


def _as_function(run: Any) -> Any:
    """FX names call targets by ``__name__``; a launcher object has none, so wrap it in a plain function."""
    def kforge_kernel(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return run(inputs)

    return kforge_kernel


def apply(gm: torch.fx.GraphModule, replacements: list[Replacement], direct: bool = False) -> int:
    """Rewrite ``gm`` in place. Returns the number of nodes replaced."""
    graph = gm.graph
    for r in replacements:
        node, sig = r.node, r.signature
        used = sig.used_outputs
        inputs = group_input_nodes(r.group) if r.group is not None else tensor_input_nodes(node, sig)
        with graph.inserting_before(node):
            if direct:  # Note [outputs laid out as eager lays them out] in eager_layout.py
                call = graph.call_function(_as_function(eager_call(r.impl)), (inputs,))
            else:
                call = graph.call_function(KERNEL_OP, (r.impl.key, inputs))
                # Note [kernel inputs keep their layout]: Inductor pins a custom op's input strides to these values
                # only when they are recorded; otherwise it may hand the kernel, say, a channels-last conv output
                # where the kernel was built for the NCHW strides of its signature.
                call.meta["eager_input_vals"] = ((r.impl.key, [i.meta.get("val") for i in inputs]), {})
            side = r.group.side if r.group is not None else None
            call.meta["val"] = _meta_outputs(node, used) if side is None else [node.meta["val"], side.meta["val"]]
            call.meta["kforge_key"] = r.impl.key
            if side is not None:  # output 1 is the side member's value: its users outside the group read it now
                inside = set(r.group.members)
                for i, old in enumerate((node, side)):
                    item = graph.call_function(operator.getitem, (call, i))
                    item.meta["val"] = call.meta["val"][i]
                    old.replace_all_uses_with(item, delete_user_cb=lambda u: u not in inside)
            elif len(sig.outputs) == 1:
                item = graph.call_function(operator.getitem, (call, 0))
                item.meta["val"] = call.meta["val"][0]
                node.replace_all_uses_with(item)
            else:
                for user in list(node.users):
                    # signature.used_outputs_of marks every output used when a user is not a getitem, so each
                    # user here is getitem(node, i), with i in used unless nothing reads it
                    if not user.users and user.args[1] not in used:  # Note [an output nothing reads is not used]
                        graph.erase_node(user)
                        continue
                    user.args = (call, used.index(user.args[1]))
        graph.erase_node(node)
        for member in reversed(r.group.members[:-1] if r.group is not None else ()):
            graph.erase_node(member)  # raises if a member still has users: the group was not closed
    if replacements:
        graph.lint()
        gm.recompile()
    return len(replacements)


def is_getitem(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is operator.getitem


def count_kernel_calls(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and (n.target is KERNEL_OP or "kforge_key" in n.meta))
