"""What ``kforge ui`` shows, as JSON-able views of the search records in a cache directory: the list of searches,
one search's tree, one node whole (its source, the diff against its parent's, its launch plan, logs and reports).

Reads only: nothing here writes to the cache. A record file that does not parse is listed as unreadable, with why,
rather than hidden (a corrupt entry is a miss, reported). Views are rebuilt from the files on every request, so a
search that another process is running shows as it grows (Note [a search record written as it grows] in
runtime/live_record.py).
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cards import OperatorCard, inputs_text
from ..runtime.live_record import INTERRUPTED
from ..search.records import CorruptRecord, SearchRecord
from ..store.queue import MissQueue
from ..store.record import is_key

# A search in progress rewrites its record after every candidate, at least once a minute in practice (a candidate's
# compile, verification and timing; an LLM's answer). A record without a decision whose file is older than this was
# left by a process that died: it is shown as interrupted, not live.
STALE_S = 300.0

STATES = ("live", "finished", "interrupted", "unreadable")
_NODE_FIELDS = ("id", "parent", "proposer", "action", "status", "failure_stage", "failure_reason", "time_us",
                "pct_bw", "speedup", "reward", "visits", "iteration")


@dataclass(frozen=True)
class Listing:
    """One search in the list: enough to pick it and to see how it went."""

    key: str
    state: str  # one of STATES
    updated_at: float  # the record file's mtime, unix time
    op: str = ""
    tensors: str = ""  # the inputs' dtypes and shapes, e.g. "bfloat16[64, 262144]"
    decision: str = ""
    reason: str = ""
    stop_reason: str = ""
    iterations: int = 0
    iterations_budget: int | None = None
    ok: int = 0
    failed: int = 0
    best_speedup: float | None = None
    best_pct_roofline: float | None = None
    started_at: float = 0.0
    finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def search_state(record: SearchRecord, mtime: float, now: float) -> str:
    """live, finished or interrupted (Note [a search record written as it grows] in runtime/live_record.py)."""
    return _state(record.finished_at, record.stop_reason, mtime, now)


def _state(finished_at: float | None, stop_reason: str, mtime: float, now: float) -> str:
    if finished_at is not None:
        return "finished"
    if stop_reason == INTERRUPTED or now - mtime > STALE_S:
        return "interrupted"
    return "live"


# A search record file, at most: 50 candidates with their sources and logs are a few MB; a team store's file is
# another machine's (Note [a search tree beside a team's kernel] in store/team.py).
MAX_SEARCH_BYTES = 64 * 1024 * 1024


def load(directory: Path, key: str) -> tuple[SearchRecord, float]:
    """The record of ``key`` in ``directory`` and its file's mtime. FileNotFoundError when there is none;
    CorruptRecord when its file does not read back or is over MAX_SEARCH_BYTES."""
    path = directory / f"{key}.json"
    st = path.stat()
    if st.st_size > MAX_SEARCH_BYTES:
        raise CorruptRecord(f"{path.name} is {st.st_size:,} bytes, over the {MAX_SEARCH_BYTES:,} a search record "
                            "may have")
    return SearchRecord.load(path), st.st_mtime


class Listings:
    """The listing of a directory's search records, live ones first, then the most recently written. A file is
    parsed again only when it changed (its inode, mtime or size): the page asks every two seconds, and the searches
    of a whole model are tens of megabytes of JSON (a node keeps its source). Safe to call from several threads."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen: dict[str, tuple[tuple[int, int, int], Listing]] = {}
        self._lock = threading.Lock()

    def __call__(self, now: float | None = None) -> list[Listing]:
        now = time.time() if now is None else now
        paths = sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []
        with self._lock:
            seen, self._seen = self._seen, {}
            for path in (p for p in paths if is_key(p.stem)):
                try:
                    st = path.stat()
                except FileNotFoundError:  # removed since the directory was listed
                    continue
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # each atomic write is a new file
                old = seen.get(path.stem)
                entry = old[1] if old is not None and old[0] == stamp else self._read(path.stem, st.st_mtime)
                if entry is not None:
                    self._seen[path.stem] = (stamp, entry)
            entries = [e for _, e in self._seen.values()]
        entries = [e if e.state == "unreadable" else
                   dataclasses.replace(e, state=_state(e.finished_at, e.stop_reason, e.updated_at, now))
                   for e in entries]
        return sorted(entries, key=lambda e: (e.state != "live", -e.updated_at))

    def _read(self, key: str, mtime: float) -> Listing | None:
        try:
            record, mtime = load(self.directory, key)
        except FileNotFoundError:
            return None
        except CorruptRecord as e:
            return Listing(key, "unreadable", mtime, reason=str(e))
        return _listing(record, key, mtime, mtime)


def _listing(record: SearchRecord, key: str, mtime: float, now: float) -> Listing:
    s = record.summary()
    done = record.finished_at is not None
    started = record.started_at or (record.nodes[0].created_at if record.nodes else 0.0)  # 0 until run() starts
    return Listing(key, search_state(record, mtime, now), mtime, record.op, inputs_text(record.card),
                   record.decision if done else "", record.reason, record.stop_reason, record.iterations,
                   record.config.get("iterations"), s["ok"], sum(s["failed"].values()), s["best_speedup"],
                   s["best_pct_roofline"], started, record.finished_at)


def search_view(directory: Path, key: str, now: float | None = None) -> dict[str, Any]:
    """One search: its listing, the card as text, the search's config, the winner and the best node, and every node
    without its source (``node_view`` has that). Raises as :func:`load` does."""
    record, mtime = load(directory, key)
    listing_ = _listing(record, key, mtime, time.time() if now is None else now)
    best = record.best_node()
    return {
        "listing": listing_.to_json(), "card_text": card_text(record.card, record.bandwidth_gbps),
        "config": record.config,
        "eager_us": record.eager_us, "floor_us": record.floor_us, "bandwidth_gbps": record.bandwidth_gbps,
        "winner_id": record.winner_id, "best_id": best.id if best else None,
        "remeasured_id": record.remeasured_id, "winner_remeasured_us": record.winner_remeasured_us,
        "iterations_to_best": record.iterations_to_best, "failures_by_stage": record.failures_by_stage(),
        "nodes": [_node_brief(n) for n in record.nodes],
    }


def card_text(card: dict[str, Any], bandwidth_gbps: float | None) -> str:
    """An operator card (a search's or a kernel record's) as ``kforge cards`` prints it."""
    try:
        return OperatorCard.from_json(card).render(bandwidth_gbps)
    except (KeyError, TypeError, ValueError) as e:  # a card of another kforge version: show what is there
        return f"(the card does not read as this kforge's: {e})\n" + json.dumps(card, indent=1)


def _node_brief(node: Any) -> dict[str, Any]:
    d = {f: getattr(node, f) for f in _NODE_FIELDS}
    d["description"] = (node.candidate or {}).get("description", "")
    d["duplicate_of"] = node.extra.get("duplicate_of")
    return d


def node_view(directory: Path, key: str, node_id: int, against: int | None = None) -> dict[str, Any]:
    """One node whole, with its lineage from the root, the diff of its source against its parent's (or against node
    ``against``: the best, the winner, any other) and the params it changed. IndexError for a node the record does
    not have; otherwise raises as :func:`load` does."""
    record, _ = load(directory, key)
    node = _node(record, key, node_id)
    base_id = node.parent if against is None else _node(record, key, against).id
    base = record.node(base_id) if base_id is not None else None
    cand = node.candidate or {}
    best = record.best_node()
    return {
        **node.to_json(), "source": cand.get("source", ""), "plan": cand.get("plan"),
        "description": cand.get("description", ""),
        "lineage": [{"id": n.id, "action": n.action} for n in record.lineage(node_id)],
        "diff_against": base_id, "diff": source_diff(base, node), "params_changed": params_changed(base, node),
        "best_id": best.id if best else None, "winner_id": record.winner_id,
        "is_winner": record.winner_id == node_id,
        "why": _why(record, node_id),
    }


def _node(record: SearchRecord, key: str, node_id: int) -> Any:
    if not 0 <= node_id < len(record.nodes):
        raise IndexError(f"search {key[:16]} has nodes 0..{len(record.nodes) - 1}, not {node_id}")
    return record.node(node_id)


def source_diff(parent: Any, node: Any) -> str:
    """The unified diff of the node's source against ``parent``'s (its parent, or another node); empty when either
    has none."""
    new = (node.candidate or {}).get("source")
    old = (parent.candidate or {}).get("source") if parent is not None else None
    if not new or not old:
        return ""
    return "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), f"node {parent.id}",
                                          f"node {node.id}", lineterm=""))


def params_changed(parent: Any, node: Any) -> dict[str, list[Any]]:
    """Template knobs that differ from ``parent``'s: name -> [its value, this node's] (None where unset)."""
    old = parent.params if parent is not None else {}
    keys = sorted(set(old) | set(node.params))
    return {k: [old.get(k), node.params.get(k)] for k in keys if old.get(k) != node.params.get(k)}


def _why(record: SearchRecord, node_id: int) -> str:
    """One sentence: why this node won, failed, lost or is the root."""
    node = record.node(node_id)
    if node.status == "root":
        return "PyTorch's own kernel: the baseline every candidate is timed against"
    if node.status == "failed":
        return f"failed at {node.failure_stage or 'an unknown stage'}: {node.failure_reason or 'no reason recorded'}"
    if node.status == "pending":
        return "not evaluated yet" if record.finished_at is None else "never evaluated (the search stopped first)"
    if record.winner_id == node_id:
        return record.reason
    if record.remeasured_id == node_id:
        return f"the fastest candidate, but PyTorch was kept: {record.reason}"
    best = record.best_node()
    if best is not None and best.id != node_id and best.time_us and node.time_us:
        return f"verified, {node.time_us:.2f} us: {node.time_us / best.time_us:.2f}x the time of the best (node " \
               f"{best.id}, {best.time_us:.2f} us)"
    return f"verified, {node.time_us:.2f} us" if node.time_us else "verified"


def queued(cache_dir: str | Path) -> list[dict[str, Any]]:
    """The misses compiles queued for ``kforge prewarm --queued`` (Note [a miss kept for later] in store/queue.py),
    the most often missed first: the searches still to come."""
    return [{"key": m.key, "op": m.card.get("op", ""), "tensors": inputs_text(m.card), "arch": m.card.get("arch"),
             "processes": m.misses, "last_seen": m.last_seen, "why": m.why}
            for m in MissQueue(cache_dir).misses()]
