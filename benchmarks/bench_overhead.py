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
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from harness import environment, titled, write_results  # noqa: E402


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def wall_us(fn: Callable[[], object], calls: int = 2000, runs: int = 20, warmup: int = 200) -> float:
    """Wall time of one call of ``fn`` in us: the median over ``runs`` runs of ``calls`` calls, the GPU (if any)
    synchronised after each run."""
    for _ in range(warmup):
        fn()
    _sync()
    per = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync()
        per.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per)


def relu_kernel(n: int, device: torch.device) -> tuple[str, Callable[[list[torch.Tensor]], list[torch.Tensor]]]:
    """A registered relu kernel of ``n`` elements and its run function: the planted CUDA kernel through its launcher
    on a GPU, a CPU relu without one (the host path without a launch)."""
    from forge_backend.registry import REGISTRY, KernelImpl
    from planted import candidate, unary_card

    card = unary_card("aten.relu.default", n)
    if device.type == "cuda":
        from forge_backend.runtime.launch import Launcher
        from forge_backend.runtime.nvrtc import compile_candidate

        major, minor = torch.cuda.get_device_capability(device)
        cand = candidate("relu_good")
        run = Launcher(card, cand, compile_candidate(cand, f"sm_{major}{minor}").cubin, device)
    else:
        def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            return [torch.relu(inputs[0])]
    REGISTRY.register(KernelImpl(card.key, card.op, tuple(t.spec for t in card.outputs), run))
    return card.key, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="results path without suffix")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_overhead needs a CUDA GPU")
        return
    from forge_backend.registry import call_kernel

    dev = torch.device("cuda", 0)
    key, run = relu_kernel(1024, dev)
    x = torch.randn(1024, device=dev)
    op = torch.ops.kforge.kernel.default
    rows = []
    aten = wall_us(lambda: torch.ops.aten.relu.default(x))
    for name, fn in (("aten relu", lambda: torch.ops.aten.relu.default(x)), ("kforge launcher (eager graphs)",
                     lambda: run([x])), ("kforge custom op (Inductor graphs, before)", lambda: op(key, [x])),
                     ("kforge call_kernel (Inductor graphs, direct)", lambda: call_kernel(key, [x]))):
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
