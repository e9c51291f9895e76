"""What the group norm's kernels share (group_norm.py and its strategy modules): the element types, the kernel's tensor
parameters, ATen's affine form and the stores of mean and rstd."""
from __future__ import annotations

from ...cards import OperatorCard
from .common import dtype_or, eps_arg, input_spec, main_input, output_spec, typedefs


def stat_dtype(card: OperatorCard, index: int) -> str:
    """ATen keeps group-norm mean/rstd in the input dtype (fp32 when weight is fp32 and input is half: mixed)."""
    s = output_spec(card, index)
    if s is not None:
        return s.dtype
    x, w = main_input(card), input_spec(card, "weight")
    return "float32" if w is not None and w.dtype == "float32" else x.dtype


def types(card: OperatorCard) -> str:
    """typedefs T (input), TO (output), TW/TB (weight, bias), TM/TR (mean, rstd)."""
    x = main_input(card)
    return typedefs(T=x.dtype, TO=output_spec(card, 0).dtype, TW=dtype_or(card, "weight", x.dtype),
                    TB=dtype_or(card, "bias", x.dtype), TM=stat_dtype(card, 1), TR=stat_dtype(card, 2))


def tensor_items(card: OperatorCard) -> list[tuple[str, str, str]]:
    """The kernel's tensors and eps, for ``plan_params``: x, w, b, y, mean_out, rstd_out, eps."""
    return [("in:input", "const T* __restrict__ x", ""), ("in:weight", "const TW* __restrict__ w", "weight"),
            ("in:bias", "const TB* __restrict__ b", "bias"), ("out:0", "TO* __restrict__ y", ""),
            ("out:1", "TM* __restrict__ mean_out", "out1"), ("out:2", "TR* __restrict__ rstd_out", "out2"),
            (eps_arg(card, 1e-5), "float eps", "")]


def affine(card: OperatorCard, pack: str) -> tuple[str, str]:
    """(coefficients, value of element j of ``pack``): ATen's fused form y = x * a + bb with a = rstd * w[c] and
    bb = bias[c] - a * mean, from the stored (rounded) m_r, r_r and the channel c in scope."""
    has_w, has_b = input_spec(card, "weight") is not None, input_spec(card, "bias") is not None
    if not (has_w or has_b):
        return "", f"(to_f({pack}.v[j]) - m_r) * r_r"
    coef = (f"const float a = {'r_r * to_f(w[c])' if has_w else 'r_r'}; "
            f"const float bb = {'to_f(b[c])' if has_b else '0.f'} - a * m_r;")
    return coef, f"to_f({pack}.v[j]) * a + bb"


def stat_stores(card: OperatorCard, index: str) -> list[str]:
    """The stores of mean and rstd at ``index`` (an empty string for an output the graph does not use)."""
    return ["mean_out[" + index + "] = from_f<TM>(mean);" if output_spec(card, 1) else "",
            "rstd_out[" + index + "] = from_f<TR>(rstd);" if output_spec(card, 2) else ""]
