"""Which ATen ops are worth a kernel: op families as data, not scattered ifs.

A node is a candidate when its overload belongs to an enabled family. Families ``matmul`` and ``conv`` are off by
default (cuBLAS and cuDNN are hard to beat); opt in with ``families="matmul,conv"``. One convolution is taken without
opting in: the 1-D depthwise one (``depthwise_conv1d``), which ATen runs with a generic kernel. Views, metadata and
RNG ops are never candidates: they are listed in DENIED so that a test pins the decision. Leaf module: imports
nothing from kforge.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class OpFamily:
    name: str
    ops: tuple[str, ...]  # overload names as str(OpOverload), e.g. "aten._softmax.default"
    enabled_by_default: bool = True
    description: str = ""


FAMILIES: tuple[OpFamily, ...] = (
    OpFamily(
        "softmax",
        ("aten._softmax.default", "aten._log_softmax.default", "aten._safe_softmax.default"),
        description="softmax / log_softmax along one dim",
    ),
    OpFamily(
        "reduction",
        ("aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default"),
        description="sum / mean / amax / amin over dims (mean over H,W is how a 1x1 adaptive pool is spelled)",
    ),
    OpFamily(
        "norm",
        (
            "aten.native_layer_norm.default",
            "aten.native_group_norm.default",
            "aten._native_batch_norm_legit_no_training.default",
            "aten._fused_rms_norm.default",
        ),
        description="layer / group / inference batch / rms normalisation",
    ),
    OpFamily(
        "pool",
        (
            "aten._adaptive_avg_pool2d.default",
            "aten.avg_pool2d.default",
            "aten.max_pool2d_with_indices.default",
        ),
        description="2d pooling",
    ),
    OpFamily(
        "elementwise",
        (
            "aten.gelu.default",
            "aten.silu.default",
            "aten.relu.default",
            "aten.sigmoid.default",
            "aten.tanh.default",
            "aten.add.Tensor",
            "aten.mul.Tensor",
            "aten.sub.Tensor",
            "aten.div.Tensor",
            "aten._to_copy.default",
        ),
        description="pointwise activations, arithmetic and casts",
    ),
    OpFamily("matmul", ("aten.mm.default", "aten.addmm.default", "aten.bmm.default"), False, "cuBLAS matmuls"),
    OpFamily("conv", ("aten.convolution.default",), False, "cuDNN convolutions"),
)

OPT_IN_FAMILIES: frozenset[str] = frozenset(f.name for f in FAMILIES if not f.enabled_by_default)

# Never candidates, whatever is opted in. Kept as data so a test can pin the list.
DENIED: frozenset[str] = frozenset(
    {
        "aten.view.default",
        "aten._unsafe_view.default",
        "aten.reshape.default",
        "aten.permute.default",
        "aten.transpose.int",
        "aten.t.default",
        "aten.expand.default",
        "aten.slice.Tensor",
        "aten.select.int",
        "aten.unsqueeze.default",
        "aten.squeeze.dim",
        "aten.as_strided.default",
        "aten.clone.default",
        "aten.detach.default",
        "aten.alias.default",
        "aten.sym_size.int",
        "aten.empty.memory_format",
        "aten.rand.default",
        "aten.randn.default",
        "aten.bernoulli.p",
        "aten.native_dropout.default",
        "aten.rand_like.default",
        "aten.randn_like.default",
    }
)

_FAMILY_OF: dict[str, OpFamily] = {op: fam for fam in FAMILIES for op in fam.ops}

# Note [what Inductor keeps]
# Inductor fuses pointwise ops, and inference batch norm (a per-channel pointwise op), into their neighbours;
# replacing one of them splits a fused kernel in two, however fast the replacement is alone. Measured on the H200
# (2026-11-30, benchmarks/results/h200/models.md): ResNet-50 fp16 batch 1 with every searched op replaced inside
# Inductor ran 7.83 ms against Inductor's own 2.21 ms. So with inner="inductor" these ops stay with Inductor.
INDUCTOR_KEEPS: frozenset[str] = frozenset(
    [op for f in FAMILIES if f.name == "elementwise" for op in f.ops]
    + ["aten._native_batch_norm_legit_no_training.default"]
)


def family_of(op_name: str) -> OpFamily | None:
    """The family an overload belongs to, or None."""
    return _FAMILY_OF.get(op_name)


CONVOLUTION = "aten.convolution.default"


def depthwise_conv1d(weight_shape: Sequence[int], args: Mapping[str, Any]) -> bool:
    """Note [the one convolution kforge takes by default]
    A 1-D depthwise convolution (a [C, 1, K] weight, ``groups == C``) with unit stride and dilation. Qwen 3.5's
    linear-attention layers run one (the causal conv1d over q/k/v, when the fused kernel is not installed), and ATen
    runs it with a generic depthwise kernel: 178 us per call for [1, 8192, 2048] bf16 on the H200, where the bytes
    allow 16 us (benchmarks/results/h200/kernels_qwen35_moe_inductor.txt). Other convolutions stay behind the
    ``conv`` opt-in. ``args`` are ``aten.convolution``'s by schema name (a node's or a card's scalars), the weight
    given as its shape; ``is_candidate`` takes the answer."""
    try:
        groups = int(args["groups"])
        return (len(weight_shape) == 3 and weight_shape[1] == 1 and weight_shape[0] == groups and groups > 1
                and list(args["stride"]) == [1] and list(args["dilation"]) == [1] and not args["transposed"]
                and list(args["output_padding"]) == [0])
    except (KeyError, TypeError, ValueError):  # missing, symbolic or malformed arguments
        return False


def is_candidate(op_name: str, opted_in: frozenset[str] | tuple[str, ...] = (), inner: str = "eager",
                 depthwise: bool = False) -> bool:
    """True when ``op_name`` (``str(OpOverload)``) belongs to an enabled family and is not denied; with
    ``inner="inductor"``, ops Inductor fuses into its neighbours are not candidates (Note [what Inductor keeps]).
    ``depthwise``: the call is a convolution that ``depthwise_conv1d`` takes without the ``conv`` opt-in."""
    if op_name in DENIED or (inner == "inductor" and op_name in INDUCTOR_KEEPS):
        return False
    fam = _FAMILY_OF.get(op_name)
    if fam is None:
        return False
    return fam.enabled_by_default or fam.name in opted_in or (depthwise and op_name == CONVOLUTION)
