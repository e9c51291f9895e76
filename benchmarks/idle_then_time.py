"""Does a GPU that sat idle time slower? A plain copy timed after idle gaps, with and without busy work first.

    python benchmarks/idle_then_time.py [--mib 64] [--out DIR]

bench_ops.py times a row's copy first, right after building the row, while the GPU has been idle for as long as the
host worked, and Inductor's and kforge's kernels right after their compiles. If the GPU slows down while idle and the
Timer's five warm-up calls do not bring it back, those first timings read slow. This tool times the copy that
``measure.time_copy`` times (``--mib`` moved in all, half read and half written) after the GPU slept ``idle`` seconds,
straight away or after ``busy`` milliseconds of L2 flushes, and then once more at once (``again_us``). Same Timer as
every benchmark (forge_backend.measure: events, median of 30 after 5 warm-ups, a 512 MiB read before each repeat).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from harness import environment, titled, write_results  # noqa: E402

COLUMNS = ["idle_s", "busy_ms", "first_us", "again_us", "first_vs_again"]


def busy_for(timer, ms: float) -> None:
    """Flush the L2 again and again for ``ms`` milliseconds of wall time (the GPU kept reading DRAM)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        for _ in range(8):
            timer.flush_l2()
        torch.cuda.synchronize(timer.device)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64, help="bytes the copy moves in all, MiB")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("idle_then_time needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.measure import Timer

    dev = torch.device("cuda", 0)
    timer = Timer(dev)
    n = args.mib * 2**20 // 8  # fp32 elements on each side, as measure.time_copy
    src = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    copy = lambda: dst.copy_(src)  # noqa: E731
    timer.time(copy)  # first use: allocations and the copy path settled before anything is recorded
    rows = []
    for idle in (0.0, 0.5, 2.0):
        for busy in (0.0, 20.0, 200.0):
            torch.cuda.synchronize(dev)
            time.sleep(idle)
            if busy:
                busy_for(timer, busy)
            first = timer.time(copy).median_us
            again = timer.time(copy).median_us
            rows.append({"idle_s": idle, "busy_ms": busy, "first_us": first, "again_us": again,
                         "first_vs_again": first / again})
            print(f"idle {idle:.1f} s, busy {busy:5.0f} ms: first {first:6.1f} us, again {again:6.1f} us", flush=True)
    if args.out:
        env = environment("python " + " ".join(sys.argv))
        write_results(args.out / "idle_then_time", env, rows, COLUMNS,
                      titled(f"A {args.mib} MiB copy timed after the GPU sat idle", env))


if __name__ == "__main__":
    main()
