"""The kernel store: KernelRecords by signature key, as JSON with an integrity hash (never pickle).

Tiers, in lookup order: :class:`LocalStore` (diskcache under ``KforgeConfig.cache_dir``; also search records and
bundle export/import), then :class:`TeamStore` (a directory the team shares, ``KforgeConfig.team_store``; this
machine's search winners are published there), then :class:`ShippedStore` (read-only ``kernels_cache/``);
:class:`TieredStore` combines them. The team and shipped tiers are :class:`RecordDirectory` files (``<key>.json``).
Anything read from another machine (team, shipped, imported) comes back ``trusted=False`` until re-verified here.
Beside the tiers, :class:`MissQueue` keeps the cards of the misses compiles did not search, for ``kforge prewarm
--queued`` (Note [a miss kept for later] in queue.py); claims.py says which process of this machine searches a
signature or times on a GPU (Note [one search of a signature at a time]), team_markers.py which machine of a team
searches a signature (Note [a search a teammate is running]); reverified.py what this machine keeps of such a
record once its kernel ran here (Note [a record timed on another GPU model]).

Layering: store imports contract, signature, errors and fsutil (cards lazily, for views; config for type hints
only); the store is imported by the runtime, prewarm, the CLI and the UI, never the other way.
"""
from __future__ import annotations

from .directory import RecordDirectory
from .local import BundleError, ImportReport, LocalStore, RecordNotFound, RecordReader
from .record import (DECISIONS, RECORD_VERSION, SOURCES, BadKey, CorruptRecord, IntegrityReport, InvalidRecord,
                     KernelRecord, check_key, is_key, make_provenance)
from .queue import MissQueue, QueuedMiss
from .shipped import ShippedStore, TieredStore, Tiers, default_shipped_dir
from .team import Published, TeamStore, TeamStoreUnavailable, publish_found, team_store

__all__ = [
    "DECISIONS", "RECORD_VERSION", "SOURCES", "BadKey", "BundleError", "CorruptRecord", "ImportReport",
    "IntegrityReport", "InvalidRecord", "KernelRecord", "LocalStore", "MissQueue", "QueuedMiss", "Published",
    "RecordDirectory", "RecordNotFound", "RecordReader", "ShippedStore", "TeamStore", "TeamStoreUnavailable",
    "TieredStore", "Tiers", "check_key", "is_key", "default_shipped_dir", "make_provenance", "publish_found",
    "team_store",
]
