"""One typed configuration object for kforge, read in one place.

Precedence: explicit ``torch.compile(options=...)`` values beat ``KFORGE_*`` environment variables, which beat the
defaults below. Every value is validated on construction; a bad value raises :class:`BadOption` naming the option
and listing what is valid.

Options (option name / environment variable / default):

=================  ========================  ==========================================================
inner              KFORGE_INNER              ``inductor``: what runs the nodes kforge does not replace
                                             (``inductor`` | ``eager``; Note [the default inner])
strict             KFORGE_STRICT             ``False``: raise instead of falling back to PyTorch
search             KFORGE_SEARCH             ``on_miss``: what a cache miss does: ``on_miss`` searches it within
                                             the compile's budget and queues what the budget leaves;
                                             ``queue`` only queues it for ``kforge prewarm --queued``; ``off``
                                             leaves it to PyTorch (Note [a miss kept for later] in store/queue.py)
search_iterations  KFORGE_SEARCH_ITERATIONS  ``8``: MCTS iterations per signature inside torch.compile
search_seconds     KFORGE_SEARCH_SECONDS     ``60``: wall-clock budget for all searches of one compile
proposer           KFORGE_PROPOSER           ``templates`` (``templates`` | ``llm`` | ``mixed``)
families           KFORGE_FAMILIES           ``""``: extra op families to opt in, comma separated
                                             (``matmul``, ``conv``); see ``selection.FAMILIES``
cache_dir          KFORGE_CACHE_DIR          ``~/.cache/kforge`` (``$XDG_CACHE_HOME/kforge``)
team_store         KFORGE_TEAM_STORE         ``""``: a directory the team shares (network filesystem, synced
                                             folder); this machine's search winners are published there and
                                             its records looked up after the local cache, re-verified before
                                             first use (store/team.py); empty = no team store
margin             KFORGE_MARGIN             ``0.03``: a kernel must beat eager by this fraction
fuse_pointwise     KFORGE_FUSE_POINTWISE     ``False``: replace each connected group of pointwise ops with
                                             one fused kernel (``inner="eager"`` only; see fusion.py)
fuse_softmax       KFORGE_FUSE_SOFTMAX       ``True``: a softmax takes the pointwise ops that make its input (scale,
                                             mask, casts) and the cast of its output into one kernel
                                             (Note [a softmax takes its neighbours] in softmax_fusion.py)
fuse_norm          KFORGE_FUSE_NORM          ``True``: a layer/rms norm takes the pointwise ops after it (adaLN's
                                             modulation) into one kernel
                                             (Note [a norm takes its epilogue] in norm_fusion.py)
fold_conv_bn       KFORGE_FOLD_CONV_BN       ``True``: in inference, a convolution's batch norm (and a ReLU, or a
                                             residual add and a ReLU, after it) folded into one cuDNN call in
                                             channels-last, folded again when the model's weights change
                                             (Note [a batch norm folded into its convolution] in conv_fold.py)
direct_calls       KFORGE_DIRECT_CALLS       ``True``: inside Inductor, the generated code calls each kernel by its key
                                             without the ``kforge::kernel`` op's dispatcher round trip; ``False``
                                             keeps the op's call (Note [Inductor's code calls the kernel, not the
                                             op] in inductor_call.py)
check              KFORGE_CHECK              ``False``: compare every kernel call with PyTorch's op on the same
                                             inputs and log disagreements (slow; see check.py)
min_share          KFORGE_MIN_SHARE          ``0.0``: skip signatures under this share of GPU time
llm_model          KFORGE_LLM_MODEL          ``""``: model name for the LLM proposer
llm_base_url       KFORGE_LLM_BASE_URL       ``""``: unset = OpenAI; else any compatible server
llm_timeout_s      KFORGE_LLM_TIMEOUT_S      ``120``: per-request timeout
llm_max_tokens     KFORGE_LLM_MAX_TOKENS     ``8192``: completion tokens per request
llm_concurrency    KFORGE_LLM_CONCURRENCY    ``4``: requests in flight at once
llm_retries        KFORGE_LLM_RETRIES        ``3``: retries on 429 / 5xx / timeouts, with backoff
llm_budget_tokens  KFORGE_LLM_BUDGET_TOKENS  ``0``: stop a search after this many tokens (0 = no limit)
llm_budget_usd     KFORGE_LLM_BUDGET_USD     ``0``: stop a search after this cost (0 = no limit)
llm_price_in       KFORGE_LLM_PRICE_IN       ``0``: USD per million prompt tokens (for the cost estimate)
llm_price_out      KFORGE_LLM_PRICE_OUT      ``0``: USD per million completion tokens
=================  ========================  ==========================================================

Note [the default inner]
The rest of the graph runs through Inductor unless ``inner="eager"`` is asked for. On the H200 (2026-11-30,
benchmarks/results/h200/models.json) the eager path ran the reduced-depth transformers at 0.52-0.73x eager: a graph
of ~2,500 ATen calls made one by one from Python costs more host time than the model's own code, and nothing is
fused. Through Inductor the same models ran at 0.91-1.01x Inductor, itself 1.6-3.8x eager, and the SD3.5 VAE
decoder at 1.27x Inductor. ``eager`` stays for compiles without Inductor (seconds instead of tens of seconds) and
for ``fuse_pointwise``.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .errors import BadOption

_CHOICES: dict[str, tuple[str, ...]] = {
    "inner": ("eager", "inductor"),
    "search": ("off", "queue", "on_miss"),
    "proposer": ("templates", "llm", "mixed"),
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kforge"


@dataclass(frozen=True)
class KforgeConfig:
    inner: str = "inductor"  # Note [the default inner]
    strict: bool = False
    search: str = "on_miss"
    search_iterations: int = 8
    search_seconds: float = 60.0
    proposer: str = "templates"
    families: tuple[str, ...] = ()
    cache_dir: Path = field(default_factory=default_cache_dir)
    team_store: str = ""  # a shared directory; "" = none (store/team.py)
    margin: float = 0.03
    fuse_pointwise: bool = False  # off until measured on a GPU (Note [pointwise groups] in fusion.py)
    fuse_softmax: bool = True  # Note [a softmax takes its neighbours] in softmax_fusion.py
    fuse_norm: bool = True  # Note [a norm takes its epilogue] in norm_fusion.py
    fold_conv_bn: bool = True  # Note [a batch norm folded into its convolution] in conv_fold.py
    direct_calls: bool = True  # Note [Inductor's code calls the kernel, not the op] in inductor_call.py
    check: bool = False
    min_share: float = 0.0
    llm_model: str = ""
    llm_base_url: str = ""
    llm_timeout_s: float = 120.0
    llm_max_tokens: int = 8192
    llm_concurrency: int = 4
    llm_retries: int = 3
    llm_budget_tokens: int = 0
    llm_budget_usd: float = 0.0
    llm_price_in: float = 0.0
    llm_price_out: float = 0.0

    def __post_init__(self) -> None:
        for name, choices in _CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise BadOption(f"kforge option {name}={value!r} is not valid; choose one of: {', '.join(choices)}")
        if self.search_iterations < 1:
            raise BadOption(f"kforge option search_iterations={self.search_iterations} must be >= 1")
        if self.search_seconds <= 0:
            raise BadOption(f"kforge option search_seconds={self.search_seconds} must be > 0")
        if not 0.0 <= self.margin < 1.0:
            raise BadOption(f"kforge option margin={self.margin} must be in [0, 1)")
        for name in ("llm_max_tokens", "llm_concurrency"):
            if getattr(self, name) < 1:
                raise BadOption(f"kforge option {name}={getattr(self, name)} must be >= 1")
        for name in ("llm_timeout_s",):
            if getattr(self, name) <= 0:
                raise BadOption(f"kforge option {name}={getattr(self, name)} must be > 0")
        for name in ("llm_retries", "llm_budget_tokens", "llm_budget_usd", "llm_price_in", "llm_price_out"):
            if getattr(self, name) < 0:
                raise BadOption(f"kforge option {name}={getattr(self, name)} must be >= 0")
        _check_team_store(self.team_store)
        if not 0.0 <= self.min_share < 1.0:
            raise BadOption(f"kforge option min_share={self.min_share} must be in [0, 1)")
        from .selection import OPT_IN_FAMILIES  # local: selection imports nothing from config

        unknown = [f for f in self.families if f not in OPT_IN_FAMILIES]
        if unknown:
            raise BadOption(
                f"kforge option families={','.join(self.families)!r}: unknown {unknown}; "
                f"families you can opt in: {', '.join(sorted(OPT_IN_FAMILIES))}"
            )

    @classmethod
    def load(cls, options: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> "KforgeConfig":
        """Build the config from explicit options first, then ``KFORGE_*`` variables, then defaults."""
        env = os.environ if env is None else env
        options = dict(options or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - set(fields))
        if unknown:
            close = {name: difflib.get_close_matches(name, fields, n=1) for name in unknown}
            hint = "".join(f" ({name}: did you mean {m[0]!r}?)" for name, m in close.items() if m)
            raise BadOption(f"unknown kforge option(s) {unknown}{hint}; valid options: {', '.join(sorted(fields))}")
        values: dict[str, Any] = {}
        for name, f in fields.items():
            if name in options:
                raw, source = options[name], f"option {name}"
            elif f"KFORGE_{name.upper()}" in env:
                raw, source = env[f"KFORGE_{name.upper()}"], f"KFORGE_{name.upper()}"
            else:
                continue
            values[name] = _coerce(name, f.type, raw, source)
        return cls(**values)


def _check_team_store(value: str) -> None:
    """A team store names a directory or nothing; a missing one is allowed (a share mounted later: store/team.py)."""
    if value != value.strip():
        raise BadOption(f"kforge option team_store={value!r} has spaces around it; give the directory's path alone")
    if value and Path(value).expanduser().exists() and not Path(value).expanduser().is_dir():
        raise BadOption(f"kforge option team_store={value!r} is a file; it must name a directory the team shares "
                        "(or be empty for no team store)")


def _coerce(name: str, type_name: Any, raw: Any, source: str) -> Any:
    type_name = str(type_name)
    if name in _CHOICES and str(raw) not in _CHOICES[name]:
        raise BadOption(f"kforge {source}={raw!r} is not valid; choose one of: {', '.join(_CHOICES[name])}")
    try:
        if type_name == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")
        if type_name == "int":
            if isinstance(raw, bool):
                raise ValueError("expected an integer")
            return int(raw)
        if type_name == "float":
            return float(raw)
        if type_name == "Path":
            return Path(raw).expanduser()
        if type_name.startswith("tuple"):
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return tuple(s.strip() for s in items if str(s).strip())
        return str(raw)
    except (TypeError, ValueError) as e:
        raise BadOption(f"kforge {source}={raw!r} is not a valid {type_name}: {e}") from e
