"""Search records: every node of one kernel search, as JSON a person (or the UI) can read later.

A :class:`SearchRecord` answers two questions without re-running anything: *why did this kernel win* (its lineage
of actions, its timings, the re-measure against eager and the margin) and *why did the others fail* (each failed
node keeps its stage, reason and compiler or verifier log). Records are plain JSON, never pickle, and are written
atomically (temp file, then ``os.replace``) so that a reader never sees half a file; a file that does not parse
raises :class:`CorruptRecord`, which callers treat as a miss and report.

Leaf of the search package: imports nothing from kforge except errors and fsutil.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import KforgeError
from ..fsutil import atomic_write

RECORD_VERSION = 1
NODE_STATUSES = ("root", "ok", "failed", "pending")
DECISIONS = ("kernel", "pytorch")


class CorruptRecord(KforgeError, ValueError):
    """A record file exists but cannot be read back (bad JSON or missing fields). The message names the file."""


@dataclass
class NodeRecord:
    """One node of the search tree: an evaluated (or pending, or failed) candidate, or the root (eager PyTorch)."""

    id: int
    parent: int | None  # None for the root
    proposer: str
    action: str  # one line: what this node changes relative to its parent
    params: dict[str, Any] = field(default_factory=dict)
    candidate: dict[str, Any] | None = None  # Candidate.to_json(); None at the root or when proposing failed
    status: str = "pending"
    failure_stage: str | None = None  # one of CandidateFailure.STAGES when status == "failed"
    failure_reason: str | None = None
    compile_log: str = ""
    verify_report: dict[str, Any] | None = None
    time_us: float | None = None  # median device time; eager's time at the root
    pct_bw: float | None = None  # percent of the measured copy bandwidth the kernel reaches
    speedup: float | None = None  # eager_us / time_us
    reward: float = 0.0  # normalised to [0, 1], 0 for failures (see mcts Note [normalised reward])
    visits: int = 0
    value_sum: float = 0.0
    best_reward: float = 0.0  # best reward anywhere in this node's subtree
    created_at: float = 0.0  # unix time
    finished_at: float | None = None
    iteration: int = 0  # 1-based order in which the node finished evaluating; 0 for the root and pending nodes
    extra: dict[str, Any] = field(default_factory=dict)  # tokens, cost, prompt hash, ...

    def __post_init__(self) -> None:
        if self.status not in NODE_STATUSES:
            raise ValueError(f"node {self.id}: unknown status {self.status!r}; valid: {NODE_STATUSES}")

    @property
    def mean_value(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "NodeRecord":
        return cls(**_known_fields(cls, d))


@dataclass
class SearchRecord:
    """The whole search of one operator signature, with the decision and a sentence saying why."""

    key: str
    op: str
    card: dict[str, Any]
    eager_us: float
    floor_us: float
    bandwidth_gbps: float | None = None
    nodes: list[NodeRecord] = field(default_factory=list)  # index == node id; nodes[0] is the root
    winner_id: int | None = None  # set only when decision == "kernel"
    remeasured_id: int | None = None  # the best node, which was re-measured (also when PyTorch was kept)
    winner_remeasured_us: list[float] = field(default_factory=list)
    decision: str = "pytorch"
    reason: str = ""
    stop_reason: str = ""  # iterations | seconds | roofline | exhausted | tokens | cost
    iterations: int = 0
    iterations_to_best: int | None = None
    started_at: float = 0.0
    finished_at: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    version: int = RECORD_VERSION

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"unknown decision {self.decision!r}; valid: {DECISIONS}")

    # ---- summaries the UI and the CLI read -------------------------------------------------------------------------

    def node(self, node_id: int) -> NodeRecord:
        return self.nodes[node_id]

    def children(self, node_id: int) -> list[NodeRecord]:
        return [n for n in self.nodes if n.parent == node_id]

    def lineage(self, node_id: int) -> list[NodeRecord]:
        """Root .. node: the chain of actions that led to a candidate."""
        chain = [self.nodes[node_id]]
        while chain[-1].parent is not None:
            chain.append(self.nodes[chain[-1].parent])
        return chain[::-1]

    def best_node(self) -> NodeRecord | None:
        """The fastest evaluated candidate (lowest id on ties), whatever the decision was."""
        ok = [n for n in self.nodes if n.status == "ok" and n.time_us is not None]
        return min(ok, key=lambda n: (n.time_us, n.id), default=None)

    def winner(self) -> NodeRecord | None:
        return None if self.winner_id is None else self.nodes[self.winner_id]

    def failed_nodes(self, stage: str | None = None) -> list[NodeRecord]:
        return [n for n in self.nodes if n.status == "failed" and (stage is None or n.failure_stage == stage)]

    def failures_by_stage(self) -> dict[str, int]:
        return dict(Counter(n.failure_stage or "unknown" for n in self.failed_nodes()))

    def summary(self) -> dict[str, Any]:
        best = self.best_node()
        return {
            "key": self.key, "op": self.op, "decision": self.decision, "reason": self.reason,
            "stop_reason": self.stop_reason, "iterations": self.iterations,
            "iterations_to_best": self.iterations_to_best,
            "ok": sum(n.status == "ok" for n in self.nodes), "failed": self.failures_by_stage(),
            "best_id": best.id if best else None, "best_speedup": best.speedup if best else None,
            "best_pct_roofline": 100.0 * self.floor_us / best.time_us if best and best.time_us else None,
        }

    # ---- JSON and files --------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "nodes"}
        d["nodes"] = [n.to_json() for n in self.nodes]
        return json.loads(json.dumps(d))  # a deep copy that owns no live objects of the engine

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SearchRecord":
        fields = _known_fields(cls, d)
        fields["nodes"] = [NodeRecord.from_json(n) for n in d.get("nodes", [])]
        return cls(**fields)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=True)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically: a reader sees the old file or the new one, never a torn one."""
        path = Path(path)
        atomic_write(path, self.dumps().encode("utf-8"))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "SearchRecord":
        """Read a saved record. A missing file raises FileNotFoundError; an unreadable one CorruptRecord."""
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CorruptRecord(f"search record {path} is not valid JSON: {e}") from e
        if not isinstance(d, dict):
            raise CorruptRecord(f"search record {path} holds a {type(d).__name__}, not an object")
        try:
            return cls.from_json(d)
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptRecord(f"search record {path} is malformed: {e}") from e


def _known_fields(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the fields this version knows, so that a record written by a newer kforge still loads."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}
