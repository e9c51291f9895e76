"""Inductor's own time for one signature's op, kept in the signature's record.

Note [the baseline inside Inductor] (cuda_provider.py) says why a kernel used inside Inductor must beat Inductor's
compiled version of the same single op. That time is measured once per signature by the search worker and stored in
the local record's timings as ``inductor_us``, so a later compile, or ``kforge prewarm`` ahead of it, does not
measure it again.
"""
from __future__ import annotations

from typing import Any

from ..cards import OperatorCard
from ..store.local import LocalStore
from ..store.record import KernelRecord


def inductor_us(card: OperatorCard, record: KernelRecord, client: Any, local: LocalStore) -> float:
    """The record's ``inductor_us``, timed by ``client`` (a search worker) and written to the local record the first
    time. Raises what the worker raises (``CandidateFailure``, ``RuntimeError``) when it cannot be timed."""
    stored = record.timings.get("inductor_us")
    if stored is not None:
        return float(stored)
    ind = float(client.call({"cmd": "inductor_baseline", "card": card.to_json()}, timeout_s=600)["inductor_us"])
    if record.source == "local":
        local.put(record.replace(timings={**record.timings, "inductor_us": ind}))
    return ind
