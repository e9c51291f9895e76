"""Honest timing on the GPU: device events, warm-up, median of repeats, L2 flushed before every repeat.

Note [why flush before each repeat]
Inputs under ~60 MB would otherwise sit in the H200's L2 and every contender would look faster than in a model.
The flush reads a buffer several times the L2 (a sum over 512 MiB), so the L2 holds only clean lines of that
buffer when the timed call starts. A flush that *writes* the buffer (``fill_``, as Triton's ``do_bench`` does)
leaves the L2 full of dirty lines, and the timed call then pays for writing ~50 MB of someone else's data back to
DRAM: up to ~12 us on the H200, a third of the floor of a 134 MB operator (``flush="write"`` keeps that method for
comparison). The flush also runs long enough (~0.1 ms) for the host to enqueue the start event, the timed call
and the end event behind it, so host overhead (a compiled function's ~35 us of guards) does not leak into device
time for calls whose host work is shorter than the flush.

The copy bandwidth (bytes read + written by a device-to-device copy) is measured once per GPU and cached in the
cache directory; rooflines and % of bandwidth use it, as METHOD.md asks.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from .fsutil import atomic_write

FLUSH_BYTES = 512 * 2**20


@dataclass(frozen=True)
class Timing:
    median_us: float
    min_us: float
    repeats: int

    def to_json(self) -> dict:
        return {"median_us": self.median_us, "min_us": self.min_us, "repeats": self.repeats}


class Timer:
    def __init__(self, device: torch.device, flush_bytes: int = FLUSH_BYTES, flush: str = "read") -> None:
        if flush not in ("read", "write"):
            raise ValueError(f"flush={flush!r}: choose 'read' or 'write'")
        self.device, self.flush = device, flush
        self._flush = torch.zeros(flush_bytes // 4, dtype=torch.int32, device=device)
        self._sink = torch.empty((), dtype=torch.int64, device=device)

    def flush_l2(self) -> None:
        """Evict the L2 as before each timed repeat (Note [why flush before each repeat]); queued, not waited for."""
        if self.flush == "write":
            self._flush.fill_(0)
        else:
            torch.sum(self._flush, dim=0, out=self._sink)

    def time(self, fn: Callable[[], object], warmup: int = 5, repeats: int = 30) -> Timing:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(self.device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for s, e in zip(starts, ends):
            self.flush_l2()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize(self.device)
        times = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
        return Timing(statistics.median(times), min(times), repeats)


def measure_copy_bandwidth(device: torch.device, nbytes: int = 2 * 2**30) -> float:
    """GB/s counting bytes read plus bytes written, median of 10 copies of a buffer far larger than the L2."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    timing = Timer(device, flush_bytes=4).time(lambda: dst.copy_(src), warmup=3, repeats=10)
    return 2 * nbytes / (timing.median_us * 1e3)


def time_copy(timer: Timer, nbytes: int) -> float:
    """Device time (us, the timer's median) of a plain copy that moves ``nbytes`` in all, half read and half written:
    the ceiling of a kernel that moves as much. A copy reaches the bandwidth of ``measure_copy_bandwidth`` only when
    it is large (H200, thirteenth session: 84% of it at 64 MiB moved, 95% at 136 MiB, 99% at 1 GiB)."""
    n = max(nbytes // 8, 1)  # fp32 elements on each side
    src = torch.empty(n, dtype=torch.float32, device=timer.device).uniform_()
    dst = torch.empty_like(src)
    return timer.time(lambda: dst.copy_(src)).median_us


def copy_bandwidth(device: torch.device, cache_dir: Path | None) -> float:
    """The measured copy bandwidth of this GPU, cached per device name in ``cache_dir/bandwidth.json``."""
    name = torch.cuda.get_device_name(device)
    path = Path(cache_dir, "bandwidth.json") if cache_dir else None
    table: dict[str, float] = {}
    if path is not None and path.exists():
        try:
            table = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            table = {}
        if name in table:
            return float(table[name])
    bw = measure_copy_bandwidth(device)
    if path is not None:
        table[name] = bw
        atomic_write(path, json.dumps(table, indent=1).encode())
    return bw


def pct_of_bandwidth(bytes_moved: int, time_us: float, bandwidth_gbps: float) -> float:
    """Achieved bytes/s as a percentage of the measured copy bandwidth (floor / time)."""
    return 100.0 * (bytes_moved / (bandwidth_gbps * 1e3)) / time_us if time_us > 0 else 0.0
