"""Turn an LLM answer (free text) into a candidate, or into a named failure. Never raises anything else.

Models wrap answers in prose, show a draft before the final kernel, split helpers into their own block, tag blocks
```cuda / ```cpp / ```c or not at all, and put comments or trailing commas in JSON. The rules below take the last
usable answer, which is what a model that revises itself means.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ...contract import Candidate, kernels_defined, screen
from ...errors import CandidateFailure, ContractViolation

SOURCE_LANGS = frozenset({"cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp"})
PLAN_LANGS = frozenset({"json", "jsonc", "json5"})
MAX_ACTION_CHARS = 200
RESPONSE_LOG_CHARS = 4000

# A fenced block: ```lang ... ```; an unterminated last block (answer cut by max_tokens) runs to the end.
_BLOCK_RE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_ACTION_RE = re.compile(r"^[\s>#*_-]*ACTION[*_]*\s*:[*_\s]*(.+?)[*_\s]*$", re.M | re.I)
_TRAILING_COMMA_RE = re.compile(r",(\s*[}\]])")
_LINE_COMMENT_RE = re.compile(r"^\s*//[^\n]*$|(?<=[,\[{\s])//[^\n\"]*$", re.M)


@dataclass(frozen=True)
class Answer:
    action: str
    source: str
    plan: dict[str, Any]


@dataclass(frozen=True)
class _Block:
    lang: str
    text: str


def parse_answer(text: str) -> Answer:
    """Extract action, source and plan. Raises CandidateFailure('parse') whose log is the answer (truncated)."""
    if not text or not text.strip():
        raise _parse_failure("the answer is empty", text)
    blocks = [_Block(m.group(1).lower(), m.group(2)) for m in _BLOCK_RE.finditer(text)]
    plan = _find_plan(blocks, text)
    source = _find_source(blocks, _plan_kernels(plan), text)
    return Answer(_find_action(text, plan), source, plan)


def action_line(text: str) -> str | None:
    """The answer's ACTION line, if it has one (read even from answers that fail to parse)."""
    m = _ACTION_RE.search(_BLOCK_RE.sub("", text or ""))
    return _one_line(m.group(1)) if m else None


def to_candidate(answer: Answer) -> Candidate:
    """Build the Candidate; a plan the contract cannot read is a parse failure."""
    try:
        return Candidate.from_parts(answer.source, answer.plan, answer.action)
    except (ContractViolation, ValueError, TypeError, AttributeError) as e:
        raise CandidateFailure("parse", f"the launch plan is malformed: {e}", json.dumps(answer.plan)[:2000]) from e


def source_escape(source: str) -> str | None:
    """Why the source escapes the contract (host code, a disallowed include, clock reads), or None.

    Screens the source alone (no launches), so a plan naming the wrong kernel is not counted as an escape.
    """
    try:
        screen(Candidate(source, ()))
    except ContractViolation as e:
        return str(e)
    return None


def screen_candidate(candidate: Candidate) -> None:
    """The whole contract (source and plan). Raises CandidateFailure('screen')."""
    try:
        screen(candidate)
    except ContractViolation as e:
        raise CandidateFailure("screen", str(e)) from e


# --------------------------------------------------------------------------------------------------------------------


def _parse_failure(message: str, text: str) -> CandidateFailure:
    body = (text or "").strip()
    if len(body) > RESPONSE_LOG_CHARS:
        body = body[:RESPONSE_LOG_CHARS] + f"\n... [{len(body) - RESPONSE_LOG_CHARS} more characters cut]"
    return CandidateFailure("parse", message, body)


def _is_plan_block(b: _Block) -> bool:
    return b.lang in PLAN_LANGS or (not b.lang and b.text.lstrip().startswith("{"))


def _is_source_block(b: _Block) -> bool:
    return "__global__" in b.text and (b.lang in SOURCE_LANGS or not b.lang)


def _find_plan(blocks: list[_Block], text: str) -> dict[str, Any]:
    errors: list[str] = []
    for b in reversed([b for b in blocks if _is_plan_block(b)]):
        try:
            return _plan_of(_loads_lenient(b.text))
        except ValueError as e:
            errors.append(str(e))
    bare = _bare_plan(text)
    if bare is not None:
        return bare
    if errors:
        raise _parse_failure(f"the ```json launch plan is not usable: {errors[0]}", text)
    raise _parse_failure('no ```json block with the launch plan ({"launches": [...]}) was found', text)


def _plan_of(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict) and isinstance(obj.get("plan"), dict) and "launches" not in obj:
        obj = obj["plan"]
    if not isinstance(obj, dict):
        raise ValueError(f"it is a JSON {type(obj).__name__}, not an object")
    if not isinstance(obj.get("launches"), list) or not obj["launches"]:
        raise ValueError('it has no non-empty "launches" list')
    for launch in obj["launches"]:
        if isinstance(launch, dict):
            for k in ("grid", "block"):  # "grid": "rows" means ["rows", 1, 1]
                if isinstance(launch.get(k), (int, str)):
                    launch[k] = [launch[k], 1, 1]
    return obj


def _loads_lenient(text: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError as e:
        raise ValueError("the JSON is nested too deeply") from e
    except json.JSONDecodeError as first:
        cleaned = _TRAILING_COMMA_RE.sub(r"\1", _LINE_COMMENT_RE.sub("", text))
        try:
            return json.loads(cleaned)
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"JSON error at line {first.lineno} column {first.colno}: {first.msg}") from first


def _bare_plan(text: str) -> dict[str, Any] | None:
    """A plan written outside any fence: {"launches": ...} in the prose."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r'\{\s*"launches"', text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
            return _plan_of(obj)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            continue
    return None


def _plan_kernels(plan: dict[str, Any]) -> set[str]:
    return {str(l.get("kernel")) for l in plan["launches"] if isinstance(l, dict)}


def _find_source(blocks: list[_Block], wanted: set[str], text: str) -> str:
    sources = [b.text.strip() for b in blocks if _is_source_block(b)]
    if not sources:
        raise _parse_failure('no ```cuda block with an extern "C" __global__ kernel was found', text)
    for s in reversed(sources):  # the last complete answer wins over drafts
        if wanted <= kernels_defined(s):
            return s
    joined = "\n\n".join(dict.fromkeys(sources))  # helpers and kernels in separate blocks
    if wanted <= kernels_defined(joined):
        return joined
    return sources[-1]  # screening names the kernel that is missing


def _find_action(text: str, plan: dict[str, Any]) -> str:
    action = action_line(text)
    if action:
        return action
    if isinstance(plan.get("description"), str) and plan["description"].strip():
        return _one_line(plan["description"])
    prose = _BLOCK_RE.sub("", text).strip().splitlines()
    for line in prose:
        line = line.strip(" #*>-\t")
        if line:
            return _one_line(line)
    return "llm kernel"


def _one_line(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= MAX_ACTION_CHARS else s[: MAX_ACTION_CHARS - 3] + "..."
