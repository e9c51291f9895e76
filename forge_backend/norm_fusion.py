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

Measured on the H200 (sixth session, benchmarks/results/h200/ops.json, row ``adaln_layer_norm``): [1, 4096, 1536] bf16
with its modulation in 13.8 us against Inductor's 22.2 us (1.61x) and eager's 51.8 us. Inside a whole MMDiT under
Inductor the gate still keeps Inductor's kernels (Note [what replacing a node costs inside Inductor]): there Inductor
also fuses the residual add before the norm, which a kforge kernel would make real. On the eager path the groups
are replaced. On by default (``fuse_norm``).

Reads the graph only; rewrite.py replaces a group.
"""
from __future__ import annotations

import torch
import torch.fx

from .expression import NORM_OP, to_text
from .fusion import Group, dense_float, describe, expression_of, node_call, row_input
from .signature import ArgSpec, OpSignature, TensorSpec, signature_of

NORMS = ("aten.native_layer_norm.default", "aten._fused_rms_norm.default")
MAX_CHAIN = 16


def find_norm_groups(graph: torch.fx.Graph) -> list[Group]:
    """Every layer/rms norm with a fusable pointwise epilogue, in graph order."""
    groups = []
    for node in graph.nodes:
        if node.op == "call_function" and str(node.target) in NORMS:
            group = _group_at(node)
            if group is not None:
                groups.append(group)
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


def _parts(group: Group) -> tuple[torch.fx.Node, torch.fx.Node, tuple[torch.fx.Node, ...]]:
    """(the norm, its output ``getitem(norm, 0)``, the epilogue chain)."""
    norm = group.anchor
    i = next(i for i, m in enumerate(group.members) if m.args and m.args[0] is norm and m.args[1:] == (0,))
    return norm, group.members[i], group.members[i + 1:]


def norm_group_signature(group: Group, arch: str | None = None) -> OpSignature:
    """The norm's own arguments, the epilogue's extra inputs ``x<i>``, the expression, ``norm`` and ``norm_out``."""
    norm, y, chain = _parts(group)
    base = signature_of(norm, arch)
    _, ep_inputs, _ = describe(group.output, tuple(chain), broadcast=True)
    k = ep_inputs.index(y)
    extra = tuple(ArgSpec(f"x{i}", TensorSpec.of(n.meta["val"])) for i, n in enumerate(ep_inputs) if i != k)
    scalars = (ArgSpec("expr", value=group.expr), ArgSpec("norm", value=str(norm.target)),
               ArgSpec("norm_out", value=k))
    out = TensorSpec.of(group.output.meta["val"])
    return OpSignature(NORM_OP, base.args + extra + scalars, (out,), (0,), base.arch)


def epilogue_inputs(group: Group) -> list[torch.fx.Node]:
    """The group's tensor inputs as the graph stands now, in the signature's order: the norm's tensor arguments,
    then the epilogue's extra inputs."""
    from .rewrite import tensor_input_nodes

    norm, y, chain = _parts(group)
    root, ep_inputs, _ = describe(group.output, tuple(chain), broadcast=True)
    if to_text(root) != group.expr:
        raise RuntimeError(f"norm group at {group.output.name} changed since capture: {group.expr}")
    return tensor_input_nodes(norm, signature_of(norm)) + [n for n in ep_inputs if n is not y]
