"""A row norm that takes the pointwise ops after it: one kernel for ``expr(layer_norm(x), x1..xk)``.

Note [a norm takes its epilogue]
Diffusion transformers modulate every norm: SD3.5's MMDiT computes
``layer_norm(x) * (1 + scale[:, None]) + shift[:, None]`` (adaLN) before each attention and MLP. Inductor fuses
the modulation into its layer-norm kernel, so a kforge layer norm alone makes the normalised tensor real and loses
inside Inductor (on the H200 the gate kept 10 of MMDiT's candidate nodes with Inductor for their fusions, fifth
session), although Inductor's fused kernels there run at ~25% of the copy bandwidth (23.9 us for [1, 4096, 1536]
bf16, whose bytes allow 6 us; benchmarks/results/h200/kernels_sd35_mmdit_inductor.txt). This is the softmax's
story (Note [a softmax takes its neighbours]) on the other side of the reduction.

So with ``fuse_norm`` a ``native_layer_norm`` or ``_fused_rms_norm`` whose only used output is the normalised
tensor is captured with its epilogue: the chain of pointwise ops (expression.OPS) that follows it, each of the
output's full shape and the single user of the one before. Their other tensor operands are the group's extra
inputs; each may broadcast over the leading dims (``scale[:, None]`` is [B, 1, C]) but not along the normalised
(last) dim. The signature is op ``kforge.norm``: the norm's own arguments, the extra inputs ``x<i>`` named by their
index in the epilogue's expression, the expression, which overload the norm is (``norm``) and which expression
input is the norm's output (``norm_out``). reference.py runs the norm and then the expression with ATen.

Measured on the H200 (benchmarks/results/h200/ops.json, row ``adaln_layer_norm``): [1, 4096, 1536] bf16 with its
modulation in 13.8 us against Inductor's 22.5 us (1.64x) and eager's 52.0 us. Inside a whole MMDiT under Inductor
the gate keeps Inductor's kernels (Note [what replacing a node costs inside Inductor]): there Inductor also fuses
the residual add before the norm. A group can now take that add too (Note [a norm takes the residual add before
it], below). On the eager path the groups are replaced. On by default (``fuse_norm``).

Reads the graph only; rewrite.py replaces a group.
"""
from __future__ import annotations

from dataclasses import replace

import torch
import torch.fx

from .expression import NORM_OP, to_text
from .fusion import Group, dense_float, describe, expression_of, node_call, row_input
from .signature import ArgSpec, OpSignature, TensorSpec, signature_of

NORMS = ("aten.native_layer_norm.default", "aten._fused_rms_norm.default")
MAX_CHAIN = 16


def find_norm_groups(graph: torch.fx.Graph) -> list[Group]:
    """Every layer/rms norm with a fusable pointwise epilogue, in graph order; a norm whose input is a prologue (Note
    [a norm takes the residual add before it]) gives two groups, with the prologue first and then without it, so
    that the group without stays a choice where the one with it has no kernel or loses."""
    groups = []
    for node in graph.nodes:
        if node.op == "call_function" and str(node.target) in NORMS:
            group = _group_at(node)
            if group is not None:
                with_head = _with_prologue(group)
                groups += ([with_head] if with_head is not None else []) + [group]
    return groups


def _normalised(norm: torch.fx.Node) -> torch.fx.Node | None:
    """``getitem(norm, 0)`` when it is the norm's only use, else None."""
    import operator

    users = [u for u in norm.users if u.users or u.target is not operator.getitem]  # dead getitems do not count
    if len(users) != 1 or users[0].target is not operator.getitem or users[0].args[1] != 0:
        return None
    return users[0] if dense_float(users[0].meta.get("val")) else None


def _group_at(norm: torch.fx.Node) -> Group | None:
    y = _normalised(norm)
    if y is None:
        return None
    full = tuple(y.meta["val"].shape)
    chain: list[torch.fx.Node] = []
    cur = y
    while len(cur.users) == 1 and len(chain) < MAX_CHAIN:
        (nxt,) = cur.users
        call = node_call(nxt, broadcast=True)
        val = nxt.meta.get("val")
        if call is None or not isinstance(val, torch.Tensor) or tuple(val.shape) != full:
            break
        others = [a for a in call.operands if isinstance(a, torch.fx.Node) and a is not cur]
        if any(a is norm or a is y or a in chain or not row_input(a, full) for a in others):
            break
        chain.append(nxt)
        cur = nxt
    if not chain:
        return None
    described = expression_of(cur, tuple(chain), broadcast=True)
    if described is None:
        return None
    text, ep_inputs = described
    if ep_inputs.count(y) != 1:
        return None
    base = [a for a in norm.all_input_nodes]
    extra = [n for n in ep_inputs if n is not y]
    dead = [u for u in norm.users if u is not y]  # unused getitems (mean, rstd) go with the norm
    return Group(cur, (norm, *dead, y, *chain), tuple(base + extra), text, op=NORM_OP, anchor=norm)


def _with_prologue(group: Group) -> Group | None:
    """``group`` with its norm's prologue in front (Note [a norm takes the residual add before it]), or None: no
    prologue, its value read before the group's output, or an epilogue that reads one of its members."""
    norm = group.anchor
    head = _prologue(norm, tuple(group.output.meta["val"].shape))
    if head is None:
        return None
    members, side, text, p_inputs = head
    own = norm.all_input_nodes
    extra = group.inputs[len(own):]
    if set(members) & set(extra) or not _after(group.output, norm, side):
        return None
    return replace(group, members=(*members, *group.members),
                   inputs=tuple(p_inputs + [a for a in own if a is not side] + list(extra)), side=side, prologue=text)


# Note [a norm takes the residual add before it]
# In a transformer block the norm's input is usually the residual stream just updated: SD3.5's MMDiT computes
# ``h = h + gate[:, None] * attn_out`` and then ``layer_norm(h)`` with its modulation, and ``h`` is used again by the
# next residual add. Inductor fuses that add into its layer-norm kernel, which writes ``h`` and the modulated norm in
# one pass (23.9 us at [1, 4096, 1536] bf16 on the H200). A kforge norm group that starts at the norm makes the
# add a kernel of its own (``h`` written, then read back), so inside Inductor the gate kept Inductor's kernels and
# MMDiT ran 1.000x on GPU time.
#
# So the group also takes its *prologue*: the pointwise ops that compute the norm's input, when that value (the new
# residual) is used after the group too. The kernel computes the input from the prologue's inputs, writes it once as
# its second output, and normalises it. The prologue is the closed set of pointwise nodes of the norm's shape behind
# the input (each one's users all inside it, except the input itself), whose other operands are row inputs as the
# epilogue's are. Its outside users must come after the group's output in graph order, since the kernel is called
# there. The signature names its inputs ``p<i>``, carries the expression as ``prologue`` and the new residual as
# output 1; the norm's own ``input`` argument is gone (it is that output). find_norm_groups offers the group with
# its prologue first and the group without it second, so a norm whose prologue group has no kernel, or loses, can
# still take its epilogue.
#
# Measured (H200, eighth session, ops.json row ``residual_adaln_layer_norm``, [1, 4096, 1536] bf16, both outputs):
# 19.1 us against Inductor's 25.3 us (1.32x) and eager's 77.2 us, at 62% of the copy bandwidth, after an 8-iteration
# search. Inside a whole MMDiT under Inductor the gate still kept Inductor's kernels (none of MMDiT's nodes replaced;
# GPU time 1.002x, models_session8_mmdit_prologue.json): with the extern call's 5 us of host time then charged and the
# 3% margin a kernel of ~19 us does not clear ~25 us. It needs to be nearer its floor (11.8 us). The charge is 2 us
# since the generated code calls kernels directly (Note [what replacing a node costs inside Inductor] in
# inductor_gate.py); MMDiT has not run under it.


def _prologue(norm: torch.fx.Node, full: tuple[int, ...]
              ) -> tuple[tuple[torch.fx.Node, ...], torch.fx.Node, str, list[torch.fx.Node]] | None:
    """(members in graph order, the norm's input, the expression, its inputs) of the norm's prologue, or None."""
    side = norm.args[0] if norm.args and isinstance(norm.args[0], torch.fx.Node) else None
    if side is None or not dense_float(side.meta.get("val"), full) or node_call(side, broadcast=True) is None:
        return None
    if not any(u is not norm for u in side.users):
        return None  # nothing else reads the new value: left out for now (no second output to write)
    members = {side}
    grew = True
    while grew and len(members) < MAX_CHAIN:
        grew = False
        for m in list(members):
            for a in node_call(m, broadcast=True).operands:
                if (isinstance(a, torch.fx.Node) and a not in members and dense_float(a.meta.get("val"), full)
                        and node_call(a, broadcast=True) is not None and all(u in members for u in a.users)):
                    members.add(a)
                    grew = True
    order = {n: i for i, n in enumerate(side.graph.nodes)}
    ordered = tuple(sorted(members, key=order.__getitem__))
    described = expression_of(side, ordered, broadcast=True)
    if described is None:
        return None
    text, inputs = described
    if not all(row_input(a, full) for a in inputs):
        return None
    return ordered, side, text, inputs


def _after(output: torch.fx.Node, norm: torch.fx.Node, side: torch.fx.Node) -> bool:
    """Every user of ``side`` but the norm comes after ``output`` in graph order (the kernel is called there)."""
    order = {n: i for i, n in enumerate(output.graph.nodes)}
    return all(order[u] > order[output] for u in side.users if u is not norm)


def _parts(group: Group) -> tuple[torch.fx.Node, torch.fx.Node, tuple[torch.fx.Node, ...]]:
    """(the norm, its output ``getitem(norm, 0)``, the epilogue chain)."""
    norm = group.anchor
    i = next(i for i, m in enumerate(group.members) if m.args and m.args[0] is norm and m.args[1:] == (0,))
    return norm, group.members[i], group.members[i + 1:]


def _head(group: Group) -> tuple[torch.fx.Node, ...]:
    """The prologue's members (those before the norm; none without a prologue)."""
    return group.members[:group.members.index(group.anchor)]


def norm_group_signature(group: Group, arch: str | None = None) -> OpSignature:
    """The norm's own arguments, the epilogue's extra inputs ``x<i>``, the expression, ``norm`` and ``norm_out``.
    With a prologue (Note [a norm takes the residual add before it]) its inputs ``p<i>`` come first and replace the
    norm's ``input``, the expression is ``prologue``, and the norm's input is output 1."""
    norm, y, chain = _parts(group)
    base = signature_of(norm, arch)
    _, ep_inputs, _ = describe(group.output, tuple(chain), broadcast=True)
    k = ep_inputs.index(y)
    extra = tuple(ArgSpec(f"x{i}", TensorSpec.of(n.meta["val"])) for i, n in enumerate(ep_inputs) if i != k)
    scalars = (ArgSpec("expr", value=group.expr), ArgSpec("norm", value=str(norm.target)),
               ArgSpec("norm_out", value=k))
    out = TensorSpec.of(group.output.meta["val"])
    if group.side is None:
        return OpSignature(NORM_OP, base.args + extra + scalars, (out,), (0,), base.arch)
    _, p_inputs, _ = describe(group.side, _head(group), broadcast=True)
    head = tuple(ArgSpec(f"p{i}", TensorSpec.of(n.meta["val"])) for i, n in enumerate(p_inputs))
    own = tuple(a for a in base.args if a.name != "input")
    return OpSignature(NORM_OP, head + own + extra + scalars + (ArgSpec("prologue", value=group.prologue),),
                       (out, TensorSpec.of(group.side.meta["val"])), (0, 1), base.arch)


def epilogue_inputs(group: Group) -> list[torch.fx.Node]:
    """The group's tensor inputs as the graph stands now, in the signature's order: the prologue's inputs (if any),
    the norm's tensor arguments (but its input, when a prologue computes it), then the epilogue's extra inputs."""
    from .rewrite import tensor_input_nodes

    norm, y, chain = _parts(group)
    root, ep_inputs, _ = describe(group.output, tuple(chain), broadcast=True)
    if to_text(root) != group.expr:
        raise RuntimeError(f"norm group at {group.output.name} changed since capture: {group.expr}")
    own = tensor_input_nodes(norm, signature_of(norm))
    head: list[torch.fx.Node] = []
    if group.side is not None:
        p_root, head, _ = describe(group.side, _head(group), broadcast=True)
        if to_text(p_root) != group.prologue:
            raise RuntimeError(f"norm prologue at {group.side.name} changed since capture: {group.prologue}")
        own = own[1:]  # the input: the kernel computes it
    return head + own + [n for n in ep_inputs if n is not y]
