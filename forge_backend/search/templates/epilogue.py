"""The epilogue (and prologue) of a row-norm kernel (``kforge.norm``, norm_fusion.py): which card inputs feed it,
whether the kernels can index them, and the per-element device function ``ep`` (fused.py's code and rounding).

The card's expression numbers its inputs x0..xk; ``norm_out`` is the norm's own output, every other ``x<i>`` is a
card input of that name. A card with a ``prologue`` (Note [a norm takes the residual add before it]) computes the
norm's input from inputs ``p<i>`` and writes it as output 1. Used by norm.py's row kernels only.
"""
from __future__ import annotations

from ...cards import OperatorCard
from ...expression import NORM_OP, is_input_name, is_prologue_name, n_inputs, parse, result_dtype
from ...signature import TensorSpec
from .common import FLOAT_DTYPES, broadcasts_over_rows, input_spec, main_input, output_spec
from .fused import device_functions, row_prologue_dtype, value_lines


def extras(card: OperatorCard) -> list:
    """A ``kforge.norm`` card's epilogue inputs x<i> (named by their index in its expression), in card order."""
    return [t for t in card.inputs if is_input_name(t.name)] if card.op == NORM_OP else []


def has_prologue(card: OperatorCard) -> bool:
    return card.op == NORM_OP and "prologue" in card.scalars


def prologue_inputs(card: OperatorCard) -> list:
    """A prologue's inputs p0..pm, in card order."""
    return [t for t in card.inputs if is_prologue_name(t.name)] if has_prologue(card) else []


def norm_input(card: OperatorCard) -> TensorSpec:
    """The spec of the tensor the norm normalises: its input, or the prologue's value (output 1)."""
    return output_spec(card, 1) if has_prologue(card) else main_input(card)


def prologue_ok(card: OperatorCard) -> bool:
    """No prologue, or one the kernels can compute (fused.row_prologue_dtype) that gives output 1's dtype, with
    output 1 contiguous and of the output's shape."""
    if not has_prologue(card):
        return True
    r, y = output_spec(card, 1), output_spec(card, 0)
    return r is not None and r.is_contiguous() and r.shape == y.shape and \
        row_prologue_dtype(str(card.scalars["prologue"]), prologue_inputs(card), "p", r) == r.dtype


def epilogue_ok(card: OperatorCard) -> bool:
    """The expression parses, names x0..xk with ``norm_out`` the norm's output and the rest the extra inputs, gives
    the output's dtype, and every extra input is dense, last dim the row's at stride 1, broadcasting over rows."""
    try:
        root = parse(str(card.scalars.get("expr", "")))
    except ValueError:
        return False
    k, x, y = card.scalars.get("norm_out"), norm_input(card), output_spec(card, 0)
    names = {t.name for t in extras(card)}
    if not isinstance(k, int) or names != {f"x{i}" for i in range(n_inputs(root)) if i != k}:
        return False
    dtypes = [x.dtype if i == k else input_spec(card, f"x{i}").dtype for i in range(n_inputs(root))]
    if any(d not in FLOAT_DTYPES for d in dtypes) or result_dtype(root, dtypes) != y.dtype:
        return False
    return all(broadcasts_over_rows(t.spec, y) for t in extras(card))


def epilogue_function(card: OperatorCard) -> str:
    """``ep(a0, ..., ak)``: a ``kforge.norm`` card's expression per element (empty for a plain norm)."""
    if card.op != NORM_OP:
        return ""
    root, k = parse(str(card.scalars["expr"])), int(card.scalars["norm_out"])
    n = n_inputs(root)
    dtypes = [norm_input(card).dtype if i == k else input_spec(card, f"x{i}").dtype for i in range(n)]
    lines = value_lines(root, dtypes)
    return f"""
{device_functions(root)}
// epilogue: {card.scalars["expr"]} (x{k} is the norm's output)
__device__ __forceinline__ float ep({", ".join(f"float a{i}" for i in range(n))}) {{
{chr(10).join(lines)}
  return t{len(lines) - 1};
}}"""
