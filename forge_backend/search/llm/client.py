"""Chat completions over the `openai` client: OpenAI itself, or any compatible server (vLLM, Ollama, llama.cpp,
LM Studio, ...) through ``llm_base_url``.

The constructor does no network I/O. Retries are ours, not the openai client's (it gets ``max_retries=0``), so they
are bounded by ``llm_retries``, counted in :class:`ChatResult.attempts`, and back off exponentially (or as the
server's ``Retry-After`` says, capped). A semaphore bounds requests in flight to ``llm_concurrency``.

An endpoint that refuses (bad key, unknown model) or keeps failing after the retries raises :class:`LLMUnavailable`:
that is broken infrastructure, not a failed candidate.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import openai

from ...config import KforgeConfig
from ...errors import BadOption, KforgeError

log = logging.getLogger("kforge.llm")

OPENAI_URL = "https://api.openai.com/v1"
# Local servers ignore the key, but the openai client refuses to start without one.
PLACEHOLDER_KEY = "not-needed"
_RETRY_STATUSES = frozenset({408, 409, 429})
CHECK_TIMEOUT_S = 10.0


class LLMUnavailable(KforgeError):
    """The LLM endpoint refused a request or did not answer within the bounded retries."""

    def __init__(self, message: str, attempts: int = 0, status: int | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.status = status


@dataclass(frozen=True)
class ChatResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    model: str
    finish_reason: str | None = None
    usage_estimated: bool = False  # the server sent no usage; tokens are estimated at 4 characters each


def endpoint_url(cfg: KforgeConfig) -> str:
    return cfg.llm_base_url or OPENAI_URL


def make_openai(cfg: KforgeConfig, api_key: str | None = None, timeout_s: float | None = None) -> openai.OpenAI:
    """An openai client with no retries of its own. No network I/O."""
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if not key:
        if not cfg.llm_base_url:
            raise LLMUnavailable("OPENAI_API_KEY is not set; set it, or point KFORGE_LLM_BASE_URL at a "
                                 "compatible server (vLLM, Ollama, llama.cpp, LM Studio)")
        key = PLACEHOLDER_KEY
    return openai.OpenAI(api_key=key, base_url=endpoint_url(cfg), timeout=timeout_s or cfg.llm_timeout_s,
                         max_retries=0)


def completion_kwargs(cfg: KforgeConfig, max_tokens: int) -> dict[str, Any]:
    # OpenAI's reasoning models reject max_tokens and want max_completion_tokens; local servers (llama.cpp, older
    # vLLM and Ollama) know only max_tokens.
    return {"max_completion_tokens": max_tokens} if not cfg.llm_base_url else {"max_tokens": max_tokens}


def describe(e: Exception, cfg: KforgeConfig, timeout_s: float | None = None) -> str:
    """One line a user can act on."""
    url = endpoint_url(cfg)
    if isinstance(e, openai.APITimeoutError):
        return f"no answer from {url} within {timeout_s or cfg.llm_timeout_s:g} s (KFORGE_LLM_TIMEOUT_S)"
    if isinstance(e, openai.APIConnectionError):
        cause = e.__cause__ or e
        return f"cannot reach {url}: {cause}"
    if isinstance(e, openai.AuthenticationError):
        return f"401 from {url}: the API key was rejected (check OPENAI_API_KEY)"
    if isinstance(e, openai.NotFoundError):
        return (f"404 from {url}: model {cfg.llm_model!r} not found, or the URL lacks the /v1 prefix "
                f"({_message(e)})")
    if isinstance(e, openai.APIStatusError):
        return f"HTTP {e.status_code} from {url}: {_message(e)}"
    return f"{type(e).__name__}: {e}"


def _message(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(e.message)


def _retryable(e: Exception) -> bool:
    if isinstance(e, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(e, openai.APIStatusError):
        if isinstance(e.body, dict) and e.body.get("code") == "insufficient_quota":
            return False  # a 429 that waiting will not fix
        return e.status_code in _RETRY_STATUSES or e.status_code >= 500
    return False


class LLMClient:
    """Thread-safe chat client. ``chat`` returns a ChatResult or raises LLMUnavailable."""

    def __init__(self, cfg: KforgeConfig, api_key: str | None = None, backoff_s: float = 1.0,
                 max_backoff_s: float = 30.0, sleep: Callable[[float], None] = time.sleep) -> None:
        if not cfg.llm_model:
            raise BadOption("kforge option llm_model is empty; the LLM proposer needs a model name "
                            "(KFORGE_LLM_MODEL, e.g. gpt-5 or the name your local server serves)")
        self.cfg = cfg
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._openai = make_openai(cfg, api_key)
        self._sem = threading.BoundedSemaphore(cfg.llm_concurrency)
        self._lock = threading.Lock()
        self._jitter = random.Random()
        self.stats: Counter[str] = Counter()  # requests, retries, ok, failed

    @property
    def model(self) -> str:
        return self.cfg.llm_model

    def chat(self, messages: Sequence[dict[str, str]], seed: int | None = None) -> ChatResult:
        attempts = 1 + self.cfg.llm_retries
        for attempt in range(1, attempts + 1):
            try:
                return self._once(messages, seed, attempt)
            except openai.OpenAIError as e:
                status = getattr(e, "status_code", None)
                if not _retryable(e):
                    self._count("failed")
                    raise LLMUnavailable(describe(e, self.cfg), attempt, status) from e
                if attempt == attempts:
                    self._count("failed")
                    raise LLMUnavailable(f"{describe(e, self.cfg)}; gave up after {attempts} attempt(s)",
                                         attempt, status) from e
                delay = self._delay(attempt, e)
                log.info("kforge LLM request failed (%s); retry %d/%d in %.2f s", describe(e, self.cfg), attempt,
                         attempts - 1, delay)
                self._count("retries")
                self._sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _once(self, messages: Sequence[dict[str, str]], seed: int | None, attempt: int) -> ChatResult:
        extra: dict[str, Any] = {"seed": seed} if seed is not None else {}
        with self._sem:
            self._count("requests")
            resp = self._openai.chat.completions.create(
                model=self.cfg.llm_model, messages=list(messages),  # type: ignore[arg-type]
                **completion_kwargs(self.cfg, self.cfg.llm_max_tokens), **extra)
        self._count("ok")
        choice = resp.choices[0] if resp.choices else None
        text = (choice.message.content if choice else None) or ""
        usage = resp.usage
        if usage is None:
            p = sum(len(m["content"]) for m in messages) // 4
            return ChatResult(text, p, len(text) // 4, attempt, resp.model or self.model,
                              choice.finish_reason if choice else None, usage_estimated=True)
        return ChatResult(text, int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0), attempt,
                          resp.model or self.model, choice.finish_reason if choice else None)

    def _delay(self, attempt: int, e: Exception) -> float:
        after = _retry_after(e)
        if after is None:
            after = self.backoff_s * 2 ** (attempt - 1) * (0.5 + 0.5 * self._jitter.random())
        return min(max(after, 0.0), self.max_backoff_s)

    def _count(self, what: str) -> None:
        with self._lock:
            self.stats[what] += 1


def _retry_after(e: Exception) -> float | None:
    response = getattr(e, "response", None)
    if response is None:
        return None
    for header, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = response.headers.get(header)
        if value is not None:
            try:
                return float(value) * scale
            except ValueError:
                return None  # an HTTP date; fall back to our own backoff
    return None


# --------------------------------------------------------------------------------------------------------------------
# kforge doctor


@dataclass(frozen=True)
class EndpointStatus:
    ok: bool
    message: str
    models: list[str] = field(default_factory=list)


def check_endpoint(cfg: KforgeConfig, api_key: str | None = None,
                   timeout_s: float = CHECK_TIMEOUT_S) -> EndpointStatus:
    """Can kforge use the configured endpoint? Lists models, then asks for a 1-token completion. No retries."""
    url = endpoint_url(cfg)
    if not cfg.llm_model:
        return EndpointStatus(False, "llm_model is not set (KFORGE_LLM_MODEL); the LLM proposer is off")
    timeout_s = min(timeout_s, cfg.llm_timeout_s)
    try:
        client = make_openai(cfg, api_key, timeout_s)
    except LLMUnavailable as e:
        return EndpointStatus(False, str(e))
    models: list[str] = []
    try:
        models = sorted(m.id for m in client.models.list())
    except openai.NotFoundError:
        log.debug("%s has no /models route; trying a completion directly", url)
    except openai.OpenAIError as e:
        return EndpointStatus(False, describe(e, cfg, timeout_s))
    if models and cfg.llm_model not in models:
        shown = ", ".join(models[:20]) + (", ..." if len(models) > 20 else "")
        return EndpointStatus(False, f"model {cfg.llm_model!r} not found at {url}; it serves: {shown}", models)
    t0 = time.perf_counter()
    try:
        client.chat.completions.create(model=cfg.llm_model, messages=[{"role": "user", "content": "Say ok."}],
                                       **completion_kwargs(cfg, 1))
    except openai.OpenAIError as e:
        return EndpointStatus(False, describe(e, cfg, timeout_s), models)
    ms = (time.perf_counter() - t0) * 1e3
    return EndpointStatus(True, f"{url} serves {cfg.llm_model} (1-token completion in {ms:.0f} ms)", models)
