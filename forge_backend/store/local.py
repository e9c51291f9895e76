"""LocalStore: this machine's KernelRecords in a diskcache, plus search records and bundle export/import.

Layout under ``cache_dir``::

    records/              diskcache (SQLite + files): signature key -> record JSON text
    searches/<key>.json   the last search record of each key (MCTS tree, candidates, logs), written atomically

Note [no pickle in the store]
diskcache pickles any value that is not str/bytes/int/float, and unpickles whatever it finds. The store only ever
puts JSON text under str keys, and :class:`_TextOnlyDisk` refuses to pickle on write and to unpickle on read (a
pickled row reads back as corrupt), so a cache directory copied from elsewhere cannot run code in this process.

Note [concurrency]
diskcache is process-safe (SQLite in WAL mode, one transaction per set), so several processes compiling models at
once share one cache without losing writes; the last writer of a key wins. Search records are written to a temp
file and renamed over the old one, so a reader sees the old record or the new one, never half of one.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import diskcache
from diskcache.core import MODE_PICKLE, UNKNOWN

from ..errors import KforgeError
from ..fsutil import atomic_write
from .record import (CorruptRecord, IntegrityReport, KernelRecord, check_key, is_key, read_record_file,
                     report_corrupt, utc_now)

log = logging.getLogger("kforge.store")

BUNDLE_FORMAT = "kforge-bundle"
BUNDLE_VERSION = 1
INDEX_NAME = "index.json"


class RecordNotFound(KforgeError, KeyError):
    """No record is stored under a key that was asked for by name."""


class BundleError(KforgeError):
    """A bundle directory cannot be read as a whole (missing, or its index is not valid JSON)."""


class _Unreadable:
    """What :class:`_TextOnlyDisk` returns for a row it will not decode; the store reads it as corrupt."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _TextOnlyDisk(diskcache.Disk):
    """A diskcache Disk that stores str values under str keys and never pickles (Note [no pickle in the store])."""

    def put(self, key: Any) -> Any:
        if type(key) is not str:
            raise TypeError(f"store keys are str, not {type(key).__name__}")
        return super().put(key)

    def get(self, key: Any, raw: bool) -> Any:
        return super().get(key, raw) if raw else _Unreadable("pickled key")

    def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> Any:
        if read or type(value) is not str:
            raise TypeError(f"store values are JSON text (str), not {type(value).__name__}")
        return super().store(value, read, key)

    def fetch(self, mode: int, filename: Any, value: Any, read: bool) -> Any:
        if mode == MODE_PICKLE:
            return _Unreadable("a pickled value (the store never writes pickles)")
        try:
            return super().fetch(mode, filename, value, read)
        except UnicodeDecodeError as e:
            return _Unreadable(f"value file is not UTF-8 text: {e}")


@dataclass
class ImportReport:
    """What :meth:`LocalStore.import_bundle` did: imported keys, keys kept because a valid record existed, and
    rejected files with the reason."""

    imported: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)


class RecordReader:
    """What every store tier shares: get (a corrupt entry a reported miss), iterate the valid records and check them
    all, on top of keys/read/where."""

    def keys(self) -> list[str]:
        raise NotImplementedError

    def read(self, key: str) -> KernelRecord | None:
        raise NotImplementedError

    def where(self) -> str:
        """Where a corrupt entry is said to be (report_corrupt)."""
        raise NotImplementedError

    def get(self, key: str) -> KernelRecord | None:
        """The record under ``key``; None on a miss or a corrupt entry (reported once, counted)."""
        try:
            return self.read(key)
        except CorruptRecord as e:
            report_corrupt(self.where(), key, e)
            return None

    def __len__(self) -> int:
        return len(self.keys())

    def items(self) -> Iterator[tuple[str, KernelRecord]]:
        """Every valid record; corrupt entries are reported and skipped."""
        for key in self.keys():
            rec = self.get(key)
            if rec is not None:
                yield key, rec

    def check(self) -> IntegrityReport:
        """Read back every entry and sort the keys into ok and corrupt (with the reason)."""
        report = IntegrityReport()
        for key in self.keys():
            try:
                if self.read(key) is not None:
                    report.ok.append(key)
            except CorruptRecord as e:
                report.corrupt[key] = str(e)
        return report


def searches_dir(cache_dir: str | os.PathLike[str]) -> Path:
    """Where a cache directory keeps its search records; `kforge ui` reads them there without opening the store."""
    return Path(cache_dir).expanduser() / "searches"


class LocalStore(RecordReader):
    """KernelRecords by signature key in ``cache_dir/records``; search records in ``cache_dir/searches``."""

    def __init__(self, cache_dir: str | os.PathLike[str]) -> None:
        self.root = Path(cache_dir).expanduser()
        self.records_dir = self.root / "records"
        self.searches_dir = searches_dir(self.root)
        # eviction "none": records are verified results that cost minutes of GPU time; never cull them silently.
        self._cache = diskcache.Cache(str(self.records_dir), disk=_TextOnlyDisk, eviction_policy="none")

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def close(self) -> None:
        self._cache.close()

    def __enter__(self) -> "LocalStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # records ---------------------------------------------------------------------------------------------------
    def read(self, key: str) -> KernelRecord | None:
        """The record under ``key`` or None; raises CorruptRecord for a corrupt entry (``get`` reports instead)."""
        value = self._cache.get(check_key(key), default=None, retry=True)
        if value is None:
            return None
        if not isinstance(value, str):
            reason = value.reason if isinstance(value, _Unreadable) else type(value).__name__
            raise CorruptRecord(f"stored value is not JSON text: {reason}")
        rec = KernelRecord.loads(value)
        if rec.key != key:
            raise CorruptRecord(f"entry {key[:16]} holds the record of key {rec.key[:16]}")
        return rec

    def where(self) -> str:
        return str(self.records_dir)

    def put(self, record: KernelRecord) -> None:
        """Store ``record`` as JSON text, replacing any record of its key; ``trusted`` is kept as it is."""
        self._cache.set(check_key(record.key), record.dumps(), retry=True)

    def delete(self, key: str) -> bool:
        return bool(self._cache.delete(check_key(key), retry=True))

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._cache

    def keys(self) -> list[str]:
        return sorted(k for k in self._cache.iterkeys() if isinstance(k, str))

    def clear(self) -> int:
        """Remove every record (search records stay; see :meth:`clear_searches`). Returns how many were removed."""
        return int(self._cache.clear(retry=True))

    def stats(self) -> dict[str, Any]:
        counts = {"kernel": 0, "pytorch": 0, "untrusted": 0}
        report = IntegrityReport()
        for key in self.keys():
            try:
                rec = self.read(key)
            except CorruptRecord as e:
                report.corrupt[key] = str(e)
                continue
            if rec is not None:
                counts[rec.decision] += 1
                counts["untrusted"] += not rec.trusted
        return {"directory": str(self.root), "entries": counts["kernel"] + counts["pytorch"] + len(report.corrupt),
                **counts, "corrupt": len(report.corrupt), "volume_bytes": int(self._cache.volume()),
                "searches": len(self.searches())}

    # search records --------------------------------------------------------------------------------------------
    def _search_path(self, key: str) -> Path:
        return self.searches_dir / f"{check_key(key)}.json"

    def put_search(self, key: str, search_record_json: Mapping[str, Any]) -> Path:
        """Persist the search record of ``key`` (a JSON-able dict), replacing the previous one atomically."""
        path = self._search_path(key)
        atomic_write(path, (json.dumps(search_record_json, sort_keys=True, indent=1) + "\n").encode())
        return path

    def get_search(self, key: str) -> dict[str, Any] | None:
        path = self._search_path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            report_corrupt(str(self.searches_dir), key, CorruptRecord(f"search record is not valid JSON: {e}"))
            return None
        if not isinstance(d, dict):
            report_corrupt(str(self.searches_dir), key, CorruptRecord("search record is not a JSON object"))
            return None
        return d

    def searches(self) -> list[str]:
        """Keys that have a search record, most recently written first."""
        if not self.searches_dir.is_dir():
            return []
        paths = [p for p in self.searches_dir.glob("*.json") if is_key(p.stem)]
        return [p.stem for p in sorted(paths, key=lambda p: p.stat().st_mtime, reverse=True)]

    def clear_searches(self) -> int:
        keys = self.searches()
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                self._search_path(key).unlink()
        return len(keys)

    # bundles ---------------------------------------------------------------------------------------------------
    def export_bundle(self, keys: Iterable[str] | None, directory: str | os.PathLike[str]) -> Path:
        """Write one ``<key>.json`` per record and an ``index.json`` to ``directory``; returns the index path.

        ``keys=None`` exports every valid record. A named key that is missing raises RecordNotFound; a named key
        whose entry is corrupt raises CorruptRecord (exporting it would spread the damage).
        """
        out = Path(directory).expanduser()
        if keys is None:
            records = [rec for _, rec in self.items()]
        else:
            records = [self._require(k) for k in keys]
        entries = []
        for rec in records:
            name = f"{rec.key}.json"
            atomic_write(out / name, rec.dumps(indent=1).encode())
            entries.append({"key": rec.key, "file": name, "op": rec.signature.get("op"), "decision": rec.decision,
                            "integrity": rec.integrity()})
        from .. import __version__

        index = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "created_at": utc_now(), "kforge": __version__,
                 "records": entries}
        atomic_write(out / INDEX_NAME, (json.dumps(index, sort_keys=True, indent=1) + "\n").encode())
        return out / INDEX_NAME

    def _require(self, key: str) -> KernelRecord:
        rec = self.read(key)
        if rec is None:
            raise RecordNotFound(f"no record under key {key}")
        return rec

    def import_bundle(self, directory: str | os.PathLike[str], trust: bool = False,
                      overwrite: bool = False) -> ImportReport:
        """Read a bundle, check every record's integrity and store it as ``source="imported"``.

        Imported records are untrusted (``trusted=False``: re-verified on this GPU before first use) unless
        ``trust=True``. A valid record already stored under the same key is kept unless ``overwrite=True``.
        """
        src = Path(directory).expanduser()
        report = ImportReport()
        for name, expected in _bundle_files(src):
            try:
                rec = _read_bundle_record(src, name, expected)
            except CorruptRecord as e:
                log.warning("kforge: rejected %s from bundle %s: %s", name, src, e)
                report.rejected[name] = str(e)
                continue
            if not overwrite and self.get(rec.key) is not None:
                report.skipped.append(rec.key)
                continue
            self.put(rec.marked(source="imported", trusted=trust, imported_from=str(src), imported_at=utc_now()))
            report.imported.append(rec.key)
        return report


def _bundle_files(src: Path) -> list[tuple[str, dict[str, Any] | None]]:
    """(file name, index entry) of every record in a bundle; without an index, every ``<key>.json`` file."""
    if src.exists() and not src.is_dir():
        raise BundleError(f"bundle {src} is a file, not a directory: pass the directory that `kforge cache export` "
                          "wrote (its index.json and one <key>.json a record)")
    if not src.is_dir():
        raise BundleError(f"bundle directory {src} does not exist")
    index_path = src / INDEX_NAME
    if not index_path.is_file():
        return [(p.name, None) for p in sorted(src.glob("*.json")) if is_key(p.stem)]
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
        entries = index["records"]
        files = [(str(e["file"]), e) for e in entries]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise BundleError(f"bundle index {index_path} is not valid ({e}); expected {{'records': [...]}}") from e
    return files


def _read_bundle_record(src: Path, name: str, expected: Mapping[str, Any] | None) -> KernelRecord:
    if not (name.endswith(".json") and is_key(name[: -len(".json")])):  # also keeps "../" out of the bundle
        raise CorruptRecord(f"file name {name!r} is not <key>.json")
    path = src / name
    rec = read_record_file(path)
    if rec is None:
        raise CorruptRecord("listed in the index but missing")
    if rec.key != path.stem:
        raise CorruptRecord(f"file {path.name} holds the record of key {rec.key[:16]}")
    if expected is not None and expected.get("integrity") not in (None, rec.integrity()):
        raise CorruptRecord("integrity differs from the bundle index")
    if expected is not None and expected.get("key") not in (None, rec.key):
        raise CorruptRecord("key differs from the bundle index")
    return rec
