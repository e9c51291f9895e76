"""Claims: which process on this machine is searching a signature, or timing candidates on a GPU, so that another
process waits for it instead of doing the same work beside it.

Note [one search of a signature at a time]
Several processes can miss the same signatures at once: the ranks of a torchrun job compiling one model, workers of
a service starting together, a `kforge prewarm` beside a training script. Without a claim each searched every miss
itself: the same minutes of GPU work done once a process, and when they shared a GPU, each one's timings disturbed
by the other's candidates, so that every record was measured on a busy GPU. So a search takes two claims first,
in this order:

* the signature's (``key-<key>``): a process that finds it taken waits for the holder to finish, then reads the
  local cache, where the holder stored its record, and uses that instead of searching;
* the GPU's (``gpu-<uuid>``, the device's UUID, which CUDA_VISIBLE_DEVICES does not renumber): searches of
  different signatures on one GPU take turns, so each times its candidates on a GPU that nothing else of kforge's
  is timing on. GPUs of a host are claimed apart, so a torchrun job's ranks still search on all of them at once.

Both are always taken in that order, and the GPU's is held only while searching the signature whose claim is held,
so no process holds a GPU's claim while it waits for a signature's: two claims cannot deadlock.

A claim is an exclusive ``flock`` on ``<cache_dir>/claims/<name>.lock``. The kernel drops it when its holder exits,
however it exits, so a crashed or killed search never leaves a stale claim behind; the files stay (removing a lock
file that another process is about to lock races with it) and are a few bytes each. The holder writes who it is
(pid, host, what, since) into the file, for the waiter's message. A waiter waits at most its budget: a compile its
``search_seconds``, after which the miss is queued (Note [a miss kept for later] in queue.py); a prewarm
:data:`PREWARM_WAIT_S`. Claims are per cache directory and per machine: ``flock`` over a network filesystem is not
to be relied on, so machines sharing a team store (team.py) do not claim each other's searches. Where ``fcntl`` does
not exist (not Linux or macOS), claims are not taken.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..errors import KforgeError

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows): claims are not taken
    fcntl = None  # type: ignore[assignment]

PREWARM_WAIT_S = 900.0  # a prewarm waits this long for another process's claim before it skips the signature
POLL_S = 0.2


class ClaimBusy(KforgeError):
    """Another process held a claim for longer than this one could wait."""

    def __init__(self, message: str, holder: "Holder | None") -> None:
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class Holder:
    """Who holds a claim, as its holder wrote it into the claim's file."""

    pid: int
    host: str
    what: str
    since: float

    def describe(self, now: float | None = None) -> str:
        age = max(0.0, (time.time() if now is None else now) - self.since)
        return f"pid {self.pid} on {self.host}, {self.what}, for {age:.0f} s"


def claims_dir(cache_dir: str | os.PathLike[str]) -> Path:
    return Path(cache_dir).expanduser() / "claims"


class Claim:
    """One exclusive claim by name: :meth:`acquire` (waiting), :meth:`release`; a context manager once acquired."""

    def __init__(self, cache_dir: str | os.PathLike[str], name: str, what: str) -> None:
        self.path = claims_dir(cache_dir) / f"{name}.lock"
        self.what = what
        self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def try_acquire(self) -> bool:
        """Take the claim if it is free; False (at once) when another holds it."""
        if fcntl is None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        except BaseException:
            f.close()
            raise
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "what": self.what,
                            "since": time.time()}))
        f.flush()
        self._file = f
        return True

    def acquire(self, wait_s: float, on_wait: Callable[[Holder | None], None] | None = None,
                poll_s: float = POLL_S) -> bool:
        """Take the claim, waiting up to ``wait_s`` for its holder; True when it was free at once, False when this
        process waited for it. ``on_wait`` is called once, with the holder, when the wait begins. Raises ClaimBusy
        when it is still held after ``wait_s``."""
        if self.try_acquire():
            return True
        if on_wait is not None:
            on_wait(self.holder())
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(min(poll_s, max(deadline - time.monotonic(), 0.0)))
            if self.try_acquire():
                return False
        holder = self.holder()
        raise ClaimBusy(f"another process held {self.path.stem} for longer than {wait_s:.3g} s" +
                        (f" ({holder.describe()})" if holder else ""), holder)

    def holder(self) -> Holder | None:
        """Who holds the claim, as the file says; None when it says nothing readable (being written, or empty)."""
        try:
            d = json.loads(self.path.read_text(encoding="utf-8"))
            return Holder(int(d["pid"]), str(d["host"]), str(d["what"]), float(d["since"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the descriptor drops the flock
            self._file = None

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def search_claims(cache_dir: str | os.PathLike[str], key: str, gpu: str, what: str, wait_s: float,
                  on_wait: Callable[[Holder | None], None] | None = None) -> Iterator[bool]:
    """Hold the claims of a search of ``key`` on the GPU named ``gpu`` (its UUID: runtime.search_runner.gpu_name;
    Note [one search of a signature at a time]), waiting at most ``wait_s`` in all. Yields whether this process
    waited for the signature's claim (then the holder may have stored a record: read the cache before searching).
    Raises ClaimBusy when a claim stayed held."""
    deadline = time.monotonic() + wait_s
    with Claim(cache_dir, f"key-{key}", what) as signature:
        waited = not signature.acquire(wait_s, on_wait)
        with Claim(cache_dir, f"gpu-{gpu}", what) as device:
            device.acquire(max(deadline - time.monotonic(), 0.0), on_wait)
            yield waited
