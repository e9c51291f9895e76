"""Run one search for one operator card and turn its outcome into stored records."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from ..cards import OperatorCard
from ..config import KforgeConfig
from ..search.mcts import MCTS, SearchConfig, SearchProgress, SearchResult
from ..store.local import LocalStore
from ..store.record import KernelRecord, make_provenance
from ..store.team import publish_found
from .evaluator import WorkerEvaluator
from .live_record import LiveRecord
from .nvrtc import nvrtc_version
from .worker import WorkerClient

log = logging.getLogger("kforge")


def make_proposers(cfg: KforgeConfig) -> list:
    """The proposers the config asks for: templates, llm or both (mixed)."""
    proposers = []
    if cfg.proposer in ("templates", "mixed"):
        from ..search.templates.proposer import TemplateProposer

        proposers.append(TemplateProposer())
    if cfg.proposer in ("llm", "mixed"):
        from ..search.llm.proposer import LLMProposer

        proposers.append(LLMProposer(cfg))
    return proposers


def template_gap(card: OperatorCard) -> str | None:
    """Why the template proposer has nothing for ``card``, or None when it has."""
    from ..search.templates import family_for
    from ..search.templates.target import target_of

    if family_for(card) is None:
        return "no template family covers this op"
    if not target_of(card).served:  # Note [templates for the card's architecture] in search/templates/target.py
        return f"the templates need sm_80 or newer, not {card.arch}"
    return None


def has_template(card: OperatorCard) -> bool:
    return template_gap(card) is None


def searchable(card: OperatorCard, cfg: KforgeConfig) -> bool:
    """Whether ``kforge prewarm`` would search ``card`` with ``cfg``'s proposer: any card with the LLM, else one a
    template family serves (prewarm.plan's rule)."""
    return cfg.proposer != "templates" or has_template(card)


def gpu_name(device_index: int) -> str:
    """A GPU's name for its search claim (store/claims.py): its UUID where torch can tell it, which
    CUDA_VISIBLE_DEVICES does not renumber, else its index."""
    try:
        return str(torch.cuda.get_device_properties(device_index).uuid)
    except (AssertionError, RuntimeError, AttributeError):  # no CUDA here (CPU tests), or a torch without uuid
        return f"index{device_index}"


@dataclass
class SearchOutcome:
    record: KernelRecord | None  # None when the result must not be cached (budget ran out before any verdict)
    result: SearchResult
    seconds: float


def run_search(card: OperatorCard, cfg: KforgeConfig, client: WorkerClient, store: LocalStore,
               iterations: int, seconds: float, proposers: list | None = None,
               on_progress: Callable[[SearchProgress], None] | None = None, seed: int = 0) -> SearchOutcome:
    import time

    t0 = time.perf_counter()
    base = client.call({"cmd": "baseline", "card": card.to_json()})
    card.baselines_us["eager"] = base["eager_us"]
    evaluator = WorkerEvaluator(client, card.arch, cfg.cache_dir)
    proposers = proposers or make_proposers(cfg)
    if "gpu" in base:
        _describe_gpu(proposers, base["gpu"], base["bandwidth_gbps"])
    config = SearchConfig(iterations=iterations, seconds=seconds, margin=cfg.margin, seed=seed, parallel=4,
                          max_tokens=cfg.llm_budget_tokens, max_cost_usd=cfg.llm_budget_usd)
    live = LiveRecord(store, card.key, then=on_progress)  # Note [a search record written as it grows]
    mcts = MCTS(card, base["eager_us"], base["floor_us"], proposers, evaluator, config,
                bandwidth_gbps=base["bandwidth_gbps"], on_progress=live)
    live.save(mcts.record)
    try:
        result = mcts.run()
    except BaseException as e:  # Ctrl-C or a broken worker: keep the tree so far, then let it propagate
        live.interrupted(mcts.record, e)
        raise
    rec = result.record
    search_json = rec.to_json()
    store.put_search(card.key, search_json)
    record = _to_record(card, result, base, proposer=_proposer_of(result))
    if record.decision == "pytorch" and rec.stop_reason in ("seconds", "tokens", "cost") and not any(
            n.status == "ok" for n in rec.nodes[1:]):
        record = None  # Note: cut short before any verdict; a later search with more budget may find a kernel
    if record is not None:
        store.put(record)
        publish_found(record, cfg, search_json)  # to the team store, if one is configured (store/team.py)
    return SearchOutcome(record, result, time.perf_counter() - t0)


def _describe_gpu(proposers: list, gpu: dict, bandwidth_gbps: float | None) -> None:
    """Tell the proposers that prompt a model (the LLM's) which GPU the search runs on: its arch, SMs and shared
    memory, not the H200's (Note [templates for the card's architecture] in search/templates/target.py)."""
    from ..search.llm.prompts import GpuFacts

    facts = GpuFacts.of_device(gpu, bandwidth_gbps)
    for p in proposers:
        if hasattr(p, "use_gpu"):
            p.use_gpu(facts)


def _proposer_of(result: SearchResult) -> str:
    rec = result.record
    node = rec.node(rec.winner_id) if rec.winner_id is not None else None
    return node.proposer if node is not None else ""


def _to_record(card: OperatorCard, result: SearchResult, base: dict, proposer: str) -> KernelRecord:
    rec = result.record
    sig = card.signature_obj()
    timings = {"eager_us": base["eager_us"], "floor_us": base["floor_us"], "bandwidth_gbps": base["bandwidth_gbps"],
               "remeasured_us": rec.winner_remeasured_us}
    verification: dict = {}
    if rec.winner_id is not None:
        import statistics

        node = rec.node(rec.winner_id)
        t = statistics.median(rec.winner_remeasured_us)
        timings.update(kforge_us=t, speedup_vs_eager=base["eager_us"] / t, pct_bw=100.0 * base["floor_us"] / t,
                       search_us=node.time_us, iterations_to_best=rec.iterations_to_best)
        verification = dict(node.verify_report or {})
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    prov = make_provenance(proposer, search_id=card.key, gpu=gpu, nvrtc=nvrtc_version(), reason=rec.reason,
                           iterations=rec.iterations)
    return KernelRecord.create(sig, card, rec.decision, result.winner, verification=verification, timings=timings,
                               provenance=prov, trusted=True)
