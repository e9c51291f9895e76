"""A batch norm in inference folded into the convolution before it, the residual add and the ReLU in cuDNN's epilogue.

Note [a batch norm folded into its convolution]
In inference a batch norm is a per-channel scale and shift, so conv(x, w) * s + t == conv(x, w * s) + t with
s = gamma / sqrt(var + eps) and t = beta - mean * s. Inductor (without ``freezing``) runs each convolution through
cuDNN and then one fused pointwise kernel for the norm, the ReLU and a residual add, which reads and writes the whole
activation once more. cuDNN's ``cudnn_convolution_relu`` and ``cudnn_convolution_add_relu`` take a bias, a residual
and the ReLU into the convolution's epilogue, so with the norm folded that pass disappears. Measured before building
this (H200, thirty-third session, benchmarks/probe_resnet_fold.py, GPU time by graph replay of one forward):
ResNet-50 at batch 32 folded this way in channels-last ran 1.067 ms against Inductor's 1.415 (fp16, 1.33x) and
2.009 against 2.493 (fp32, 1.24x); in NCHW the fused calls were slower than Inductor's (which moves the convolutions
to channels-last itself), so the op here always works in channels-last: its output is channels-last, and the next
folded convolution takes it as it is.

Through Inductor, with the constants below (no Python per convolution), examples/resnet50.py ran faster than Inductor
by wall time in the same run (H200, thirty-third session, median of 20 calls after 5): fp16 batch 32 3.25 ms against
3.43 (1.05x), fp32 batch 32 2.91 against 4.01 (1.38x) (results/h200/example_session33_resnet_fold2_*.log). On by
default since the thirty-fourth session (off with ``fold_conv_bn=False``), after the model benchmark ran with it on
every ResNet-50 setting (results/h200/models_session34_resnet_default.json and _fp32_b1.json, 40 interleaved rounds,
the median of the per-round ratios): kforge+Inductor against Inductor by wall time 1.149x at fp16 batch 32, 1.180x at
fp32 batch 32, 1.181x at fp16 batch 1, 1.119x at fp32 batch 1 (Inductor against itself 0.998-1.013), by GPU time
1.47x, 1.27x, 1.27x and 1.14x; warm compiles within 0.41 s of Inductor's. The first run of that benchmark, before
the Refresher's one-pass check and the pruned inputs (Note [the folded graph's dead inputs]), read 0.962x, 1.041x,
1.031x and 1.017x (models_session34_fold.json): the host time per forward decided it.

The pass runs on Dynamo's graph, before any trace, on graphs that need no backward: a ``conv2d`` whose only user is a
``batch_norm`` with ``training=False``, then optionally a ReLU, or an add of another tensor of the same shape and a
ReLU (ResNet's bottleneck end), each link the only user of the one before, become, on a CUDA device with cuDNN, one
``aten.cudnn_convolution_relu`` or ``aten.cudnn_convolution_add_relu`` call (``aten.convolution`` with the bias for a
chain without a ReLU) on the input in channels-last and the folded weight and bias; elsewhere (the CPU smoke tests) the
plain convolution, add and ReLU on the folded weight and bias. Both paths trace these as ATen ops (Note [meta kernels
for cuDNN's fused convolutions]); Inductor calls the cuDNN ones as extern kernels. Each group's signature (shapes,
dtypes, stride, padding, dilation, groups, the tail) is first verified on fresh random inputs and random norm
statistics, computed as the graph will compute it (``folded_call``), against PyTorch's unfused ops
(``verify_group``); a group that fails or raises stays unfused. A signature that passed is remembered in the cache
directory (``Verified``), so a warm compile does not verify it again. On by default (``fold_conv_bn``).

The folded weight and bias are buffers of the graph, folded at compile time from the example inputs (the model's
parameters and running statistics). Before each call of the compiled graph a ``Refresher`` checks that the six
tensors each group was folded from are the same objects at the same versions (``Tensor._version``, which every
in-place update bumps) and folds again, into the same buffers, the groups whose sources changed; so a model whose
weights are loaded or updated after the compile computes with the new ones, and compiled code and CUDA graphs that
hold the buffers see them. An update through ``.data`` bypasses the version counter and is not seen, as with any
cache keyed on versions. The buffers are a second copy of the folded convolutions' weights (ResNet-50 in fp16: about
50 MB), held as long as the compiled graph. No Python runs per convolution; the Refresher checks six tensors a
group once a forward, in one pass (its docstring has the cost). With Inductor's ``freezing`` on,
Inductor would take the buffers as constants of its own and a refresh would not reach them, and it folds batch norms
into convolutions itself: kforge+Inductor then leaves the chains to it (backend._fold_conv_bn). On the eager path the
constants make the in-place trace fall back to AOTAutograd's (Note [the eager path keeps in-place updates] in
backend.py).

The first version (4d2809d) was a ``torch.library.custom_op`` that folded per call through a cache: 92-104 us of host
time a call against cuDNN's 49 (benchmarks/probe_fold_host.py), which made ResNet-50 fp16 batch 32 take 6.38 ms a
forward against Inductor's 3.42 (results/h200/example_session33_resnet_fold.log), and Inductor's CUDA-graph trees
refused the folds it kept (an allocation made in their pool during warm-up).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx
import torch.nn.functional as F
from torch._dynamo.utils import counters

from .fsutil import atomic_write

log = logging.getLogger("kforge")

_CL = torch.channels_last
_VERSION = operator.attrgetter("_version")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# max |out - ref| / max |ref| a folded group may differ from PyTorch's unfused ops by (fp32 convolutions use TF32 in
# cuDNN by default, as PyTorch's own do)
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 1e-2}


def fold(weight: torch.Tensor, conv_bias: Optional[torch.Tensor], bn_weight: Optional[torch.Tensor],
         bn_bias: Optional[torch.Tensor], mean: torch.Tensor, var: torch.Tensor, eps: float,
         dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The convolution's weight and bias with the norm folded in, computed in fp32, in ``dtype``, the weight in
    channels-last."""
    with torch.no_grad():
        scale = torch.rsqrt(var.float() + eps)
        if bn_weight is not None:
            scale = scale * bn_weight.float()
        w = (weight.float() * scale.reshape(-1, 1, 1, 1)).to(dtype).contiguous(memory_format=_CL)
        b = -mean.float() if conv_bias is None else conv_bias.float() - mean.float()
        b = b * scale
        if bn_bias is not None:
            b = b + bn_bias.float()
        return w, b.to(dtype)


def _out_shape(x: torch.Tensor, weight: torch.Tensor, stride, padding, dilation) -> tuple[int, ...]:
    size = [x.shape[0], weight.shape[0]]
    for i in range(2):
        k = dilation[i] * (weight.shape[2 + i] - 1) + 1
        size.append((x.shape[2 + i] + 2 * padding[i] - k) // stride[i] + 1)
    return tuple(size)


def _cl_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides ``torch.empty(shape, memory_format=torch.channels_last)`` has, without allocating it."""
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def cudnn_fusable(device: torch.device) -> bool:
    """Whether a folded group on ``device`` takes cuDNN's fused calls (else PyTorch's plain ops)."""
    return device.type == "cuda" and torch.backends.cudnn.is_available() and torch.backends.cudnn.enabled


# Note [meta kernels for cuDNN's fused convolutions]
# ATen registers ``cudnn_convolution_relu`` and ``cudnn_convolution_add_relu`` for CUDA only: no meta kernel, so fake
# tensors (make_fx, AOTAutograd, Inductor) could not trace a graph that calls them. These are theirs: the output shape
# of the convolution, in channels-last (cuDNN lays the output out as its inputs, and a folded group's weight is
# channels-last: ATen's cudnn_conv_suggest_memory_format). Registered once, where none is.
_META = torch.library.Library("aten", "IMPL")


def _meta_relu(x, weight, bias, stride, padding, dilation, groups):
    return torch.empty(_out_shape(x, weight, stride, padding, dilation), dtype=x.dtype, device=x.device,
                       memory_format=_CL)


def _meta_add_relu(x, weight, z, alpha, bias, stride, padding, dilation, groups):
    return _meta_relu(x, weight, bias, stride, padding, dilation, groups)


for _name, _fn in (("cudnn_convolution_relu", _meta_relu), ("cudnn_convolution_add_relu", _meta_add_relu)):
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{_name}", "Meta"):
        _META.impl(_name, _fn, "Meta")


def folded_call(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, residual: Optional[torch.Tensor],
                relu: bool, stride: list[int], padding: list[int], dilation: list[int], groups: int,
                cudnn: bool) -> torch.Tensor:
    """What a folded group computes, op for op as the pass writes it into the graph (``_emit``): with ``cudnn``, one
    fused cuDNN call in channels-last; else the plain convolution, add and ReLU."""
    aten = torch.ops.aten
    if cudnn:
        x = x.contiguous(memory_format=_CL)
        if residual is not None:
            return aten.cudnn_convolution_add_relu(x, weight, residual.contiguous(memory_format=_CL), 1.0, bias,
                                                   stride, padding, dilation, groups)
        if relu:
            return aten.cudnn_convolution_relu(x, weight, bias, stride, padding, dilation, groups)
    out = aten.convolution(x, weight, bias, stride, padding, dilation, False, [0, 0], groups)
    if residual is not None:
        out = aten.add(out, residual)
    return aten.relu(out) if relu else out


def reference(x, weight, conv_bias, bn_weight, bn_bias, mean, var, eps, residual, relu, stride, padding, dilation,
              groups) -> torch.Tensor:
    """PyTorch's unfused ops, computed in fp32 from the same inputs: what a folded group must match."""
    f = (lambda t: None if t is None else t.float())
    out = F.conv2d(x.float(), weight.float(), f(conv_bias), stride, padding, dilation, groups)
    out = F.batch_norm(out, mean.float(), var.float(), f(bn_weight), f(bn_bias), False, 0.0, eps)
    if residual is not None:
        out = out + residual.float()
    return torch.relu(out) if relu else out


# --------------------------------------------------------------------------------------------------------------------
# the pass on Dynamo's graph

_CONV = {torch.conv2d, F.conv2d}
_BN = {F.batch_norm}
_RELU_FN = {F.relu, torch.relu, torch.relu_, F.relu_}
_RELU_METHOD = {"relu", "relu_"}
_ADD_FN = {operator.add, operator.iadd, torch.add}
_ADD_METHOD = {"add", "add_"}


@dataclass
class Group:
    """One foldable chain of Dynamo's graph: its nodes and (x, weight, conv bias, norm weight, norm bias, mean, var,
    eps, residual, relu, stride, padding, dilation, groups)."""

    nodes: list[torch.fx.Node]  # conv, norm[, add], [relu], in graph order
    args: tuple

    @property
    def tail(self) -> torch.fx.Node:
        return self.nodes[-1]


def _arg(node: torch.fx.Node, i: int, name: str, default: Any = None) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _pair(v: Any) -> list[int] | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return [v, v]
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        return list(v)
    return None


def _value(node: Any) -> torch.Tensor | None:
    v = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _is_relu(node: torch.fx.Node | None, of: torch.fx.Node) -> bool:
    if node is None or not node.args or node.args[0] is not of:
        return False
    if node.op == "call_function":
        return node.target in _RELU_FN and len(node.args) == 1 and set(node.kwargs) <= {"inplace"}
    return node.op == "call_method" and node.target in _RELU_METHOD and len(node.args) == 1 and not node.kwargs


def _residual_of(node: torch.fx.Node | None, of: torch.fx.Node) -> torch.fx.Node | None:
    """The other operand of ``node`` if it is ``of + other`` (either order, no alpha) of two tensors of one shape."""
    if node is None or node.kwargs or len(node.args) != 2 or not (
            (node.op == "call_function" and node.target in _ADD_FN)
            or (node.op == "call_method" and node.target in _ADD_METHOD)):
        return None
    a, b = node.args
    other = b if a is of else a if b is of else None
    if node.op == "call_method" and a is not of:
        return None  # x.add_(bn) would write into x, not into the norm's output
    mine, theirs = _value(of), _value(other)
    if other is None or other is of or mine is None or theirs is None or mine.shape != theirs.shape \
            or mine.dtype != theirs.dtype:
        return None
    return other


def has_candidates(gm: torch.fx.GraphModule) -> bool:
    """Whether Dynamo's graph has a convolution and a batch norm at all (the cheap test before copying it)."""
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    return bool(targets & _CONV) and bool(targets & _BN)


def find_groups(gm: torch.fx.GraphModule) -> list[Group]:
    """The foldable chains of Dynamo's graph ``gm`` (Note [a batch norm folded into its convolution])."""
    groups, claimed = [], set()  # a node joins one group: the first in graph order that reaches it
    for conv in gm.graph.nodes:
        if conv.op != "call_function" or conv.target not in _CONV:
            continue
        x, weight, conv_bias = _arg(conv, 0, "input"), _arg(conv, 1, "weight"), _arg(conv, 2, "bias")
        stride, padding = _pair(_arg(conv, 3, "stride", 1)), _pair(_arg(conv, 4, "padding", 0))
        dilation, n_groups = _pair(_arg(conv, 5, "dilation", 1)), _arg(conv, 6, "groups", 1)
        xv, wv = _value(x), _value(weight)
        if None in (stride, padding, dilation) or not isinstance(n_groups, int) or xv is None or wv is None \
                or xv.dim() != 4 or wv.dim() != 4 or xv.dtype not in _DTYPES or wv.dtype != xv.dtype \
                or not all(isinstance(d, int) for d in (*xv.shape, *wv.shape)) \
                or not isinstance(weight, torch.fx.Node) or not (conv_bias is None or isinstance(conv_bias,
                                                                                              torch.fx.Node)):
            continue
        bn = _only_user(conv)
        if bn is None or bn.op != "call_function" or bn.target not in _BN or _arg(bn, 0, "input") is not conv:
            continue
        mean, var = _arg(bn, 1, "running_mean"), _arg(bn, 2, "running_var")
        bn_w, bn_b = _arg(bn, 3, "weight"), _arg(bn, 4, "bias")
        training, eps = _arg(bn, 5, "training", False), _arg(bn, 7, "eps", 1e-5)
        if training is not False or not isinstance(eps, float) or not all(
                isinstance(t, torch.fx.Node) for t in (mean, var)) or not all(
                t is None or isinstance(t, torch.fx.Node) for t in (bn_w, bn_b)):
            continue
        nodes, residual, relu = [conv, bn], None, False
        nxt = _only_user(bn)
        if nxt in claimed:  # two chains meeting at one add (a shortcut's and the main path's): the first takes it
            pass
        elif _is_relu(nxt, bn):
            nodes.append(nxt)
            relu = True
        else:
            other = _residual_of(nxt, bn)
            after = _only_user(nxt) if other is not None else None
            if other is not None and _is_relu(after, nxt):
                nodes += [nxt, after]
                residual, relu = other, True
        claimed.update(nodes)
        groups.append(Group(nodes, (x, weight, conv_bias, bn_w, bn_b, mean, var, eps, residual, relu, stride,
                                    padding, dilation, n_groups)))
    return groups


def _signature(group: Group) -> tuple:
    def spec(a: Any) -> Any:
        v = _value(a) if isinstance(a, torch.fx.Node) else None
        return (tuple(v.shape), v.dtype, str(v.device)) if v is not None else a
    return tuple(spec(a) if not isinstance(a, list) else tuple(a) for a in group.args)


def verify_group(group: Group, seed: int = 0) -> str | None:
    """None if the group folded, computed as the graph will compute it (``folded_call``), matches PyTorch's unfused
    ops on fresh random inputs and norm statistics (twice, the second run agreeing with the first, the inputs
    unchanged after); else why not."""
    vals = [_value(a) if isinstance(a, torch.fx.Node) else a for a in group.args]
    x, w = vals[0], vals[1]
    g = torch.Generator(device="cpu").manual_seed(seed)

    def rand(v: torch.Tensor | None, lo: float = -1.0, hi: float = 1.0) -> torch.Tensor | None:
        if v is None:
            return None
        t = torch.rand(tuple(v.shape), generator=g) * (hi - lo) + lo
        return t.to(device=x.device, dtype=v.dtype)

    args = list(vals)
    args[0] = rand(x, -2.0, 2.0).contiguous(memory_format=_CL) if seed % 2 else rand(x, -2.0, 2.0)
    args[1] = rand(w) / max(1.0, math.prod(w.shape[1:]) ** 0.5)
    args[2], args[3], args[4] = rand(vals[2]), rand(vals[3], 0.5, 1.5), rand(vals[4])
    args[5], args[6] = rand(vals[5], -0.2, 0.2), rand(vals[6], 0.5, 1.5)
    args[8] = rand(vals[8], -1.0, 1.0)
    kept = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    cudnn = cudnn_fusable(x.device)
    try:
        with torch.no_grad():
            w_f, b_f = fold(*args[1:8], x.dtype)
            call = (args[0], w_f, b_f, args[8], args[9], *args[10:14], cudnn)
            first, second = folded_call(*call), folded_call(*call)
            ref = reference(*args)
    except Exception as e:  # a cuDNN configuration it refuses: the group stays unfused
        return f"{type(e).__name__}: {str(e)[:200]}"
    if not all(torch.equal(a, b) for a, b in zip(args, kept) if isinstance(a, torch.Tensor)):
        return "an input changed"
    if first.shape != ref.shape or (cudnn and first.stride() != _cl_strides(tuple(ref.shape))):
        return f"output {tuple(first.shape)} strides {first.stride()} against {tuple(ref.shape)}"
    if not torch.isfinite(first).all():
        return "non-finite output"
    scale = float(ref.abs().max().clamp_min(1e-6))
    err = float((first.float() - ref).abs().max()) / scale
    if err > TOLERANCE[x.dtype]:
        return f"max_rel_err {err:.2e} over {TOLERANCE[x.dtype]:.0e}"
    if float((first.float() - second.float()).abs().max()) > TOLERANCE[x.dtype] * scale:
        return "a second run disagrees"
    return None


@dataclass
class _Source:
    """Where a folded constant's source tensor comes from at run time: the graph's input ``index``, or ``tensor``
    itself (a constant of the graph)."""

    index: int | None
    tensor: torch.Tensor | None


@dataclass
class _Constants:
    """One folded group's weight and bias, kept on the graph, and what they were folded from."""

    weight: torch.Tensor
    bias: torch.Tensor
    sources: tuple[_Source | None, ...]  # weight, conv bias, norm weight, norm bias, mean, var
    eps: float
    seen: list  # the source tensors last folded, and their versions
    versions: list[int]


def _getter(positions: Sequence[int]) -> Callable[[Any], tuple]:
    """A C-speed function of a sequence that returns its items at ``positions`` as a tuple (``itemgetter`` of one
    position returns the item itself)."""
    if len(positions) == 1:
        return lambda args, i=positions[0]: (args[i],)
    return operator.itemgetter(*positions) if positions else lambda args: ()


class Refresher:
    """Note [a batch norm folded into its convolution]: before each call of the compiled graph, every group whose
    source tensors are other objects or at other versions than when it was folded is folded again, into the same
    constants (so compiled code and CUDA graphs that hold them see the new values).

    The check runs once a forward over every group's sources at once (ResNet-50: 53 groups, 265 tensors), in C loops
    (``itemgetter``, ``map``); only when something changed are the groups looked at one by one. Looping over the
    groups in Python cost 91 us a forward of 53 unchanged groups on the development machine's CPU, the one pass 23 us
    (the same loop as benchmarks/probe_fold_host.py's, which has not run on the GPU machine's host since)."""

    def __init__(self, groups: list[_Constants], kept: Sequence[int] | None = None) -> None:
        self.groups = groups
        self.refolds = 0
        # the positions of the arguments the folded graph still takes (Note [the folded graph's dead inputs]);
        # None: all of them
        self.kept = None if kept is None else tuple(kept)
        self._select = None if kept is None else _getter(self.kept)
        # the graph's arguments and constants the groups were folded from, each as one tuple
        sources = [(s, t) for g in groups for s, t in zip(g.sources, g.seen) if s is not None]
        self._take = _getter([s.index for s, _ in sources if s.index is not None])
        self._constants = tuple(s.tensor for s, _ in sources if s.index is None)
        self._remember(tuple(t for s, t in sources if s.index is not None))

    def arguments(self, args: Sequence[Any]) -> list:
        """The arguments of the folded graph, out of Dynamo's graph's ``args``."""
        return list(args) if self._select is None else list(self._select(args))

    def _remember(self, inputs: tuple) -> None:
        self._inputs = inputs
        self._versions = list(map(_VERSION, inputs + self._constants))

    def __call__(self, args: Any) -> None:
        inputs = self._take(args)
        if all(map(operator.is_, inputs, self._inputs)) and list(map(_VERSION, inputs + self._constants)) == \
                self._versions:
            return
        for g in self.groups:
            now = [None if s is None else args[s.index] if s.index is not None else s.tensor for s in g.sources]
            if all(a is b for a, b in zip(now, g.seen)) and \
                    [-1 if t is None else t._version for t in now] == g.versions:
                continue
            with torch.no_grad():
                w, b = fold(*now, g.eps, g.weight.dtype)
                g.weight.copy_(w)
                g.bias.copy_(b)
            g.seen, g.versions = now, [-1 if t is None else t._version for t in now]
            self.refolds += 1
            counters["kforge"]["conv_bn_refolds"] += 1
        self._remember(inputs)


def with_refresh(fn: Callable, refresher: Refresher | None) -> Callable:
    """``fn``, the compiled folded graph, as Dynamo's graph: ``refresher`` run on the arguments first, then ``fn``
    called with the arguments it takes (``Refresher.arguments``), as Dynamo calls it: positionally, or with one list
    where ``fn`` takes its arguments boxed (that list is cleared, as a boxed callee does)."""
    if refresher is None:
        return fn
    boxed = getattr(fn, "_boxed_call", False)

    def run(*args: Any) -> Any:
        if boxed and len(args) == 1 and isinstance(args[0], list):
            refresher(args[0])
            inner = refresher.arguments(args[0])
            args[0].clear()
            return fn(inner)
        refresher(args)
        return fn(*refresher.arguments(args))

    if boxed:
        run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _emit(gm: torch.fx.GraphModule, group: Group, weight: str, bias: str, cudnn: bool) -> torch.fx.Node:
    """The group's nodes as ``folded_call`` computes it, before its tail; returns the last."""
    g, aten = gm.graph, torch.ops.aten
    x, residual, relu = group.args[0], group.args[8], group.args[9]
    stride, padding, dilation, groups = group.args[10:14]
    with g.inserting_before(group.tail):
        w, b = g.get_attr(weight), g.get_attr(bias)
        if cudnn:
            x = g.call_method("contiguous", (x,), {"memory_format": _CL})
            if residual is not None:
                z = g.call_method("contiguous", (residual,), {"memory_format": _CL})
                return g.call_function(aten.cudnn_convolution_add_relu.default,
                                       (x, w, z, 1.0, b, stride, padding, dilation, groups))
            if relu:
                return g.call_function(aten.cudnn_convolution_relu.default,
                                       (x, w, b, stride, padding, dilation, groups))
        out = g.call_function(aten.convolution.default, (x, w, b, stride, padding, dilation, False, [0, 0], groups))
        if residual is not None:
            out = g.call_function(aten.add.Tensor, (out, residual))
        return g.call_function(aten.relu.default, (out,)) if relu else out


def _source(node: Any, gm: torch.fx.GraphModule, inputs: dict[torch.fx.Node, int],
            example_inputs: Sequence[Any]) -> tuple[_Source | None, torch.Tensor | None]:
    """Where ``node``'s tensor comes from at run time, and its value now (None, None for no tensor; raises
    LookupError for a source that is neither an input nor a constant of the graph)."""
    if node is None:
        return None, None
    if node in inputs and isinstance(example_inputs[inputs[node]], torch.Tensor):
        return _Source(inputs[node], None), example_inputs[inputs[node]]
    if node.op == "get_attr":
        t = getattr(gm, node.target, None)
        if isinstance(t, torch.Tensor):
            return _Source(None, t), t
    raise LookupError(f"{node.name} is not an input or a constant of the graph")


def _add_constant(gm: torch.fx.GraphModule, name: str, t: torch.Tensor) -> None:
    """``t`` as a buffer of Dynamo's graph ``gm``. AOTAutograd lifts a Dynamo graph's buffers as static inputs and
    asks each for its Dynamo source (``_param_name_to_source``): a folded constant has none in the user's program, so
    it gets a ``ConstantSource`` of its own name, which nothing guards on (the Refresher keeps it current)."""
    gm.register_buffer(name, t)
    sources = getattr(gm, "_param_name_to_source", None)
    if sources is not None:
        from torch._dynamo.source import ConstantSource

        gm._param_name_to_source = {**sources, name: ConstantSource(f"__kforge_{name}")}  # the copy's own dict


# Bumped when verify_group's checks or TOLERANCE change, so that passes kept under the old checks are not trusted.
VERIFIER_VERSION = 1


@dataclass(frozen=True)
class VerifiedKey:
    """What a kept verdict of ``verify_group`` depends on: the group's signature (shapes, dtypes, device, scalars,
    the tail), the verifier, the torch and cuDNN versions and the device's name."""

    signature: tuple
    verifier: int
    torch_version: str
    cudnn: int | None
    device_name: str

    @classmethod
    def of(cls, group: Group) -> "VerifiedKey":
        device = _value(group.args[0]).device
        cuda = device.type == "cuda"
        return cls(_signature(group), VERIFIER_VERSION, torch.__version__,
                   torch.backends.cudnn.version() if cuda else None,
                   torch.cuda.get_device_name(device) if cuda else device.type)

    def digest(self) -> str:
        return hashlib.sha256(repr(dataclasses.astuple(self)).encode()).hexdigest()

    def debug_lines(self) -> list[str]:
        """One line per field, so two keys can be diffed to see why they differ."""
        return [f"{f.name}: {getattr(self, f.name)!r}" for f in dataclasses.fields(self)]


class Verified:
    """Signatures whose folded groups passed ``verify_group`` on this machine, kept in ``directory`` (the kforge
    cache) so that a warm compile does not run the verifier's cuDNN calls again (``VerifiedKey``). Only passes are
    kept: a refusal is verified again by the next compile. A torn or foreign file is reported and read as empty.
    Without a directory nothing is kept."""

    FILE = "conv_fold_verified.json"

    def __init__(self, directory: Path | None) -> None:
        self.path = Path(directory) / self.FILE if directory is not None else None
        self.keys: set[str] = set()
        if self.path is not None and self.path.exists():
            try:
                self.keys = set(json.loads(self.path.read_text()))
            except (OSError, ValueError, TypeError) as e:
                log.warning("kforge: %s is unreadable (%s: %s); its chains are verified again", self.path,
                            type(e).__name__, e)

    def __contains__(self, key: VerifiedKey) -> bool:
        return key.digest() in self.keys

    def add(self, key: VerifiedKey) -> None:
        self.keys.add(key.digest())
        if self.path is not None:
            atomic_write(self.path, json.dumps(sorted(self.keys)).encode())


def fold_conv_bn(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cache_dir: Path | None = None
                 ) -> tuple[int, list[str], Refresher | None]:
    """Replace each verified group of Dynamo's graph ``gm`` (called with ``example_inputs``) by its folded form, in
    place: the folded weight and bias become buffers of ``gm``. ``cache_dir`` keeps the signatures verified here
    (``Verified``). Returns how many were folded, why the others were not, and the Refresher the compiled graph must
    run before each call (None when nothing folded)."""
    inputs = {n: i for i, n in enumerate(gm.graph.find_nodes(op="placeholder"))}
    verified = Verified(cache_dir)
    verdicts: dict[VerifiedKey, str | None] = {}
    refused: list[str] = []
    constants: list[_Constants] = []
    renamed: dict[torch.fx.Node, torch.fx.Node] = {}  # a folded group's tail -> its last node, for the groups after
    for group in find_groups(gm):
        group.args = tuple(renamed.get(a, a) if isinstance(a, torch.fx.Node) else a for a in group.args)
        try:
            found = [_source(group.args[i], gm, inputs, example_inputs) for i in range(1, 7)]
        except LookupError as e:
            refused.append(f"{group.nodes[0].name}: {e}")
            continue
        key = VerifiedKey.of(group)
        if key not in verdicts and key in verified:
            verdicts[key] = None
        elif key not in verdicts:
            verdicts[key] = verify_group(group, seed=len(verdicts))
            if verdicts[key] is None:
                verdicts[key] = verify_group(group, seed=len(verdicts) + 1)
            if verdicts[key] is None:
                verified.add(key)
        if verdicts[key] is not None:
            refused.append(f"{group.nodes[0].name}: {verdicts[key]}")
            continue
        now = [t for _, t in found]
        x = _value(group.args[0])
        w, b = fold(*now, group.args[7], x.dtype)
        name = f"_kforge_fold_{len(constants)}"
        for suffix, t in (("_w", w), ("_b", b)):
            _add_constant(gm, name + suffix, t)
        constants.append(_Constants(w, b, tuple(src for src, _ in found), group.args[7], now,
                                    [-1 if t is None else t._version for t in now]))
        new = _emit(gm, group, f"{name}_w", f"{name}_b", cudnn_fusable(x.device))
        new.meta.update(group.tail.meta)  # shape and dtype for the groups after it (the strides may differ)
        group.tail.replace_all_uses_with(new)
        renamed[group.tail] = new
        for node in reversed(group.nodes):
            gm.graph.erase_node(node)
    kept = None
    if constants:
        used = {s.index for g in constants for s in g.sources if s is not None}
        kept = _prune_inputs(gm, [n for n, i in inputs.items() if i in used])
        gm.graph.lint()
        gm.recompile()
    for why in refused:
        log.info("kforge: conv + batch norm not folded (%s)", why)
    return len(constants), refused, Refresher(constants, kept) if constants else None


def _prune_inputs(gm: torch.fx.GraphModule, sources: list[torch.fx.Node]) -> list[int] | None:
    """Note [the folded graph's dead inputs]
    Dynamo hands a backend a graph without unused inputs; a fold leaves the folded chains' convolution weights and
    norm parameters and statistics unused (ResNet-50: 265 of 373). Every layer under the compiled graph pays per
    argument (AOTAutograd's runtime wrappers, Inductor's checks of each input's size and strides), so the sources
    nothing uses any more are taken out of the graph's inputs: the Refresher still reads them from Dynamo's
    arguments, and ``with_refresh`` passes the compiled graph the others. Returns the positions kept (None: all)."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    dead = {n for n in sources if not n.users}
    if not dead:
        return None
    for n in dead:
        gm.graph.erase_node(n)
    return [i for i, n in enumerate(placeholders) if n not in dead]
