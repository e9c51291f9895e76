"""The kernel store: KernelRecords by signature key, as JSON with an integrity hash (never pickle).

Tiers, in lookup order: :class:`LocalStore` (diskcache under ``KforgeConfig.cache_dir``; also search records and
bundle export/import), then :class:`ShippedStore` (read-only ``kernels_cache/``); :class:`TieredStore` combines them.
Anything read from another machine (shipped, imported) comes back ``trusted=False`` until re-verified here.

Layering: store imports contract, signature and errors (cards lazily, for views); nothing imports the store except
the runtime and the CLI.
"""
from __future__ import annotations

from .local import BundleError, ImportReport, LocalStore, RecordNotFound
from .record import (DECISIONS, RECORD_VERSION, SOURCES, BadKey, CorruptRecord, IntegrityReport, InvalidRecord,
                     KernelRecord, check_key, is_key, make_provenance)
from .shipped import ShippedStore, TieredStore, default_shipped_dir

__all__ = [
    "DECISIONS", "RECORD_VERSION", "SOURCES", "BadKey", "BundleError", "CorruptRecord", "ImportReport",
    "IntegrityReport", "InvalidRecord", "KernelRecord", "LocalStore", "RecordNotFound", "ShippedStore",
    "TieredStore", "check_key", "is_key", "default_shipped_dir", "make_provenance",
]
