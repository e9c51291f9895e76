"""Capture a model's graphs and collect its operator cards, without replacing anything (``kforge cards``)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .backend import CompileReport, make_backend
from .cards import OperatorCard
from .config import KforgeConfig
from .expression import FUSED_OP, NORM_OP, SOFTMAX_OP
from .modelspec import load
from .selection import CONVOLUTION, depthwise_conv1d, is_candidate

H200_COPY_GBPS = 4248.0  # measured device-to-device copy on the H200 (shared/anchors, 2026-11-30)


class RecordingProvider:
    """Serves no kernels; remembers every card it was asked about."""

    def __init__(self) -> None:
        self.cards: list[OperatorCard] = []

    def kernels_for(self, cards: list[OperatorCard], cfg: KforgeConfig) -> dict:
        self.cards.extend(cards)
        return {}


@dataclass
class ModelCards:
    cards: list[OperatorCard]
    ops_seen: int
    candidates: int
    bandwidth_gbps: float
    bandwidth_source: str
    reports: list[CompileReport] = field(default_factory=list)


def merge_cards(cards: list[OperatorCard]) -> list[OperatorCard]:
    """Merge cards of the same key found in several graphs, summing occurrences."""
    merged: dict[str, OperatorCard] = {}
    for c in cards:
        if c.key in merged:
            merged[c.key].occurrences += c.occurrences
        else:
            merged[c.key] = OperatorCard.from_json(c.to_json())
    return list(merged.values())


def looked_up(card: OperatorCard, families: tuple[str, ...], inner: str, cfg: KforgeConfig) -> bool:
    """Would a compile with ``inner`` look this card's signature up? A softmax group (``kforge.softmax``) whenever
    softmaxes are candidates and ``fuse_softmax`` is on, a norm group (``kforge.norm``) likewise with ``fuse_norm``,
    on both paths; a pointwise group on the eager path only."""
    op = card.op
    if op == NORM_OP:
        return cfg.fuse_norm and is_candidate(str(card.scalars.get("norm")), families, inner)
    if op == SOFTMAX_OP:
        return cfg.fuse_softmax and is_candidate("aten._softmax.default", families, inner)
    if op == FUSED_OP:
        return inner == "eager" and cfg.fuse_pointwise
    weight = next((t.spec.shape for t in card.inputs if t.name == "weight"), ())
    return is_candidate(op, families, inner, op == CONVOLUTION and depthwise_conv1d(weight, card.scalars))


def model_cards(spec: str, families: tuple[str, ...] = (), inner: str | None = None) -> ModelCards:
    """The model's operator cards: the signatures a compile with ``inner`` (default: the configured one) would look
    up. The graphs are captured as the eager path captures them, whole ATen ops with nothing decomposed, and the
    ops that ``inner`` leaves to its own code generation (``selection.INDUCTOR_KEEPS``) are dropped, so one capture
    serves both and does not depend on Inductor's plans for a graph."""
    loaded = load(spec)
    cfg = KforgeConfig.load({"families": families})
    inner = inner or cfg.inner
    provider = RecordingProvider()
    reports: list[CompileReport] = []
    backend = make_backend(provider=provider, on_report=reports.append)
    torch._dynamo.reset()
    compiled = torch.compile(loaded.model, backend=backend,
                             options={"families": families, "search": "off", "inner": "eager"})
    with torch.no_grad():
        compiled(*loaded.inputs)
    bw, source = floor_bandwidth()
    cards = [c for c in merge_cards(provider.cards) if looked_up(c, families, inner, cfg)]
    return ModelCards(cards, sum(r.ops_seen for r in reports), sum(c.occurrences for c in cards), bw, source, reports)


def floor_bandwidth() -> tuple[float, str]:
    """The bandwidth floors are drawn at, and where it comes from: measured on the current GPU, else the H200's."""
    if not torch.cuda.is_available():
        return H200_COPY_GBPS, "H200 copy bandwidth from the anchors; no GPU here"
    from .measure import copy_bandwidth

    dev = torch.device("cuda", torch.cuda.current_device())
    return copy_bandwidth(dev, KforgeConfig.load().cache_dir), f"measured on {torch.cuda.get_device_name()}"


def queued_cards(cache_dir) -> ModelCards:
    """The cards of the misses compiles queued in ``cache_dir`` (Note [a miss kept for later] in store/queue.py), as
    a model's cards: each with the occurrences its compile counted."""
    from .store.queue import MissQueue

    cards = [m.card_obj() for m in MissQueue(cache_dir).misses()]
    bw, source = floor_bandwidth()
    return ModelCards(cards, 0, sum(c.occurrences for c in cards), bw, source, [])
