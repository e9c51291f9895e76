"""Note [a leftover next to a replaced node]: inside Inductor, nodes of an overload that kforge replaced elsewhere in
the graph are decomposed one by one, and the replaced nodes stay replaced."""
import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters
from torch._inductor.decomposition import select_decomp_table
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from cpu_provider import CpuProvider
from forge_backend.backend import make_backend
from forge_backend.node_decompose import NotDecomposable, decompose_nodes


class WidthsOnly(CpuProvider):
    """Serves softmax and group norm only at the given last-dim widths / channel counts: the other nodes of the
    same overloads are leftovers beside replaced ones."""

    def __init__(self, softmax_width: int, group_norm_channels: int) -> None:
        super().__init__(ops=("aten._softmax.default", "aten.native_group_norm.default"))
        self.softmax_width, self.group_norm_channels = softmax_width, group_norm_channels

    def kernels_for(self, cards, cfg):
        def serve(card):
            shape = card.signature_obj().tensor_args()[0][1].shape
            if card.op == "aten._softmax.default":
                return shape[-1] == self.softmax_width
            return shape[1] == self.group_norm_channels
        return super().kernels_for([c for c in cards if serve(c)], cfg)


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gn8, self.gn16 = torch.nn.GroupNorm(4, 8), torch.nn.GroupNorm(4, 16)
        self.up = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x, y, img):
        a = F.silu(self.gn8(img))
        b = F.silu(self.gn16(self.up(a)))
        return torch.softmax(x * 2, -1).sum(-1) + torch.softmax(y, -1)[:, :1].sum(-1), b


def test_leftovers_beside_replaced_nodes_are_decomposed_in_place(tmp_path):
    provider, reports = WidthsOnly(softmax_width=64, group_norm_channels=16), []
    m = Mixed().eval()
    args = torch.randn(8, 64), torch.randn(8, 33), torch.randn(2, 8, 5, 5)
    counters["kforge"].clear()
    with torch.no_grad():
        expected = m(*args)
        got = torch.compile(m, backend=make_backend(provider, reports.append),
                            options={"inner": "inductor", "cache_dir": str(tmp_path)})(*args)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    assert counters["kforge"]["inductor_retries"] == 0  # no whole-graph retry, which would undo the replacements
    assert counters["kforge"]["decomposed_in_place"] == 2
    assert provider.calls == {"aten._softmax.default": 1, "aten.native_group_norm.default": 1}
    assert len(reports[-1].replaced) == 2


def test_an_overload_with_no_replaced_node_is_still_decomposed_by_inductors_trace(tmp_path):
    provider = WidthsOnly(softmax_width=64, group_norm_channels=999)  # no group norm served at all
    m = Mixed().eval()
    args = torch.randn(8, 64), torch.randn(8, 33), torch.randn(2, 8, 5, 5)
    counters["kforge"].clear()
    with torch.no_grad():
        expected = m(*args)
        got = torch.compile(m, backend=make_backend(provider), options={"inner": "inductor",
                                                                      "cache_dir": str(tmp_path)})(*args)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    assert counters["kforge"]["inductor_retries"] == 1 and counters["kforge"]["decomposed_in_place"] == 1
    assert provider.calls == {"aten._softmax.default": 1}


def _fake_graph(fn, *shapes):
    mode = FakeTensorMode()
    with mode:
        vals = [torch.empty(s) for s in shapes]
    return make_fx(fn, tracing_mode="real")(*vals)


def test_a_group_norm_node_becomes_its_decomposition_with_the_same_outputs():
    gm = _fake_graph(lambda x, w, b: torch.ops.aten.native_group_norm(x, w, b, 2, 8, 15, 4, 1e-5), (2, 8, 3, 5),
                     (8,), (8,))
    node = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.native_group_norm.default)
    decompose_nodes(gm, [node], select_decomp_table())
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.native_group_norm.default not in targets
    x, w, b = torch.randn(2, 8, 3, 5), torch.randn(8), torch.randn(8)
    for g, e in zip(gm(x, w, b), torch.ops.aten.native_group_norm(x, w, b, 2, 8, 15, 4, 1e-5)):
        torch.testing.assert_close(g, e)


def test_a_decomposition_that_would_change_strides_is_refused():
    gm = _fake_graph(lambda x: torch.ops.aten._softmax(x, -1, False), (6, 10))
    node = next(n for n in gm.graph.nodes if n.target is torch.ops.aten._softmax.default)
    val = node.meta["val"]
    node.meta["val"] = val.new_empty_strided(val.shape, (1, 6))  # as if the node had written column-major
    with pytest.raises(NotDecomposable, match="changes layout") as e:
        decompose_nodes(gm, [node], select_decomp_table())
    assert e.value.op is torch.ops.aten._softmax.default  # the overload the caller decomposes whole instead


def test_a_decomposition_that_fails_to_trace_is_refused_not_raised():
    def broken(*args, **kwargs):
        raise RuntimeError("planted: this decomposition cannot run")

    gm = _fake_graph(lambda x: torch.ops.aten._softmax(x, -1, False), (6, 10))
    node = next(n for n in gm.graph.nodes if n.target is torch.ops.aten._softmax.default)
    with pytest.raises(NotDecomposable, match="planted"):
        decompose_nodes(gm, [node], {torch.ops.aten._softmax.default: broken})
