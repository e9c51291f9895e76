"""Note [what replacing a node costs inside Inductor]: the bytes a replaced node makes real, and the decision."""
import logging

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cpu_provider import CpuProvider
from forge_backend.backend import make_backend
from forge_backend.inductor_gate import HOST_COST_US, charged_bytes, decide, fused_traffic_bytes, replaces

LN = torch.ops.aten.native_layer_norm.default
SOFTMAX = torch.ops.aten._softmax.default


def node_of(fn, target, *args):
    gm = make_fx(fn)(*args)
    nodes = [n for n in gm.graph.nodes if n.target == target]
    assert len(nodes) == 1
    return nodes[0]


def test_an_output_read_by_a_pointwise_op_counts_twice():
    x, w, b = torch.randn(8, 64), torch.randn(64), torch.randn(64)

    def modulated(x, w, b):
        return torch.ops.aten.native_layer_norm(x, [64], w, b, 1e-5)[0] * 2.0

    def plain(x, w, b):
        return torch.ops.aten.native_layer_norm(x, [64], w, b, 1e-5)[0]

    assert fused_traffic_bytes(node_of(modulated, LN, x, w, b)) == 2 * x.numel() * 4
    assert fused_traffic_bytes(node_of(plain, LN, x, w, b)) == 0


def test_an_input_made_by_a_pointwise_op_counts_twice_through_views():
    x = torch.randn(4, 8, 16)

    def scaled(x):
        return torch.ops.aten._softmax((x * 0.5).view(32, 16), -1, False)

    def through_a_view_after(x):
        return torch.ops.aten._softmax(x, -1, False).view(32, 16) + 1.0

    assert fused_traffic_bytes(node_of(scaled, SOFTMAX, x)) == 2 * x.numel() * 4
    assert fused_traffic_bytes(node_of(through_a_view_after, SOFTMAX, x)) == 2 * x.numel() * 4


def test_an_input_others_read_too_counts_once():
    """Inductor writes ``y`` for its other reader whatever the softmax does; replacing the softmax adds only its own
    read of it (Note [what replacing a node costs inside Inductor])."""
    x = torch.randn(4, 8, 16)

    def shared(x):
        y = x * 0.5
        return torch.ops.aten._softmax(y.view(32, 16), -1, False), y + 1.0

    def shared_through_the_view(x):
        y = (x * 0.5).view(32, 16)
        return torch.ops.aten._softmax(y, -1, False), y + 1.0

    assert fused_traffic_bytes(node_of(shared, SOFTMAX, x)) == x.numel() * 4
    assert fused_traffic_bytes(node_of(shared_through_the_view, SOFTMAX, x)) == x.numel() * 4


def test_a_norm_group_pays_a_read_of_the_residual_only_without_its_prologue():
    """MMDiT's residual adaLN: the group that takes the residual add reads its inputs as Inductor's kernel would;
    the group without it reads the new residual, which Inductor writes anyway for the next block."""
    from forge_backend.norm_fusion import find_norm_groups
    from test_norm_fusion import _residual_inputs, residual_adaln

    h = _residual_inputs()[0]
    gm = make_fx(residual_adaln)(*_residual_inputs())
    with_head, without = find_norm_groups(gm.graph)
    assert without.side is None and with_head.side is not None
    assert fused_traffic_bytes(without.output, without) == fused_traffic_bytes(with_head.output, with_head) + \
        h.numel() * 4


def test_a_matmul_neighbour_is_not_a_fusion():
    x, w = torch.randn(16, 32), torch.randn(32, 32)

    def f(x, w):
        return torch.ops.aten._softmax(x @ w, -1, False) @ w

    assert fused_traffic_bytes(node_of(f, SOFTMAX, x, w)) == 0


def test_an_op_inductor_runs_as_an_extern_is_charged_no_fusion():
    """Qwen's causal conv1d is followed by a slice and a SiLU; Inductor cannot fuse those into its own (extern)
    convolution either, so replacing it makes no tensor real that Inductor would have kept in registers."""
    x, w = torch.randn(2, 11, 24), torch.randn(24, 1, 4)

    def causal(x, w):
        y = torch.nn.functional.conv1d(x.transpose(1, 2), w, padding=3, groups=24)
        return torch.nn.functional.silu(y[..., :11])

    node = node_of(causal, torch.ops.aten.convolution.default, x, w)
    assert fused_traffic_bytes(node) > 0  # the SiLU reads the output
    assert charged_bytes(node, layout_reordered=False) == 0


@pytest.mark.parametrize("fused,used", [(0, True), (10**6, False)])
def test_fused_bytes_are_charged_at_the_kernels_own_rate(fused, used):
    # 10 us for 1 MB: 1 MB more traffic costs 10 us more, so 10*1.03 + 10 + host > 18.8 but 10*1.03 + host < 18.8
    assert replaces(10.0, 18.8, 10**6, fused, 0.03) is used
    assert not replaces(10.0, 10.0 * 1.03 + HOST_COST_US - 0.01, 10**6, 0, 0.03)


@pytest.mark.parametrize("kf,ind,op_bytes,fused,host", [
    (10.0, 18.8, 10**6, 0, HOST_COST_US), (10.0, 18.8, 10**6, 10**6, HOST_COST_US),
    (10.0, 10.0 * 1.03 + HOST_COST_US - 0.01, 10**6, 0, HOST_COST_US), (5.8, 8.1, 10**4, 0, 0.0),
    (16.2, 21.9, 0, 0, HOST_COST_US)])
def test_the_decision_holds_the_arithmetic_replaces_answers_with(kf, ind, op_bytes, fused, host):
    d = decide("kforge.norm", "k", kf, ind, op_bytes, fused, 0.03, host)
    assert d.replaced is replaces(kf, ind, op_bytes, fused, 0.03, host)
    assert d.fused_us == pytest.approx(fused * kf / max(op_bytes, 1)) and d.charged_bytes == fused
    assert d.total_us == pytest.approx(kf * 1.03 + d.fused_us + host) and d.replaced is (d.total_us < ind)


def test_a_decision_names_the_numbers_it_compared():
    """SD3.5 MMDiT's residual adaLN norm: a 16.2 us kernel against Inductor's 21.9 us, with its fused traffic."""
    kept = decide("kforge.norm", "k", 16.2, 21.9, 162_000, 31_000, 0.03, 5.0)
    assert kept.describe() == ("kforge.norm kept: 16.2 us x1.03 + 3.1 us fused traffic (0.031 MB) + 5.0 us host "
                               "= 24.8 >= Inductor 21.9 us")
    assert decide("kforge.norm", "k", 16.2, 21.9, 162_000, 0, 0.03, 0.0).describe().endswith("16.7 < Inductor 21.9 us")


def test_cuda_graph_replays_charge_no_host_time():
    """A kernel faster than Inductor's op by less than the extern call's host time loses to it, except in a compile
    that replays CUDA graphs (mode="reduce-overhead"), where no host code runs per node."""
    import torch._inductor.config as inductor_config

    from forge_backend.inductor_gate import host_cost_us

    inductor_us = 5.8 * 1.03 + HOST_COST_US / 2
    assert host_cost_us() == HOST_COST_US and not replaces(5.8, inductor_us, 10**4, 0, 0.03, host_cost_us())
    with inductor_config.patch({"triton.cudagraphs": True}):
        assert host_cost_us() == 0.0 and replaces(5.8, inductor_us, 10**4, 0, 0.03, host_cost_us())


class Timed(CpuProvider):
    """Serves layer norms with the timings a CUDA provider attaches inside Inductor."""

    def _impl(self, key, sig):
        import dataclasses

        return dataclasses.replace(super()._impl(key, sig), extra={"kforge_us": 10.0, "inductor_us": 18.8})


def compiled_counters(fn, *args, on_report=None, provider=None):
    from torch._dynamo.utils import counters

    counters.clear()
    provider = provider or Timed(ops=["aten.native_layer_norm.default"])
    with torch.no_grad():
        out = torch.compile(fn, backend=make_backend(provider, on_report), options={"inner": "inductor"})(*args)
    torch.testing.assert_close(out, fn(*args), rtol=1e-4, atol=1e-5)
    return dict(counters["kforge"])


def test_inside_inductor_a_norm_feeding_a_pointwise_op_stays_with_inductor():
    ln = torch.nn.LayerNorm(64)
    x = torch.randn(8, 64)
    alone = compiled_counters(lambda x: ln(x), x)
    assert alone.get("replaced_nodes") == 1 and not alone.get("kept_for_fusion")
    torch._dynamo.reset()
    modulated = compiled_counters(lambda x: torch.tanh(ln(x)) * 2.0, x)
    assert modulated.get("kept_for_fusion") == 1 and modulated.get("inductor_retries") == 1


@pytest.mark.parametrize("modulated", [False, True])
def test_the_report_holds_each_gate_decision_and_the_log_names_a_kept_one(caplog, modulated):
    """The modulated norm is kept, and the compile runs again with layer norms decomposed: its report (the second
    attempt's) still holds the first attempt's decision."""
    ln = torch.nn.LayerNorm(64)
    x = torch.randn(8, 64)
    provider, reports = Timed(ops=["aten.native_layer_norm.default"]), []
    with caplog.at_level(logging.INFO, logger="kforge"):
        counted = compiled_counters((lambda x: torch.tanh(ln(x)) * 2.0) if modulated else ln, x,
                                    on_report=reports.append, provider=provider)
    [report] = reports
    [d] = report.gate
    card = next(c for c in provider.cards_seen if c.key == d.key)
    assert (d.op, d.key, d.charged_bytes) == (card.op, card.key, 2 * x.numel() * 4 if modulated else 0)
    assert d == decide(card.op, card.key, 10.0, 18.8, card.bytes_min, d.charged_bytes, 0.03, HOST_COST_US)
    assert d.replaced is not modulated and counted.get("inductor_retries", 0) == int(modulated)
    kept = [r.getMessage() for r in caplog.records if "kept with Inductor" in r.getMessage()]
    assert kept == ([f"kforge: {card.op} kept with Inductor: {d.reason()} (key {card.key})"] if modulated else [])


@pytest.mark.parametrize("reordered", [False, True])
def test_a_channels_last_graph_does_not_charge_4d_fusions(monkeypatch, reordered):
    """Inductor's layout optimisation makes its in-graph norm unlike the NCHW single op it was timed as."""
    import forge_backend.backend as backend

    monkeypatch.setattr(backend, "inductor_reorders_layout", lambda gm: reordered)
    gn = torch.nn.GroupNorm(4, 16)
    x = torch.randn(2, 16, 8, 8)
    provider = Timed(ops=["aten.native_group_norm.default"])
    from torch._dynamo.utils import counters

    counters.clear()
    with torch.no_grad():
        out = torch.compile(lambda x: torch.nn.functional.silu(gn(x)), backend=make_backend(provider),
                            options={"inner": "inductor"})(x)
    torch.testing.assert_close(out, torch.nn.functional.silu(gn(x)), rtol=1e-4, atol=1e-5)
    assert counters["kforge"]["kept_for_fusion"] == (0 if reordered else 1)
    assert counters["kforge"]["replaced_nodes"] == (1 if reordered else 0)
