"""TeamStore: KernelRecords in a directory that several people share (a network filesystem, a synced folder).

The format is the shipped bundle's: ``<key>.json``, one record a file (``KernelRecord.dumps(indent=1)``), read by
:class:`~.directory.RecordDirectory`, so a team directory can also be imported by hand (``kforge cache import``).
Set ``team_store`` (``KFORGE_TEAM_STORE``) to use one.

* Lookup order (:class:`~.shipped.TieredStore`): local, then team, then shipped. This machine's own measurement
  comes first; a teammate's is newer than the bundle kforge shipped, and was likely made on the team's GPUs.
* Trust: a record read from here comes back ``trusted=False`` with ``provenance.source="team"`` whatever the file
  says (Note [record integrity is not authenticity] in record.py). The runtime re-verifies it on this GPU before first
  use and keeps the verified copy in the local cache (``cuda_provider.reverified_locally``), as for shipped records.
* Publishing: a trusted record that this machine's search produced is published right after it is stored
  (:func:`publish_found`, from ``search_runner.run_search``), and ``kforge cache publish`` pushes stored ones.
  Records that came from elsewhere (re-verified shipped, imported or team records) are not published again. What a
  publish does when the team already holds the key: Note [what a publish replaces].
* A published kernel takes the search that found it along: Note [a search tree beside a team's kernel].
* A team of several GPU models of one arch: Note [a team of several GPU models].
* Writes are atomic (temp file, then rename) and world-readable, so a reader on another machine sees a whole file or
  none. A corrupt or mismatched file is a miss, reported; a directory that cannot be reached is
  Note [a team store that cannot be reached].

Note [what a publish replaces]
What a search publishes by itself, and what ``kforge cache publish`` publishes when no key is named, are kernels
(the winners), never PyTorch's decision: a team record of any decision answers a teammate's lookup, and a "pytorch"
record would stop every teammate's compile from searching that signature, although it may only say that a compile's
8-iteration search found nothing. A "pytorch" record goes to the team only when a user names its key to ``kforge
cache publish``.

Several machines publish into one directory, so neither the first record of a key nor the last is the best by
itself. A publish writes its record when the team holds none of the key (or only a corrupt file); otherwise:

* a "pytorch" decision replaces nothing. It says that nothing beat eager on the GPU that searched, while the team's
  kernel beat eager by the margin on the GPU that found it; replacing it would take the kernel from everyone.
* a kernel replaces a "pytorch" decision: a verified kernel says more than "nothing found", and every reader
  re-verifies it on its own GPU before first use, as it does a shipped record.
* a kernel replaces a kernel only when it was measured on the same GPU name (``provenance["gpu"]``) and is faster
  (``timings["kforge_us"]``, the median of the winner's re-measured runs). Times of two GPU models do not compare,
  and GPUs of one arch share a key (an H100 PCIe and an H200 are both sm_90). Otherwise the team's kernel stays; the
  publisher keeps its own in its local cache, which it looks up first anyway. A kernel of another named model goes
  into that model's folder instead, under these same rules (Note [a team of several GPU models]).

A publish reads, compares and renames without a lock (a network filesystem's locks are not to be relied on), so two
machines publishing one key at once both write and the last rename wins, perhaps with the slower of two verified
kernels, until the next publish of that key. A reader never sees half a file.

Note [a team of several GPU models]
GPUs of one arch share a key (an H100 and an H200 are both sm_90), and the team store held one record a key. A
kernel measured on another model than the team's kernel of its key was refused (above: times of two models do not
compare), so a teammate on that model kept what its own search found to itself, and every other teammate on that
model re-timed the first model's kernel (Note [a record timed on another GPU model] in reverified.py) and, where it
lost there, searched again. Now such a kernel goes beside the key's record, into its model's folder,
``gpus/<model>/<key>.json`` (:func:`gpu_slug`: "NVIDIA H100 80GB HBM3" -> ``nvidia-h100-80gb-hbm3``), under the same
rules against what that folder holds, its search tree into ``gpus/<model>/searches/``. The key's own record stays
where it is, and so does every rule for it: PyTorch's decisions and kernels of unnamed GPUs never go to a folder.
A reader on a model (:class:`TeamStore` ``gpu``: this machine's GPU, :func:`this_gpu`) takes its folder's record of a
key before the key's own; a reader with no GPU the key's own. ``kforge ui`` lists each folder as a tier of its own
(``team@<model>``), ``kforge doctor`` counts its records, and ``kforge cache verify --team`` checks its files.

Note [a search tree beside a team's kernel]
A teammate who gets a kernel from the team store should be able to see why it won, as for a kernel searched here
(`kforge ui`). So a publish that writes a kernel record also writes the search record that found it, to
``<directory>/searches/<key>.json``, before the record (a reader who finds the record finds its tree). Only the search
that found that very kernel goes (:func:`found_by`: its winner's source is the record's); a key's local search record
is its last search, which may have been cut short since. A publish that replaces nothing writes no tree. A tree is
read like any file from another machine: its size is capped, it is shown as text, and nothing in it is run.

Note [a team store that cannot be reached]
A shared directory can be unmounted, read-only, or unreadable to this user. kforge does not create a missing one:
an unmounted share's mount point would silently become a local folder nobody else sees. A search never fails
because of it: a publish that cannot write and a lookup that cannot read are counted
(``counters["kforge"]["team_unavailable"]``) and warned about once per directory and process (``warnings.warn``:
the user can mount it, fix its permissions or unset ``KFORGE_TEAM_STORE``). The lookup is a miss, the record stays
in the local cache, and ``kforge cache publish`` can push it later.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import KforgeError
from ..fsutil import atomic_write
from .directory import RecordDirectory
from .gpu_model import GPUS_DIR, gpu_slug, this_gpu
from .local import searches_dir
from .record import IntegrityReport, KernelRecord, check_key

if TYPE_CHECKING:
    from ..config import KforgeConfig

log = logging.getLogger("kforge.store")

FILE_MODE = 0o644  # teammates read the files under their own uid; a rename needs the directory's write bit only


class TeamStoreUnavailable(KforgeError):
    """The team store's directory is missing, or cannot be written or read (Note [a team store that cannot be
    reached])."""


@dataclass(frozen=True)
class Published:
    """What one publish did: whether the record was written, and why (or why not); whether its search tree went
    with it."""

    key: str
    written: bool
    why: str
    tree: bool = False


class TeamStore(RecordDirectory):
    """Records shared by a team in ``<directory>/<key>.json``: read untrusted, published by :meth:`publish`. With
    ``gpu`` (the reader's GPU model) a key's record in that model's folder comes first (Note [a team of several GPU
    models])."""

    source = "team"

    def __init__(self, directory: str | os.PathLike[str], gpu: str = "") -> None:
        super().__init__(directory)
        self.gpu = gpu
        self.mine = self.model(gpu) if gpu_slug(gpu) else None  # the reader's model's folder, if it names one

    def model(self, gpu: str) -> "TeamStore":
        """The folder of the GPU model ``gpu``, read and written as a team directory of its own."""
        slug = gpu_slug(gpu)
        if not slug:
            raise ValueError(f"a GPU model's folder needs a GPU name, not {gpu!r}")
        return TeamStore(self.directory / GPUS_DIR / slug)

    def models(self) -> list["TeamStore"]:
        """Every GPU model's folder there is (none where the directory cannot be listed: warned)."""
        folders = self.directory / GPUS_DIR
        try:
            return [TeamStore(d) for d in sorted(folders.iterdir()) if d.is_dir()] if folders.is_dir() else []
        except OSError as e:
            warn_unavailable(self, f"cannot list the team store's GPU model folders {folders}: {e}")
            return []

    def read(self, key: str) -> KernelRecord | None:
        """The reader's model's record of ``key`` where its folder holds one (a corrupt one reported and passed
        over), else the key's own; raises CorruptRecord for a corrupt file of the key's own."""
        rec = self.mine.get(key) if self.mine is not None else None
        return rec if rec is not None else super().read(key)

    def get(self, key: str) -> KernelRecord | None:
        """The team's record of ``key`` (untrusted); None when absent, corrupt (reported) or unreadable (warned)."""
        try:
            return super().get(key)
        except OSError as e:  # a share gone stale or a file this user may not read: a miss, not a failed compile
            warn_unavailable(self, f"cannot read the team store {self.directory}: {e}")
            return None

    def keys(self) -> list[str]:
        try:
            keys = super().keys()
            return sorted(set(keys).union(RecordDirectory.keys(self.mine))) if self.mine is not None else keys
        except OSError as e:
            warn_unavailable(self, f"cannot list the team store {self.directory}: {e}")
            return []

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key) or (self.mine is not None and key in self.mine)

    def check(self) -> IntegrityReport:
        """Every file read back, the key's own and those of every GPU model's folder (as ``<model>/<key>``)."""
        report = RecordDirectory.check(TeamStore(self.directory))
        for folder in self.models():
            report.add(folder.check(), folder.directory.name)
        return report

    def check_writable(self) -> None:
        """Raise TeamStoreUnavailable unless a file can be created here; a real probe, as ``os.access`` does not see
        a read-only mount's or a network filesystem's refusals."""
        self._check_dir()
        try:
            fd, probe = tempfile.mkstemp(dir=self.directory, prefix=".kforge-probe", suffix=".tmp")
        except OSError as e:
            raise TeamStoreUnavailable(f"cannot write to the team store {self.directory}: {e.strerror or e}") from e
        os.close(fd)
        os.unlink(probe)

    def write(self, record: KernelRecord) -> None:
        """Write ``record`` atomically, replacing the team's record of its key; no rule applied (see publish)."""
        self._check_dir()
        try:
            atomic_write(self.path(record.key), record.dumps(indent=1).encode(), mode=FILE_MODE)
        except OSError as e:
            raise TeamStoreUnavailable(f"cannot write to the team store {self.directory}: {e.strerror or e}") from e

    def publish(self, record: KernelRecord, search: Mapping[str, Any] | None = None) -> Published:
        """Write ``record`` if it is this machine's own and Note [what a publish replaces] lets it replace what the
        team holds, with ``search``, the search record that found it (Note [a search tree beside a team's kernel]);
        raises TeamStoreUnavailable when the directory cannot be written."""
        why_not = not_publishable(record)
        if why_not:
            return Published(record.key, False, why_not)
        target, held, beside = self._target(record)
        ok, why = publish_verdict(record, held)
        if beside:
            why = f"{why}, in the folder of {record.provenance['gpu']} ({beside})"
        tree = ok and search is not None and found_by(record, search)
        if ok and target is not self:
            target.make_folder(self)
        if tree:  # before the record, so that a teammate who reads the record finds its tree
            target.write_search(record.key, search)
        if ok:
            target.write(record)
        return Published(record.key, ok, why, tree=bool(tree))

    def _target(self, record: KernelRecord) -> tuple["TeamStore", KernelRecord | None, str]:
        """Where a publish of ``record`` goes, what is held there, and why when that is its model's folder (Note [a
        team of several GPU models])."""
        own = TeamStore(self.directory).get(record.key)  # the key's own, whatever the reader's model
        gpu, own_gpu = record.provenance.get("gpu") or "", (own.provenance.get("gpu") or "") if own else ""
        if (own is None or own.decision != "kernel" or record.decision != "kernel" or not gpu_slug(gpu)
                or gpu == own_gpu or own.candidate == record.candidate):
            return self, own, ""
        folder = self.model(gpu)
        return folder, folder.get(record.key), f"the key's own kernel was measured on {own_gpu or 'an unnamed GPU'}"

    def make_folder(self, team: "TeamStore") -> None:
        """Create this GPU model's folder inside ``team``'s directory, which must exist (Note [a team store that
        cannot be reached]: the team's directory itself is never created)."""
        team._check_dir()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TeamStoreUnavailable(f"cannot write to the team store {team.directory}: {e.strerror or e}") from e

    @property
    def searches_dir(self) -> Path:
        return searches_dir(self.directory)

    def search_path(self, key: str) -> Path:
        return self.searches_dir / f"{check_key(key)}.json"

    def write_search(self, key: str, search: Mapping[str, Any]) -> None:
        """Write the search record of ``key`` atomically and world-readable, as a record is written."""
        self._check_dir()
        try:
            atomic_write(self.search_path(key), (json.dumps(search, sort_keys=True, indent=1) + "\n").encode(),
                         mode=FILE_MODE)
        except OSError as e:
            raise TeamStoreUnavailable(f"cannot write to the team store {self.directory}: {e.strerror or e}") from e

    def _check_dir(self) -> None:
        if not self.directory.is_dir():  # Note [a team store that cannot be reached]: never created here
            raise TeamStoreUnavailable(self.missing())

    def missing(self) -> str:
        return (f"the team store {self.directory} is not a directory (kforge does not create it: mount the share or "
                "create the folder first)")


def not_publishable(record: KernelRecord) -> str:
    """Why ``record`` is not this machine's own trusted result (so not published), or "" when it is."""
    if record.source != "local" or record.provenance.get("reverified"):
        origin = "re-verified here" if record.source == "local" else f"source {record.source}"
        return f"it came from another machine ({origin}); only this machine's own searches are published"
    if not record.trusted:
        return "untrusted here: re-verify it on this GPU first (kforge cache verify --gpu)"
    return ""


def publish_verdict(new: KernelRecord, held: KernelRecord | None) -> tuple[bool, str]:
    """Whether ``new`` replaces ``held``, the team's record of its key, and why (Note [what a publish replaces])."""
    if held is None:
        return True, "new to the team"
    if new.decision == "pytorch":
        return False, ("the team holds a kernel; PyTorch's decision does not replace it" if held.decision == "kernel"
                       else "the team holds PyTorch's decision already")
    if held.decision == "pytorch":
        return True, "a kernel replaces the team's PyTorch decision"
    if new.candidate == held.candidate:
        return False, "the team holds this kernel already"
    gpu, held_gpu = new.provenance.get("gpu") or "", held.provenance.get("gpu") or ""
    if not gpu or gpu != held_gpu:
        return False, f"the team holds a kernel measured on {held_gpu or 'an unnamed GPU'}, not on {gpu or 'this one'}"
    us, held_us = _us(new.timings.get("kforge_us")), _us(held.timings.get("kforge_us"))
    if us is None or held_us is None or us >= held_us:
        return False, f"the team's kernel is as fast or faster on {gpu} ({_fmt(held_us)} vs {_fmt(us)})"
    return True, f"faster on {gpu}: {_fmt(us)} vs the team's {_fmt(held_us)}"


def _us(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _fmt(us: float | None) -> str:
    return "untimed" if us is None else f"{us:.2f} us"


# --------------------------------------------------------------------------------------------------------------------
# the configured team store


def team_store(cfg: "KforgeConfig") -> TeamStore | None:
    """The team store ``cfg.team_store`` names, or None when none is configured; one that is missing is warned about
    (Note [a team store that cannot be reached]) and returned anyway, as an empty tier."""
    if not cfg.team_store:
        return None
    team = TeamStore(cfg.team_store, this_gpu())
    if not team.directory.is_dir():
        warn_unavailable(team, team.missing())
    return team


def found_by(record: KernelRecord, search: Mapping[str, Any]) -> bool:
    """Whether ``search`` (a search record's JSON) is the search that found ``record``'s kernel: its winner's source
    is the record's. A key's local search record is its last search, which may have found nothing since."""
    try:
        node = search["nodes"][search["winner_id"]]
        return bool(record.candidate) and node["candidate"]["source"] == record.candidate["source"]
    except (KeyError, IndexError, TypeError):
        return False


def publish_found(record: KernelRecord, cfg: "KforgeConfig", search: Mapping[str, Any] | None = None
                  ) -> Published | None:
    """Publish a record this machine's search just stored, with the search's record, to the configured team store
    (None: there is none, or it cannot be written: warned once, counted, never raised)."""
    if not cfg.team_store or record.decision != "kernel":  # Note [what a publish replaces]: winners only
        return None
    team = TeamStore(cfg.team_store)  # not team_store(cfg): a missing directory is warned about (and counted) below
    try:
        done = team.publish(record, search)
    except TeamStoreUnavailable as e:
        warn_unavailable(team, str(e))
        return None
    _count("team_published" if done.written else "team_kept")
    log.info("kforge: %s %s to the team store %s: %s", "published" if done.written else "did not publish",
             record.key[:16], team.directory, done.why)
    return done


_warned: set[str] = set()


def warn_unavailable(team: TeamStore, problem: str) -> None:
    """Note [a team store that cannot be reached]: count every failure, warn once per directory and process."""
    _count("team_unavailable")
    where = str(team.directory)
    if where in _warned:
        return
    _warned.add(where)
    warnings.warn(f"kforge: {problem}; carrying on without the team store (mount it, fix its permissions or unset "
                  "KFORGE_TEAM_STORE; `kforge cache publish` pushes stored records later)", stacklevel=3)


def _count(name: str) -> None:
    from torch._dynamo.utils import counters  # the backend's counters; imported late, only when there is news

    counters["kforge"][name] += 1
