"""Host time of kforge nodes inside Inductor's generated code: the op's call against the direct call.

    python benchmarks/bench_inductor_call.py [--nodes 16] [--out PATH]

A graph of ``--nodes`` chained ``kforge::kernel`` nodes on a 1024-element tensor is compiled by Inductor twice in one
run: once with its generated code calling ``torch.ops.kforge.kernel.default`` (the dispatcher's round trip), once
calling ``registry.call_kernel`` (Note [Inductor's code calls the kernel, not the op] in
forge_backend/inductor_call.py). Each compile's code is checked for the call it is meant to make. On a GPU every node
runs the planted relu kernel through its launcher; without one, a CPU relu (the host path without a launch). The
kforge launcher in a Python loop over the same nodes is one reference, Inductor's own code for a graph of as many
steps that each need a kernel of their own (mean and subtract, reduced dims alternating) the other. Wall time per
graph call, median of 20 runs of 500 calls, and per launch.
"""
from __future__ import annotations

import argparse
import operator
import re
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from bench_overhead import relu_kernel, wall_us  # noqa: E402
from harness import environment, titled, write_results  # noqa: E402


def _chain(key: str, nodes: int) -> torch.fx.GraphModule:
    from forge_backend.registry import KERNEL_OP

    g = torch.fx.Graph()
    x = g.placeholder("x")
    for _ in range(nodes):
        x = g.call_function(operator.getitem, (g.call_function(KERNEL_OP, (key, [x])), 0))
    g.output((x,))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _compiled(gm: torch.fx.GraphModule, x: torch.Tensor, direct: bool) -> Callable[[], object]:
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    from forge_backend.inductor_call import CALL_NAME, direct_calls, install

    if not install():
        raise SystemExit("this torch has no custom extern-kernel codegen: nothing to compare")
    with torch._inductor.config.patch(fx_graph_cache=False), direct_calls(direct):
        fn, codes = run_and_get_code(compile_fx, gm, [x])
    code = "\n".join(codes)
    made = f"{CALL_NAME}(" in code, "torch.ops.kforge.kernel.default(" in code
    if made != (direct, not direct):
        raise SystemExit(f"the {'direct' if direct else 'op'} compile's code makes the wrong call: {made}")
    return lambda: fn(x)


def _inductors_own(nodes: int, device: torch.device) -> tuple[Callable[[], object], int]:
    """Inductor's own kernels for comparison: ``nodes`` steps of ``y - y.mean(dim)`` on a [32, 32] tensor, the
    reduced dim alternating so that each step needs the whole of the one before, and the launches its code makes (on
    a GPU about one a step; Inductor's C++ code for the CPU fuses them into one)."""
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    g = torch.fx.Graph()
    y = g.placeholder("x")
    for i in range(nodes):
        mean = g.call_function(torch.ops.aten.mean.dim, (y, [i % 2], True))
        y = g.call_function(torch.ops.aten.sub.Tensor, (y, mean))
    g.output((y,))
    inp = torch.randn(32, 32, device=device)
    with torch._inductor.config.patch(fx_graph_cache=False):
        fn, codes = run_and_get_code(compile_fx, torch.fx.GraphModule(torch.nn.Module(), g), [inp])
    launches = len(re.findall(r"^\s+(?:\w+\.run\(|cpp_fused\w*\()", "\n".join(codes), re.M))
    return (lambda: fn(inp)), launches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--out", default=None, help="results path without suffix (default: results/<gpu>/inductor_call, "
                                                "or results/host/inductor_call without a GPU)")
    args = ap.parse_args()
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    key, run = relu_kernel(1024, device)
    x = torch.randn(1024, device=device)
    gm = _chain(key, args.nodes)
    rows = []
    with torch.no_grad():
        calls = {"Inductor's code calls the op": _compiled(gm, x, direct=False),
                 "Inductor's code calls call_kernel": _compiled(gm, x, direct=True)}

        def loop() -> None:
            y = x
            for _ in range(args.nodes):
                y = run([y])[0]
        calls["the launcher in a Python loop"] = loop
        own, launches = _inductors_own(args.nodes, device)
        calls["Inductor's own kernels (mean, sub)"] = own
        times = {name: wall_us(fn, calls=500, warmup=50) for name, fn in calls.items()}
    base = times["Inductor's code calls the op"]
    for name, t in times.items():
        n = launches if name.startswith("Inductor's own") else args.nodes
        rows.append({"call": name, "launches": n, "graph_us": t, "per_launch_us": t / max(n, 1), "vs_op": t / base})
        print(f"{name:40s} {t:8.2f} us a graph  {n:3d} launches  {t / max(n, 1):6.2f} us a launch  "
              f"{t / base:.3f}x the op's")
    env = environment("python " + " ".join(sys.argv))
    gpu = env.get("gpu", "")
    folder = "h200" if "H200" in gpu else "h100" if "H100" in gpu else "host"
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / folder / "inductor_call"
    write_results(out, env, rows, ["call", "launches", "graph_us", "per_launch_us", "vs_op"],
                  titled(f"Inductor graphs of {args.nodes} kforge nodes on 1024 elements, wall time a call", env),
                  notes=["One run; ratios compare numbers of that run. Without a GPU each node runs a CPU relu. "
                         "launches: kforge nodes, or the kernel calls in Inductor's code for its own graph of "
                         f"{args.nodes} mean-and-subtract steps on [32, 32]."])


if __name__ == "__main__":
    main()
