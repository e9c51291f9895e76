"""Pointwise fusion: find connected groups of pointwise ATen nodes that one kernel can replace.

Note [pointwise groups]
``silu(x) * x`` in bf16 [16384, 4096] ran 167 us eager and 165 us with kforge replacing silu and mul one by one,
against 73.5 us for Inductor's one fused kernel (H200, docs/STATUS.md): two kernels read and write the intermediate
through DRAM, one does not. So with ``fuse_pointwise`` (and ``inner="eager"``; Inductor fuses these itself) a group
of pointwise nodes becomes one candidate whose signature is ``kforge.pointwise`` with the group's expression
(expression.py) over its external inputs.

A group is a maximal connected set of at least two fusable nodes with one output. A node is fusable when it is one
of expression.OPS with its usual arguments, its value and every tensor operand are dense row-major float tensors
(fp32/fp16/bf16) of one shape (no broadcasting, no views), and scalar operands are Python numbers. Groups are grown
backwards: walking the graph in reverse, a fusable node joins the group of its users when all of them belong to one
group, and otherwise starts a group of its own as that group's output. So every member but the output has all its
users inside the group, and a node whose value is also used elsewhere (a softmax, the graph's output) splits the
chain there. Shared subexpressions are allowed (printed once per use, computed once).

Reads the graph only; rewrite.py replaces a group.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx

from .expression import FUSABLE_ATEN, FUSED_OP, OPS, Call, Const, Expr, Input, PointwiseOp, result_dtype, to_text
from .signature import ArgSpec, OpSignature, TensorSpec, arch_of, dtype_name, node_arguments

log = logging.getLogger("kforge")

MAX_MEMBERS = 128  # bigger groups are left unfused (keeps the recursive description shallow)
_DTYPES = {torch.float32, torch.float16, torch.bfloat16}
_ATEN_NAME = {op.aten: op for op in OPS.values() if op.approximate is None and op.dtype is None}
_PLAIN_COPY = {"layout": (None, torch.strided), "pin_memory": (None, False),
               "memory_format": (None, torch.preserve_format, torch.contiguous_format)}


@dataclass(frozen=True)
class Group:
    output: torch.fx.Node
    members: tuple[torch.fx.Node, ...]  # in graph order; the output last
    inputs: tuple[torch.fx.Node, ...]  # external tensor inputs, x0..xk
    expr: str
    op: str = FUSED_OP  # SOFTMAX_OP: softmax_fusion.py; NORM_OP: norm_fusion.py
    anchor: torch.fx.Node | None = None  # the softmax / norm node the group is built around (None: pointwise)
    # a member whose value is also used outside the group: the kernel's second output (a norm's prologue, the new
    # residual: Note [a norm takes the residual add before it] in norm_fusion.py); its outside users follow
    # ``output`` in graph order
    side: torch.fx.Node | None = None
    prologue: str | None = None  # the expression that computes ``side`` (the norm's input) from its inputs


@dataclass(frozen=True)
class _NodeCall:
    op: PointwiseOp
    operands: tuple[Any, ...]  # fx Nodes (tensors) or Python numbers
    alpha: int | float | None


def dense_float(v: Any, shape: tuple[int, ...] | None = None) -> bool:
    """A static-shape, non-empty, row-major contiguous fp32/fp16/bf16 tensor (of ``shape`` when given)."""
    if not isinstance(v, torch.Tensor) or v.dtype not in _DTYPES:
        return False
    dims = (*v.shape, *v.stride(), v.storage_offset())
    if not all(isinstance(d, int) for d in dims) or v.numel() == 0 or not v.is_contiguous():
        return False
    return shape is None or tuple(v.shape) == shape


def row_strided_float(v: Any) -> bool:
    """A static-shape, non-empty fp32/fp16/bf16 tensor whose last dim is contiguous (any strides elsewhere)."""
    if not isinstance(v, torch.Tensor) or v.dtype not in _DTYPES or v.dim() < 1 or v.numel() == 0:
        return False
    dims = (*v.shape, *v.stride(), v.storage_offset())
    return all(isinstance(d, int) for d in dims) and (v.shape[-1] == 1 or v.stride(-1) == 1)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# Inductor's trace spells a cast as prims.convert_element_type(a, dtype); eager's ATen graph as _to_copy
_CONVERT = "prims.convert_element_type.default"


def node_call(node: torch.fx.Node, broadcast: bool = False) -> _NodeCall | None:
    """How a node reads as an expression op, or None when it is not fusable. With ``broadcast`` a tensor operand
    may be smaller than the result, as long as it broadcasts to it (a [1, 1, S, S] attention mask), and may be a
    strided view whose last dim is contiguous (adaLN's ``shift[:, None]`` of a chunk); the group decides which
    layouts its kernel can index."""
    if node.op != "call_function" or (str(node.target) not in FUSABLE_ATEN and str(node.target) != _CONVERT):
        return None
    val = node.meta.get("val")
    if not dense_float(val):
        return None
    args = dict(node_arguments(node))
    op = _pick_op(str(node.target), args, val)
    if op is None:
        return None
    first = args["a"] if str(node.target) == _CONVERT else args["self"]
    operands = (first,) + ((args["other"],) if op.arity == 2 else ())
    for i, a in enumerate(operands):
        tensor = isinstance(a, torch.fx.Node)
        if tensor and not (dense_float(a.meta.get("val"), tuple(val.shape)) or (broadcast and _smaller(a, val))):
            return None
        if tensor and a.meta["val"].device != val.device:
            return None
        if not tensor and (i == 0 or not _number(a)):
            return None
    alpha = args.get("alpha", 1)
    if not _number(alpha):
        return None
    return _NodeCall(op, operands, None if alpha == 1 else alpha)


def _smaller(a: torch.fx.Node, val: torch.Tensor) -> bool:
    """An operand that broadcasts to ``val`` with a contiguous last dim (``node_call``'s ``broadcast``)."""
    return row_strided_float(a.meta.get("val")) and _broadcasts(a.meta["val"].shape, val.shape)


def _broadcasts(small: Sequence[int], full: Sequence[int]) -> bool:
    """Shape ``small`` broadcasts to shape ``full`` (dims of 1 or equal, aligned from the right)."""
    return len(small) <= len(full) and all(s in (1, f) for s, f in zip(reversed(small), reversed(full)))


def row_input(node: torch.fx.Node, full: tuple[int, ...]) -> bool:
    """An input a row kernel over ``full`` (rows x last dim) can index: its last dim is the row's, contiguous;
    any strides over the leading dims, which may broadcast (the [1, 1, S, S] mask, adaLN's ``shift[:, None]``)."""
    val = node.meta.get("val")
    return (row_strided_float(val) and val.shape[-1] == full[-1] and val.stride(-1) == 1
            and _broadcasts(val.shape, full))


def _pick_op(target: str, args: dict[str, Any], val: torch.Tensor) -> PointwiseOp | None:
    if target == _CONVERT:
        return OPS[f"to_{dtype_name(val.dtype)}"]
    if target == "aten.gelu.default":
        return OPS.get({"none": "gelu", "tanh": "gelu_tanh"}.get(args.get("approximate", "none"), ""))
    if target == "aten._to_copy.default":
        if any(args.get(k) not in ok for k, ok in _PLAIN_COPY.items()):
            return None
        dev = args.get("device")
        if dev is not None and torch.device(dev) != val.device:
            return None
        return OPS[f"to_{dtype_name(val.dtype)}"]
    return _ATEN_NAME.get(target)


def describe(output: torch.fx.Node, members: tuple[torch.fx.Node, ...], broadcast: bool = False
             ) -> tuple[Call, list[torch.fx.Node], dict[torch.fx.Node, Expr]]:
    """The group's expression, its external inputs in order of first use, and each member's subexpression.
    Raises ValueError when a member is no longer fusable. ``broadcast``: as in ``node_call``."""
    inside = set(members)
    inputs: list[torch.fx.Node] = []
    built: dict[torch.fx.Node, Expr] = {}

    def build(n: torch.fx.Node) -> Expr:
        if n in built:
            return built[n]
        call = node_call(n, broadcast)
        if call is None:
            raise ValueError(f"node {n.name} ({n.target}) is not fusable")
        args: list[Expr] = []
        for a in call.operands:
            if isinstance(a, torch.fx.Node) and a in inside:
                args.append(build(a))
            elif isinstance(a, torch.fx.Node):
                if a not in inputs:
                    inputs.append(a)
                args.append(Input(inputs.index(a)))
            else:
                args.append(Const(a))
        built[n] = Call(call.op.name, tuple(args), call.alpha)
        return built[n]

    root = build(output)
    assert isinstance(root, Call)
    return root, inputs, built


def find_groups(graph: torch.fx.Graph) -> list[Group]:
    """Every fusable group of two or more nodes, in graph order of their outputs."""
    owner: dict[torch.fx.Node, torch.fx.Node] = {}  # member -> its group's output
    for node in reversed(list(graph.nodes)):
        if node_call(node) is None:
            continue
        owners = {owner.get(u) for u in node.users}
        owner[node] = owners.pop() if len(owners) == 1 and None not in owners else node
    members: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node in owner:
            members.setdefault(owner[node], []).append(node)
    groups = []
    for out, nodes in members.items():
        if len(nodes) >= 2:
            group = _make_group(out, tuple(nodes))
            if group is not None:
                groups.append(group)
    return groups


def _make_group(output: torch.fx.Node, members: tuple[torch.fx.Node, ...]) -> Group | None:
    if len(members) > MAX_MEMBERS:
        log.info("kforge: pointwise group at %s has %d nodes (> %d); left unfused", output.name, len(members),
                 MAX_MEMBERS)
        return None
    described = expression_of(output, members)
    return None if described is None else Group(output, members, tuple(described[1]), described[0])


def expression_of(output: torch.fx.Node, members: tuple[torch.fx.Node, ...], broadcast: bool = False
                  ) -> tuple[str, list[torch.fx.Node]] | None:
    """The printed expression of ``members`` (whose result is ``output``) and its external inputs, or None (logged)
    when it cannot be described or its type promotion is not what eager did."""
    try:
        root, inputs, built = describe(output, members, broadcast)
        text = to_text(root)
    except ValueError as e:
        log.info("kforge: pointwise group at %s left unfused: %s", output.name, e)
        return None
    dtypes = [dtype_name(n.meta["val"].dtype) for n in inputs]
    memo: dict = {}
    result_dtype(root, dtypes, memo)
    for n, e in built.items():  # the expression's type promotion must be what eager did
        if memo[e] != dtype_name(n.meta["val"].dtype):
            log.info("kforge: pointwise group at %s left unfused: %s is %s in the graph, %s by promotion",
                     output.name, n.name, n.meta["val"].dtype, memo[e])
            return None
    return text, inputs


def group_signature(group: Group, arch: str | None = None) -> OpSignature:
    """The synthetic signature of a group: op ``kforge.pointwise`` (or ``kforge.softmax``), tensors x0..xk, and the
    expression as a value."""
    vals = [n.meta["val"] for n in group.inputs]
    out = group.output.meta["val"]
    args = tuple(ArgSpec(f"x{i}", TensorSpec.of(v)) for i, v in enumerate(vals))
    return OpSignature(group.op, args + (ArgSpec("expr", value=group.expr),), (TensorSpec.of(out),), (0,),
                       arch or arch_of(out.device))
