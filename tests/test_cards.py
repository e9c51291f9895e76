import torch
import torch.nn.functional as F

from forge_backend.cards import OperatorCard, build_card, cards_for_graph
from forge_backend.signature import signature_of
from graphs import aten_graph, op_nodes


def card_of(fn, x, op):
    return build_card(signature_of(op_nodes(aten_graph(fn, x), op)[0], arch="sm_90"))


def test_softmax_card_by_hand():
    c = card_of(lambda x: F.softmax(x, -1), torch.randn(64, 1000), "aten._softmax.default")
    assert c.family == "softmax"
    assert c.bytes_min == 64 * 1000 * 4 * 2  # read once, write once
    assert c.flops == 5 * 64 * 1000
    assert c.sizes["rows"] == 64 and c.sizes["cols"] == 1000
    assert abs(c.floor_us(4248.0) - 512000 / 4248e3) < 1e-12
    assert "softmax" in c.semantics and "dim -1" in c.semantics
    assert c.reference == "torch.ops.aten._softmax.default(self, dim=-1, half_to_float=False)"
    assert [t.name for t in c.inputs] == ["self"] and [t.name for t in c.outputs] == ["out0"]


def test_group_norm_card_by_hand():
    w, b = torch.randn(64), torch.randn(64)
    c = card_of(lambda x: F.group_norm(x, 32, w, b), torch.randn(2, 64, 8, 8), "aten.native_group_norm.default")
    x_bytes = 2 * 64 * 8 * 8 * 4
    assert c.bytes_min == x_bytes + 64 * 4 * 2 + x_bytes  # x, weight, bias in; out (mean/rstd unused) out
    assert c.flops == 7 * 2 * 64 * 64
    assert c.sizes["G"] == 32 and c.sizes["ch_per_group"] == 2 and c.sizes["group_size"] == 2 * 64
    assert c.floats["eps"] == 1e-5
    assert [t.name for t in c.inputs] == ["input", "weight", "bias"]
    assert [t.name for t in c.outputs] == ["out0"]
    assert "32 groups" in c.semantics


def test_adaptive_avg_pool2d_card_by_hand():
    c = card_of(lambda x: torch.ops.aten._adaptive_avg_pool2d(x, [1, 1]), torch.randn(2, 32, 7, 7),
                "aten._adaptive_avg_pool2d.default")
    assert c.family == "pool"
    assert c.bytes_min == 2 * 32 * 49 * 4 + 2 * 32 * 4
    assert c.flops == 2 * 32 * 49 + 2 * 32  # one add per input, one divide per output
    assert (c.sizes["N"], c.sizes["C"], c.sizes["H"], c.sizes["W"]) == (2, 32, 7, 7)


def test_global_pool_spelled_as_mean_dim():
    """F.adaptive_avg_pool2d(x, 1) reaches ATen as mean.dim over H, W: the card must say so."""
    c = card_of(lambda x: F.adaptive_avg_pool2d(x, 1), torch.randn(2, 32, 7, 7), "aten.mean.dim")
    assert c.sizes["cols"] == 49 and c.sizes["rows"] == 64
    assert "global average pool" in c.semantics


def test_layer_norm_card_by_hand():
    ln = torch.nn.LayerNorm(256)
    c = card_of(lambda x: ln(x), torch.randn(16, 256), "aten.native_layer_norm.default")
    assert c.bytes_min == 16 * 256 * 4 * 2 + 256 * 4 * 2
    assert c.flops == 7 * 16 * 256
    assert c.sizes["rows"] == 16 and c.sizes["cols"] == 256


def test_card_json_round_trip_and_render():
    c = card_of(lambda x: F.softmax(x, -1), torch.randn(8, 100), "aten._softmax.default")
    c.baselines_us["eager"] = 3.5
    again = OperatorCard.from_json(c.to_json())
    assert again == c
    text = again.render(4248.0)
    for needle in ("computes:", "reference:", "input  self: float32[8, 100] stride [100, 1]", "roofline floor",
                   "baseline eager: 3.50 us", "min bytes moved: 6,400"):
        assert needle in text


def test_identical_signatures_share_one_card():
    gn = torch.nn.GroupNorm(32, 64)

    def fn(x):
        for _ in range(5):
            x = gn(x)
        return x

    gm = aten_graph(fn, torch.randn(1, 64, 4, 4))
    sigs = [signature_of(n, arch="sm_90") for n in op_nodes(gm, "aten.native_group_norm.default")]
    cards = cards_for_graph(sigs)
    assert len(sigs) == 5 and len(cards) == 1 and cards[0].occurrences == 5
