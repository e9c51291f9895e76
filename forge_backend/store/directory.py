"""RecordDirectory: KernelRecords kept as ``<directory>/<key>.json`` files that another machine wrote.

The shipped tier (``kernels_cache/``) and the team store share this format, the one ``kforge cache export`` writes
(``KernelRecord.dumps(indent=1)``, one record a file). Each file is checked like any stored record (Note [what a
corrupt record is] in record.py), and a record read from here comes back ``trusted=False`` with the tier's
``provenance.source`` whatever the file says (Note [record integrity is not authenticity] in record.py).
"""
from __future__ import annotations

import os
from pathlib import Path

from .local import RecordReader
from .record import CorruptRecord, KernelRecord, check_key, is_key, read_record_file


class RecordDirectory(RecordReader):
    """Read-only records from ``<directory>/<key>.json``, marked with :attr:`source` and untrusted."""

    source = ""  # the provenance source a record read from this tier is marked with (one of record.SOURCES)

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.directory)!r})"

    def path(self, key: str) -> Path:
        """The file of ``key``; the key is checked first, so no name escapes the directory."""
        return self.directory / f"{check_key(key)}.json"

    def read(self, key: str) -> KernelRecord | None:
        """The record of ``key`` (untrusted) or None; raises CorruptRecord for a corrupt file."""
        path = self.path(key)
        rec = read_record_file(path)
        if rec is None:
            return None
        if rec.key != key:
            raise CorruptRecord(f"{path.name} holds the record of key {rec.key[:16]}")
        return rec.marked(source=self.source, trusted=False)

    def where(self) -> str:
        return str(self.directory)

    def keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.json") if is_key(p.stem))

    def __contains__(self, key: object) -> bool:
        return is_key(key) and (self.directory / f"{key}.json").is_file()
