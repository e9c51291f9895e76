"""The LLM proposer's prompts: package data files under prompts/, rendered with :class:`string.Template`.

``$name`` placeholders, not ``str.format``: the files hold CUDA and JSON, whose braces ``format`` would eat.

* ``system.md``: the kernel contract, the answer format and one worked example (``example_kernel.cu`` +
  ``example_plan.json``, a real kernel that tests compile with NVRTC).
* ``expand.md``: one expansion: the operator card, eager time and roofline floor, the GPU, the parent's source,
  plan and measurements, failed children (so their mistakes are not repeated) and sibling actions (so the new child
  differs).
* ``repair.md``: the one repair turn, quoting the parse, screen or compile error.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from string import Template
from typing import Any, Mapping, Sequence

from ...cards import OperatorCard
from ...contract import ALLOWED_INCLUDES
from ...errors import CandidateFailure
from ..proposer import ParentView

PROMPT_FILES = ("system.md", "expand.md", "repair.md", "example_kernel.cu", "example_plan.json")
EXAMPLE_REFERENCE = ("aten._softmax.default(self, dim=-1, half_to_float=False) on a contiguous float32 tensor; "
                     "named sizes rows, cols")

# How much of each log goes into a prompt. A compile log's first error is what matters; verification reports put
# the max error first. Six failed children of 2,000 characters keep the expand prompt under ~6k tokens.
MAX_FAILED = 6
FAILED_LOG_CHARS = 2000
REPAIR_LOG_CHARS = 4000
MAX_QUOTED_ERRORS = 5


@dataclass(frozen=True)
class GpuFacts:
    """What the prompt tells the model about the GPU. Defaults: the H200 kforge is tuned on."""

    name: str = "NVIDIA H200"
    arch: str = "sm_90"
    sm_count: int = 132
    smem_per_block_kb: int = 227
    l2_mb: int = 60
    regs_per_sm: int = 65536
    max_threads_per_sm: int = 2048
    # Measured device-to-device copy (bytes read + written) on the H200, anchors of 2026-11-30; pass the machine's
    # own measurement where there is one.
    bandwidth_gbps: float | None = 4248.0

    def render(self) -> str:
        bw = (f"measured copy bandwidth {self.bandwidth_gbps:.0f} GB/s (bytes read + written)"
              if self.bandwidth_gbps else "copy bandwidth not measured")
        return (f"{self.name} ({self.arch}): {self.sm_count} SMs; up to {self.smem_per_block_kb} KB shared memory "
                f"per block (opt-in above 48 KB needs dynamic smem); {self.l2_mb} MB L2; {self.regs_per_sm} "
                f"registers and at most {self.max_threads_per_sm} threads per SM; warp size 32, at most 1024 "
                f"threads per block; {bw}.")

    @classmethod
    def of_device(cls, gpu: dict[str, Any], bandwidth_gbps: float | None) -> "GpuFacts":
        """The facts of the GPU a search runs on: ``gpu`` as the worker's baseline reply describes it
        (runtime/worker.py, ``gpu_description``)."""
        return cls(gpu["name"], gpu["arch"], gpu["sm_count"], gpu["smem_per_block_kb"], gpu["l2_mb"],
                   gpu["regs_per_sm"], gpu["max_threads_per_sm"], bandwidth_gbps)

    def stable(self) -> str:
        """The facts that shape an answer, without the measured bandwidth (it varies run to run)."""
        return f"{self.name}|{self.arch}|{self.sm_count}|{self.smem_per_block_kb}|{self.l2_mb}"


@functools.lru_cache(maxsize=None)
def read(name: str) -> str:
    if name not in PROMPT_FILES:
        raise KeyError(f"unknown prompt file {name!r}; prompt files: {', '.join(PROMPT_FILES)}")
    return resources.files(__package__).joinpath("prompts", name).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def prompt_version() -> str:
    """Hash of every prompt file: editing a prompt invalidates cached answers."""
    h = hashlib.sha256()
    for name in PROMPT_FILES:
        h.update(name.encode() + b"\0" + read(name).encode() + b"\0")
    return h.hexdigest()[:16]


def render(name: str, **values: Any) -> str:
    return Template(read(name)).substitute(**values).strip() + "\n"


def system_message() -> str:
    return render("system.md", allowed_includes=", ".join(f"`{h}`" for h in sorted(ALLOWED_INCLUDES)),
                  example_reference=EXAMPLE_REFERENCE, example_kernel=read("example_kernel.cu").strip(),
                  example_plan=read("example_plan.json").strip())


def expand_message(card: OperatorCard, parent: ParentView, facts: GpuFacts) -> str:
    eager = parent.eager_us if parent.eager_us is not None else card.baselines_us.get("eager")
    floor = parent.floor_us
    if floor is None and facts.bandwidth_gbps:
        floor = card.floor_us(facts.bandwidth_gbps)
    return render("expand.md", card=card.render(facts.bandwidth_gbps), eager=_us(eager), floor=_us(floor),
                  gpu=facts.render(), parent=_parent_text(parent), failed=_failed_text(parent.failed_children),
                  siblings=_siblings_text(parent.sibling_actions))


def repair_message(failure: CandidateFailure, source: str | None) -> str:
    if failure.stage == "compile":
        details = _compile_details(failure.log, source)
    elif failure.stage == "screen":
        details = "The kernel contract forbids this; see the rules in the system message."
    else:
        details = ("An answer needs one ```cuda block that defines every kernel the plan names, and one ```json "
                   "block holding an object with a non-empty \"launches\" list.")
    return render("repair.md", stage=failure.stage, message=failure.message, details=details)


def chat_messages(card: OperatorCard, parent: ParentView, facts: GpuFacts) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_message()},
            {"role": "user", "content": expand_message(card, parent, facts)}]


# --------------------------------------------------------------------------------------------------------------------
# pieces


def truncate(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f"\n... [{len(text) - limit} more characters cut]"


def _us(v: float | None) -> str:
    return f"{v:.2f} us" if v is not None else "an unmeasured time"


def _parent_text(parent: ParentView) -> str:
    c = parent.candidate
    if c is None:
        return "The parent is PyTorch's own kernel: there is no parent source yet. Write a first kernel."
    meas = [f"time {_us(parent.time_us)}"]
    meas.append(f"{parent.pct_bw:.0f}% of the roofline" if parent.pct_bw is not None else "roofline share unknown")
    meas.append(f"{parent.speedup:.2f}x eager" if parent.speedup is not None else "speedup unknown")
    return "\n".join([
        f"What it does: {c.description or '(no description)'}",
        f"Measured: {', '.join(meas)}.",
        "```cuda", c.source.strip(), "```",
        "```json", json.dumps(c.plan_json(), indent=2), "```",
    ])


def _failed_text(failed: Sequence[Mapping[str, Any]]) -> str:
    if not failed:
        return "(none)"
    items = list(failed)[-MAX_FAILED:]
    out = []
    if len(failed) > len(items):
        out.append(f"({len(failed) - len(items)} older failures not shown)")
    for f in items:
        out.append(f"- {f.get('action') or '(no action)'}: failed at {f.get('stage', '?')}: {f.get('reason', '')}")
        log = str(f.get("log") or "").strip()
        if log:
            out += ["  ```text", _indent(truncate(log, FAILED_LOG_CHARS), "  "), "  ```"]
    return "\n".join(out)


def _siblings_text(actions: Sequence[str]) -> str:
    return "\n".join(f"- {a}" for a in actions) if actions else "(none yet)"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


_LOG_LINE_RE = re.compile(r"\((\d+)\): (?:error|warning)")


def _compile_details(log: str, source: str | None) -> str:
    """The NVRTC log, then each source line it names with its number, so the model need not count lines."""
    parts = ["NVRTC's log:", "```text", truncate(log or "(empty log)", REPAIR_LOG_CHARS), "```"]
    lines = (source or "").splitlines()
    numbers = sorted({int(n) for n in _LOG_LINE_RE.findall(log or "")})[:MAX_QUOTED_ERRORS]
    quoted = [f"{n:5d} | {lines[n - 1]}" for n in numbers if 0 < n <= len(lines)]
    if quoted:
        parts += ["The source lines it names:", "```cuda", *quoted, "```"]
    return "\n".join(parts)
