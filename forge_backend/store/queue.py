"""MissQueue: the signatures a compile met and did not search, kept for ``kforge prewarm --queued``.

Note [a miss kept for later]
A compile that does not search a miss leaves its op to PyTorch and, until now, forgot it: to search it later the
user had to write a MODEL_SPEC that rebuilds the model and its inputs, which a training script or a service often
cannot do cheaply. With ``search="queue"`` every miss a search could take (a template family covers it, or the LLM
proposer is configured) is written to ``cache_dir/queue/<key>.json`` with its operator card, which is all a search
needs (the card holds the signature; prewarm draws inputs from it). With ``search="on_miss"`` the misses that the
compile's budget left unsearched are queued the same way, and so is a search cut short before any verdict.
``kforge prewarm --queued`` then profiles and searches the queued cards as it does a model's, and an entry leaves
the queue once the local cache holds a decision for its key (``prune``). ``search="off"`` records nothing.

One JSON file a key, written atomically, so compiles in several processes can queue at once: the last write of a
key wins, and the count of processes that missed it may lose one then, never a whole entry. A file that does
not read back is reported and skipped, never raised into a compile.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..fsutil import atomic_write
from .record import CorruptRecord, check_key, is_key, report_corrupt

if TYPE_CHECKING:
    from ..cards import OperatorCard
    from .local import LocalStore

log = logging.getLogger("kforge.store")

QUEUE_VERSION = 1


@dataclass(frozen=True)
class QueuedMiss:
    """One queued signature: its card (JSON), when it was first and last missed, by how many processes (a process
    queues a key once), and why it was not searched then."""

    key: str
    card: dict[str, Any]
    first_seen: float
    last_seen: float
    misses: int
    why: str

    def card_obj(self) -> "OperatorCard":
        from ..cards import OperatorCard

        return OperatorCard.from_json(self.card)

    def to_json(self) -> dict[str, Any]:
        return {"version": QUEUE_VERSION, "key": self.key, "card": self.card, "first_seen": self.first_seen,
                "last_seen": self.last_seen, "misses": self.misses, "why": self.why}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "QueuedMiss":
        try:
            miss = cls(str(d["key"]), dict(d["card"]), float(d["first_seen"]), float(d["last_seen"]),
                       int(d["misses"]), str(d.get("why", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptRecord(f"queued miss is malformed: {e}") from e
        if miss.card.get("key") != miss.key:
            raise CorruptRecord(f"queued miss {miss.key[:16]} holds the card of {str(miss.card.get('key'))[:16]}")
        return miss


class MissQueue:
    """Queued misses in ``<cache_dir>/queue/<key>.json`` (Note [a miss kept for later])."""

    def __init__(self, cache_dir: str | os.PathLike[str]) -> None:
        self.directory = Path(cache_dir).expanduser() / "queue"

    def __repr__(self) -> str:
        return f"MissQueue({str(self.directory)!r})"

    def _path(self, key: str) -> Path:
        return self.directory / f"{check_key(key)}.json"

    def add(self, card: "OperatorCard", why: str, now: float | None = None) -> QueuedMiss:
        """Queue ``card`` (or count one more miss of it), saying why it was not searched."""
        now = time.time() if now is None else now
        old = self.get(card.key)
        miss = QueuedMiss(card.key, card.to_json(), old.first_seen if old else now, now,
                          (old.misses if old else 0) + 1, why)
        atomic_write(self._path(card.key), (json.dumps(miss.to_json(), sort_keys=True) + "\n").encode())
        return miss

    def get(self, key: str) -> QueuedMiss | None:
        """The queued miss of ``key``; None when absent, or corrupt (reported)."""
        path = self._path(key)
        try:
            return QueuedMiss.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError, CorruptRecord) as e:
            report_corrupt(str(self.directory), key, CorruptRecord(f"{path.name}: {e}"))
            return None

    def keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.json") if is_key(p.stem))

    def misses(self) -> list[QueuedMiss]:
        """Every readable queued miss, the most often missed first."""
        found = [m for m in (self.get(k) for k in self.keys()) if m is not None]
        return sorted(found, key=lambda m: (-m.misses, -m.last_seen, m.key))

    def remove(self, key: str) -> bool:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            return False
        return True

    def prune(self, store: "LocalStore") -> list[str]:
        """Remove the misses the local cache now holds a decision for (a kernel, or PyTorch kept); their keys."""
        done = [k for k in self.keys() if store.get(k) is not None]
        for key in done:
            self.remove(key)
        return done

    def clear(self) -> int:
        keys = self.keys()
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                self._path(key).unlink()
        return len(keys)
