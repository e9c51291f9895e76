"""Does a replaced signature slow the model around it? The kforge+eager path with and without its kernels.

    python benchmarks/ab_replace.py --model sd35_vae::bf16_1024 --drop aten.div.Tensor --layout channels_last

Compiles the model's kforge+eager path twice from one kernel cache (the first compile searches its misses, with
``--margin``): B with every kernel the cache holds, A with the kernels whose card matches ``--drop`` (the op's name,
and ``--layout``: the layout of the card's first input) left to PyTorch. For each it takes the GPU time per forward
(the profiler's kernels, copies and memsets, ``--rounds`` rounds in alternating order) and the kernel table, and
records, at the first call of every kernel, the strides and 16-byte alignment of what it was given and what it
returned. Writes ``ab_<model>.json`` and ``ab_<model>.txt`` (the kernels whose time per forward differs most between A
and B) under ``--out``. A development tool: it says where a difference comes from, not how fast anything is.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import environment, log  # noqa: E402


def layout_of(strides: list[int], shape: list[int]) -> str:
    """``contiguous``, ``channels_last`` (4-d), or ``strided``."""
    return _layout(torch.empty_strided(shape, strides, device="meta"), long=True)


def card_matches(card, op: str, layout: str) -> bool:
    if op not in card.op:
        return False
    if layout == "any" or not card.inputs:
        return True
    first = card.inputs[0]
    return layout_of(list(first.spec.stride), list(first.spec.shape)) == layout


def _layout(t: torch.Tensor, long: bool = False) -> str:
    if t.is_contiguous():
        return "contiguous" if long else "C"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last" if long else "CL"
    return "strided" if long else "S" + str(tuple(t.stride()))


def _line(name: str, args, out) -> str:
    """One op as it ran: ``name [input layouts] -> [output layout@address % 16]``."""
    from torch.utils._pytree import tree_flatten

    ins = [_layout(t) for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
    outs = [f"{_layout(t)}@{t.data_ptr() % 16}" for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return f"{name} {ins} -> {outs}"


def op_layouts(fn, inputs) -> list[str]:
    """Every ATen op one call of ``fn`` dispatches, with the layouts of its tensor inputs and outputs (C contiguous,
    CL channels-last, S strided) and its outputs' 16-byte alignment: where two runs part ways, a layout changed."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.lines.append(_line(str(func), (args, kwargs), out))
            return out

    rec = Record()
    with rec:
        fn(*inputs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return rec.lines


class _Graph:
    """A compiled graph's callable and the arguments of its last call."""

    def __init__(self, fn) -> None:
        self.fn, self.args = fn, None

    def __call__(self, *args):
        self.args = args
        return self.fn(*args)


def kept(backend, graphs: list):
    """``backend``, keeping what it returns for each graph (and the arguments it is called with) in ``graphs``."""
    def wrapped(gm, example_inputs, **kwargs):
        g = _Graph(backend(gm, example_inputs, **kwargs))
        graphs.append(g)
        return g
    return wrapped


def graph_layouts(graphs: list) -> list[str]:
    """The kforge+eager path's nodes as they run: each compiled graph (a GraphModule's forward on that path) is
    replayed node by node on the arguments of its last call, with the layout and alignment of every node's tensor
    results, so the two paths can be compared with eager's ``op_layouts`` line by line."""
    lines: list[str] = []
    for g in graphs:
        gm = getattr(g.fn, "__self__", None)
        if not isinstance(gm, torch.fx.GraphModule) or g.args is None:
            lines.append(f"(a graph that is not a GraphModule's forward: {type(g.fn).__name__})")
            continue

        class Record(torch.fx.Interpreter):
            def run_node(self, n):
                out = super().run_node(n)
                if n.op == "call_function":
                    lines.append(_line(str(getattr(n.target, "__name__", n.target)),
                                       self.fetch_args_kwargs_from_env(n), out))
                return out

        Record(gm).run(*g.args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return lines


class ABProvider:
    """The runtime's provider with two switches: ``drop`` leaves matching cards to PyTorch, and every kernel it
    serves records its first call's strides and alignment in ``seen``."""

    def __init__(self, inner, op: str, layout: str, drop: bool, seen: dict[str, dict]) -> None:
        self.inner, self.op, self.layout, self.drop, self.seen = inner, op, layout, drop, seen
        self.dropped: list[str] = []

    def kernels_for(self, cards, cfg):
        impls = dict(self.inner.kernels_for(cards, cfg))
        for card in cards:
            if card.key in impls and card_matches(card, self.op, self.layout):
                if self.drop:
                    impls.pop(card.key)
                    self.dropped.append(card.key)
        return {k: self._watched(impl) for k, impl in impls.items()}

    def _watched(self, impl):
        seen, run, op = self.seen, impl.run, impl.op

        def watched(inputs):
            outputs = run(inputs)
            if impl.key not in seen:
                seen[impl.key] = {
                    "op": op, "description": impl.description,
                    "inputs": [[list(t.shape), list(t.stride()), t.data_ptr() % 16] for t in inputs],
                    "outputs": [[list(t.shape), list(t.stride()), t.data_ptr() % 16] for t in outputs],
                    "promised": [[list(s.shape), list(s.stride)] for s in impl.outputs]}
            return outputs
        return dataclasses.replace(impl, run=watched)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="sd35_vae::bf16_1024", help="example[::setting]")
    ap.add_argument("--drop", default="aten.div.Tensor", help="op name (substring) of the kernels A leaves out")
    ap.add_argument("--layout", default="channels_last", choices=["any", "contiguous", "channels_last", "strided"])
    ap.add_argument("--margin", type=float, default=0.0, help="the searches' margin over eager")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cache", type=Path, default=None, help="kernel cache (default: a fresh temporary one)")
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("ab_replace needs a CUDA GPU; none is visible here.")
        return
    from profile_kernels import kernel_table

    from forge_backend.backend import make_backend
    from forge_backend.modelspec import load
    from forge_backend.runtime.provider import default_provider
    from forge_backend.config import KforgeConfig

    cache = args.cache or Path(tempfile.mkdtemp(prefix="kforge-ab-"))
    opts = {"inner": "eager", "search_iterations": args.iterations, "search_seconds": 400, "cache_dir": str(cache),
            "margin": args.margin}
    inner = default_provider(KforgeConfig.load(opts))
    seen: dict[str, dict] = {}
    providers = {"B_all": ABProvider(inner, args.drop, args.layout, False, seen),
                 "A_dropped": ABProvider(inner, args.drop, args.layout, True, seen)}
    name, _, setting = args.model.partition("::")
    examples = Path(__file__).resolve().parent.parent / "examples"
    loaded = load(f"{examples / name}.py" + (f"::{setting}" if setting else "") if "/" not in name else args.model)
    model, inputs = loaded.model, loaded.inputs
    compiled, reports, graphs = {}, {}, {}
    with torch.no_grad():
        ref = model(*inputs)
        torch._dynamo.reset()
        for name, provider in providers.items():  # no reset in between: each keeps its compiled code
            got, graphs[name] = [], []
            fn = torch.compile(model, backend=kept(make_backend(provider, on_report=got.append), graphs[name]),
                               options=opts)
            out = fn(*inputs)
            torch.cuda.synchronize()
            compiled[name] = fn
            reports[name] = {"replaced": sorted({key for r in got for _, key, _ in r.replaced}),
                             "graphs": len(graphs[name]), "max_abs_diff": float((out.float() - ref.float()).abs().max())}
            log(f"{name}: {len(reports[name]['replaced'])} signatures replaced")
        tables = {name: [] for name in compiled}
        for r in range(args.rounds):
            for name in (list(compiled) if r % 2 == 0 else list(compiled)[::-1]):
                tables[name].append(kernel_table(compiled[name], inputs, 2))
        # after the timing: the dispatch mode runs the model eagerly; the compiled paths replay their graphs' nodes
        layouts = {"eager": op_layouts(model, inputs)} | {name: graph_layouts(g) for name, g in graphs.items()}
    totals = {n: statistics.median(sum(k["us_per_forward"] for k in t) for t in ts) / 1e3 for n, ts in tables.items()}
    per = {n: {k["kernel"]: k for k in ts[-1]} for n, ts in tables.items()}
    names = set(per["A_dropped"]) | set(per["B_all"])

    def us(n, k):
        return per[n].get(k, {}).get("us_per_forward", 0.0)

    def calls(n, k):
        return per[n].get(k, {}).get("calls_per_forward", 0.0)

    diffs = sorted(({"kernel": k, "A_us": us("A_dropped", k), "B_us": us("B_all", k), "A_calls": calls("A_dropped", k),
                     "B_calls": calls("B_all", k)} for k in names), key=lambda d: -abs(d["B_us"] - d["A_us"]))
    stem = args.model.replace("::", "_").replace("/", "_").replace(".py", "")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"environment": environment(" ".join(["python"] + sys.argv)), "model": args.model, "drop": args.drop,
              "layout": args.layout, "margin": args.margin, "device_ms": totals, "reports": reports,
              "dropped_keys": sorted(set(providers["A_dropped"].dropped)), "kernel_calls_seen": seen, "diffs": diffs[:60],
              "op_layouts": layouts}
    (args.out / f"ab_{stem}.json").write_text(json.dumps(result, indent=1))
    lines = [f"{args.model}: GPU ms per forward (median of {args.rounds} rounds): "
             f"B (all kernels) {totals['B_all']:.2f}, A (without {args.drop} {args.layout}) {totals['A_dropped']:.2f}",
             f"dropped keys: {result['dropped_keys']}",
             f"{'B-A us':>9} {'A us':>9} {'B us':>9} {'A n':>5} {'B n':>5}  kernel"]
    lines += [f"{d['B_us'] - d['A_us']:9.1f} {d['A_us']:9.1f} {d['B_us']:9.1f} {d['A_calls']:5.1f} {d['B_calls']:5.1f}"
              f"  {d['kernel'][:140]}" for d in diffs[:40]]
    lines += ["", "first call of each kernel (inputs / outputs: shape, strides, address % 16):"]
    lines += [f"{v['op']} {k[:12]} in={v['inputs']} out={v['outputs']} promised={v['promised']}"
              for k, v in seen.items()]
    (args.out / f"ab_{stem}.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:50]))


if __name__ == "__main__":
    main()
