"""A row norm with its pointwise epilogue as one candidate (norm_fusion.py): capture, signature, reference, and the
rewrite on both paths, on SD3.5 MMDiT's adaLN modulation."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from cpu_provider import DEFAULT_OPS, CpuProvider
from forge_backend.backend import make_backend
from forge_backend.capture import scan
from forge_backend.expression import NORM_OP
from forge_backend.norm_fusion import find_norm_groups, norm_group_signature
from forge_backend.reference import call_aten

LAYER_NORM = "aten.native_layer_norm.default"


def adaln(x, emb):
    scale, shift = emb.chunk(2, dim=-1)
    return F.layer_norm(x, (x.shape[-1],), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]


def _inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 16, 32, generator=g).to(dtype), torch.randn(2, 64, generator=g).to(dtype)


def test_adaln_modulation_is_the_norms_epilogue():
    gm = make_fx(adaln)(*_inputs())
    [group] = find_norm_groups(gm.graph)
    assert group.op == NORM_OP and group.expr == "add(mul(x0,x1),x2)"
    sig = norm_group_signature(group)
    names = [n for n, _ in sig.tensor_args()]
    assert names == ["input", "x1", "x2"] and sig.scalar_args()["norm_out"] == 0
    assert sig.scalar_args()["norm"] == LAYER_NORM and [s.shape for _, s in sig.tensor_args()][1:] == [(2, 1, 32)] * 2


def test_reference_is_the_norm_then_the_expression():
    x, emb = _inputs()
    gm = make_fx(adaln)(x, emb)
    [group] = find_norm_groups(gm.graph)
    scale, shift = emb.chunk(2, dim=-1)
    [got] = call_aten(norm_group_signature(group), [x, (1 + scale[:, None]), shift[:, None].contiguous()])
    torch.testing.assert_close(got, adaln(x, emb), rtol=0, atol=0)


@pytest.mark.parametrize("fn", [
    lambda x, e: F.layer_norm(x, (32,)),  # no epilogue
    lambda x, e: F.layer_norm(x, (32,)) * e[:, None, :32].sum(-1, keepdim=True),  # an operand broadcast along C
])
def test_no_group_without_an_epilogue_the_kernel_can_take(fn):
    gm = make_fx(fn)(*_inputs())
    assert find_norm_groups(gm.graph) == []


def test_a_norm_whose_output_is_used_twice_keeps_it():
    def f(x, e):
        y = F.layer_norm(x, (32,))
        return y * 2.0 + 1.0, y
    gm = make_fx(f)(*_inputs())
    assert find_norm_groups(gm.graph) == []


def test_fuse_norm_is_on_by_default_and_scan_offers_both():
    gm = make_fx(adaln)(*_inputs())
    ops = [c.signature.op for c in scan(gm, fuse_norm=True).candidates]
    assert NORM_OP in ops and LAYER_NORM in ops
    from forge_backend.config import KforgeConfig

    assert KforgeConfig.load({}).fuse_norm is True
    assert KforgeConfig.load({"fuse_norm": False}).fuse_norm is False


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_backend_replaces_the_group_and_matches_eager(inner):
    x, emb = _inputs()
    provider, reports = CpuProvider(ops=DEFAULT_OPS + (NORM_OP,)), []
    got = torch.compile(adaln, backend=make_backend(provider, reports.append),
                        options={"inner": inner, "fuse_norm": True})(x, emb)
    torch.testing.assert_close(got, adaln(x, emb), rtol=1e-5, atol=1e-5)
    assert [op for r in reports for op, _, _ in r.replaced] == [NORM_OP]
    assert provider.calls[NORM_OP] == 1 and provider.calls[LAYER_NORM] == 0


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_tiny_mmdit_norms_take_their_modulation(inner):
    """SD3.5's MMDiT blocks (diffusers), shrunk: its adaLN norms run as groups and the output matches eager."""
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    model = diffusers.SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2,
                                            attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                            caption_projection_dim=16, pooled_projection_dim=8,
                                            out_channels=4, pos_embed_max_size=16).eval()
    inputs = (torch.randn(1, 4, 8, 8), torch.randn(1, 5, 16), torch.randn(1, 8), torch.tensor([3.0]))

    def run(m):
        return m(hidden_states=inputs[0], encoder_hidden_states=inputs[1], pooled_projections=inputs[2],
                 timestep=inputs[3], return_dict=False)[0]
    provider = CpuProvider(ops=DEFAULT_OPS + (NORM_OP,))
    with torch.no_grad():
        expected = run(model)
        got = run(torch.compile(model, backend=make_backend(provider), options={"inner": inner, "fuse_norm": True}))
    torch.testing.assert_close(got, expected, rtol=1e-3 if inner == "inductor" else 1e-4, atol=1e-4)
    assert provider.calls[NORM_OP] >= 2
    # the residual adds before the norms go with them (Note [a norm takes the residual add before it])
    heads = [sig.scalar_args().get("prologue") for sig in provider.served.values() if sig.op == NORM_OP]
    assert any(heads), heads


def test_cards_list_the_norm_group_only_when_fuse_norm_is_on(tmp_path, monkeypatch):
    from forge_backend.cli import _op_name
    from forge_backend.inspect_model import model_cards

    spec = tmp_path / "adaln_spec.py"
    spec.write_text(
        "import torch\nimport torch.nn.functional as F\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x, e):\n"
        "        scale, shift = e.chunk(2, dim=-1)\n"
        "        return F.layer_norm(x, (32,), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]\n"
        "def get_model():\n    return M()\n"
        "def get_inputs():\n    return torch.randn(2, 16, 32), torch.randn(2, 64)\n")
    monkeypatch.setenv("KFORGE_FUSE_NORM", "0")
    assert NORM_OP not in {c.op for c in model_cards(str(spec), inner="inductor").cards}
    monkeypatch.setenv("KFORGE_FUSE_NORM", "1")
    cards = model_cards(str(spec), inner="inductor").cards
    [group] = [c for c in cards if c.op == NORM_OP]
    assert _op_name(group) == "native_layer_norm.default -> add(mul(x0,x1),x2)"
    assert LAYER_NORM in {c.op for c in cards}


# Note [a norm takes the residual add before it]
def residual_adaln(h, attn, emb, w):
    """An MMDiT block's second half, shrunk: the residual add, the modulated norm, a linear, the next residual add."""
    gate, scale, shift = emb.chunk(3, dim=-1)
    h = h + gate[:, None] * attn
    y = F.layer_norm(h, (h.shape[-1],), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
    return h + y @ w


def _residual_inputs(dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(*s, generator=g).to(dtype) for s in ((2, 16, 32), (2, 16, 32), (2, 96), (32, 32)))


def test_the_residual_add_is_the_norms_prologue():
    gm = make_fx(residual_adaln)(*_residual_inputs())
    with_head, without = find_norm_groups(gm.graph)  # the prologue first, then the group without it
    assert with_head.prologue == "add(x0,mul(x1,x2))" and with_head.side is not None and without.side is None
    assert with_head.expr == without.expr == "add(mul(x0,x1),x2)" and with_head.output is without.output
    sig = norm_group_signature(with_head)
    assert [n for n, _ in sig.tensor_args()] == ["p0", "p1", "p2", "x1", "x2"]
    assert sig.used_outputs == (0, 1) and [o.shape for o in sig.outputs] == [(2, 16, 32)] * 2
    assert sig.scalar_args()["prologue"] == "add(x0,mul(x1,x2))"
    assert [n for n, _ in norm_group_signature(without).tensor_args()] == ["input", "x1", "x2"]


def test_reference_runs_the_prologue_then_the_group():
    h, attn, emb, w = _residual_inputs()
    gm = make_fx(residual_adaln)(h, attn, emb, w)
    gate, scale, shift = emb.chunk(3, dim=-1)
    got = call_aten(norm_group_signature(find_norm_groups(gm.graph)[0]),
                    [h, gate[:, None], attn, 1 + scale[:, None], shift[:, None]])
    new_h = h + gate[:, None] * attn
    want = F.layer_norm(new_h, (32,), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
    torch.testing.assert_close(got[0], want, rtol=0, atol=0)
    torch.testing.assert_close(got[1], new_h, rtol=0, atol=0)


def test_no_prologue_when_the_new_residual_is_read_before_the_group_ends():
    """The kernel is called at the group's output; a reader of the prologue's value before that would read nothing."""
    def f(h, attn, emb, w):
        gate, scale, shift = emb.chunk(3, dim=-1)
        h = h + gate[:, None] * attn
        early = h * 3.0
        return F.layer_norm(h, (32,)) * (1 + scale[:, None]) + early
    gm = make_fx(f)(*_residual_inputs())
    assert [g.side for g in find_norm_groups(gm.graph)] == [None]


def test_no_prologue_when_nothing_else_reads_the_new_value():
    def f(h, attn, emb, w):
        gate, scale, shift = emb.chunk(3, dim=-1)
        return F.layer_norm(h + gate[:, None] * attn, (32,)) * (1 + scale[:, None]) + shift[:, None]
    gm = make_fx(f)(*_residual_inputs())
    assert [g.side for g in find_norm_groups(gm.graph)] == [None]


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_backend_replaces_the_norm_with_its_prologue_and_matches_eager(inner):
    args = _residual_inputs()
    provider, reports = CpuProvider(ops=DEFAULT_OPS + (NORM_OP,)), []
    got = torch.compile(residual_adaln, backend=make_backend(provider, reports.append),
                        options={"inner": inner, "fuse_norm": True})(*args)
    torch.testing.assert_close(got, residual_adaln(*args), rtol=1e-5, atol=1e-5)
    [(op, key, _)] = [r for rep in reports for r in rep.replaced]
    assert op == NORM_OP and "prologue" in provider.served[key].scalar_args()  # the group with the residual add
    assert provider.calls[NORM_OP] == 1 and provider.calls[LAYER_NORM] == 0
