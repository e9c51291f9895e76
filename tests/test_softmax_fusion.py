"""A softmax with its pointwise neighbours as one candidate (softmax_fusion.py): capture, signature, reference,
rewrite on both paths, and the tiny Gemma 4 whose attention and sampling softmaxes are the reason for it."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cpu_provider import DEFAULT_OPS, CpuProvider
from forge_backend.backend import make_backend
from forge_backend.capture import scan
from forge_backend.expression import SOFTMAX_OP
from forge_backend.fusion import group_signature
from forge_backend.inductor_gate import fused_traffic_bytes
from forge_backend.reference import call_aten
from forge_backend.softmax_fusion import find_softmax_groups

SOFTMAX = "aten._softmax.default"


def attention(q, k, mask):
    scores = (q @ k.transpose(-1, -2)) * 0.125 + mask
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)


def _attention_graph():
    q, k = torch.randn(1, 4, 16, 8, dtype=torch.bfloat16), torch.randn(1, 4, 16, 8, dtype=torch.bfloat16)
    mask = torch.zeros(1, 1, 16, 16, dtype=torch.bfloat16).masked_fill(torch.ones(16, 16).triu(1).bool(), -1e30)
    return make_fx(attention)(q, k, mask), (q, k, mask)


def test_attention_softmax_takes_its_scale_mask_and_casts():
    gm, _ = _attention_graph()
    [group] = find_softmax_groups(gm.graph)
    assert group.op == SOFTMAX_OP
    assert group.expr == "to_float32(add(mul(x0,0.125),x1))"
    assert [tuple(n.meta["val"].shape) for n in group.inputs] == [(1, 4, 16, 16), (1, 1, 16, 16)]
    assert group.output.meta["val"].dtype == torch.bfloat16  # the cast after the softmax is inside
    sig = group_signature(group)
    assert sig.op == SOFTMAX_OP and sig.outputs[0].dtype == "bfloat16"


def test_reference_is_the_expression_then_softmax_then_the_cast():
    gm, (q, k, mask) = _attention_graph()
    [group] = find_softmax_groups(gm.graph)
    scores = (q @ k.transpose(-1, -2)).contiguous()
    [got] = call_aten(group_signature(group), [scores, mask])
    torch.testing.assert_close(got, attention(q, k, mask), rtol=0, atol=0)


def test_prologue_stops_at_values_used_outside():
    def f(x):
        y = x * 2.0
        return torch.softmax(y + 1.0, dim=-1), y  # y is also an output: it must stay real
    gm = make_fx(f)(torch.randn(4, 8))
    [group] = find_softmax_groups(gm.graph)
    assert group.expr == "add(x0,1.0)"
    assert str(group.inputs[0].target) == "aten.mul.Tensor"


@pytest.mark.parametrize("fn", [
    lambda x, m: torch.softmax(x, dim=-1),  # nothing to take
    lambda x, m: torch.softmax(x + m[:, :1], dim=-1),  # an input broadcast along the softmax's dim
    lambda x, m: torch.softmax(x * 2.0, dim=0),  # not the last dim
])
def test_no_group_where_the_kernel_cannot_take_the_neighbours(fn):
    gm = make_fx(fn)(torch.randn(4, 8), torch.randn(4, 8))
    assert find_softmax_groups(gm.graph) == []


def test_scan_keeps_the_softmax_and_its_neighbours_candidates_of_their_own():
    gm, _ = _attention_graph()
    ops = [c.signature.op for c in scan(gm, fuse_softmax=True).candidates]
    assert ops.count(SOFTMAX_OP) == 1 and ops.count(SOFTMAX) == 1 and "aten.mul.Tensor" in ops
    assert SOFTMAX_OP not in [c.signature.op for c in scan(gm, fuse_softmax=False).candidates]



def test_gate_charges_a_pointwise_made_mask_not_the_matmul():
    def f(q, k, m):
        return attention(q, k, (m - 1.0) * 1e4)  # a mask made by pointwise ops, as Inductor's graph makes it
    q, k = torch.randn(1, 4, 16, 8, dtype=torch.bfloat16), torch.randn(1, 4, 16, 8, dtype=torch.bfloat16)
    gm = make_fx(f)(q, k, torch.ones(1, 1, 16, 16, dtype=torch.bfloat16))
    [group] = find_softmax_groups(gm.graph)
    mask_bytes = 16 * 16 * 2
    assert fused_traffic_bytes(group.output, group) == 2 * mask_bytes


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_backend_replaces_the_group_and_matches_eager(inner):
    q, k = torch.randn(1, 4, 16, 8), torch.randn(1, 4, 16, 8)
    mask = torch.zeros(1, 1, 16, 16).masked_fill(torch.ones(16, 16).triu(1).bool(), float("-inf"))
    provider, reports = CpuProvider(ops=DEFAULT_OPS + (SOFTMAX_OP, "aten.mul.Tensor", "aten.add.Tensor")), []
    expected = attention(q, k, mask)
    got = torch.compile(attention, backend=make_backend(provider, reports.append), options={"inner": inner})(q, k, mask)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    replaced = [op for r in reports for op, _, _ in r.replaced]
    assert replaced == [SOFTMAX_OP]  # the group, and neither the softmax nor the mul and add inside it as well
    assert provider.calls[SOFTMAX_OP] >= 1 and provider.calls[SOFTMAX] == 0 and provider.calls["aten.mul.Tensor"] == 0


def test_a_softmax_group_without_a_kernel_leaves_the_pointwise_group_and_the_softmax():
    """With fuse_pointwise, silu(x) * x before a softmax is both a pointwise group and a softmax prologue; where
    the softmax group gets no kernel, the pointwise group and the softmax are still replaced one by one."""
    import torch.nn.functional as F

    from forge_backend.expression import FUSED_OP

    def f(x):
        return torch.softmax(F.silu(x) * x, -1)
    provider, reports = CpuProvider(ops=(FUSED_OP, SOFTMAX)), []
    x = torch.randn(8, 32)
    got = torch.compile(f, backend=make_backend(provider, reports.append),
                        options={"inner": "eager", "fuse_pointwise": True})(x)
    torch.testing.assert_close(got, f(x))
    assert sorted(op for r in reports for op, _, _ in r.replaced) == [SOFTMAX, FUSED_OP]
    assert any(c.op == SOFTMAX_OP for c in provider.cards_seen)  # offered, not served


def test_inductor_path_decomposes_a_plain_softmax_beside_a_replaced_group_in_place():
    """A softmax with no neighbours beside a replaced group is a leftover of the same overload: decomposed in
    place, not by the whole-graph retry (which would decompose the group's softmax too)."""
    from torch._dynamo.utils import counters

    def f(x, y):
        return torch.softmax(x * 2.0, dim=-1), torch.softmax(y, dim=-1)

    provider = CpuProvider(ops=(SOFTMAX_OP,))
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    counters.clear()
    got = torch.compile(f, backend=make_backend(provider), options={"inner": "inductor"})(x, y)
    for g, e in zip(got, f(x, y)):
        torch.testing.assert_close(g, e)
    assert counters["kforge"]["inductor_retries"] == 0
    assert counters["kforge"]["decomposed_in_place"] == 1
    assert provider.calls[SOFTMAX_OP] == 1


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_tiny_gemma4_softmaxes_take_their_neighbours(inner):
    """Gemma 4's three attention softmaxes (scale and mask before) and its sampling softmax (soft-capping before)
    each run as one group, and the model still matches eager."""
    from test_models_cpu import POSITIONS, PROMPT, TINY_GEMMA4, TOL, VOCAB, _llm_example

    gemma4 = _llm_example("gemma4", "Gemma4TextConfig")
    model = gemma4.build_model(gemma4.text_config("eager", **TINY_GEMMA4), device="cpu", dtype=torch.float32,
                               positions=POSITIONS)
    ids = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    provider, reports = CpuProvider(ops=DEFAULT_OPS + (SOFTMAX_OP,)), []
    with torch.no_grad():
        expected = model(ids)
        got = torch.compile(model, backend=make_backend(provider, reports.append), options={"inner": inner})(ids)
    torch.testing.assert_close(got, expected, **TOL[inner])
    assert [r.fallback for r in reports if r.fallback] == []
    assert provider.calls[SOFTMAX_OP] == len(gemma4.LAYER_TYPES) + 1 and provider.calls[SOFTMAX] == 0
    exprs = {card.scalars["expr"] for card in provider.cards_seen if card.op == SOFTMAX_OP}
    assert any("tanh" in e for e in exprs) and any(e.startswith("add(") for e in exprs), exprs


def test_cards_and_prewarm_list_the_softmax_groups(tmp_path):
    """``kforge cards`` / ``prewarm`` capture on the eager path and keep what the configured inner looks up: a
    softmax group on both paths, and its softmax alone too."""
    from forge_backend.cli import _op_name
    from forge_backend.inspect_model import model_cards

    spec = tmp_path / "attn_spec.py"
    spec.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, s, m):\n"
        "        return torch.softmax(s * 0.125 + m, dim=-1, dtype=torch.float32).to(s.dtype)\n"
        "def get_model():\n    return M()\n"
        "def get_inputs():\n"
        "    return torch.randn(1, 2, 8, 8), torch.zeros(1, 1, 8, 8)\n")
    for inner in ("eager", "inductor"):
        cards = model_cards(str(spec), inner=inner).cards
        ops = {c.op for c in cards}
        assert SOFTMAX_OP in ops and SOFTMAX in ops, (inner, ops)
        [group] = [c for c in cards if c.op == SOFTMAX_OP]
        assert _op_name(group) == "softmax(add(mul(x0,0.125),x1))"
