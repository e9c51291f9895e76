"""Note [what replacing a node costs inside Inductor]
Inside Inductor (``inner="inductor"``) a kforge kernel competes with Inductor's own code for the op, and a
replaced node costs more than its kernel's time:

- the call: a replaced node is an extern call from Inductor's generated code. Through the ``kforge::kernel`` op a
  1024-element call cost 14.8 us on the H200 host, against 8.3 us for an ATen op (benchmarks/results/h200/overhead.md),
  and the gate charged 5 us for it. The code now calls the kernel without the op (Note [Inductor's code calls the
  kernel, not the op] in inductor_call.py). On an H100 host, in graphs of 16 and 32 nodes on 1024 elements (one call,
  benchmarks/results/h100/inductor_call_session58_run3*.md), that cost 15.3 and 13.1 us a node, against 11.4 and
  13.4 us a launch for Inductor's own code in a graph of as many kernels, and 18.9 and 22.1 us a node through the
  op. ``HOST_COST_US`` charges 2 us, about the mean of the two differences (4.0 and -0.3 us: the host was noisy, its
  launcher in a Python loop ran 13.1 and 16.3 us a node), except when Inductor replays the graph as a CUDA graph
  (``triton.cudagraphs``, ``mode="reduce-overhead"``): a replay runs no host code per node. In a host-bound graph
  (ResNet-50 at batch 1, a small transformer) the time is not hidden;
- the fusions Inductor loses: Inductor fuses pointwise producers into a reduction's loads and pointwise consumers
  into its stores (a layer norm with the modulation after it, a softmax with the scale and mask before it). An
  extern node makes those tensors real: each fused neighbour's tensor is written once and read once more.
  ``fused_traffic_bytes`` counts those bytes on the node's real neighbours, looking through views, and they are
  charged at the kernel's own rate (its time over the bytes it moves). An input that other nodes read too (the
  residual stream) is one Inductor's code writes anyway, for those readers: its write is not the node's to pay.
  Replacing a plain node still adds the node's own read of it, where Inductor's kernel would have computed it in
  registers from its inputs as it stored it (MMDiT's ``triton_red_fused_add_mul_native_layer_norm`` kernels:
  benchmarks/results/h200/kernels_sd35_mmdit_inductor.txt), so it is charged once, not twice. A norm group with a
  prologue reads such an input as Inductor's own kernel for the group would: it is not charged.

The single-op time Inductor is measured by (Note [the baseline inside Inductor]) has none of these costs, so a
kernel replaces a node only when ``kforge_us * (1 + margin) + fused bytes at its rate + HOST_COST_US`` is below
Inductor's time. Signature-level decisions (the provider) use no neighbours; node-level ones (the rewrite) do. Each
node-level one is a ``GateDecision`` in the compile's report (``CompileReport.gate``), and a node it keeps with
Inductor is logged with the numbers compared.

An op Inductor itself runs as an extern call (a convolution, or a matmul in its default mode) loses no fusion
when kforge replaces it: Inductor's own version makes the same tensors real. Its fusions are not charged.

One exception, from measurement: in a graph where Inductor's layout optimisation applies (convolution nets; see
``inductor_reorders_layout``), Inductor runs 4-D activations channels-last, so its norm or pooling in the real graph
is not the NCHW single op it was timed as. There the fusions are not charged: the SD3.5 VAE decoder with its group
norms replaced inside Inductor ran 27.0 and 27.1 ms against Inductor's 35.0 and 34.6 ms (two runs, H200), and
with every one of them charged for its fused SiLU and left to Inductor, 35.2 against 35.0 ms.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from .fusion import Group
from .rewrite import is_getitem

HOST_COST_US = 2.0  # extra host time of a kforge node over an Inductor-generated launch (see the Note)
# ops Inductor calls as externs in its default mode: replacing one loses no fusion (see the Note)
INDUCTOR_EXTERNS = frozenset({"aten.convolution.default", "aten.mm.default", "aten.addmm.default", "aten.bmm.default"})


def _is_view(node: torch.fx.Node) -> bool:
    target = node.target
    return node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and (
        target.is_view or target.overloadpacket in (torch.ops.aten._unsafe_view, torch.ops.aten.reshape))


def _is_pointwise(node: torch.fx.Node) -> bool:
    target = node.target
    return node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and \
        torch.Tag.pointwise in target.tags


def _nbytes(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    return val.numel() * val.element_size() if isinstance(val, torch.Tensor) else 0


def _view_chain(node: torch.fx.Node, depth: int = 4) -> list[torch.fx.Node]:
    """``node``, then what it is a view of, and so on (a few views deep): the last is its producer."""
    chain = [node]
    while depth and _is_view(chain[-1]) and chain[-1].args and isinstance(chain[-1].args[0], torch.fx.Node):
        chain, depth = chain + [chain[-1].args[0]], depth - 1
    return chain


def _producer(node: torch.fx.Node) -> torch.fx.Node:
    """``node`` itself, or what it is a view of (a few views deep)."""
    return _view_chain(node)[-1]


def _has_pointwise_user(node: torch.fx.Node, depth: int = 4) -> bool:
    for user in node.users:
        if _is_pointwise(user) or (depth and _is_view(user) and _has_pointwise_user(user, depth - 1)):
            return True
    return False


def fused_traffic_bytes(node: torch.fx.Node, group: Group | None = None) -> int:
    """Bytes that become real memory traffic when ``node`` is an extern call instead of Inductor's fused code: 2x
    each input made by a pointwise op and each output read by one (a multi-output node's outputs are its
    ``getitem`` users). An input other nodes read too counts once, or not at all for a group with a prologue (see
    the Note). For a fused group (``node`` its output), the group's inputs are the inputs."""
    total = 0
    inside = set(group.members) if group is not None else {node}
    with_prologue = group is not None and group.side is not None
    for arg in group.inputs if group is not None else node.all_input_nodes:
        if not _is_pointwise(_producer(arg)):
            continue
        if not _read_elsewhere(arg, inside):
            total += 2 * _nbytes(arg)
        elif not with_prologue:
            total += _nbytes(arg)
    getitems = [u for u in node.users if is_getitem(u)]
    for out in getitems or [node]:
        if _has_pointwise_user(out):
            total += 2 * _nbytes(out)
    return total


def _read_elsewhere(arg: torch.fx.Node, inside: set) -> bool:
    """``arg``, or what it is a view of (a few views deep), has a reader outside ``inside`` and the views between:
    Inductor's code writes it for that reader whatever this node does (the residual stream: Note [a norm takes the
    residual add before it] in norm_fusion.py)."""
    chain = _view_chain(arg)
    allowed = set(inside) | set(chain)
    return any(u not in allowed for v in chain for u in v.users)


def inductor_reorders_layout(gm: torch.fx.GraphModule) -> bool:
    """Inductor's own decision whether to run this (post-decomposition) graph's activations channels-last."""
    from torch._inductor.graph import GraphLowering

    try:
        return bool(GraphLowering.decide_layout_opt(gm, is_inference=True))
    except Exception:  # a private heuristic: if it cannot answer, charge the fusions
        return False


def charged_bytes(node: torch.fx.Node, layout_reordered: bool, group: Group | None = None) -> int:
    """``fused_traffic_bytes``, except for ops Inductor runs as externs and for 4-D nodes of a graph Inductor runs
    channels-last (see the Note)."""
    if group is None and str(node.target) in INDUCTOR_EXTERNS:
        return 0
    val = node.all_input_nodes[0].meta.get("val") if node.all_input_nodes else None
    if layout_reordered and isinstance(val, torch.Tensor) and val.dim() == 4 and group is None:
        return 0
    return fused_traffic_bytes(node, group)


def host_cost_us() -> float:
    """The extern call's host time in the Inductor compile under way: none when it replays CUDA graphs."""
    import torch._inductor.config as inductor_config

    return 0.0 if inductor_config.triton.cudagraphs else HOST_COST_US


@dataclass(frozen=True)
class GateDecision:
    """One node's comparison (Note [what replacing a node costs inside Inductor]): the kernel's time with the margin,
    its fused neighbours' traffic at its rate and the extern call's host time, against Inductor's single op."""

    op: str  # the signature's op ("kforge.norm" for a norm group)
    key: str  # the kernel's signature key
    kforge_us: float
    inductor_us: float
    charged_bytes: int  # fused neighbours' bytes charged to the node
    fused_us: float  # those bytes at the kernel's own rate
    host_us: float
    margin: float

    @property
    def total_us(self) -> float:
        return self.kforge_us * (1.0 + self.margin) + self.fused_us + self.host_us

    @property
    def replaced(self) -> bool:
        return self.total_us < self.inductor_us

    def reason(self) -> str:
        return (f"{self.kforge_us:.1f} us x{1.0 + self.margin:.2f} + {self.fused_us:.1f} us fused traffic "
                f"({self.charged_bytes / 1e6:.3g} MB) + {self.host_us:.1f} us host = {self.total_us:.1f} "
                f"{'<' if self.replaced else '>='} Inductor {self.inductor_us:.1f} us")

    def describe(self) -> str:
        return f"{self.op} {'replaced' if self.replaced else 'kept'}: {self.reason()}"


def decide(op: str, key: str, kforge_us: float, inductor_us: float, op_bytes: int, fused_bytes: int, margin: float,
           host_us: float = HOST_COST_US) -> GateDecision:
    """Note [what replacing a node costs inside Inductor]: the kernel's costs against Inductor's time, fused bytes
    charged at the kernel's own rate (its time over the ``op_bytes`` it moves)."""
    return GateDecision(op, key, kforge_us, inductor_us, fused_bytes, fused_bytes * (kforge_us / max(op_bytes, 1)),
                        host_us, margin)


def replaces(kforge_us: float, inductor_us: float, op_bytes: int, fused_bytes: int, margin: float,
             host_us: float = HOST_COST_US) -> bool:
    """Does the kernel beat Inductor with its costs added? (``decide`` without the record.)"""
    return decide("", "", kforge_us, inductor_us, op_bytes, fused_bytes, margin, host_us).replaced
