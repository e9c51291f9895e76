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

Note [kernel time beside event time]
Events around one call count the GPU's launch of the call's kernels as well as the kernels themselves. On the H200
(twenty-ninth session, benchmarks/results/h200/launch_cost_session29.md) a kernel that only writes one word a block
reads 3.4-3.9 us by ``Timer.time`` and runs 0.86 us by the profiler, whatever its grid (1 or 132 blocks), block
size, shared memory (0-227 KB) or launch kind (plain or cooperative): about 3 us of every timed call is the launch.
That is nothing beside a 2 GiB copy (the copy bandwidth) and 15% of a 20 us kernel: a plain copy of 64 MiB reads
18.6 us by events and runs 15.55 us. ``Timer.kernel_time`` times the same calls, flushed the same way, by the
durations the profiler (CUPTI) records for the device work each call queues, summed per call: device time without
the launch. It flatters small calls the other way: a kernel's time ends with its last store, which the 50 MB L2
may still hold, so a 64 MiB row can run faster than its floor (the copy above: 101%); and in ops runs AA and AB five
of Inductor's calls read 0.8-2.4% more by kernel time than by events (their medians come from separate repeats, with
the profiler running). Kernel time says how much of a gap is the kernel's own; the targets are judged by event time
and by graph replay (next Note).

Note [device time by graph replay]
The anchors (../shared/anchors/README.md, "the numbers to beat") time eager and Inductor by CUDA-graph replay: 20
calls captured in one graph, replayed, the replay's time over 20. The launch is paid once a replay, so the number is
the kernels' own, queued back to back as a model's kernels are. The anchors replay the same inputs, which a 64 MiB
row's 32 MiB input then reads from the L2. ``Timer.graph_time`` keeps their method and takes that flattery out: each
captured call has its own inputs and keeps its own outputs (``graph_calls`` picks enough calls that they move at
least ten times the L2; with its cap of 64 calls, calls of >= 8 MiB), and the L2 is flushed before every replay as
before every timed call. What remains between calls is what a model has too: the L2 holds the last call's outputs
when the next one starts. Unlike kernel time, a call's time still ends when its last store leaves the SM, and the
next call's first loads wait for that.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from .fsutil import atomic_write

FLUSH_BYTES = 512 * 2**20
GRAPH_ROTATION_BYTES = 512 * 2**20  # Note [device time by graph replay]: what one replay's calls move, at least


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

    def kernel_time(self, fn: Callable[[], object], warmup: int = 5, repeats: int = 30) -> Timing:
        """Note [kernel time beside event time]: per flushed call, the summed durations of the device work ``fn``
        queues (kernels, copies, fills), as the profiler records them; median and minimum over ``repeats``."""
        for _ in range(warmup):
            self.flush_l2()
            fn()
        flush_only = _device_durations(self.flush_l2, 3, self.device)
        if len(flush_only) % 3:
            raise RuntimeError(f"the L2 flush queued {len(flush_only)} device activities over 3 calls")
        both = _device_durations(lambda: (self.flush_l2(), fn()), repeats, self.device)
        sums = per_call_sums(both, repeats, len(flush_only) // 3)
        return Timing(statistics.median(sums), min(sums), repeats)

    def graph_time(self, calls: Sequence[Callable[[], object]], repeats: int = 30) -> Timing:
        """Note [device time by graph replay]: ``calls`` (each on its own buffers) captured in one CUDA graph, the
        graph replayed after an L2 flush, timed by events; median and minimum of ``repeats`` replays, per call.
        Every call's outputs are held while the graph lives, so no call writes where another one did."""
        if not calls:
            raise ValueError("graph_time needs at least one call")
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):  # a warm-up off the capture, as torch.cuda.graphs asks
            for call in calls:
                call()
        current.wait_stream(side)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            held = [call() for call in calls]
        timing = self.time(graph.replay, warmup=3, repeats=repeats)
        del held, graph
        n = len(calls)
        return Timing(timing.median_us / n, timing.min_us / n, repeats)


def graph_calls(nbytes: int, rotation_bytes: int = GRAPH_ROTATION_BYTES, least: int = 4, most: int = 64) -> int:
    """How many calls of ``nbytes`` each one graph replays (Note [device time by graph replay]): enough that they
    move ``rotation_bytes``, at least ``least`` (so the launch is shared) and at most ``most``."""
    if nbytes <= 0:
        raise ValueError(f"a call moves {nbytes} bytes")
    return min(most, max(least, -(-rotation_bytes // nbytes)))


def _device_durations(call: Callable[[], object], times: int, device: torch.device) -> list[float]:
    """Durations (us) of the device activities ``times`` calls of ``call`` queue, in the order they started."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(times):
            call()
        torch.cuda.synchronize(device)
    found = sorted((e.time_range.start, e.time_range.elapsed_us()) for e in prof.events()
                   if e.device_type == DeviceType.CUDA)
    return [d for _, d in found]


def per_call_sums(durations: list[float], calls: int, flush_activities: int) -> list[float]:
    """Split the device activities of ``calls`` flushed calls, in the order they ran (each call's flush, then the
    call's own work), into each call's own summed duration. The split needs every call to queue as many activities:
    otherwise the count does not divide, or leaves a call none of its own, and this raises."""
    if calls < 1 or len(durations) % calls:
        raise ValueError(f"{len(durations)} device activities do not split into {calls} calls")
    per = len(durations) // calls
    if per <= flush_activities:
        raise ValueError(f"each call queued {per} device activities, none beyond the flush's {flush_activities}")
    return [sum(durations[i * per + flush_activities:(i + 1) * per]) for i in range(calls)]


def copy_call(device: torch.device, nbytes: int) -> Callable[[], object]:
    """A plain copy that moves ``nbytes`` in all, half read and half written (fp32 on each side)."""
    n = max(nbytes // 8, 1)
    src = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


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
    return timer.time(copy_call(timer.device, nbytes)).median_us


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
