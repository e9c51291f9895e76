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

A marker is advisory. Two machines that look at once both search, as before, and the publish rule keeps the faster
kernel (Note [what a publish replaces] in team.py). A machine that dies leaves a marker nobody touches: it is stale
after STALE_S and ignored. Freshness is judged on the share's own clock (the mtime of a file this process touches
there), not this machine's, whose clock may differ from the writer's. A marker that cannot be written or read is
ignored: the search goes on unmarked (Note [a team store that cannot be reached] in team.py).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..fsutil import atomic_write
from .claims import ClaimBusy
from .record import KernelRecord, check_key
from .team import FILE_MODE, TeamStore

log = logging.getLogger("kforge.store")

HEARTBEAT_S = 30.0  # how often a running search touches its marker
STALE_S = 120.0  # a marker untouched this long was left by a machine that stopped
POLL_S = 5.0  # how often a waiter looks whether the search it waits for has ended


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


class TeamMarkers:
    """The markers of ``team`` (Note [a search a teammate is running])."""

    def __init__(self, team: TeamStore) -> None:
        self.team = team
        self.directory = team.directory / "claims"
        self.me = (socket.gethostname(), os.getpid())

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
            path = self.path(key)
            d = json.loads(path.read_text(encoding="utf-8"))
            marker = Marker(str(d["host"]), int(d["pid"]), str(d["what"]), self.now() - path.stat().st_mtime)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.debug("kforge: marker of %s unreadable (%s); ignored", key[:16], e)
            return None
        if (marker.host, marker.pid) == self.me or marker.age_s > STALE_S:
            return None
        return marker

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
        """Mark ``key`` as searched here while the block runs, touching the marker every HEARTBEAT_S seconds."""
        path = self.path(key)
        body = {"host": self.me[0], "pid": self.me[1], "what": what, "since": time.time()}
        try:
            self.directory.mkdir(exist_ok=True)
            atomic_write(path, json.dumps(body).encode(), mode=FILE_MODE)
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

    def _remove_if_mine(self, path: Path) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            d = json.loads(path.read_text(encoding="utf-8"))
            if (d["host"], d["pid"]) == self.me:  # another machine may have marked it since (both searched)
                path.unlink()


def _heartbeat(path: Path, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_S):
        with contextlib.suppress(OSError):
            os.utime(path)
