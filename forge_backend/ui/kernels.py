"""What ``kforge ui``'s kernels view shows: the records a compile on this machine can use, tier by tier, in the
order a compile looks them up (local, then the team store, then the shipped records), and one record whole.

A search record (ui/data.py) says how a kernel was found; a kernel record says what a compile here gets. The two
differ for a teammate's kernel, which arrives without its tree, and for a shipped one. The view marks, for each key,
the tier whose record answers a compile's lookup (the first that holds a valid one; Tiers.get in store/shipped.py),
so a teammate's faster kernel hidden behind this machine's own record shows as such. The team's kernels measured on
another GPU model than the key's own (Note [a team of several GPU models] in store/team.py) are listed as tiers of
their own, ``team@<model>``, after the team's: they answer only a machine of that model, and the view looks keys up
as a machine with no GPU named does, so none of their rows answers. So are the local cache's GPU model folders (Note
[a cache directory that GPU models share] in store/local.py), ``local@<model>``, after those; the cache keeps one
search record a key, the last search's, so no tree is said to be theirs.

Note [the kernels view reads the store without writing it]
The search views never open the local store: diskcache would create its database in a cache directory that has
none. This view opens it only when its database already exists (``records/cache.db``); diskcache then rewrites its
own settings rows on open, as every process that compiles does, and nothing here puts or deletes a record. A team
directory that is missing is reported, never created (Note [a team store that cannot be reached] in store/team.py).
The page asks for this view when it is opened or refreshed, not on its two-second poll, and a team or shipped
record file is parsed again only when it changed (its inode, mtime or size).
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..cards import inputs_text
from ..store.directory import RecordDirectory
from ..store.gpu_model import GPUS_DIR
from ..store.local import LocalStore, RecordReader, searches_dir
from ..store.record import CorruptRecord, KernelRecord
from ..store.shipped import ShippedStore, Tiers
from ..store.team import TeamStore
from .data import card_text

TIERS = ("local", "team", "shipped")  # lookup order
FOLDER = "team@"  # the prefix of a team GPU model's folder as a tier: "team@nvidia-h100-80gb-hbm3"
LOCAL_FOLDER = "local@"  # the prefix of the local cache's GPU model folder as a tier


@dataclass(frozen=True)
class TierState:
    """One tier as the page shows it: where it is, whether it could be read (and why not), how many records."""

    name: str
    where: str
    readable: bool
    problem: str = ""
    records: int = 0
    corrupt: int = 0


@dataclass(frozen=True)
class KernelRow:
    """One record of one tier in the list; ``answers`` is True where a compile here gets this tier's record."""

    key: str
    tier: str
    answers: bool
    op: str = ""
    tensors: str = ""
    decision: str = ""  # kernel | pytorch; "" for a corrupt entry
    corrupt: str = ""  # why the entry does not read back
    trusted: bool = False
    source: str = ""  # provenance: local | shipped | import | team
    proposer: str = ""
    gpu: str = ""
    created_at: str = ""
    kforge_us: float | None = None
    eager_us: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_inductor: float | None = None
    pct_bw: float | None = None
    has_search: bool = False  # its tier holds the search that found it (local: this cache's; team: a teammate's)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class KernelTiers:
    """The record tiers of one cache directory, one team store and one shipped directory, read-only (Note [the
    kernels view reads the store without writing it]). Safe to call from several threads."""

    def __init__(self, cache_dir: str | Path, team_dir: str | Path | None = None,
                 shipped_dir: str | Path | None = None) -> None:
        self.cache_dir = Path(cache_dir).expanduser()
        self.searches_dir = searches_dir(self.cache_dir)
        self.team = TeamStore(team_dir) if team_dir else None
        self.shipped = ShippedStore(shipped_dir)
        self._local: LocalStore | None = None
        self._folders: dict[str, LocalStore] = {}  # the local cache's GPU model folders, opened once each
        self._lock = threading.Lock()
        # (tier, key) -> (the file's inode, mtime and size, its row): a team directory on a network filesystem may
        # hold thousands of records, read again only when their files change (each write is a new file: a rename)
        self._rows: dict[tuple[str, str], tuple[tuple[int, int, int], KernelRow]] = {}

    def close(self) -> None:
        with self._lock:
            for store in [self._local, *self._folders.values()]:
                if store is not None:
                    store.close()
            self._local, self._folders = None, {}

    def local(self) -> LocalStore | None:
        """The local store, opened the first time its database exists; None until then."""
        with self._lock:
            if self._local is None and (self.cache_dir / "records" / "cache.db").is_file():
                self._local = LocalStore(self.cache_dir)
            return self._local

    def readers(self) -> dict[str, tuple[RecordReader | None, TierState]]:
        """Each tier's reader (None where it cannot be read) and its state before counting."""
        local = self.local()
        out: dict[str, tuple[RecordReader | None, TierState]] = {
            "local": (local, TierState("local", str(self.cache_dir / "records"), local is not None,
                                       "" if local is not None else "no local cache yet: nothing was compiled or "
                                                                    "searched with this cache directory")),
        }
        if self.team is None:
            out["team"] = (None, TierState("team", "", False, "no team store is configured (KFORGE_TEAM_STORE, or "
                                                              "kforge ui --team-dir DIR)"))
        elif not self.team.directory.is_dir():
            out["team"] = (None, TierState("team", str(self.team.directory), False, self.team.missing()))
        else:
            out["team"] = (self.team, TierState("team", str(self.team.directory), True))
        shipped_ok = self.shipped.directory.is_dir()
        out["shipped"] = (self.shipped if shipped_ok else None,
                          TierState("shipped", str(self.shipped.directory), shipped_ok,
                                    "" if shipped_ok else "the shipped records' directory is missing"))
        team = out["team"][0]
        for folder in team.models() if isinstance(team, TeamStore) else []:
            name = FOLDER + folder.directory.name
            out[name] = (folder, TierState(name, str(folder.directory), True))
        for name, store in self._local_folders(local).items():
            out[name] = (store, TierState(name, str(store.records_dir), True))
        return out

    def _local_folders(self, local: LocalStore | None) -> dict[str, LocalStore]:
        """The local cache's GPU model folders that hold a database, each opened once."""
        if local is None:
            return {}
        with self._lock:
            for folder in local.model_dirs():
                name = LOCAL_FOLDER + folder.name
                if name not in self._folders:
                    self._folders[name] = LocalStore(folder)
            return dict(self._folders)

    def is_tier(self, name: str) -> bool:
        """Whether ``name`` is one of TIERS or a team or local GPU model's folder that exists."""
        return name in TIERS or (name.startswith((FOLDER, LOCAL_FOLDER)) and name in self.readers())

    def listing(self) -> dict[str, Any]:
        """Every tier's state and every record of every tier, in lookup order, with the tier that answers each key."""
        readers = self.readers()
        rows: list[KernelRow] = []
        states = []
        for name in readers:  # TIERS in lookup order, then the team's GPU model folders, then the local cache's
            reader, state = readers[name]
            tier_rows = [self._row(name, key, reader) for key in reader.keys()] if reader is not None else []
            tier_rows.sort(key=lambda r: (not r.corrupt, r.op, r.tensors))  # corrupt entries first: they need a look
            rows += tier_rows
            states.append(dataclasses.replace(state, records=sum(not r.corrupt for r in tier_rows),
                                              corrupt=sum(bool(r.corrupt) for r in tier_rows)))
        answered: set[str] = set()
        for i, r in enumerate(rows):  # rows are in lookup order: the first valid record of a key answers
            if not r.corrupt and r.key not in answered and r.tier in TIERS:
                answered.add(r.key)
                rows[i] = dataclasses.replace(r, answers=True)
        return {"cache_dir": str(self.cache_dir), "tiers": [dataclasses.asdict(s) for s in states],
                "kernels": [r.to_json() for r in rows]}

    def tree_dir(self, tier: str) -> Path | None:
        """Where a tier keeps the search records that found its kernels: this cache's searches, the team store's
        (Note [a search tree beside a team's kernel] in store/team.py); None for the shipped records."""
        if tier == "local":
            return self.searches_dir
        if tier == "team" and self.team is not None:
            return self.team.searches_dir
        if tier.startswith(FOLDER) and self.team is not None:  # a folder's name the listing or is_tier gave
            return TeamStore(self.team.directory / GPUS_DIR / tier.removeprefix(FOLDER)).searches_dir
        return None

    def _has_tree(self, tier: str, key: str) -> bool:
        where = self.tree_dir(tier)
        return where is not None and (where / f"{key}.json").is_file()

    def _row(self, tier: str, key: str, reader: RecordReader) -> KernelRow:
        has_search = self._has_tree(tier, key)
        stamp = _stamp(reader, key)
        with self._lock:
            seen = self._rows.get((tier, key))
        if stamp is not None and seen is not None and seen[0] == stamp:  # the file did not change: not parsed again
            return dataclasses.replace(seen[1], has_search=has_search)
        try:
            rec = reader.read(key)
        except (CorruptRecord, OSError) as e:  # OSError: a team file this user may not read
            return KernelRow(key, tier, False, corrupt=str(e) or "corrupt", has_search=has_search)
        if rec is None:  # removed since the tier was listed
            return KernelRow(key, tier, False, corrupt="removed while it was being read", has_search=has_search)
        made = row(rec, tier, has_search)
        if stamp is not None:
            with self._lock:
                self._rows[(tier, key)] = (stamp, made)
        return made

    def record_view(self, tier: str, key: str) -> dict[str, Any] | str:
        """One tier's record of ``key`` whole, or why there is none (the tier cannot be read, or holds no record of
        ``key``). Raises CorruptRecord for an entry that does not read back, OSError for a file that cannot be read."""
        readers = self.readers()
        reader, state = readers[tier]
        if reader is None:
            return state.problem
        rec = reader.read(key)
        if rec is None:
            return f"the {tier} tier ({state.where}) holds no record of {key[:16]}"
        holders = [name for name, (reader, _) in readers.items() if reader is not None and key in reader]
        return record_json(rec, tier, answers=_answering(readers, key), in_tiers=holders,
                           has_search=self._has_tree(tier, key))


def _stamp(reader: RecordReader, key: str) -> tuple[int, int, int] | None:
    """A directory tier's file of ``key`` as (inode, mtime, size); None for the local store or a file gone."""
    if not isinstance(reader, RecordDirectory):
        return None
    try:
        st = reader.path(key).stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _answering(readers: Mapping[str, tuple[RecordReader | None, TierState]], key: str) -> str | None:
    """The tier whose record a compile's lookup gets: the one Tiers.find finds."""
    present = {id(reader): name for name, (reader, _) in readers.items() if reader is not None}
    found = Tiers(*(readers[name][0] for name in TIERS)).find(key)
    return None if found is None else present[id(found[0])]


def row(rec: KernelRecord, tier: str, has_search: bool = False) -> KernelRow:
    """The list row of a valid record (``answers`` is set by the listing)."""
    t, p = rec.timings, rec.provenance
    kf, ind = _num(t.get("kforge_us")), _num(t.get("inductor_us"))
    return KernelRow(rec.key, tier, False, str(rec.signature.get("op", "")), inputs_text(rec.card), rec.decision,
                     trusted=rec.trusted, source=rec.source, proposer=str(p.get("proposer") or ""),
                     gpu=str(p.get("gpu") or ""), created_at=str(p.get("created_at") or ""), kforge_us=kf,
                     eager_us=_num(t.get("eager_us")), speedup_vs_eager=_num(t.get("speedup_vs_eager")),
                     speedup_vs_inductor=ind / kf if ind and kf else None, pct_bw=_num(t.get("pct_bw")),
                     has_search=has_search)


def record_json(rec: KernelRecord, tier: str, *, answers: str | None, in_tiers: list[str],
                has_search: bool) -> dict[str, Any]:
    """A record whole for the page: its row, the card as text, the kernel's source, plan and params, and the
    record's verification, timings, provenance and signature."""
    cand = rec.candidate or {}
    return {
        "row": dataclasses.replace(row(rec, tier, has_search), answers=answers == tier).to_json(),
        "answers": answers, "in_tiers": in_tiers,
        "card_text": card_text(rec.card, rec.timings.get("bandwidth_gbps")),
        "description": cand.get("description", ""), "source": cand.get("source", ""), "plan": cand.get("plan"),
        "params": cand.get("params"), "verification": rec.verification, "timings": rec.timings,
        "provenance": rec.provenance, "signature": rec.signature,
    }


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
