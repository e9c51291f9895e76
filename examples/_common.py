"""Shared harness for the model examples: settings, devices, CUDA timing and the kforge report table.

Every example module defines ``SETTINGS`` (its first entry is the default), ``get_model()`` / ``get_inputs()`` for
the default and ``get_model_<setting>()`` / ``get_inputs_<setting>()`` for each setting, so the same file works as a
MODEL_SPEC (``kforge prewarm examples/gemma4.py::eager_attn``) and as a script::

    python examples/gemma4.py --setting eager_attn

The script times eager PyTorch, Inductor and kforge with CUDA events (warm-up, then the median of repeats), lists
the operators kforge replaced with their measured speedups, and the time spent compiling and searching. Without a
CUDA GPU it says so and exits 0: the numbers would mean nothing on the CPU.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Sequence

import torch


def device() -> torch.device:
    """CUDA when there is a GPU, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def on_gpu() -> bool:
    return torch.cuda.is_available()


def placement(dev: torch.device | str | None, dtype: torch.dtype | None,
              gpu_dtype: torch.dtype) -> tuple[torch.device, torch.dtype]:
    """Where a model goes: the given device (else CUDA when there is one, else the CPU) and the given dtype (else
    ``gpu_dtype`` on a GPU and fp32 on the CPU, where half-precision kernels are slow or missing)."""
    dev = torch.device(dev) if dev is not None else device()
    return dev, dtype if dtype is not None else (gpu_dtype if dev.type == "cuda" else torch.float32)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Build parameters directly in ``dtype`` (a 2.6 B-parameter model built in fp32 first needs 10 GB more)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def random_tokens(tokens: int, vocab: int, batch: int = 1, device: torch.device | str | None = None) -> torch.Tensor:
    """A seeded random prompt of token ids, on ``device`` (else the GPU when there is one)."""
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (batch, tokens), generator=g).to(placement(device, None, torch.float32)[0])


class PrefillSampler(torch.nn.Module):
    """An LLM prefill (no KV cache) followed by the sampling softmax over the vocabulary.

    Only the last ``positions`` logits are computed (``logits_to_keep``, as ``generate`` does), and the softmax is
    taken in fp32 as samplers do, so it stays one ATen ``_softmax`` over [batch, positions, vocab] in the graph.
    """

    def __init__(self, lm: torch.nn.Module, positions: int = 64) -> None:
        super().__init__()
        self.lm = lm
        self.positions = positions

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        logits = self.lm(input_ids=input_ids, use_cache=False, logits_to_keep=self.positions).logits
        return torch.softmax(logits.float(), dim=-1)


def build_prefill_sampler(model_cls: Any, config: Any, device: torch.device | str | None = None,
                          dtype: torch.dtype | None = None, positions: int = 64) -> PrefillSampler:
    """A causal LM built from ``config`` with seeded random weights (bf16 on the GPU, fp32 on the CPU by default),
    wrapped as a prefill + sampling softmax over its last ``positions`` logits."""
    dev, dt = placement(device, dtype, torch.bfloat16)
    torch.manual_seed(0)
    with dev, default_dtype(dt):
        lm = model_cls(config)
    return PrefillSampler(lm.eval(), positions)


def prompt_tokens() -> int:
    """The LLM examples' prompt length: 2048 tokens on the GPU, 128 on the CPU."""
    return 2048 if on_gpu() else 128


def variant(module: ModuleType, setting: str) -> tuple[Callable[[], torch.nn.Module], Callable[[], Any]]:
    """The ``(get_model, get_inputs)`` pair of one setting; the default setting also has the plain names."""
    settings: Sequence[str] = module.SETTINGS
    if setting not in settings:
        raise SystemExit(f"unknown setting {setting!r}; {Path(module.__file__).name} has: {', '.join(settings)}")
    return getattr(module, f"get_model_{setting}"), getattr(module, f"get_inputs_{setting}")


def _as_tuple(inputs: Any) -> tuple[Any, ...]:
    return tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


class CudaTimer:
    """Times with CUDA events: ``warmup`` calls, then the median of ``iters`` timed calls."""

    def median_ms(self, fn: Callable[..., Any], args: Sequence[Any], warmup: int, iters: int) -> float:
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def first_call(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[float, Any]:
        """Seconds of the first call of a compiled model (Dynamo, AOT, kforge lookup/search, inner compiler)."""
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn(*args)
        torch.cuda.synchronize()
        return time.perf_counter() - t0, out

    def device_name(self) -> str:
        return torch.cuda.get_device_name()


class WallTimer(CudaTimer):
    """Host wall-clock timing, for running the harness itself on the CPU (tests); its numbers mean little."""

    def median_ms(self, fn: Callable[..., Any], args: Sequence[Any], warmup: int, iters: int) -> float:
        for _ in range(warmup):
            fn(*args)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def first_call(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[float, Any]:
        t0 = time.perf_counter()
        out = fn(*args)
        return time.perf_counter() - t0, out

    def device_name(self) -> str:
        return "CPU"


def max_abs_diff(a: Any, b: Any) -> float:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (a.float() - b.float()).abs().max().item()
    return float("nan")


@dataclass
class Timing:
    name: str
    ms: float
    compile_s: float | None = None
    max_diff: float | None = None


def print_reports(reports: Sequence[Any]) -> None:
    """One row per replaced (op, signature key), with how often it occurs and the measured speedup."""
    rows: Counter[tuple[str, str, float | None]] = Counter()
    for r in reports:
        for op, key, speedup in r.replaced:
            rows[(op, key, speedup)] += 1
    graphs = len(reports)
    fallbacks = [r.fallback for r in reports if r.fallback]
    print(f"\nkforge: {graphs} graph(s), {sum(r.ops_seen for r in reports)} ATen ops, "
          f"{sum(r.candidates for r in reports)} candidates in {sum(r.signatures for r in reports)} signatures, "
          f"{sum(rows.values())} nodes replaced, {sum(len(r.skipped) for r in reports)} skipped, "
          f"{sum(r.seconds for r in reports):.1f} s planning/searching")
    for f in fallbacks:
        print(f"  fallback: {f}")
    folded = sum(r.folded for r in reports)
    if folded:
        print(f"  {folded} convolution + batch norm chains folded into one cuDNN call each (fold_conv_bn)")
    if not rows and not folded:
        print("  no operator replaced (no verified kernel beat eager by the margin, or the search is off)")
        return
    if not rows:
        return
    print(f"  {'operator':<36} {'key':<14} {'nodes':>5} {'speedup':>8}")
    for (op, key, speedup), n in sorted(rows.items(), key=lambda kv: (kv[0][0], -(kv[0][2] or 0.0))):
        shown = f"{speedup:.2f}x" if speedup is not None else "-"
        print(f"  {op:<36} {key[:12]:<14} {n:>5} {shown:>8}")


def print_timings(title: str, timings: Sequence[Timing]) -> None:
    base = {t.name: t.ms for t in timings}
    print(f"\n{title}")
    print(f"  {'':<10} {'median ms':>10} {'vs eager':>9} {'vs inductor':>12} {'compile s':>10} {'max|diff|':>10}")
    for t in timings:
        vs = [f"{base[b] / t.ms:.2f}x" if b in base and t.ms > 0 else "-" for b in ("eager", "inductor")]
        comp = f"{t.compile_s:.1f}" if t.compile_s is not None else "-"
        diff = f"{t.max_diff:.2e}" if t.max_diff is not None else "-"
        print(f"  {t.name:<10} {t.ms:>10.3f} {vs[0]:>9} {vs[1]:>12} {comp:>10} {diff:>10}")


def _parse(module: ModuleType, argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=((module.__doc__ or "").strip().splitlines() or [""])[0])
    p.add_argument("--setting", default=module.SETTINGS[0], choices=module.SETTINGS)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--inner", default=None, choices=("eager", "inductor"),
                   help="what runs the nodes kforge does not replace (default: kforge's, KFORGE_INNER or inductor)")
    p.add_argument("--no-inductor", action="store_true", help="skip the plain Inductor baseline")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra kforge option, e.g. --option search_seconds=120 (repeatable)")
    return p.parse_args(argv)


def _options(args: argparse.Namespace) -> dict[str, str]:
    opts = {"inner": args.inner} if args.inner else {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--option expects KEY=VALUE, got {item!r}")
        opts[key.strip()] = value.strip()
    return opts


def _describe(model: torch.nn.Module, inputs: Sequence[Any]) -> str:
    shown = [f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}" if isinstance(t, torch.Tensor) else repr(t)
             for t in inputs]
    return f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters; inputs {', '.join(shown)}"


def _compiled_timing(name: str, compiled: Callable[..., Any], inputs: Sequence[Any], ref: Any,
                     args: argparse.Namespace, timer: CudaTimer) -> Timing:
    secs, out = timer.first_call(compiled, inputs)
    return Timing(name, timer.median_ms(compiled, inputs, args.warmup, args.iters), secs, max_abs_diff(out, ref))


def run_example(module: ModuleType, argv: Sequence[str] | None = None, *, timer: CudaTimer | None = None,
                provider: Any = None) -> int:
    """The ``__main__`` of every example: time eager, Inductor and kforge on one setting and print the results.
    ``timer`` and ``provider`` are for tests (a wall-clock timer and a CPU kernel provider)."""
    args = _parse(module, argv)
    name = Path(module.__file__).stem
    if timer is None:
        if not on_gpu():
            print(f"{name}: this example times CUDA kernels and needs a CUDA GPU; none is visible "
                  f"(torch {torch.__version__}). Nothing to do.")
            return 0
        timer = CudaTimer()
    from forge_backend.backend import make_backend

    get_model, get_inputs = variant(module, args.setting)
    model, inputs = get_model(), _as_tuple(get_inputs())
    print(f"{name} [{args.setting}] on {timer.device_name()}: {_describe(model, inputs)}")
    timings, reports = [], []
    with torch.no_grad():
        ref = model(*inputs)
        timings.append(Timing("eager", timer.median_ms(model, inputs, args.warmup, args.iters)))
        if not args.no_inductor:
            torch._dynamo.reset()
            timings.append(_compiled_timing("inductor", torch.compile(model, backend="inductor"), inputs, ref, args,
                                            timer))
        torch._dynamo.reset()
        backend = make_backend(provider, on_report=reports.append)
        timings.append(_compiled_timing("kforge", torch.compile(model, backend=backend, options=_options(args)),
                                        inputs, ref, args, timer))
    print_timings(f"{name} [{args.setting}], median of {args.iters} after {args.warmup} warm-up calls", timings)
    print_reports(reports)
    return 0


def main_of(module_name: str) -> None:
    """``if __name__ == "__main__": main_of(__name__)`` in each example."""
    sys.exit(run_example(sys.modules[module_name]))
