"""Pointwise fusion on the CPU: group finding, the expression language, the fused signature and card, and the
rewrite of a group through torch.compile with the CPU provider (its 'kernel' runs the reference interpreter)."""
import pytest
import torch
import torch.nn.functional as F

import template_cards as tc
from cpu_provider import CpuProvider
from forge_backend.backend import make_backend
from forge_backend.capture import scan
from forge_backend.config import KforgeConfig
from forge_backend.expression import FUSED_OP, Call, Const, Input, evaluate, parse, result_dtype, to_text
from forge_backend.fusion import find_groups, group_signature
from forge_backend.reference import call_aten
from forge_backend.registry import REGISTRY
from forge_backend.rewrite import Replacement, apply
from graphs import aten_graph, op_nodes


def groups_of(fn, *inputs):
    gm = aten_graph(fn, *inputs)
    return gm, find_groups(gm.graph)


def names(nodes):
    return [str(n.target) if n.op == "call_function" else n.op for n in nodes]


# ---------------------------------------------------------------------------------------------------------------------
# group finding


def test_silu_times_x_is_one_group_of_two():
    gm, groups = groups_of(lambda x: F.silu(x) * x, torch.randn(8, 16, dtype=torch.bfloat16))
    (g,) = groups
    assert g.expr == "mul(silu(x0),x0)"
    assert names(g.members) == ["aten.silu.default", "aten.mul.Tensor"] and g.output is g.members[-1]
    assert names(g.inputs) == ["placeholder"]


def test_chain_feeding_a_softmax_stops_at_the_softmax():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    gm, groups = groups_of(lambda x, y: torch.softmax(torch.relu(x) * 2 + y, -1) * 3.0, x, y)
    (g,) = groups  # the mul after the softmax is alone: not a group
    assert g.expr == "add(mul(relu(x0),2),x1)"
    assert "aten._softmax.default" not in names(g.members)
    (softmax,) = op_nodes(gm, "aten._softmax.default")
    assert softmax.args[0] is g.output


def test_a_node_with_an_outside_user_splits_the_group():
    def fn(x):
        a = torch.sigmoid(x) + 1
        return torch.tanh(a) * 2, a  # a is also a graph output

    gm, groups = groups_of(fn, torch.randn(4, 8))
    assert sorted(g.expr for g in groups) == ["add(sigmoid(x0),1)", "mul(tanh(x0),2)"]
    first, second = sorted(groups, key=lambda g: g.expr)
    assert second.inputs == (first.output,)  # the second group reads the first group's output


def test_users_in_two_groups_split_too():
    def fn(x):
        a = torch.relu(x)
        return torch.sigmoid(a) * 2, torch.tanh(a) * 3

    _, groups = groups_of(fn, torch.randn(4, 8))
    assert sorted(g.expr for g in groups) == ["mul(sigmoid(x0),2)", "mul(tanh(x0),3)"]


def test_broadcasting_operands_and_views_are_not_fused():
    x, b = torch.randn(4, 8), torch.randn(8)
    gm, groups = groups_of(lambda x, b: torch.relu(x + b) * 2, x, b)
    (g,) = groups  # the broadcasting add stays out; relu reads it
    assert g.expr == "mul(relu(x0),2)" and names(g.inputs) == ["aten.add.Tensor"]
    _, groups = groups_of(lambda x: torch.relu(x * x.sum()) * 2, x)  # a 0-d tensor operand broadcasts too
    assert [g.expr for g in groups] == ["mul(relu(x0),2)"]
    _, groups = groups_of(lambda x: torch.relu(x.t()) * 2, x)  # a transposed (non-contiguous) input
    assert groups == []


def test_scalars_alpha_and_casts_are_captured():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    _, groups = groups_of(lambda x: (x * 0.5 - 3) / 7.25, x)
    assert [g.expr for g in groups] == ["div(sub(mul(x0,0.5),3),7.25)"]
    _, groups = groups_of(lambda x, y: torch.relu(torch.add(x, y, alpha=2)), x, y)
    assert [g.expr for g in groups] == ["relu(add(x0,x1,alpha=2))"]
    _, groups = groups_of(lambda x: (torch.relu(x) * 2.0).to(torch.bfloat16), x)
    assert [g.expr for g in groups] == ["to_bfloat16(mul(relu(x0),2.0))"]
    _, groups = groups_of(lambda x, y: x.half() * y.bfloat16(), x, y)
    (g,) = groups
    assert g.expr == "mul(to_float16(x0),to_bfloat16(x1))" and g.output.meta["val"].dtype == torch.float32


def test_gelu_variants_and_shared_subexpressions():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    _, groups = groups_of(lambda x, y: F.gelu(x, approximate="tanh") + F.gelu(y), x, y)
    assert [g.expr for g in groups] == ["add(gelu_tanh(x0),gelu(x1))"]

    def square_plus(x, y):
        t = x + y
        return t * t + t

    _, groups = groups_of(square_plus, x, y)
    assert [g.expr for g in groups] == ["add(mul(add(x0,x1),add(x0,x1)),add(x0,x1))"]


def test_scan_with_fuse_makes_groups_candidates_instead_of_their_members():
    gm = aten_graph(lambda x: torch.softmax(F.silu(x) * x, -1), torch.randn(4, 8))
    plain = scan(gm)
    assert [c.signature.op for c in plain.candidates] == ["aten.silu.default", "aten.mul.Tensor",
                                                         "aten._softmax.default"]
    fused = scan(gm, fuse=True)
    assert [c.signature.op for c in fused.candidates] == [FUSED_OP, "aten._softmax.default"]
    assert fused.candidates[0].group is not None and fused.ops_seen == plain.ops_seen == 3


# ---------------------------------------------------------------------------------------------------------------------
# the expression language


@pytest.mark.parametrize("text", ["mul(silu(x0),x0)", "to_bfloat16(mul(relu(x0),2.0))", "add(gelu(x0),x1)",
                                  "sub(x0,mul(x1,-inf),alpha=2)", "div(x0,1e-05)", "add(gelu_tanh(x0),nan)",
                                  "mul(to_float16(x0),to_float32(sigmoid(x1)))"])
def test_expression_round_trip(text):
    e = parse(text)
    assert to_text(e) == text and parse(to_text(e)) == e


def test_expression_tree_is_what_it_says():
    assert parse("mul(silu(x0),2.5)") == Call("mul", (Call("silu", (Input(0),)), Const(2.5)))
    assert parse("add(x0,x1,alpha=1)").alpha is None  # alpha 1 is the default, printed nowhere
    assert Const(0.0) != Const(-0.0) and Const(float("nan")) == Const(float("nan"))


@pytest.mark.parametrize("text,needle", [
    ("x0", "must be an op call"), ("mul(x0)", "takes 2 operand(s)"), ("mul(2,x0)", "must be a tensor"),
    ("exp(x0)", "unknown op 'exp'"), ("mul(x1,x0)", "order of first use"), ("relu(x0,alpha=2)", "takes no alpha"),
    ("mul(x0,x1))", "after the expression"), ("mul(x0;x1)", "cannot read"), ("__import__('os')", "cannot read"),
])
def test_parser_rejects_anything_else(text, needle):
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse(text)


def test_result_dtype_follows_type_promotion():
    assert result_dtype(parse("mul(x0,x1)"), ["float16", "bfloat16"]) == "float32"
    assert result_dtype(parse("mul(x0,2.0)"), ["bfloat16"]) == "bfloat16"
    assert result_dtype(parse("to_float32(x0)"), ["float16"]) == "float32"


EAGER_CASES = {
    "silu_mul": (lambda x: F.silu(x) * x, 1),
    "gelu_add_scale": (lambda x, y: (F.gelu(x) + y) * 0.5, 2),
    "tanh_gelu_sub_alpha": (lambda x, y: torch.sub(F.gelu(x, approximate="tanh"), torch.sigmoid(y), alpha=0.3), 2),
    "div_relu": (lambda x, y: torch.relu(x) / (y * y + 1), 2),
    "casts": (lambda x: (torch.relu(x) * 2.0).to(torch.bfloat16).float() - x, 1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(EAGER_CASES))
def test_reference_interpreter_matches_eager_bit_for_bit(case, dtype):
    fn, n = EAGER_CASES[case]
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(6, 33, generator=gen).to(dtype) for _ in range(n)]
    _, groups = groups_of(fn, *inputs)
    (g,) = groups
    sig = group_signature(g)
    assert [n.op for n in g.inputs] == ["placeholder"] * n  # x0..xk are fn's arguments, in order
    (got,) = call_aten(sig, inputs)
    want = fn(*inputs)
    assert got.dtype == want.dtype and torch.equal(got, want), g.expr


def test_interpreter_computes_a_shared_subexpression_once():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    x = torch.randn(3)
    with Count() as seen:
        out = evaluate("mul(add(x0,1),add(x0,1))", [x])
    assert seen.ops == ["aten.add.Tensor", "aten.mul.Tensor"] and torch.equal(out, (x + 1) * (x + 1))


# ---------------------------------------------------------------------------------------------------------------------
# signature and card


def test_signature_key_covers_the_expression():
    x = torch.randn(4, 8)
    (a,) = groups_of(lambda x: F.silu(x) * x, x)[1]
    (b,) = groups_of(lambda x: F.silu(x) + x, x)[1]
    (c,) = groups_of(lambda x: F.silu(x) * x, x.clone())[1]
    sa, sb, sc = (group_signature(g, arch="sm_90") for g in (a, b, c))
    assert sa.op == FUSED_OP and sa.key() != sb.key() and sa.key() == sc.key()
    assert [a.name for a in sa.args] == ["x0", "expr"] and sa.used_outputs == (0,)
    diff = [line for line in sb.debug_lines() if line not in sa.debug_lines()]
    assert diff == ['arg expr: {"name": "expr", "value": "add(silu(x0),x0)"}']


def test_silu_mul_card_by_hand():
    c = tc.fused("mul(silu(x0),x0)", [((16384, 4096), "bfloat16")])
    numel = 16384 * 4096
    assert c.op == FUSED_OP and c.family == "elementwise"
    assert c.bytes_min == 2 * numel + 2 * numel  # x read once, the output written once; no intermediate
    assert c.flops == (4 + 1) * numel  # silu 4, mul 1 (Note [FLOP convention])
    assert c.sizes["numel"] == c.sizes["out_numel"] == c.sizes["x0_numel"] == numel and c.sizes["x0_d1"] == 4096
    assert "fused pointwise expression: mul(silu(x0),x0)" in c.semantics
    assert c.reference == "torch.ops.aten.mul.Tensor(torch.ops.aten.silu.default(x0), x0)"
    assert [t.name for t in c.inputs] == ["x0"] and c.outputs[0].spec.dtype == "bfloat16"


def test_two_input_card_by_hand():
    c = tc.fused("to_bfloat16(add(gelu(x0),x1))", [((1001, 7), "float32")] * 2)
    numel = 1001 * 7
    assert c.bytes_min == 4 * numel * 2 + 2 * numel
    assert c.flops == (8 + 1 + 0) * numel  # gelu 8, add 1, cast 0
    assert [t.name for t in c.inputs] == ["x0", "x1"]


# ---------------------------------------------------------------------------------------------------------------------
# rewrite and torch.compile


def _rewrite(gm, ops, fuse=True):
    found = scan(gm, fuse=fuse)
    provider = CpuProvider(ops=ops)
    impls = provider.kernels_for(found.cards(), KforgeConfig.load({}, env={}))
    reps = []
    for c in found.candidates:
        if c.signature.key() in impls:
            REGISTRY.register(impls[c.signature.key()])
            reps.append(Replacement(c.node, c.signature, impls[c.signature.key()], c.group))
    return apply(gm, reps), provider


@pytest.mark.parametrize("order", ["group first", "softmax first"])
def test_rewrite_replaces_group_and_erases_members(order):
    def fn(x):
        return F.silu(torch.softmax(x, -1)) * 2.0

    x = torch.randn(4, 8)
    gm = aten_graph(fn, x)
    ops = (FUSED_OP, "aten._softmax.default")
    n, provider = _rewrite(gm, ops if order == "group first" else ops[::-1])
    left = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert n == 2 and not any(op.startswith("aten.") for op in left)
    torch.testing.assert_close(gm(x)[0], fn(x), rtol=0, atol=0)
    assert provider.calls == {FUSED_OP: 1, "aten._softmax.default": 1}


def _compiled(fn, provider, options, *inputs):
    reports = []
    # fuse_pointwise and per-node pointwise candidates belong to the eager path (Note [pointwise groups]); softmax
    # groups are off here (tests/test_softmax_fusion.py has them beside pointwise groups)
    f = torch.compile(fn, backend=make_backend(provider, reports.append),
                      options={"inner": "eager", "fuse_softmax": False, **options})
    with torch.no_grad():
        return f(*inputs), reports[-1]


def silu_block(x, y):
    return torch.softmax(F.silu(x) * x, -1) + y


def test_fused_group_through_torch_compile_matches_eager():
    x, y = torch.randn(8, 32, dtype=torch.bfloat16), torch.randn(8, 32, dtype=torch.bfloat16)
    provider = CpuProvider(ops=(FUSED_OP, "aten._softmax.default"))
    got, report = _compiled(silu_block, provider, {"fuse_pointwise": True}, x, y)
    assert torch.equal(got, silu_block(x, y))
    assert provider.calls == {FUSED_OP: 1, "aten._softmax.default": 1}
    assert report.groups == 1 and sorted(op for op, _, _ in report.replaced) == ["aten._softmax.default", FUSED_OP]
    assert [c.semantics.split(";")[0] for c in provider.cards_seen if c.op == FUSED_OP] == [
        "fused pointwise expression: mul(silu(x0),x0)"]


def test_option_off_keeps_the_per_node_path():
    x, y = torch.randn(8, 32), torch.randn(8, 32)
    provider = CpuProvider(ops=(FUSED_OP, "aten.silu.default", "aten.mul.Tensor", "aten.add.Tensor"))
    got, report = _compiled(silu_block, provider, {}, x, y)
    torch.testing.assert_close(got, silu_block(x, y))
    assert provider.calls == {"aten.silu.default": 1, "aten.mul.Tensor": 1, "aten.add.Tensor": 1}
    assert report.groups == 0 and all(c.op != FUSED_OP for c in provider.cards_seen)


def test_members_are_not_candidates_on_their_own_when_fusing():
    x, y = torch.randn(8, 32), torch.randn(8, 32)
    provider = CpuProvider(ops=("aten.silu.default", "aten.mul.Tensor"))  # serves no fused kernel
    got, report = _compiled(silu_block, provider, {"fuse_pointwise": True}, x, y)
    torch.testing.assert_close(got, silu_block(x, y))
    assert not provider.calls and report.groups == 1 and not report.replaced
    assert {c.op for c in provider.cards_seen} == {FUSED_OP, "aten._softmax.default", "aten.add.Tensor"}


def test_fuse_pointwise_from_the_environment(monkeypatch):
    monkeypatch.setenv("KFORGE_FUSE_POINTWISE", "1")
    assert KforgeConfig.load().fuse_pointwise is True
    x, y = torch.randn(8, 32), torch.randn(8, 32)
    provider = CpuProvider(ops=(FUSED_OP,))
    got, _ = _compiled(silu_block, provider, {}, x, y)
    torch.testing.assert_close(got, silu_block(x, y))
    assert provider.calls == {FUSED_OP: 1}


def test_inductor_inner_never_fuses():
    x, y = torch.randn(8, 32), torch.randn(8, 32)
    provider = CpuProvider(ops=(FUSED_OP, "aten._softmax.default"))
    got, report = _compiled(silu_block, provider, {"fuse_pointwise": True, "inner": "inductor"}, x, y)
    torch.testing.assert_close(got, silu_block(x, y))
    assert report.groups == 0 and provider.calls == {"aten._softmax.default": 1}


def test_verifier_trials_and_float64_reference_work_for_a_fused_card():
    from forge_backend.verify import _compare, prepare_trials

    card = tc.fused("to_bfloat16(mul(silu(x0),x1))", [((64, 33), "float32")] * 2)
    for trial in prepare_trials(card, torch.device("cpu")):
        (eager,), (ref,) = trial.eager, trial.reference
        assert eager.dtype == ref.dtype == torch.bfloat16
        assert _compare(eager, ref, eager, "out0").ok


def test_a_malformed_fused_signature_fails_loudly():
    from forge_backend.cards import build_card
    from forge_backend.signature import ArgSpec, OpSignature, TensorSpec

    x = TensorSpec((4,), (1,), "float32")
    sig = OpSignature(FUSED_OP, (ArgSpec("x0", x), ArgSpec("expr", value="exp(x0)")), (x,), (0,), "sm_90")
    with pytest.raises(ValueError, match="unknown op 'exp'"):
        build_card(sig)
    with pytest.raises(ValueError, match="unknown op 'exp'"):
        call_aten(sig, [torch.randn(4)])
