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

By wall time it loses, so it is off by default (``fold_conv_bn``). examples/resnet50.py fp16_b32 with every one of the
53 chains folded through Inductor: 6.38 ms a forward against Inductor's 3.42 (same run, results/h200/
example_session33_resnet_fold.log). That host spent about 45 us of Python and cuDNN host work on each convolution
call, Inductor's and ours alike, so ResNet-50 is host-bound there (Inductor: 3.4 ms of wall time for 1.5 of GPU
work), and this op added about 50 us a call on top of its cuDNN call (benchmarks/probe_fold_host.py: the custom op
92-104 us a call against cudnn_convolution_relu's 49 and aten.convolution's 45; the fold cache's lookup 5). What
would make it pay: the folded weights kept as graph constants refreshed once a forward (no Python per call), an op
registration with less dispatch than ``torch.library.custom_op``, and CUDA graphs (``mode="reduce-overhead"``), where
the GPU time is the wall time. Under CUDA graphs it does not run yet: Inductor's CUDA-graph trees warm up inside
their memory pool, and a fold kept from there is an allocation the trees refuse (the GPU test caught it), so a
compile with CUDA graphs on folds nothing.

The pass runs on Dynamo's graph, before any trace, on graphs that need no backward: a ``conv2d`` whose only user is a
``batch_norm`` with ``training=False``, then optionally a ReLU, or an add of another tensor of the same shape and a
ReLU (ResNet's bottleneck end), each link the only user of the one before, become one ``kforge::conv_bn_act`` call.
Both paths see the op as opaque: ``inner="eager"`` calls it, Inductor calls it as an extern kernel. Each group's
signature (shapes, dtypes, stride, padding, dilation, groups, the tail) is verified once per compile on fresh random
inputs and random norm statistics against PyTorch's unfused ops (``verify_group``); a group that fails or raises stays
unfused. On with ``fold_conv_bn=True``.

Folding costs a few small kernels, so the folded weight and bias are kept (``_Folds``) while the six tensors they come
from are the same objects at the same versions (``Tensor._version``, which every in-place update bumps): a model
whose weights are updated in place gets them folded again. An update through ``.data`` bypasses the version counter
and is not seen, as with any cache keyed on versions. A fold computed while a CUDA graph is being captured is not
kept (its memory belongs to the graph's pool). Not on CUDA (the CPU smoke tests), the op computes the same folded
convolution with PyTorch's plain ops, so the rewrite is exercised everywhere.

``_FOLDS`` is process-wide for the reason REGISTRY is (registry.py): torch's dispatcher calls the op by name, so the
state it keeps must be reachable from the op.
"""
from __future__ import annotations

import logging
import math
import operator
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx
import torch.nn.functional as F

log = logging.getLogger("kforge")

_CL = torch.channels_last
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# max |out - ref| / max |ref| a folded group may differ from PyTorch's unfused ops by (fp32 convolutions use TF32 in
# cuDNN by default, as PyTorch's own do)
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 4e-2, torch.float32: 1e-2}


@dataclass
class _Fold:
    refs: tuple
    versions: tuple
    weight: torch.Tensor
    bias: torch.Tensor


class _Folds:
    """Folded (weight, bias) per group of source tensors, kept while they are the same objects at the same versions;
    at most ``size`` entries, least recently used dropped first."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self.entries: OrderedDict[tuple, _Fold] = OrderedDict()
        self.computed = 0

    def get(self, sources: tuple, eps: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        key = tuple(id(t) for t in sources) + (eps, dtype)
        versions = tuple(-1 if t is None else t._version for t in sources)
        hit = self.entries.get(key)
        if hit is not None and hit.versions == versions and all(
                (r is None and t is None) or (r is not None and r() is t) for r, t in zip(hit.refs, sources)):
            self.entries.move_to_end(key)
            return hit.weight, hit.bias
        weight, bias = fold(*sources, eps, dtype)
        self.computed += 1
        if not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            refs = tuple(None if t is None else weakref.ref(t) for t in sources)
            self.entries[key] = _Fold(refs, versions, weight, bias)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return weight, bias


_FOLDS = _Folds()


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


def _channels_last(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device, memory_format=_CL)


def _cl_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides ``torch.empty(shape, memory_format=torch.channels_last)`` has, without allocating it."""
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def _cudnn(x: torch.Tensor) -> bool:
    return x.is_cuda and torch.backends.cudnn.is_available() and torch.backends.cudnn.enabled


@torch.library.custom_op("kforge::conv_bn_act", mutates_args=())
def conv_bn_act(x: torch.Tensor, weight: torch.Tensor, conv_bias: Optional[torch.Tensor],
                bn_weight: Optional[torch.Tensor], bn_bias: Optional[torch.Tensor], running_mean: torch.Tensor,
                running_var: torch.Tensor, eps: float, residual: Optional[torch.Tensor], relu: bool,
                stride: list[int], padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    """relu?(conv(x, weight, conv_bias) -> batch_norm (inference) [+ residual]) in channels-last: Note [a batch norm
    folded into its convolution]."""
    w, b = _FOLDS.get((weight, conv_bias, bn_weight, bn_bias, running_mean, running_var), eps, x.dtype)
    x = x.contiguous(memory_format=_CL)
    if residual is not None and not relu:
        raise ValueError("kforge::conv_bn_act takes a residual only with the ReLU after it")
    if _cudnn(x) and residual is not None:
        out = torch.ops.aten.cudnn_convolution_add_relu(x, w, residual.contiguous(memory_format=_CL), 1.0, b,
                                                        stride, padding, dilation, groups)
    elif _cudnn(x) and relu:
        out = torch.ops.aten.cudnn_convolution_relu(x, w, b, stride, padding, dilation, groups)
    else:
        out = torch.ops.aten.convolution(x, w, b, stride, padding, dilation, False, [0, 0], groups)
        if residual is not None:
            out = out + residual
        if relu:
            out = torch.relu(out)
    if out.stride() != _cl_strides(tuple(out.shape)):  # the exact strides the fake promised (Inductor checks them)
        out = _channels_last(tuple(out.shape), out.dtype, out.device).copy_(out)
    return out


@conv_bn_act.register_fake
def _(x, weight, conv_bias, bn_weight, bn_bias, running_mean, running_var, eps, residual, relu, stride, padding,
      dilation, groups):
    return _channels_last(_out_shape(x, weight, stride, padding, dilation), x.dtype, x.device)


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
    """One foldable chain of Dynamo's graph and the arguments of its ``kforge::conv_bn_act`` call."""

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
    """None if the folded op matches PyTorch's unfused ops on fresh random inputs and norm statistics (twice, the
    second run agreeing with the first, the inputs unchanged after); else why not."""
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
    try:
        with torch.no_grad():
            first = conv_bn_act(*args)
            second = conv_bn_act(*args)
            ref = reference(*args)
    except Exception as e:  # a cuDNN configuration it refuses: the group stays unfused
        return f"{type(e).__name__}: {str(e)[:200]}"
    finally:
        _FOLDS.entries.clear()  # the random tensors' folds: never used again
    if not all(a is b or torch.equal(a, b) for a, b in zip(args, kept) if isinstance(a, torch.Tensor)):
        return "an input changed"
    if first.shape != ref.shape or first.stride() != _cl_strides(tuple(ref.shape)):
        return f"output {tuple(first.shape)} strides {first.stride()} against {tuple(ref.shape)} channels-last"
    if not torch.isfinite(first).all():
        return "non-finite output"
    err = float((first.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6))
    if err > TOLERANCE[x.dtype]:
        return f"max_rel_err {err:.2e} over {TOLERANCE[x.dtype]:.0e}"
    if not torch.allclose(first, second, rtol=0, atol=0) and float((first - second).abs().max()) > \
            TOLERANCE[x.dtype] * float(ref.abs().max()):
        return "a second run disagrees"
    return None


def fold_conv_bn(gm: torch.fx.GraphModule) -> tuple[int, list[str]]:
    """Replace each verified group of Dynamo's graph ``gm`` with one ``kforge::conv_bn_act`` call, in place.
    Returns how many were folded and why the others were not."""
    verdicts: dict[tuple, str | None] = {}
    folded, refused = 0, []
    renamed: dict[torch.fx.Node, torch.fx.Node] = {}  # a folded group's tail -> its call, for the groups after it
    for group in find_groups(gm):
        group.args = tuple(renamed.get(a, a) if isinstance(a, torch.fx.Node) else a for a in group.args)
        sig = _signature(group)
        if sig not in verdicts:
            verdicts[sig] = verify_group(group, seed=len(verdicts))
            if verdicts[sig] is None:
                verdicts[sig] = verify_group(group, seed=len(verdicts) + 1)
        why = verdicts[sig]
        if why is not None:
            refused.append(f"{group.nodes[0].name}: {why}")
            continue
        with gm.graph.inserting_before(group.tail):
            new = gm.graph.call_function(torch.ops.kforge.conv_bn_act.default, group.args)
        new.meta.update(group.tail.meta)
        group.tail.replace_all_uses_with(new)
        renamed[group.tail] = new
        for node in reversed(group.nodes):
            gm.graph.erase_node(node)
        folded += 1
    if folded:
        gm.graph.lint()
        gm.recompile()
    for why in refused:
        log.info("kforge: conv + batch norm not folded (%s)", why)
    return folded, refused
