"""ShippedStore: read-only KernelRecords shipped with kforge in the repository's ``kernels_cache/`` directory.

Each file is ``<key>.json`` holding one record (``KernelRecord.dumps(indent=1)``), read by
:class:`~.directory.RecordDirectory` like the team store's. A shipped record was verified on someone else's GPU, so
it is returned with ``trusted=False`` and ``provenance.source="shipped"`` whatever the file says; the runtime decides
whether to re-verify it on this GPU before first use.

The directory is ``$KFORGE_SHIPPED_DIR`` when set, else ``kernels_cache/`` beside the ``forge_backend`` package (a
source checkout or an editable install), else the copy a wheel installs as data files
(``<prefix>/share/kforge/kernels_cache``, pyproject.toml's ``data-files``; the environment's prefix, or the user base
after ``pip install --user``). None of them present: no shipped records.

:class:`TieredStore` puts the tiers in lookup order: local (this machine's measurements), then the team store
(store/team.py: a teammate's measurement is newer than the bundle kforge shipped), then shipped.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from .directory import RecordDirectory
from .local import LocalStore, RecordReader
from .record import KernelRecord

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


class ShippedStore(RecordDirectory):
    """Read-only records from ``<directory>/<key>.json`` (default: :func:`default_shipped_dir`)."""

    source = "shipped"

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        super().__init__(directory if directory is not None else default_shipped_dir())


class Tiers:
    """Read-only lookup across tiers in order: the first tier that holds a valid record of a key answers."""

    def __init__(self, *tiers: RecordReader | None) -> None:
        self.tiers = [t for t in tiers if t is not None]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(t) for t in self.tiers)})"

    def find(self, key: str) -> tuple[RecordReader, KernelRecord] | None:
        """The first tier that holds a valid record of ``key``, and that record (a corrupt entry is reported and
        passed over)."""
        for tier in self.tiers:
            rec = tier.get(key)
            if rec is not None:
                return tier, rec
        return None

    def get(self, key: str) -> KernelRecord | None:
        found = self.find(key)
        return None if found is None else found[1]

    def keys(self) -> list[str]:
        return sorted(set().union(*(t.keys() for t in self.tiers)))

    def __contains__(self, key: object) -> bool:
        return any(key in t for t in self.tiers)


class TieredStore(Tiers):
    """This machine's LocalStore first, then the team store (when there is one), then the shipped records. Writes go
    to local."""

    def __init__(self, local: LocalStore, shipped: ShippedStore | None = None,
                 team: RecordReader | None = None) -> None:
        self.local = local
        self.team = team
        self.shipped = shipped if shipped is not None else ShippedStore()
        super().__init__(local, team, self.shipped)

    def put(self, record: KernelRecord) -> None:
        self.local.put(record)
