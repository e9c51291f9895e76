"""Operator cards: what proposers (templates, LLM) and the UI read about one operator signature.

A card states in plain language what the op computes, the reference call, every tensor's shape/stride/dtype, the
named sizes a launch plan may use, the minimum bytes moved and FLOPs (see roofline.py), the roofline floor on a
given bandwidth, how often the signature occurs in the graph, and measured baselines once they exist.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import roofline
from .expression import FUSED_OP, NORM_OP, SOFTMAX_OP, aten_text, parse
from .reference import norm_base
from .selection import family_of
from .signature import OpSignature, TensorSpec

_SEMANTICS: dict[str, str] = {
    "aten._softmax.default": "softmax of `self` along dim {dim}: exp(x - max) / sum(exp(x - max)); "
                             "half_to_float={half_to_float}",
    "aten._log_softmax.default": "log_softmax of `self` along dim {dim}: x - max - log(sum(exp(x - max)))",
    "aten._safe_softmax.default": "softmax along dim {dim} that returns 0 for rows that are all -inf",
    "aten.native_layer_norm.default": "layer norm over the last {ndims} dim(s) ({cols} values per row, {rows} rows): "
                                      "(x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + eps), eps={eps}; "
                                      "outputs (out, mean, rstd)",
    "aten._fused_rms_norm.default": "RMS norm over the last {ndims} dim(s): x * rsqrt(mean(x^2) + eps) * weight; "
                                    "outputs (out, rstd)",
    "aten.native_group_norm.default": "group norm: {C} channels of {N} images split into {group} groups; each group "
                                      "({group_size} values) is normalised by its mean and rstd = 1/sqrt(var + eps), "
                                      "eps={eps}, then scaled per channel by weight and shifted by bias; "
                                      "outputs (out [N,C,HxW], mean [N,G], rstd [N,G])",
    "aten._native_batch_norm_legit_no_training.default": "inference batch norm: (x - running_mean[c]) / "
                                                         "sqrt(running_var[c] + eps) * weight[c] + bias[c], eps={eps}",
    "aten.mean.dim": "mean of `self` over dims {dim} (keepdim={keepdim}); over the last two dims of an NCHW tensor "
                     "this is a global average pool",
    "aten.sum.dim_IntList": "sum of `self` over dims {dim} (keepdim={keepdim})",
    "aten.amax.default": "maximum of `self` over dims {dim} (keepdim={keepdim})",
    "aten.amin.default": "minimum of `self` over dims {dim} (keepdim={keepdim})",
    "aten._adaptive_avg_pool2d.default": "adaptive average pool of an [N,C,H,W] tensor to output size {output_size}",
    "aten.avg_pool2d.default": "average pool 2d, kernel {kernel_size}, stride {stride}, padding {padding}",
    "aten.max_pool2d_with_indices.default": "max pool 2d, kernel {kernel_size}, stride {stride}, padding {padding}; "
                                            "outputs (values, indices)",
    "aten.gelu.default": "elementwise GELU (approximate={approximate})",
    "aten.silu.default": "elementwise SiLU: x * sigmoid(x)",
    "aten.relu.default": "elementwise max(x, 0)",
    "aten.sigmoid.default": "elementwise 1 / (1 + exp(-x))",
    "aten.tanh.default": "elementwise tanh",
    "aten.add.Tensor": "elementwise self + alpha * other (broadcasting), alpha={alpha}",
    "aten.sub.Tensor": "elementwise self - alpha * other (broadcasting), alpha={alpha}",
    "aten.mul.Tensor": "elementwise self * other (broadcasting)",
    "aten.div.Tensor": "elementwise self / other (broadcasting)",
    "aten._to_copy.default": "copy with a dtype/layout change (dtype={dtype})",
    FUSED_OP: "fused pointwise expression: {expr}; over same-shape contiguous inputs x0..xk, one output element per "
              "input element; each op computes in fp32 and PyTorch rounds its result to the op's dtype (type "
              "promotion; to_<dtype> casts)",
    NORM_OP: "{norm} over the last dim ({cols} columns, {rows} rows), then the expression {expr} whose input "
             "x{norm_out} is the norm's output and whose other inputs x<i> broadcast to it (never along the last "
             "dim); the expression computes like a fused pointwise one",
    SOFTMAX_OP: "softmax over the last dim (of {cols} columns, {rows} rows) of the expression {expr} over inputs "
                "x0..xk, which broadcast to the output's shape (never along the last dim); the expression computes "
                "like a fused pointwise one, the softmax in fp32, and the result is cast to the output's dtype",
}


@dataclass(frozen=True)
class NamedTensor:
    name: str
    spec: TensorSpec

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, **self.spec.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "NamedTensor":
        return cls(d["name"], TensorSpec.from_json(d))


@dataclass
class OperatorCard:
    key: str
    op: str
    family: str
    semantics: str
    reference: str
    inputs: list[NamedTensor]
    scalars: dict[str, Any]
    outputs: list[NamedTensor]  # the outputs the graph uses, named out<i> after the op's output index
    sizes: dict[str, int]
    floats: dict[str, float]
    bytes_min: int
    flops: int
    arch: str
    signature: dict[str, Any]
    occurrences: int = 1
    baselines_us: dict[str, float] = field(default_factory=dict)  # "eager", "inductor", measured device time
    time_share: float | None = None  # share of the model's GPU time, from a profile

    def floor_us(self, bandwidth_gbps: float) -> float:
        """Minimum bytes over a (measured) bandwidth, in microseconds."""
        return self.bytes_min / (bandwidth_gbps * 1e3)

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["inputs"] = [t.to_json() for t in self.inputs]
        d["outputs"] = [t.to_json() for t in self.outputs]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OperatorCard":
        d = dict(d)
        d["inputs"] = [NamedTensor.from_json(t) for t in d["inputs"]]
        d["outputs"] = [NamedTensor.from_json(t) for t in d["outputs"]]
        return cls(**d)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True)

    def signature_obj(self) -> OpSignature:
        return OpSignature.from_json(self.signature)

    def render(self, bandwidth_gbps: float | None = None) -> str:
        """A readable, complete text form (used by `kforge cards` and the LLM prompt)."""
        lines = [f"op: {self.op}  (family {self.family}, key {self.key[:16]}, arch {self.arch}, "
                 f"occurs {self.occurrences}x)",
                 f"computes: {self.semantics}",
                 f"reference: {self.reference}"]
        for t in self.inputs:
            lines.append(f"input  {t.name}: {t.spec.dtype}{list(t.spec.shape)} stride {list(t.spec.stride)}")
        for t in self.outputs:
            lines.append(f"output {t.name}: {t.spec.dtype}{list(t.spec.shape)} stride {list(t.spec.stride)}")
        if self.scalars:
            lines.append("scalars: " + ", ".join(f"{k}={v}" for k, v in self.scalars.items()))
        lines.append("named sizes: " + ", ".join(f"{k}={v}" for k, v in self.sizes.items()))
        lines.append(f"min bytes moved: {self.bytes_min:,} ({self.bytes_min / 2**20:.2f} MiB); FLOPs: {self.flops:,}")
        if bandwidth_gbps:
            lines.append(f"roofline floor: {self.floor_us(bandwidth_gbps):.2f} us at {bandwidth_gbps:.0f} GB/s")
        for k, v in self.baselines_us.items():
            lines.append(f"baseline {k}: {v:.2f} us")
        return "\n".join(lines)


def inputs_text(card: dict[str, Any], limit: int = 3) -> str:
    """A card's inputs, from its JSON form, as ``dtype[shape]``, comma separated: the first ``limit``, then how
    many more (`kforge ui`, `kforge cache queue`)."""
    ins = card.get("inputs") or []
    parts = [f"{t.get('dtype', '?')}{list(t.get('shape', []))}" for t in ins[:limit]]
    return ", ".join(parts + ([f"+{len(ins) - limit} more"] if len(ins) > limit else []))


def reference_call(sig: OpSignature) -> str:
    if sig.op == FUSED_OP:
        return aten_text(parse(sig.scalar_args()["expr"]))
    if sig.op == NORM_OP:
        s = sig.scalar_args()
        head = f"input = {aten_text(parse(s['prologue']))} (over p0..pm; also output 1); " if "prologue" in s else ""
        return f"{head}x{s['norm_out']} = {reference_call(norm_base(sig))}[0]; {aten_text(parse(s['expr']))}"
    if sig.op == SOFTMAX_OP:
        return (f"torch.ops.aten._softmax.default({aten_text(parse(sig.scalar_args()['expr']))}, -1, False)"
                f".to(torch.{sig.outputs[0].dtype})")
    parts = []
    for a in sig.args:
        parts.append(f"{a.name}" if a.tensor is not None else f"{a.name}={a.value!r}")
    return f"torch.ops.{sig.op}({', '.join(parts)})"


def build_card(sig: OpSignature, occurrences: int = 1) -> OperatorCard:
    fam = family_of(sig.op)
    family = "elementwise" if sig.op == FUSED_OP else "softmax" if sig.op == SOFTMAX_OP else \
        "norm" if sig.op == NORM_OP else fam.name if fam else "other"
    inputs = [NamedTensor(name, spec) for name, spec in sig.tensor_args()]
    outputs = [NamedTensor(f"out{i}", sig.outputs[i]) for i in sig.used_outputs]
    scalars = sig.scalar_args()
    sizes, floats = named_sizes(sig)
    fmt = {**{k: v for k, v in scalars.items()}, **sizes}
    template = _SEMANTICS.get(sig.op, f"{sig.op} (see the ATen schema)")
    try:
        semantics = template.format(**fmt)
    except (KeyError, IndexError):
        semantics = template
    if sig.op == NORM_OP and "prologue" in scalars:  # Note [a norm takes the residual add before it]
        semantics = (f"the norm's input is the expression {scalars['prologue']} over inputs p0..pm (which broadcast "
                     f"to it), computed like a fused pointwise one and also returned as output 1; ") + semantics
    return OperatorCard(
        key=sig.key(),
        op=sig.op,
        family=family,
        semantics=semantics,
        reference=reference_call(sig),
        inputs=inputs,
        scalars={k: (list(v) if isinstance(v, tuple) else v) for k, v in scalars.items()},
        outputs=outputs,
        sizes=sizes,
        floats=floats,
        bytes_min=roofline.min_bytes(sig),
        flops=roofline.flops(sig),
        arch=sig.arch,
        signature=sig.canonical(),
        occurrences=occurrences,
    )


def named_sizes(sig: OpSignature) -> tuple[dict[str, int], dict[str, float]]:
    """Sizes a launch plan may name: tensor dims (``self_d0``), numels, int scalars, and per-op derived sizes."""
    sizes: dict[str, int] = {}
    floats: dict[str, float] = {}
    for name, spec in sig.tensor_args():
        for i, s in enumerate(spec.shape):
            sizes[f"{name}_d{i}"] = s
        sizes[f"{name}_numel"] = spec.numel
    for name, v in sig.scalar_args().items():
        if isinstance(v, bool):
            sizes[name] = int(v)
        elif isinstance(v, int):
            sizes[name] = v
        elif isinstance(v, float):
            floats[name] = v
    sizes["out_numel"] = sig.outputs[0].numel
    sizes.update(roofline.derived_sizes(sig))
    return sizes, floats


def cards_for_graph(signatures: list[OpSignature]) -> list[OperatorCard]:
    """One card per distinct key, with its occurrence count, in first-seen order."""
    counts: dict[str, int] = {}
    first: dict[str, OpSignature] = {}
    for s in signatures:
        counts[s.key()] = counts.get(s.key(), 0) + 1
        first.setdefault(s.key(), s)
    return [build_card(s, counts[k]) for k, s in first.items()]
