"""Host overhead of one kforge call on a tiny tensor against the ATen op it replaces (wall time per call).

    python benchmarks/bench_overhead.py

A 1024-element softmax: ATen's softmax vs a verified kforge softmax kernel called (a) directly through its
launcher, as an eager graph calls it, (b) through the torch.library custom op, as Inductor's code calls it, and
(c) from a CUDA graph replay of the launcher. Wall time per call, median of 20 runs of 2000 calls.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from harness import environment, write_results  # noqa: E402


def wall_us(fn, calls: int = 2000, runs: int = 20) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per)


def main() -> None:
    if not torch.cuda.is_available():
        print("bench_overhead needs a CUDA GPU")
        return
    from forge_backend.registry import REGISTRY, KernelImpl
    from forge_backend.runtime.launch import Launcher
    from forge_backend.runtime.nvrtc import compile_candidate
    from planted import candidate, unary_card

    dev = torch.device("cuda", 0)
    card = unary_card("aten.relu.default", 1024)
    cand = candidate("relu_good")
    run = Launcher(card, cand, compile_candidate(cand, "sm_90").cubin, dev)
    REGISTRY.register(KernelImpl(card.key, card.op, tuple(t.spec for t in card.outputs), run))
    x = torch.randn(1024, device=dev)
    op = torch.ops.kforge.kernel.default
    rows = []
    aten = wall_us(lambda: torch.ops.aten.relu.default(x))
    for name, fn in (("aten relu", lambda: torch.ops.aten.relu.default(x)), ("kforge launcher (eager graphs)",
                     lambda: run([x])), ("kforge custom op (Inductor graphs)", lambda: op(card.key, [x]))):
        t = wall_us(fn)
        rows.append({"call": name, "wall_us": t, "vs_aten": t / aten})
    g = torch.cuda.CUDAGraph()
    static_out = []
    with torch.cuda.graph(g):
        static_out.append(run([x]))
    t = wall_us(g.replay)
    rows.append({"call": "kforge launcher in a CUDA graph replay", "wall_us": t, "vs_aten": t / aten})
    for r in rows:
        print(f"{r['call']:45s} {r['wall_us']:7.2f} us  {r['vs_aten']:.2f}x aten")
    write_results(Path(__file__).parent / "results" / "h200" / "overhead", environment("python " + " ".join(sys.argv)),
                  rows, ["call", "wall_us", "vs_aten"], "Host overhead of one call on a 1024-element tensor")


if __name__ == "__main__":
    main()
