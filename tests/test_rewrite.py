import torch
import torch.nn.functional as F

from cpu_provider import CpuProvider
from forge_backend.capture import scan
from forge_backend.config import KforgeConfig
from forge_backend.registry import KERNEL_OP, REGISTRY
from forge_backend.rewrite import Replacement, apply, count_kernel_calls
from graphs import aten_graph, op_nodes


def rewrite(gm, provider=None, direct=False):
    found = scan(gm)
    provider = provider or CpuProvider()
    impls = provider.kernels_for(found.cards(), KforgeConfig.load({}, env={}))
    reps = []
    for c in found.candidates:
        if c.signature.key() in impls:
            REGISTRY.register(impls[c.signature.key()])
            reps.append(Replacement(c.node, c.signature, impls[c.signature.key()]))
    return apply(gm, reps, direct=direct), provider


def model(x, w, b):
    y = torch.relu(x @ w)  # mm and relu: untouched (matmul is opt-in; relu has no CPU impl in the provider)
    y = F.layer_norm(y, (16,), b, b)
    return F.softmax(y, -1) + 1.0


def test_replaces_candidates_and_keeps_the_rest():
    x, w, b = torch.randn(4, 16), torch.randn(16, 16), torch.randn(16)
    gm = aten_graph(model, x, w, b)
    before = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    n, provider = rewrite(gm)
    after = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert n == 2 and count_kernel_calls(gm) == 2
    assert "aten._softmax.default" not in after and "aten.native_layer_norm.default" not in after
    for untouched in ("aten.mm.default", "aten.relu.default", "aten.add.Tensor"):
        assert before.count(untouched) == after.count(untouched) == 1
    expected = model(x, w, b)
    torch.testing.assert_close(gm(x, w, b)[0], expected)
    assert provider.calls == {"aten._softmax.default": 1, "aten.native_layer_norm.default": 1}


def test_multi_output_op_keeps_used_outputs_in_order():
    def fn(x, w, b):
        out, mean, rstd = torch.ops.aten.native_group_norm(x, w, b, 2, 64, 16, 32, 1e-5)
        return out * 2, rstd  # mean unused

    x, w, b = torch.randn(2, 64, 4, 4), torch.randn(64), torch.randn(64)
    gm = aten_graph(fn, x, w, b)
    (node,) = op_nodes(gm, "aten.native_group_norm.default")
    assert sorted(u.args[1] for u in node.users) == [0, 2]
    n, _ = rewrite(gm)
    assert n == 1
    (call,) = [n for n in gm.graph.nodes if n.target is KERNEL_OP]
    assert sorted(u.args[1] for u in call.users) == [0, 1]  # positions among used outputs (0, 2)
    got, want = gm(x, w, b), fn(x, w, b)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def test_direct_mode_calls_the_impl_without_the_dispatcher():
    x = torch.randn(4, 16)
    gm = aten_graph(lambda t: F.softmax(t, -1), x)
    n, provider = rewrite(gm, direct=True)
    assert n == 1 and not any(n.target is KERNEL_OP for n in gm.graph.nodes)
    torch.testing.assert_close(gm(x)[0], F.softmax(x, -1))
    assert provider.calls["aten._softmax.default"] == 1


class CallableImpl:
    """A launcher-like callable object (no __name__), as the GPU runtime's Launcher is."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, inputs):
        return self.fn(inputs)


def test_direct_mode_accepts_callable_objects():
    import dataclasses

    x = torch.randn(4, 16)
    gm = aten_graph(lambda t: F.softmax(t, -1), x)
    found = scan(gm)
    impl = CpuProvider().kernels_for(found.cards(), KforgeConfig.load({}, env={}))[found.candidates[0].signature.key()]
    impl = dataclasses.replace(impl, run=CallableImpl(impl.run))
    apply(gm, [Replacement(found.candidates[0].node, found.candidates[0].signature, impl)], direct=True)
    torch.testing.assert_close(gm(x)[0], F.softmax(x, -1))


def test_graph_with_nothing_to_replace_is_unchanged():
    gm = aten_graph(lambda t: torch.relu(t) * 3, torch.randn(3))
    code = gm.code
    n, _ = rewrite(gm)
    assert n == 0 and gm.code == code


def test_provider_without_kernels_leaves_graph_alone():
    gm = aten_graph(lambda t: F.softmax(t, -1), torch.randn(3, 5))
    n, _ = rewrite(gm, CpuProvider(ops=()))
    assert n == 0 and op_nodes(gm, "aten._softmax.default")


def test_custom_op_passes_opcheck():
    x = torch.randn(4, 16)
    gm = aten_graph(lambda t: F.softmax(t, -1), x)
    rewrite(gm)
    (call,) = [n for n in gm.graph.nodes if n.target is KERNEL_OP]
    key = call.args[0]
    torch.library.opcheck(torch.ops.kforge.kernel.default, (key, [x]))
