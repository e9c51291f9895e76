"""LocalStore: this machine's KernelRecords in a diskcache, plus search records and bundle export/import.

Layout under ``cache_dir``::

    records/              diskcache (SQLite + files): signature key -> record JSON text
    searches/<key>.json   the last search record of each key (MCTS tree, candidates, logs), written atomically
    gpus/<model>/records/ the records of a GPU model that found the key's own record timed on another model
                          (Note [a cache directory that GPU models share])

Note [no pickle in the store]
diskcache pickles any value that is not str/bytes/int/float, and unpickles whatever it finds. The store only ever
puts JSON text under str keys, and :class:`_TextOnlyDisk` refuses to pickle on write and to unpickle on read (a
pickled row reads back as corrupt), so a cache directory copied from elsewhere cannot run code in this process.

Note [concurrency]
diskcache is process-safe (SQLite in WAL mode, one transaction per set), so several processes compiling models at
once share one cache without losing writes; the last writer of a key wins. Search records are written to a temp
file and renamed over the old one, so a reader sees the old record or the new one, never half of one.

Note [a cache directory that GPU models share]
GPUs of one arch share a key (an H100 and an H200 are both sm_90), so machines of two models that share a cache
directory (a home directory on a network filesystem, the default ``~/.cache/kforge``) found each other's records and
trusted them, times and all: the H100 used the H200's kernel with the H200's speedup over eager, which it may not
have here, and weighed the H200's kernel time against Inductor (Note [a record timed on another GPU model] in
reverified.py). A store opened for a GPU model (``LocalStore(cache_dir, gpu)``: the compile's, the prewarm's and
the CLI's, :func:`~.gpu_model.this_gpu`) now keeps that model's records beside the key's own where they differ:

* a read takes the record of this model's folder, ``gpus/<model>/records`` (:func:`~.gpu_model.gpu_slug`), before
  the key's own; a corrupt one there is reported and passed over;
* a write goes to the folder when the folder holds the key already, or when the key's own record names another GPU
  model than this one (``provenance["gpu"]``); otherwise to the key's own place, as before. So the first model to
  store a key stores it for all, and no model overwrites another's record (two storing a new key at once both write
  its own place, and the last one wins: the other re-times that record at its next lookup, as below);
* the runtime re-verifies a trusted record that names another model before using it, as it does a shipped one, and
  times it here (cuda_provider._use_record); kept, this GPU's copy goes to the folder, and a kernel slower here is
  searched on a miss (Note [a record that fails here is searched] in runtime/cuda_provider.py). ``kforge prewarm``
  plans such a record as "shipped" (Note [a shipped record in a prewarm] in prewarm.py);
* PyTorch's decisions ("nothing beat eager") are taken across models as they are: they hold no kernel to time;
* a delete removes the key's record from the folder and from its own place: ``kforge cache rm`` asks for the key
  to be searched again; ``clear`` empties both; ``keys``, ``len`` and ``check`` cover both (a folder's key as
  ``<model>/<key>`` in ``check``). A store opened with no GPU name (a machine without one, ``kforge ui``) reads the
  keys' own records only; :meth:`LocalStore.models` lists the folders.

Search records stay one a key, the last search's, whichever model ran it: ``kforge ui`` follows live searches
there. A record with no GPU named (older records) is taken as this machine's.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import diskcache
from diskcache.core import MODE_PICKLE, UNKNOWN

from ..errors import KforgeError
from ..fsutil import atomic_write
from .gpu_model import GPUS_DIR, gpu_slug, timed_on_another_model
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
        return self._reported(self.read, key)

    def _reported(self, read: Callable[[str], KernelRecord | None], key: str) -> KernelRecord | None:
        """``read(key)``, with a corrupt entry reported and read as a miss."""
        try:
            return read(key)
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
        return _checked(self.keys(), self.read)


def _checked(keys: Iterable[str], read: Callable[[str], KernelRecord | None]) -> IntegrityReport:
    """Each of ``keys`` read back with ``read``, sorted into ok and corrupt (with the reason)."""
    report = IntegrityReport()
    for key in keys:
        try:
            if read(key) is not None:
                report.ok.append(key)
        except CorruptRecord as e:
            report.corrupt[key] = str(e)
    return report


def searches_dir(cache_dir: str | os.PathLike[str]) -> Path:
    """Where a cache directory keeps its search records; `kforge ui` reads them there without opening the store."""
    return Path(cache_dir).expanduser() / "searches"


class LocalStore(RecordReader):
    """KernelRecords by signature key in ``cache_dir/records``; search records in ``cache_dir/searches``. With
    ``gpu`` (this machine's GPU model) the model's own records in ``cache_dir/gpus/<model>`` come first (Note [a cache
    directory that GPU models share])."""

    def __init__(self, cache_dir: str | os.PathLike[str], gpu: str = "") -> None:
        self.root = Path(cache_dir).expanduser()
        self.records_dir = self.root / "records"
        self.searches_dir = searches_dir(self.root)
        self.gpu = gpu
        # eviction "none": records are verified results that cost minutes of GPU time; never cull them silently.
        self._cache = diskcache.Cache(str(self.records_dir), disk=_TextOnlyDisk, eviction_policy="none")
        self._mine: LocalStore | None = None

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r}" + (f", {self.gpu!r})" if self.gpu else ")")

    def close(self) -> None:
        self._cache.close()
        if self._mine is not None:
            self._mine.close()

    # GPU models ------------------------------------------------------------------------------------------------
    def mine(self, create: bool = False) -> "LocalStore | None":
        """This GPU model's folder, opened where it exists (or ``create``); None for a store opened without a GPU
        name, or before the folder exists."""
        slug = gpu_slug(self.gpu)
        if self._mine is None and slug:
            folder = self.root / GPUS_DIR / slug
            if create or (folder / "records" / "cache.db").is_file():
                self._mine = LocalStore(folder)
        return self._mine

    def model_dirs(self) -> list[Path]:
        """Every GPU model's folder that holds a database."""
        folders = self.root / GPUS_DIR
        return sorted(d for d in folders.iterdir() if (d / "records" / "cache.db").is_file()) \
            if folders.is_dir() else []

    def models(self) -> list["LocalStore"]:
        """Every GPU model's folder that holds a database, opened (none is created; the caller closes them)."""
        return [LocalStore(d) for d in self.model_dirs()]

    def _target(self, key: str) -> "LocalStore":
        """Where a record of ``key`` is written: this model's folder when it holds the key or the key's own record
        names another model, else the key's own place."""
        mine = self.mine()
        if mine is not None and key in mine:
            return mine
        held = self._reported(self._read_own, key) if gpu_slug(self.gpu) else None
        folder = self.mine(create=True) if held is not None and timed_on_another_model(held, self.gpu) else None
        return folder if folder is not None else self

    def __enter__(self) -> "LocalStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # records ---------------------------------------------------------------------------------------------------
    def read(self, key: str) -> KernelRecord | None:
        """The record under ``key`` (this model's where its folder holds one) or None; raises CorruptRecord for a
        corrupt entry of the key's own (``get`` reports instead)."""
        mine = self.mine()
        rec = mine.get(key) if mine is not None else None
        return rec if rec is not None else self._read_own(key)

    def _read_own(self, key: str) -> KernelRecord | None:
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
        """Store ``record`` as JSON text, replacing this model's record of its key (Note [a cache directory that GPU
        models share]); ``trusted`` is kept as it is."""
        target = self._target(check_key(record.key))
        target._cache.set(record.key, record.dumps(), retry=True)

    def delete(self, key: str) -> bool:
        """Remove the record of ``key``, this model's and the key's own; whether there was one."""
        mine = self.mine()
        gone = mine is not None and mine.delete(key)
        return bool(self._cache.delete(check_key(key), retry=True)) or gone

    def __contains__(self, key: object) -> bool:
        mine = self.mine()
        return isinstance(key, str) and (key in self._cache or (mine is not None and key in mine))

    def keys(self) -> list[str]:
        mine = self.mine()
        own = self._own_keys()
        return sorted(own.union(mine.keys()) if mine is not None else own)

    def _own_keys(self) -> set[str]:
        return {k for k in self._cache.iterkeys() if isinstance(k, str)}

    def clear(self) -> int:
        """Remove every record, this model's folder's too (search records stay; see :meth:`clear_searches`).
        Returns how many were removed."""
        mine = self.mine()
        return int(self._cache.clear(retry=True)) + (mine.clear() if mine is not None else 0)

    def check(self) -> IntegrityReport:
        """Every entry read back: the keys' own, and this model's folder's as ``<model>/<key>``."""
        report = _checked(sorted(self._own_keys()), self._read_own)
        mine = self.mine()
        if mine is not None:
            report.add(mine.check(), mine.root.name)
        return report

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
                **counts, "corrupt": len(report.corrupt), "volume_bytes": self._volume(),
                "searches": len(self.searches())}

    def _volume(self) -> int:
        mine = self.mine()
        return int(self._cache.volume()) + (mine._volume() if mine is not None else 0)

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
