"""The LLM proposer: one child per call from a chat model, with one repair turn, a disk cache and a budget.

propose(): render the prompt -> ask (cache, else budget check, else the endpoint) -> parse -> screen -> compile
(NVRTC, no GPU needed). A parse, screen or compile failure gets one repair turn that quotes the error; if that fails
too, the child is returned as a failure (data for the search and the next prompt), never raised.

Note [LLM cache key]
Answers are cached on disk by :class:`PromptKey`, a declared object listing what shapes the answer: the model, the
completion limit, the prompt files' hash, the GPU's static facts, the card's signature key, the parent kernel's
identity, the failed children's (action, stage), the sibling actions, the seed drawn from the search's rng, and the
turn (expand, or repair of one previous answer). Excluded on purpose: measured times, speedups, % of bandwidth and
the measured bandwidth, and failure reasons and logs, because they carry numbers that vary from run to run, so a key
over them would make every rerun a miss; also the endpoint URL and API key (the same model behind another port
answers the same question). The prompt text still shows all of these; the key is what decides a rerun is the same.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ...cards import OperatorCard
from ...config import KforgeConfig
from ...contract import Candidate
from ...errors import CandidateFailure
from ...fsutil import atomic_write
from ..proposer import ParentView, Proposal
from .client import ChatResult, LLMClient
from .parse import action_line, parse_answer, screen_candidate, source_escape, to_candidate
from .prompts import GpuFacts, chat_messages, prompt_version, repair_message

log = logging.getLogger("kforge.llm")


@dataclass(frozen=True)
class PromptKey:
    """What decides that two requests get the same answer; see Note [LLM cache key]."""

    model: str
    max_tokens: int
    prompt_version: str
    gpu: str
    card_key: str
    parent: str
    failed: tuple[tuple[str, str], ...]
    siblings: tuple[str, ...]
    seed: int
    turn: str = "expand"

    @classmethod
    def of(cls, cfg: KforgeConfig, facts: GpuFacts, card: OperatorCard, parent: ParentView,
           seed: int) -> "PromptKey":
        return cls(cfg.llm_model, cfg.llm_max_tokens, prompt_version(), facts.stable(), card.key,
                   parent.candidate.identity() if parent.candidate is not None else "root",
                   tuple((str(f.get("action", "")), str(f.get("stage", ""))) for f in parent.failed_children),
                   tuple(parent.sibling_actions), seed)

    def repair(self, previous_answer: str, failure: CandidateFailure) -> "PromptKey":
        blob = "\0".join((previous_answer, failure.stage, failure.message, failure.log))
        return dataclasses.replace(self, turn="repair:" + hashlib.sha256(blob.encode()).hexdigest()[:16])

    def digest(self) -> str:
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def debug_lines(self) -> list[str]:
        """One line per field, to see why two keys differ."""
        return [f"{k}: {json.dumps(v)}" for k, v in dataclasses.asdict(self).items()]


class ResponseCache:
    """One JSON file per PromptKey digest. Writes are atomic; a corrupt entry is a miss, logged."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, key: PromptKey) -> Path:
        return self.root / f"{key.digest()}.json"

    def get(self, key: PromptKey) -> ChatResult | None:
        path = self.path(key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            d = json.loads(raw)
            if not isinstance(d.get("text"), str):
                raise ValueError("no answer text")
            return ChatResult(d["text"], int(d["prompt_tokens"]), int(d["completion_tokens"]), 0, str(d["model"]),
                              d.get("finish_reason"))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("kforge: corrupt LLM cache entry %s ignored (%s)", path, e)
            return None

    def put(self, key: PromptKey, result: ChatResult) -> None:
        entry = {"key": dataclasses.asdict(key), "text": result.text, "prompt_tokens": result.prompt_tokens,
                 "completion_tokens": result.completion_tokens, "model": result.model,
                 "finish_reason": result.finish_reason}
        atomic_write(self.path(key), json.dumps(entry, indent=1).encode())


class LLMBudget:
    """Tokens and dollars spent on LLM requests; share one object among proposers and threads of a search.

    Checked before each request and charged after it, so up to ``llm_concurrency`` requests in flight can overshoot
    the limit by their own size.
    """

    def __init__(self, max_tokens: int = 0, max_usd: float = 0.0, price_in: float = 0.0,
                 price_out: float = 0.0) -> None:
        self.max_tokens, self.max_usd = max_tokens, max_usd
        self.price_in, self.price_out = price_in, price_out  # USD per million tokens
        self._lock = threading.Lock()
        self.tokens = 0
        self.usd = 0.0
        self.requests = 0

    @classmethod
    def from_config(cls, cfg: KforgeConfig) -> "LLMBudget":
        return cls(cfg.llm_budget_tokens, cfg.llm_budget_usd, cfg.llm_price_in, cfg.llm_price_out)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_in + completion_tokens * self.price_out) / 1e6

    def charge(self, result: ChatResult) -> float:
        cost = self.cost(result.prompt_tokens, result.completion_tokens)
        with self._lock:
            self.tokens += result.prompt_tokens + result.completion_tokens
            self.usd += cost
            self.requests += 1
        return cost

    def exhausted(self) -> str | None:
        """Why no more requests may be made, or None."""
        with self._lock:
            if self.max_tokens and self.tokens >= self.max_tokens:
                return (f"LLM token budget spent: {self.tokens:,} of {self.max_tokens:,} tokens "
                        f"(KFORGE_LLM_BUDGET_TOKENS)")
            if self.max_usd and self.usd >= self.max_usd:
                return f"LLM cost budget spent: ${self.usd:.4f} of ${self.max_usd:.4f} (KFORGE_LLM_BUDGET_USD)"
        return None


@dataclass
class _Ledger:
    """What one propose() call spent, over its one or two turns."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    turns: int = 0
    cached_turns: int = 0
    attempts: int = 0

    def add(self, result: ChatResult, cost: float, cached: bool) -> None:
        self.turns += 1
        if cached:
            self.cached_turns += 1
            return  # a cached answer costs nothing now
        self.prompt_tokens += result.prompt_tokens
        self.completion_tokens += result.completion_tokens
        self.cost_usd += cost
        self.attempts += result.attempts


@dataclass
class _Outcome:
    candidate: Candidate | None = None
    action: str = "llm: unusable answer"
    failure: CandidateFailure | None = None
    source: str | None = None
    plan: dict[str, Any] | None = None
    escape: str | None = None


class LLMProposer:
    """Implements the Proposer protocol with a chat model. Thread-safe: the search calls it from several threads."""

    name = "llm"

    def __init__(self, cfg: KforgeConfig, gpu_facts: GpuFacts = GpuFacts(), client: LLMClient | None = None,
                 budget: LLMBudget | None = None, compile: bool = True, use_cache: bool = True) -> None:
        self.cfg = cfg
        self.facts = gpu_facts
        self.client = client if client is not None else LLMClient(cfg)
        self.budget = budget if budget is not None else LLMBudget.from_config(cfg)
        self.cache = ResponseCache(Path(cfg.cache_dir) / "llm") if use_cache else None
        self.compile = compile
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._stop_reason: str | None = None

    def use_gpu(self, facts: GpuFacts) -> None:
        """Describe the GPU the search runs on, not the H200 (run_search calls this with the worker's device)."""
        self.facts = facts

    @property
    def stop_reason(self) -> str | None:
        """Why propose() returned None (the budget), or None while it is still proposing."""
        return self._stop_reason

    def propose(self, card: OperatorCard, parent: ParentView, rng: random.Random) -> Proposal | None:
        seed = rng.randrange(2**31)
        messages = chat_messages(card, parent, self.facts)
        key = PromptKey.of(self.cfg, self.facts, card, parent, seed)
        ledger = _Ledger()
        first = self._ask(key, messages, seed, ledger)
        if first is None:
            return None
        outcome = self._evaluate(first.text, card)
        escapes = [outcome.escape] if outcome.escape else []
        repaired = False
        if outcome.failure is not None:
            follow_up = [*messages, {"role": "assistant", "content": first.text},
                         {"role": "user", "content": repair_message(outcome.failure, outcome.source)}]
            second = self._ask(key.repair(first.text, outcome.failure), follow_up, seed, ledger)
            if second is not None:  # None: the budget ran out; the first failure stands
                outcome = self._evaluate(second.text, card, fallback_action=outcome.action)
                escapes += [outcome.escape] if outcome.escape else []
                repaired = outcome.failure is None
        return self._proposal(outcome, key, ledger, repaired, escapes)

    # ----------------------------------------------------------------------------------------------------------------

    def _ask(self, key: PromptKey, messages: Sequence[dict[str, str]], seed: int, ledger: _Ledger) -> ChatResult | None:
        """The cached answer, else a fresh one; None when the budget is spent. Identical prompts wait for one
        request instead of sending two."""
        with self._key_lock(key.digest()):
            if self.cache is not None:
                hit = self.cache.get(key)
                if hit is not None:
                    ledger.add(hit, 0.0, cached=True)
                    return hit
            reason = self.budget.exhausted()
            if reason is not None:
                self._stop(reason)
                return None
            result = self.client.chat(messages, seed=seed)
            cost = self.budget.charge(result)
            if self.cache is not None:
                self.cache.put(key, result)
            ledger.add(result, cost, cached=False)
            return result

    def _evaluate(self, text: str, card: OperatorCard, fallback_action: str | None = None) -> _Outcome:
        try:
            answer = parse_answer(text)
        except CandidateFailure as f:
            return _Outcome(action=action_line(text) or fallback_action or _Outcome.action, failure=f)
        out = _Outcome(action=answer.action, source=answer.source, plan=answer.plan)
        try:
            candidate = to_candidate(answer)
            out.escape = source_escape(answer.source)
            if out.escape is not None:
                raise CandidateFailure("screen", out.escape)
            screen_candidate(candidate)
            if self.compile:
                self._compile(candidate, card)
        except CandidateFailure as f:
            out.failure = f
            return out
        out.candidate = candidate
        return out

    def _compile(self, candidate: Candidate, card: OperatorCard) -> None:
        from ...runtime.nvrtc import compile_candidate  # local: keeps NVRTC out of prompt-only imports

        arch = card.arch if card.arch.startswith("sm_") else self.facts.arch
        compile_candidate(candidate, arch, self.cfg.cache_dir)

    def _proposal(self, outcome: _Outcome, key: PromptKey, ledger: _Ledger, repaired: bool,
                  escapes: list[str]) -> Proposal:
        extra: dict[str, Any] = {
            "prompt_tokens": ledger.prompt_tokens, "completion_tokens": ledger.completion_tokens,
            "tokens": ledger.prompt_tokens + ledger.completion_tokens,  # what the MCTS budget sums
            "cost_usd": ledger.cost_usd, "prompt_hash": key.digest(),
            "cached": ledger.turns > 0 and ledger.cached_turns == ledger.turns, "repaired": repaired,
            "turns": ledger.turns, "attempts": ledger.attempts, "model": self.cfg.llm_model,
        }
        if escapes:
            extra["escape_attempts"] = escapes
        if outcome.failure is not None:
            if outcome.source is not None:
                extra["source"] = outcome.source
            if outcome.plan is not None:
                extra["plan"] = outcome.plan
        return Proposal(outcome.candidate, outcome.action, self.name, {}, outcome.failure, extra)

    def _key_lock(self, digest: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(digest, threading.Lock())

    def _stop(self, reason: str) -> None:
        with self._lock:
            first = self._stop_reason is None
            self._stop_reason = reason
        if first:
            log.info("kforge LLM proposer stops: %s", reason)
