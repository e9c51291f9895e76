"""Call the original ATen op for a signature: the reference for the verifier, the eager baseline for the timer, and the
fallback when a call-time precondition fails. A fused ``kforge.pointwise`` signature runs its expression's ATen ops,
in eager's order and dtypes (expression.evaluate); a ``kforge.softmax`` signature runs its expression, then
``_softmax`` over the last dim, then the cast to its output's dtype (softmax_fusion.py); a ``kforge.norm`` signature
runs its prologue (if any: the norm's input, also its output 1), its norm, then its expression with the norm's output
as input ``norm_out`` (norm_fusion.py)."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .expression import FUSED_OP, NORM_OP, SOFTMAX_OP, evaluate, is_input_name, is_prologue_name
from .signature import ArgSpec, OpSignature


def aten_overload(op: str) -> torch._ops.OpOverload:
    """``"aten._softmax.default"`` -> ``torch.ops.aten._softmax.default``."""
    namespace, rest = op.split(".", 1)
    packet, overload = rest.rsplit(".", 1)
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)


def _py(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _scalar(v: Any) -> Any:
    if isinstance(v, str) and v.startswith("torch."):
        attr = getattr(torch, v.removeprefix("torch."), None)
        if isinstance(attr, (torch.dtype, torch.memory_format, torch.layout)):
            return attr
    return _py(v)


def call_aten(sig: OpSignature, inputs: Sequence[torch.Tensor], **overrides: Any) -> list[torch.Tensor]:
    """Run the signature's op on ``inputs`` (its tensor args in schema order); return the used outputs.
    ``overrides`` replace scalar arguments by name (the verifier uses it to drop ``half_to_float`` for fp64)."""
    if sig.op == FUSED_OP:
        return [evaluate(str(sig.scalar_args()["expr"]), inputs)]
    if sig.op == SOFTMAX_OP:
        x = evaluate(str(sig.scalar_args()["expr"]), inputs)
        out = torch.ops.aten._softmax.default(x, -1, False)
        # the verifier's float64 reference keeps the softmax unrounded; everything else casts as the graph did
        return [out if inputs[0].dtype == torch.float64 else out.to(getattr(torch, sig.outputs[0].dtype))]
    if sig.op == NORM_OP:
        return _norm_then_expression(sig, inputs)
    fn = aten_overload(sig.op)
    it = iter(inputs)
    positional, kwargs = [], {}
    for a, schema_arg in zip(sig.args, fn._schema.arguments):
        v = next(it) if a.tensor is not None else _scalar(overrides.get(a.name, a.value))
        if a.tensor is None and a.value is None and schema_arg.type.kind() == "TensorType":
            v = None
        if schema_arg.kwarg_only:
            kwargs[a.name] = v
        else:
            positional.append(v)
    out = fn(*positional, **kwargs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return [outs[i] for i in sig.used_outputs]


def norm_base(sig: OpSignature) -> OpSignature:
    """The signature of a ``kforge.norm`` group's norm alone: its own arguments, its normalised output. With a
    prologue, its ``input`` is the prologue's result (the group's output 1)."""
    group_args = ("expr", "norm", "norm_out", "prologue")
    args = tuple(a for a in sig.args if not is_input_name(a.name) and not is_prologue_name(a.name)
                 and a.name not in group_args)
    if "prologue" in sig.scalar_args():
        args = (ArgSpec("input", sig.outputs[1]),) + args
    return OpSignature(str(sig.scalar_args()["norm"]), args, sig.outputs[:1], (0,), sig.arch)


def _norm_then_expression(sig: OpSignature, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``kforge.norm``: the prologue (if any) on its inputs ``p<i>``, the norm on its own arguments, then the
    expression over its output and the extra inputs. Returns the expression's value (and the prologue's)."""
    scalars = sig.scalar_args()
    names = [name for name, _ in sig.tensor_args()]
    extra = {name: t for name, t in zip(names, inputs) if is_input_name(name)}
    own = [t for name, t in zip(names, inputs) if not is_input_name(name) and not is_prologue_name(name)]
    head: list[torch.Tensor] = []
    if "prologue" in scalars:
        head = [evaluate(str(scalars["prologue"]), [t for name, t in zip(names, inputs) if is_prologue_name(name)])]
    [y] = call_aten(norm_base(sig), head + own)
    k = int(scalars["norm_out"])
    operands = [y if i == k else extra[f"x{i}"] for i in range(len(extra) + 1)]
    return [evaluate(str(scalars["expr"]), operands)] + head
