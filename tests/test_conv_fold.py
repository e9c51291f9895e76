"""Note [a batch norm folded into its convolution] (forge_backend/conv_fold.py) on the CPU: which chains of Dynamo's
graph fold, that the folded model matches eager on both paths, that folds are kept while the weights stay and
recomputed when they change, and that a group failing verification stays unfused. The fold is opt-in
(``fold_conv_bn=True``): the Note says why."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn
from torch._dynamo.utils import counters

from forge_backend import conv_fold
from forge_backend.backend import make_backend
from forge_backend.conv_fold import find_groups, fold_conv_bn

ON = {"fold_conv_bn": True}


class Block(nn.Module):
    """A bottleneck-like block: conv-bn-relu, conv-bn + identity then relu (in place, as torchvision writes it), then
    a strided conv-bn with no ReLU."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 1, bias=True), nn.BatchNorm2d(c)
        self.conv3, self.bn3 = nn.Conv2d(c, 2 * c, 3, stride=2, bias=False), nn.BatchNorm2d(2 * c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        out = self.relu(out)
        return self.bn3(self.conv3(out))


def block() -> nn.Module:
    torch.manual_seed(0)
    m = Block().eval()
    for bn in (m.bn1, m.bn2, m.bn3):  # statistics far from the identity, so a wrong fold shows
        bn.running_mean.uniform_(-0.3, 0.3)
        bn.running_var.uniform_(0.4, 1.6)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
    return m


def dynamo_graph(model: nn.Module, *inputs: torch.Tensor, with_inputs: bool = False):
    """Dynamo's graph of ``model`` (and the example inputs it was compiled with, ``with_inputs``)."""
    graphs = []

    def capture(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    with torch.no_grad():
        torch.compile(model, backend=capture)(*inputs)
    assert len(graphs) == 1
    return graphs[0] if with_inputs else graphs[0][0]


def test_the_three_chains_of_a_block_are_found_with_their_tails():
    gm = dynamo_graph(block(), torch.randn(2, 8, 9, 9))
    groups = find_groups(gm)
    assert [len(g.nodes) for g in groups] == [3, 4, 2]  # conv bn relu; conv bn add relu; conv bn
    relu, residual = [g.args[9] for g in groups], [g.args[8] for g in groups]
    assert relu == [True, True, False] and residual[0] is None and residual[2] is None
    assert residual[1].op == "placeholder"  # the block's input
    assert [g.args[10:] for g in groups] == [([1, 1], [1, 1], [1, 1], 1), ([1, 1], [0, 0], [1, 1], 1),
                                             ([2, 2], [0, 0], [1, 1], 1)]


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_a_folded_block_matches_eager_and_returns_channels_last(inner):
    m, x = block(), torch.randn(2, 8, 9, 9)
    reports = []
    with torch.no_grad():
        expected = m(x)
        got = torch.compile(m, backend=make_backend(on_report=reports.append), options=ON | {"inner": inner})(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert reports[-1].folded == 3 and got.is_contiguous(memory_format=torch.channels_last)


def test_on_by_default_and_off_when_asked():
    m, x = block(), torch.randn(2, 8, 9, 9)
    for options, folded in (({}, 3), ({"fold_conv_bn": False}, 0)):
        reports = []
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(m, backend=make_backend(on_report=reports.append), options=options | {"inner": "eager"})(x)
        assert reports[-1].folded == folded


def test_folds_are_refreshed_when_the_weights_change_and_only_then():
    """The folded constants are folded again before a call whose source tensors changed in place or were replaced,
    and not otherwise (Note [a batch norm folded into its convolution]: the Refresher)."""
    m, x = block(), torch.randn(2, 8, 9, 9)
    with torch.no_grad():
        f = torch.compile(m, backend=make_backend(), options=ON | {"inner": "eager"})
        f(x)
        f(x)
        assert counters["kforge"]["conv_bn_refolds"] == 0
        m.bn1.running_var.mul_(3.0)  # an in-place update bumps the version
        m.conv3.weight.add_(0.5)
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
        assert counters["kforge"]["conv_bn_refolds"] == 2  # the two chains whose sources changed
        m.bn2.weight = nn.Parameter(m.bn2.weight * 2)  # a new object
        torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)


def test_the_refresher_checks_arguments_and_constants_and_refolds_only_what_changed():
    """The Refresher's one check over every group (Note [a batch norm folded into its convolution]) sees an argument
    replaced, an argument updated in place and a graph constant updated in place, and refolds the group they feed
    into its same buffers, and nothing else."""
    def chain(w, g, b, m, v, sources):
        folded_w, folded_b = conv_fold.fold(w, None, g, b, m, v, 1e-5, torch.float32)
        seen = [w, None, g, b, m, v]
        return conv_fold._Constants(folded_w, folded_b, sources, 1e-5, seen, [-1 if t is None else t._version
                                                                              for t in seen])

    args = [torch.randn(4, 3, 1, 1), *(torch.rand(4) + 0.5 for _ in range(4))]
    const = [torch.randn(4, 3, 1, 1), *(torch.rand(4) + 0.5 for _ in range(4))]
    by_arg = (conv_fold._Source(0, None), None, *(conv_fold._Source(i, None) for i in range(1, 5)))
    by_const = (conv_fold._Source(None, const[0]), None, *(conv_fold._Source(None, t) for t in const[1:]))
    groups = [chain(*args, by_arg), chain(*const, by_const)]
    weights = [g.weight for g in groups]
    refresher = conv_fold.Refresher(groups)
    refresher(args)
    assert refresher.refolds == 0
    args[2].mul_(2.0)  # the first group's norm weight, in place
    refresher(args)
    assert refresher.refolds == 1
    torch.testing.assert_close(groups[0].weight, conv_fold.fold(args[0], None, *args[1:], 1e-5, torch.float32)[0])
    refresher(args)
    assert refresher.refolds == 1  # unchanged since
    const[4].add_(1.0)  # the second group's running variance, a constant of the graph
    refresher(args)
    assert refresher.refolds == 2
    torch.testing.assert_close(groups[1].weight, conv_fold.fold(const[0], None, *const[1:], 1e-5, torch.float32)[0])
    args = list(args)
    args[0] = args[0].clone() * 3  # a new object in the first group's weight's position
    refresher(args)
    refresher(args)
    assert refresher.refolds == 3
    torch.testing.assert_close(groups[0].weight, conv_fold.fold(args[0], None, *args[1:], 1e-5, torch.float32)[0])
    assert all(g.weight is w for g, w in zip(groups, weights))  # the same buffers, refolded in place


def test_the_folded_graph_takes_only_the_inputs_it_still_uses():
    """Note [the folded graph's dead inputs]: the folded chains' weights and norm tensors leave the folded graph's
    inputs; the graph called with Refresher.arguments of Dynamo's arguments computes the model, and the Refresher
    still sees an update of a tensor the graph no longer takes."""
    m, x = block(), torch.randn(2, 8, 9, 9)
    gm, example_inputs = dynamo_graph(m, x, with_inputs=True)
    before = len(list(gm.graph.find_nodes(op="placeholder")))
    folded, _, refresher = fold_conv_bn(gm, example_inputs)
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    # 3 chains: 3 conv weights, 1 conv bias, 4 tensors of each of 3 norms gone; the input stays
    assert folded == 3 and before - len(placeholders) == 16 and refresher.kept is not None
    assert len(refresher.kept) == len(placeholders) and all(n.users for n in placeholders)
    with torch.no_grad():
        torch.testing.assert_close(gm(*refresher.arguments(example_inputs))[0], m(x), rtol=1e-4, atol=1e-5)
        m.bn3.running_mean.add_(0.25)  # not an input of the folded graph any more
        refresher(example_inputs)
        torch.testing.assert_close(gm(*refresher.arguments(example_inputs))[0], m(x), rtol=1e-4, atol=1e-5)
    assert refresher.refolds == 1


def test_inductor_freezing_keeps_its_own_fold():
    """With Inductor's freezing on, kforge+Inductor folds nothing (Inductor folds the chains into constants of its
    own, where a refold could not reach) and says why; the eager path still folds."""
    from forge_backend.backend import CompileReport, _fold_conv_bn
    from forge_backend.config import KforgeConfig

    gm, example_inputs = dynamo_graph(block(), torch.randn(2, 8, 9, 9), with_inputs=True)
    report = CompileReport()
    with torch._inductor.config.patch(freezing=True):
        folded, refresher = _fold_conv_bn(gm, example_inputs, KforgeConfig.load(ON | {"inner": "inductor"}, env={}),
                                          report)
    assert folded is gm and refresher is None and report.folded == 0
    assert any("freezing" in why for _, why in report.skipped)
    folded, refresher = _fold_conv_bn(gm, example_inputs, KforgeConfig.load(ON | {"inner": "eager"}, env={}),
                                      CompileReport())
    assert folded is not gm and refresher is not None


def test_chains_that_must_not_fold_are_left_alone():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)
            self.conv2, self.bn2 = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)
            self.conv3, self.bn3 = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)

        def forward(self, x, bias):
            c = self.conv(x)
            y = self.bn(c) + c  # the conv has two users
            z = torch.relu(self.bn2(self.conv2(x)) + bias)  # a broadcast residual: the norm folds, the add stays
            w = x.add_(self.bn3(self.conv3(x)))  # an add into x, not into the norm's output: not a residual
            return y, z, w

    groups = find_groups(dynamo_graph(Odd().eval(), torch.randn(1, 4, 5, 5), torch.randn(4, 1, 1)))
    assert [len(g.nodes) for g in groups] == [2, 2]  # conv2-bn2 and conv3-bn3, each without its add
    assert all(g.args[8] is None and g.args[9] is False for g in groups)


def test_symbolic_shapes_are_left_alone_and_the_model_still_runs():
    """Under dynamic shapes the verifier cannot draw inputs of a symbolic size: nothing folds, nothing breaks."""
    m, reports = block(), []
    with torch.no_grad():
        f = torch.compile(m, backend=make_backend(on_report=reports.append), dynamic=True,
                          options=ON | {"inner": "eager"})
        for x in (torch.randn(2, 8, 9, 9), torch.randn(3, 8, 11, 7)):
            torch.testing.assert_close(f(x), m(x), rtol=1e-4, atol=1e-5)
    assert reports and all(r.folded == 0 and r.fallback is None for r in reports)


def test_a_warm_compile_does_not_verify_again(monkeypatch, tmp_path):
    """The signatures that passed are kept in the cache directory: a second compile with it verifies nothing, one
    with another directory verifies again."""
    calls = []
    real = conv_fold.verify_group
    monkeypatch.setattr(conv_fold, "verify_group", lambda *a, **k: calls.append(1) or real(*a, **k))
    m, x = block(), torch.randn(2, 8, 9, 9)

    def compile_with(cache):
        torch._dynamo.reset()
        reports = []
        with torch.no_grad():
            torch.compile(m, backend=make_backend(on_report=reports.append),
                          options=ON | {"inner": "eager", "cache_dir": str(cache)})(x)
        return reports[-1].folded

    assert compile_with(tmp_path / "a") == 3 and len(calls) == 6  # three signatures, two seeds each
    assert compile_with(tmp_path / "a") == 3 and len(calls) == 6
    assert compile_with(tmp_path / "b") == 3 and len(calls) == 12
    (tmp_path / "a" / conv_fold.Verified.FILE).write_text("{torn")
    assert compile_with(tmp_path / "a") == 3 and len(calls) == 18  # a torn file: verified again


def test_training_mode_batch_norm_is_not_folded():
    m, x = block().train(), torch.randn(2, 8, 9, 9)
    with torch.no_grad():
        gm = dynamo_graph(m, x)
    assert find_groups(gm) == []


def test_a_group_failing_verification_stays_unfused(monkeypatch):
    """The verifier compares the folded op with PyTorch's unfused ops: make the reference disagree and nothing
    folds, each refusal saying why, and the compiled model still matches eager."""
    monkeypatch.setattr(conv_fold, "reference", lambda *a: torch.zeros(1))
    m, x = block(), torch.randn(2, 8, 9, 9)
    gm, example_inputs = dynamo_graph(m, x, with_inputs=True)
    folded, refused, refresher = fold_conv_bn(gm, example_inputs)
    assert folded == 0 and len(refused) == 3 and refresher is None
    assert all("output" in why or "max_rel_err" in why for why in refused)
    reports = []
    with torch.no_grad():
        got = torch.compile(m, backend=make_backend(on_report=reports.append), options=ON | {"inner": "eager"})(x)
        torch.testing.assert_close(got, m(x))
    assert reports[-1].folded == 0 and any(op == "conv + batch norm fold" for op, _ in reports[-1].skipped)


def test_cudnn_fused_convolutions_trace_on_the_meta_device():
    """Note [meta kernels for cuDNN's fused convolutions]: the output shape of the convolution, in channels-last."""
    meta = dict(device="meta", dtype=torch.float16)
    x, w, b = torch.empty(2, 4, 7, 6, **meta), torch.empty(6, 4, 3, 3, **meta), torch.empty(6, **meta)
    args = ([2, 1], [1, 0], [1, 2], 1)
    expected = torch.nn.functional.conv2d(torch.zeros(2, 4, 7, 6), torch.zeros(6, 4, 3, 3), None, *args).shape
    out = torch.ops.aten.cudnn_convolution_relu(x, w, b, *args)
    z = torch.empty(expected, **meta)
    out2 = torch.ops.aten.cudnn_convolution_add_relu(x, w, z, 1.0, b, *args)
    for o in (out, out2):
        assert o.shape == expected and o.is_contiguous(memory_format=torch.channels_last)


def test_the_plain_folded_call_matches_the_reference():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 4, 7, 6, generator=g), torch.randn(6, 4, 3, 3, generator=g)
    cb, gw, gb, mean = (torch.randn(6, generator=g) for _ in range(4))
    var, z = torch.rand(6, generator=g) + 0.5, torch.randn(2, 6, 4, 2, generator=g)
    args = ([2, 1], [1, 0], [1, 2], 1)
    wf, bf = conv_fold.fold(w, cb, gw, gb, mean, var, 1e-5, torch.float32)
    got = conv_fold.folded_call(x, wf, bf, z, True, *args, cudnn=False)
    torch.testing.assert_close(got, conv_fold.reference(x, w, cb, gw, gb, mean, var, 1e-5, z, True, *args),
                               rtol=1e-4, atol=1e-5)


def test_a_verified_key_names_the_field_that_changed():
    """VerifiedKey is a declared cache key: another cuDNN or verifier gives another digest, and debug_lines says why."""
    a = conv_fold.VerifiedKey(("sig",), 1, "2.13.0", 91000, "NVIDIA H200")
    b = dataclasses.replace(a, cudnn=91100)
    assert a.digest() != b.digest() and a.digest() == conv_fold.VerifiedKey(*dataclasses.astuple(a)).digest()
    assert [x for x, y in zip(a.debug_lines(), b.debug_lines()) if x != y] == ["cudnn: 91000"]
