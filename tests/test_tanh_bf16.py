"""Note [a tanh from bf16 to bf16] (templates/fused.py) on the CPU: which tanh a fused expression evaluates, and the
margin that makes the cheaper form exact. The GPU test runs every bf16 input against eager
(test_templates_gpu.py::test_a_bf16_tanh_gives_eagers_bits_on_every_bf16_input)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

import template_cards as tc
from forge_backend.search.templates import family_for

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))


@pytest.mark.parametrize("expr, dtype, cheap", [
    ("mul(tanh(div(x0,30.0)),30.0)", "bfloat16", True),  # Gemma's soft cap: bf16 in, bf16 out
    ("tanh(x0)", "bfloat16", True),
    ("tanh(x0)", "float32", False),
    ("tanh(x0)", "float16", False),  # fp16's midpoints are 8x closer: not covered by the bf16 argument
    ("to_bfloat16(tanh(to_float32(x0)))", "bfloat16", False),  # tanh's own result is fp32
    ("tanh(to_float32(x0))", "bfloat16", False),
])
def test_the_cheap_tanh_only_from_bf16_to_bf16(expr, dtype, cheap):
    card = tc.fused(expr, [((4, 1024), dtype)])
    src = family_for(card).generate(card, family_for(card).root_params(card)).source
    assert ("f_tanh_bf16(" in src) is cheap and ("tanhf(" in src) is not cheap


def test_no_bf16_tanh_comes_near_a_rounding_midpoint():
    """The margin the Note relies on: the exact tanh of every bf16 input stays more than 64 fp32 ulps away from a
    bf16 rounding midpoint, so a form that close to tanhf rounds as tanhf does."""
    from tanh_bf16_exhaustive import closest_to_a_midpoint

    assert closest_to_a_midpoint() == 102
