"""A search record written as the search grows, so that ``kforge ui`` can show a search while it runs and a search
cut short (Ctrl-C, a crash of this process) leaves its tree behind.

Note [a search record written as it grows]
``run_search`` used to write a search's record once, after its decision, so a search in progress was invisible and a
search that died took its whole tree with it. Now the record is written when the search starts (the root, eager's
time), then after evaluated candidates, at most once every ``EVERY_S`` seconds (a snapshot of 50 nodes with their
sources is about a megabyte of JSON and takes milliseconds, against a candidate's compile, verification and timing),
and once more, whole, by ``run_search`` after the decision. Each write replaces the file atomically (LocalStore.
put_search), so a reader sees one snapshot or the next. A record without ``finished_at`` is a search in progress;
one that stopped by an exception is written with ``stop_reason`` "interrupted" and why, and one whose process died
outright is recognised by its file's age (ui/data.py: ``search_state``). A rerun of the signature replaces it.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from ..search.mcts import SearchProgress
from ..search.records import SearchRecord
from ..store.local import LocalStore

log = logging.getLogger("kforge")

INTERRUPTED = "interrupted"  # the stop_reason of a search that ended by an exception, without a decision
EVERY_S = 1.0  # the least time between two snapshots of one search


class LiveRecord:
    """An ``on_progress`` callback that also writes the record so far (Note [a search record written as it grows]),
    then calls ``then``."""

    def __init__(self, store: LocalStore, key: str, then: Callable[[SearchProgress], None] | None = None,
                 every_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.key, self.then, self.clock = store, key, then, clock
        self.every_s = EVERY_S if every_s is None else every_s
        self._last: float | None = None
        self._failed = False

    def __call__(self, progress: SearchProgress) -> None:
        now = self.clock()
        last = progress.iteration >= progress.iterations_budget
        if progress.record is not None and (last or self._last is None or now - self._last >= self.every_s):
            self.save(progress.record)
        if self.then is not None:
            self.then(progress)

    def save(self, record: SearchRecord) -> None:
        """Write ``record`` as it is now. A file the system refuses is logged once and does not stop the search: the
        record is written again, whole, after the decision, and that write raises as it always did."""
        self._last = self.clock()
        try:
            self.store.put_search(self.key, record.to_json())
        except OSError as e:
            if not self._failed:
                log.warning("kforge: could not write the search record of %s as it runs (%s)", self.key[:16], e)
            self._failed = True

    def interrupted(self, record: SearchRecord, error: BaseException) -> None:
        """Write the record of a search that ``error`` stopped before its decision."""
        record.stop_reason = INTERRUPTED
        record.reason = f"the search stopped without a decision: {type(error).__name__}: {error}".rstrip(": ")
        self.save(record)
