"""Host overhead of one kforge call on a tiny tensor against the ATen op it replaces (wall time per call).

    python benchmarks/bench_overhead.py [--out PATH]

A 1024-element relu: ATen's relu vs the planted relu kernel called (a) directly through its launcher, as an eager
graph calls it, (b) through the torch.library custom op, as Inductor's code called it before the direct call, (c)
through ``registry.call_kernel``, as Inductor's code calls it now (Note [Inductor's code calls the kernel, not the
op] in forge_backend/inductor_call.py), and (d) from a CUDA graph replay of the launcher. Wall time per call, median
of 20 runs of 2000 calls. Default output: results/<h200|h100>/overhead.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from harness import environment, titled, write_results  # noqa: E402


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results path without suffix")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_overhead needs a CUDA GPU")
        return
    from forge_backend.registry import REGISTRY, KernelImpl, call_kernel
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
                     lambda: run([x])), ("kforge custom op (Inductor graphs, before)", lambda: op(card.key, [x])),
                     ("kforge call_kernel (Inductor graphs, direct)", lambda: call_kernel(card.key, [x]))):
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
    env = environment("python " + " ".join(sys.argv))
    folder = "h200" if "H200" in env.get("gpu", "") else "h100"
    write_results(args.out or Path(__file__).parent / "results" / folder / "overhead", env, rows,
                  ["call", "wall_us", "vs_aten"], titled("Host overhead of one call on a 1024-element tensor", env))


if __name__ == "__main__":
    main()
