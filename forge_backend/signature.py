"""Operator signatures: a canonical, versioned description of one operator instance, and its cache key.

Note [what goes into a signature]
Everything that can change which kernel is right or fastest: the ATen overload; for each argument, by its schema
name, either a tensor (shape, stride, dtype, storage-offset alignment class) or a scalar value; which outputs the
graph uses (``native_group_norm`` has three, inference graphs read one); the GPU architecture; the kernel-contract
version; and this module's own SIGNATURE_VERSION. The key is sha256 of the canonical JSON. Base-pointer alignment
is *not* in the key: the signature cannot see it, so it is checked at call time (see runtime.launch).
"""
from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from .contract import CONTRACT_VERSION
from .errors import UnsupportedNode

SIGNATURE_VERSION = 1
_ALIGN_CLASSES = (16, 8, 4, 2, 1)


def align_class(byte_offset: int) -> int:
    """Largest power-of-two alignment class (<= 16 bytes) that divides a byte offset."""
    for a in _ALIGN_CLASSES:
        if byte_offset % a == 0:
            return a
    return 1


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def to_dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype name {name!r}")
    return dt


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    offset_align: int = 16  # alignment class of storage_offset * itemsize, in bytes

    @classmethod
    def of(cls, t: torch.Tensor) -> "TensorSpec":
        for v in (*t.shape, *t.stride(), t.storage_offset()):
            if not isinstance(v, int):
                raise UnsupportedNode(f"symbolic shape or stride {tuple(t.shape)} (dynamic shapes are left to PyTorch)")
        return cls(
            tuple(int(s) for s in t.shape),
            tuple(int(s) for s in t.stride()),
            dtype_name(t.dtype),
            align_class(int(t.storage_offset()) * t.element_size()),
        )

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def layout_key(self) -> tuple[tuple[int, int], ...]:
        """(size, stride) of every dim of size > 1: what decides where each element lives in memory."""
        return _layout_key(self.shape, self.stride)

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=to_dtype(self.dtype)).element_size()

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def is_contiguous(self) -> bool:
        return self.stride == _contiguous_strides(self.shape)

    def is_channels_last(self) -> bool:
        if len(self.shape) != 4:
            return False
        n, c, h, w = self.shape
        return self.stride == (h * w * c, 1, w * c, c)

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "stride": list(self.stride), "dtype": self.dtype, "offset_align": self.offset_align}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TensorSpec":
        return cls(tuple(d["shape"]), tuple(d["stride"]), d["dtype"], int(d.get("offset_align", 16)))


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class ArgSpec:
    """One schema argument: a tensor (``tensor`` set) or a JSON-able scalar value (``value``)."""

    name: str
    tensor: TensorSpec | None = None
    value: Any = None

    def to_json(self) -> dict[str, Any]:
        if self.tensor is not None:
            return {"name": self.name, "tensor": self.tensor.to_json()}
        return {"name": self.name, "value": self.value}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ArgSpec":
        t = d.get("tensor")
        return cls(d["name"], TensorSpec.from_json(t) if t else None, _freeze(d.get("value")))


@dataclass(frozen=True)
class OpSignature:
    op: str
    args: tuple[ArgSpec, ...]
    outputs: tuple[TensorSpec, ...]
    used_outputs: tuple[int, ...]
    arch: str
    contract_version: int = CONTRACT_VERSION
    version: int = SIGNATURE_VERSION
    _key: str = field(default="", compare=False, repr=False)

    def canonical(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "contract_version": self.contract_version,
            "op": self.op,
            "args": [a.to_json() for a in self.args],
            "outputs": [o.to_json() for o in self.outputs],
            "used_outputs": list(self.used_outputs),
            "arch": self.arch,
        }

    def key(self) -> str:
        if not self._key:
            blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_key", hashlib.sha256(blob.encode()).hexdigest())
        return self._key

    def debug_lines(self) -> list[str]:
        """One line per field, so two signatures can be diffed to see why their keys differ."""
        c = self.canonical()
        lines = [f"{k}: {json.dumps(c[k], sort_keys=True)}" for k in ("version", "contract_version", "op", "arch")]
        lines += [f"arg {a['name']}: {json.dumps(a, sort_keys=True)}" for a in c["args"]]
        lines += [f"output {i}: {json.dumps(o, sort_keys=True)}" for i, o in enumerate(c["outputs"])]
        lines.append(f"used_outputs: {c['used_outputs']}")
        return lines

    def to_json(self) -> dict[str, Any]:
        return self.canonical()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OpSignature":
        return cls(
            op=d["op"],
            args=tuple(ArgSpec.from_json(a) for a in d["args"]),
            outputs=tuple(TensorSpec.from_json(o) for o in d["outputs"]),
            used_outputs=tuple(d["used_outputs"]),
            arch=d["arch"],
            contract_version=int(d["contract_version"]),
            version=int(d["version"]),
        )

    # convenient views --------------------------------------------------------------------------------------------
    def tensor_args(self) -> list[tuple[str, TensorSpec]]:
        return [(a.name, a.tensor) for a in self.args if a.tensor is not None]

    def scalar_args(self) -> dict[str, Any]:
        return {a.name: a.value for a in self.args if a.tensor is None}

    def arg(self, name: str) -> ArgSpec:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(f"{self.op} has no argument {name!r}; it has {[a.name for a in self.args]}")


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


def _scalar_value(v: Any) -> Any:
    """A JSON-able canonical form of a non-tensor argument."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return tuple(_scalar_value(x) for x in v)
    if isinstance(v, torch.SymInt) or isinstance(v, torch.SymFloat):
        raise UnsupportedNode(f"symbolic scalar {v} (dynamic shapes are left to PyTorch)")
    raise UnsupportedNode(f"argument of type {type(v).__name__} is not supported in a signature")


def arch_of(device: torch.device) -> str:
    """``sm_90`` for an H200/H100, ``cpu`` for CPU tensors (used only by CPU tests)."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    return device.type


def used_outputs_of(node: torch.fx.Node, n_outputs: int) -> tuple[int, ...]:
    """The outputs something reads (Note [an output nothing reads is not used])."""
    if n_outputs == 1:
        return (0,)
    used: set[int] = set()
    for user in node.users:
        if user.op == "call_function" and user.target is operator.getitem and isinstance(user.args[1], int):
            if user.users:
                used.add(user.args[1])
        else:
            return tuple(range(n_outputs))  # consumed whole: every output counts
    return tuple(sorted(used))


# Note [an output nothing reads is not used]
# The eager path traces ATen without dead-code elimination, so a multi-output op keeps a getitem for an output
# nothing reads (group norm's mean and rstd in inference); AOTAutograd's graph, which the Inductor path sees, has
# dropped it. Counting such a getitem as a use gave one op two signatures: the VAE's group norms were searched once
# per path, and a prewarm (which captures as the eager path does) served the Inductor path none of them (thirty-second
# session: its seven group norms missed after a prewarm of the model). A getitem with no users is not a use; the
# rewrite erases it with the node it read.


def _meta_val(x: Any) -> Any:
    if isinstance(x, torch.fx.Node):
        if "val" not in x.meta:
            raise UnsupportedNode(f"node {x.name} has no meta value")
        return x.meta["val"]
    if isinstance(x, (list, tuple)) and any(isinstance(i, torch.fx.Node) for i in x):
        raise UnsupportedNode("lists of tensors are not supported")
    return x


def node_arguments(node: torch.fx.Node) -> list[tuple[str, Any]]:
    """(schema name, value) for each schema argument of an OpOverload node, defaults filled in."""
    schema = node.target._schema  # type: ignore[union-attr]
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(node.args) and not a.kwarg_only:
            v = node.args[i]
        elif a.name in node.kwargs:
            v = node.kwargs[a.name]
        elif a.has_default_value():
            v = a.default_value
        else:
            v = None
        out.append((a.name, v))
    return out


def signature_of(node: torch.fx.Node, arch: str | None = None) -> OpSignature:
    """Describe a call_function node on an OpOverload. Raises UnsupportedNode when it cannot be described."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        raise UnsupportedNode(f"node {node.name} is not an ATen operator call")
    args: list[ArgSpec] = []
    device = None
    for name, raw in node_arguments(node):
        v = _meta_val(raw)
        if isinstance(v, torch.Tensor):
            args.append(ArgSpec(name, TensorSpec.of(v)))
            device = device or v.device
        else:
            args.append(ArgSpec(name, value=_scalar_value(v)))
    val = node.meta.get("val")
    outs = val if isinstance(val, (list, tuple)) else (val,)
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise UnsupportedNode(f"node {node.name} ({node.target}) has non-tensor outputs")
    if device is None:
        raise UnsupportedNode(f"node {node.name} has no tensor inputs")
    return OpSignature(
        op=str(node.target),
        args=tuple(args),
        outputs=tuple(TensorSpec.of(o) for o in outs),
        used_outputs=used_outputs_of(node, len(outs)),
        arch=arch or arch_of(device),
    )


def layout_key_of(t: torch.Tensor) -> tuple[tuple[int, int], ...]:
    """:meth:`TensorSpec.layout_key` of a live tensor (the launcher compares the two before every launch)."""
    return _layout_key(t.shape, t.stride())


def _layout_key(shape: Sequence[int], stride: Sequence[int]) -> tuple[tuple[int, int], ...]:
    return tuple((sz, st) for sz, st in zip(shape, stride) if sz != 1)
