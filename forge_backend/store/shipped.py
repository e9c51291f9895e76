"""ShippedStore: read-only KernelRecords shipped with kforge in the repository's ``kernels_cache/`` directory.

Each file is ``<key>.json`` holding one record (``KernelRecord.dumps(indent=1)``), checked like any stored record
(Note [what a corrupt record is] in record.py). A shipped record was verified on someone else's GPU, so it is
returned with ``trusted=False`` and ``provenance.source="shipped"`` whatever the file says; the runtime decides
whether to re-verify it on this GPU before first use.

The directory is ``$KFORGE_SHIPPED_DIR`` when set, else ``kernels_cache/`` beside the ``forge_backend`` package (a
source checkout or an editable install), else the copy a wheel installs as data files
(``<prefix>/share/kforge/kernels_cache``, pyproject.toml's ``data-files``; the environment's prefix, or the user base
after ``pip install --user``). None of them present: no shipped records.

:class:`TieredStore` puts the tiers in lookup order: local (this machine's measurements) before shipped.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from .local import LocalStore, RecordReader
from .record import CorruptRecord, KernelRecord, check_key, is_key, report_corrupt

SHIPPED_ENV = "KFORGE_SHIPPED_DIR"


def default_shipped_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(SHIPPED_ENV):
        return Path(env[SHIPPED_ENV]).expanduser()
    import site
    import sys

    import forge_backend

    beside = Path(forge_backend.__file__).resolve().parent.parent / "kernels_cache"
    installed = [Path(prefix) / "share" / "kforge" / "kernels_cache" for prefix in (sys.prefix, site.getuserbase())]
    return next((d for d in [beside, *installed] if d.is_dir()), beside)


class ShippedStore(RecordReader):
    """Read-only records from ``<directory>/<key>.json``."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_shipped_dir()

    def __repr__(self) -> str:
        return f"ShippedStore({str(self.directory)!r})"

    def read(self, key: str) -> KernelRecord | None:
        """The shipped record of ``key`` (untrusted) or None; raises CorruptRecord for a corrupt file."""
        path = self.directory / f"{check_key(key)}.json"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError as e:
            raise CorruptRecord(f"{path.name} is not UTF-8 text: {e}") from e
        rec = KernelRecord.loads(text)
        if rec.key != key:
            raise CorruptRecord(f"{path.name} holds the record of key {rec.key[:16]}")
        return rec.marked(source="shipped", trusted=False)

    def get(self, key: str) -> KernelRecord | None:
        """The shipped record of ``key``; None when absent or corrupt (reported once, counted)."""
        try:
            return self.read(key)
        except CorruptRecord as e:
            report_corrupt(str(self.directory), key, e)
            return None

    def keys(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.json") if is_key(p.stem))

    def __contains__(self, key: object) -> bool:
        return is_key(key) and (self.directory / f"{key}.json").is_file()



class TieredStore:
    """Lookup across tiers: this machine's LocalStore first, then the shipped records. Writes go to local."""

    def __init__(self, local: LocalStore, shipped: ShippedStore | None = None) -> None:
        self.local = local
        self.shipped = shipped if shipped is not None else ShippedStore()

    def __repr__(self) -> str:
        return f"TieredStore({self.local!r}, {self.shipped!r})"

    def get(self, key: str) -> KernelRecord | None:
        rec = self.local.get(key)
        return rec if rec is not None else self.shipped.get(key)

    def put(self, record: KernelRecord) -> None:
        self.local.put(record)

    def keys(self) -> list[str]:
        return sorted(set(self.local.keys()) | set(self.shipped.keys()))

    def __contains__(self, key: object) -> bool:
        return key in self.local or key in self.shipped
