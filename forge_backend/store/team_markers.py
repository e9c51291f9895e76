"""Markers of the searches a team's machines are running, in the team store, so that a prewarm on one machine leaves
a signature another machine is searching to it and takes its record later.

Note [a search a teammate is running]
Claims (Note [one search of a signature at a time] in claims.py) hold on one machine only: ``flock`` over a network
filesystem is not to be relied on. So between machines a prewarm leaves a marker instead, ``<team>/claims/<key>.json``
(who, what, since), written when its search of a signature starts, touched every HEARTBEAT_S seconds while it runs
and removed when it ends. A prewarm on another machine that meets a fresh marker (touched within STALE_S) does not
search that signature then: it goes on with the next ones and comes back to it after them, waits for the marker to
go (at most PREWARM_WAIT_S), and takes the team's record, re-verified on this GPU like a shipped one (Note [a shipped
record in a prewarm] in prewarm.py); where the team holds none (the search found nothing, or failed) it searches it
itself. So two machines that prewarm one model at once split its searches between them, each taking the other's
kernels at the end, with no ``--shard`` (Note [a prewarm split across machines] in prewarm.py). A compile's search
on a miss leaves a marker too, and a compile that meets another machine's waits for it within its search budget and
takes the team's record (re-verified), else searches; past the budget it queues the miss (cuda_provider._miss).

A marker is taken exclusively, so that two machines that look at once do not both search. It is written whole to a
temp file beside its name, then linked to the name with ``os.link``, which fails where the name exists: a create
with O_CREAT|O_EXCL, done the way open(2) advises where O_EXCL may not hold (NFS), and the marker appears whole. The
machine whose link fails meets the other's fresh marker and raises MarkedElsewhere (a ClaimBusy): a prewarm leaves
the signature for after the others, a compile waits for the teammate within its budget and takes its record, else
queues the miss. A machine that dies leaves a marker nobody touches: it is stale after STALE_S, and the next machine
to mark the key takes it over. It renames the marker away to a name of its own, checks that what it moved is the
stale one (a teammate may have taken it over and marked it in between: a fresh one is linked back), deletes it and
links its own; a rename that finds nothing means a teammate took it over first, and it looks again, at most
TAKE_TRIES times. A marker that cannot be parsed is taken over the same way. Freshness is judged on the share's own
clock (the mtime of a file this process touches there), not this machine's, whose clock may differ from the
writer's.

What is still not guaranteed: a search that stalls longer than STALE_S without its heartbeat (a stopped process, a
filesystem that hangs) is taken over and then runs beside its successor's; a take-over that races with a third
machine's can, rarely, leave two searching; a kforge from before markers were exclusive still writes over one; and a
filesystem without atomic link and rename (some FUSE mounts) gives none of this. Two searches of one signature then
cost what they always did, time, not a wrong kernel: the publish rule keeps the faster one (Note [what a publish
replaces] in team.py). A directory where a marker cannot be written at all leaves the search unmarked, and a marker
that cannot be read is not waited for (Note [a team store that cannot be reached] in team.py).
"""
from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .claims import ClaimBusy
from .record import KernelRecord, check_key
from .team import FILE_MODE, TeamStore

log = logging.getLogger("kforge.store")

HEARTBEAT_S = 30.0  # how often a running search touches its marker
STALE_S = 120.0  # a marker untouched this long was left by a machine that stopped
POLL_S = 5.0  # how often a waiter looks whether the search it waits for has ended
TAKE_TRIES = 3  # looks at a marker that keeps going stale or away under us before giving up

_UNREADABLE = (OSError, ValueError, KeyError, TypeError)  # a marker half gone, not JSON, or not ours in shape
_ASIDE = itertools.count()  # tells apart the names a process moves stale markers to


def markers_of(team: TeamStore | None) -> "TeamMarkers | None":
    """The markers of ``team``; None without a team store, or where its directory is missing."""
    return TeamMarkers(team) if team is not None and team.directory.is_dir() else None


@dataclass(frozen=True)
class Marker:
    """A search another machine (or process) is running: who, what, and how long ago it last touched its marker."""

    host: str
    pid: int
    what: str
    age_s: float

    def describe(self) -> str:
        return f"{self.what} on {self.host} (pid {self.pid}), seen {self.age_s:.0f} s ago"


class MarkedElsewhere(ClaimBusy):
    """Another machine or process holds a fresh marker of the key this one meant to search (Note [a search a
    teammate is running]); ``marker`` says whose."""

    def __init__(self, marker: Marker) -> None:
        super().__init__(f"a teammate is searching it ({marker.describe()})", None)
        self.marker = marker


class TeamMarkers:
    """The markers of ``team`` (Note [a search a teammate is running]). ``me`` (host, pid) is who this process is
    in the markers it writes; tests play several machines with it."""

    def __init__(self, team: TeamStore, me: tuple[str, int] | None = None) -> None:
        self.team = team
        self.directory = team.directory / "claims"
        self.me = me if me is not None else (socket.gethostname(), os.getpid())

    def path(self, key: str) -> Path:
        return self.directory / f"{check_key(key)}.json"

    def now(self) -> float:
        """The share's clock: the mtime of a file this process touches in the markers' directory."""
        probe = self.directory / f".now-{self.me[0]}-{self.me[1]}-{threading.get_ident()}"
        self.directory.mkdir(exist_ok=True)
        probe.touch()
        try:
            return probe.stat().st_mtime
        finally:
            probe.unlink()

    def running_elsewhere(self, key: str) -> Marker | None:
        """The fresh marker of another machine or process for ``key``; None when there is none, it is this
        process's, it is stale, or it cannot be read."""
        try:
            marker = self._read(self.path(key))
        except FileNotFoundError:
            return None
        except _UNREADABLE as e:
            log.debug("kforge: marker of %s unreadable (%s); ignored", key[:16], e)
            return None
        return marker if self._fresh_elsewhere(marker) else None

    def record_after(self, key: str, wait_s: float, on_wait: Callable[[Marker], None] | None = None
                     ) -> KernelRecord | None:
        """The team's record of ``key`` once no other machine's fresh marker of it is left, waiting at most
        ``wait_s`` (``on_wait`` is called once, when the wait begins); ClaimBusy when one is still there then."""
        deadline = time.monotonic() + wait_s
        marker = self.running_elsewhere(key)
        if marker is not None and on_wait is not None:
            on_wait(marker)
        while marker is not None:
            if time.monotonic() >= deadline:
                raise ClaimBusy(f"a teammate was still searching it after {wait_s:.3g} s ({marker.describe()})", None)
            time.sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))
            marker = self.running_elsewhere(key)
        return self.team.get(key)

    @contextlib.contextmanager
    def searching(self, key: str, what: str) -> Iterator[None]:
        """Mark ``key`` as searched here while the block runs, touching the marker every HEARTBEAT_S seconds.
        MarkedElsewhere, before the block runs, where another machine or process holds a fresh marker of it."""
        path = self.path(key)
        try:
            self._take(path, what)
        except OSError as e:
            log.info("kforge: could not mark %s as searched here (%s); searching it unmarked", key[:16], e)
            yield
            return
        stop = threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(path, stop), name="kforge-marker", daemon=True)
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join()
            self._remove_if_mine(path)

    def _take(self, path: Path, what: str) -> None:
        """Create this process's marker at ``path`` exclusively; MarkedElsewhere where another's fresh one is there.
        A stale or unreadable one is taken over. OSError: the directory cannot be written."""
        self.directory.mkdir(exist_ok=True)
        body = json.dumps({"host": self.me[0], "pid": self.me[1], "what": what, "since": time.time()}).encode()
        for _ in range(TAKE_TRIES):
            if self._link_new(path, body):
                return
            try:
                marker = self._read(path)
            except FileNotFoundError:  # its search ended since our link failed: try again
                continue
            except _UNREADABLE as e:
                log.info("kforge: marker of %s unreadable (%s); taking it over", path.stem[:16], e)
                marker = None
            if marker is not None and (marker.host, marker.pid) == self.me:
                os.utime(path)  # this process's own, left by an earlier search of it here: fresh again
                return
            if marker is not None and self._fresh_elsewhere(marker):
                raise MarkedElsewhere(marker)
            self._take_over(path)
        raise ClaimBusy(f"could not mark it as searched here: its marker was taken over or went {TAKE_TRIES} times "
                        "while this process tried", None)

    def _link_new(self, path: Path, body: bytes) -> bool:
        """Create ``path`` holding ``body``, False where it exists: written to a temp file beside it, then linked."""
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f"{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
            os.chmod(tmp, FILE_MODE)
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            Path(tmp).unlink(missing_ok=True)

    def _take_over(self, path: Path) -> None:
        """Move the stale or unreadable marker at ``path`` away and delete it. Where what was moved turns out fresh
        (a teammate took the stale one over and marked it in between), it is linked back: MarkedElsewhere."""
        aside = path.with_name(f"{path.name}.stale-{self.me[0]}-{self.me[1]}-{next(_ASIDE)}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:  # a teammate took it over first
            return
        try:
            moved = self._read(aside)
        except _UNREADABLE:
            moved = None
        if moved is not None and self._fresh_elsewhere(moved):
            with contextlib.suppress(FileExistsError):  # a third machine marked it meanwhile: it holds it now
                os.link(aside, path)
            aside.unlink()
            raise MarkedElsewhere(moved)
        aside.unlink()

    def _read(self, path: Path) -> Marker:
        """The marker at ``path``, its age on the share's clock; FileNotFoundError, or another of _UNREADABLE."""
        d = json.loads(path.read_text(encoding="utf-8"))
        return Marker(str(d["host"]), int(d["pid"]), str(d["what"]), self.now() - path.stat().st_mtime)

    def _fresh_elsewhere(self, marker: Marker) -> bool:
        return (marker.host, marker.pid) != self.me and marker.age_s <= STALE_S

    def _remove_if_mine(self, path: Path) -> None:
        with contextlib.suppress(*_UNREADABLE):
            marker = self._read(path)
            if (marker.host, marker.pid) == self.me:  # a teammate may have taken it over since (this search stalled)
                path.unlink()


def _heartbeat(path: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        with contextlib.suppress(OSError):
            os.utime(path)
