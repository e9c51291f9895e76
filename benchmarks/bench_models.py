"""End-to-end model benchmark on the GPU: five configurations per model and setting, all in one run.

    python benchmarks/bench_models.py [--models resnet50,sd35_vae] [--iterations 8]

Per MODEL_SPEC (examples/*.py with a setting): eager; Inductor; kforge with the rest of the graph eager (its first
compile searches the signatures it misses); kforge with the rest through Inductor (cache now warm); and the compile
time of a warm-cache kforge+Inductor compile next to a warm Inductor compile. Outputs are checked against eager.
Times: the wall time per call of each configuration in interleaved rounds (``interleaved_ms``; ``inductor_again``
times Inductor's model a second time in each round, so ``inductor_vs_itself`` says what the same code differs by),
and the GPU time and launches per forward from the profiler (``device_work``: kernels only, no host time;
``launches_per_forward`` counts kernels, copies and memsets per configuration). ``gate_decisions``: what
the Inductor gate compared for each node of the kforge+Inductor compile that has a kernel (Note [what replacing a node
costs inside Inductor]).
Writes models.json/.md under --out (models_check with --check, models_<mode> with --mode), one row at a time, so a
run cut short keeps what finished.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).parent))
from harness import environment, log, titled, without_shipped_records, write_results  # noqa: E402

EXAMPLES = Path(__file__).parent.parent / "examples"
DEFAULT = "resnet50::fp16_b1,sd35_vae::bf16_1024,sd35_mmdit::bf16_txt333,gemma4::eager_attn,qwen35_moe::eager_attn"
# every setting issue 6 names: ResNet-50 in fp16 and fp32 at batch 1 and 32, Gemma 4 with sdpa as well as eager
# attention (`--models every`; more than one 10-minute device call: run it in parts and --merge them)
EVERY = DEFAULT + ",resnet50::fp16_b32,resnet50::fp32_b1,resnet50::fp32_b32,gemma4::sdpa"
COLUMNS = ["model", "setting", "eager_ms", "inductor_ms", "kforge_eager_ms", "kforge_inductor_ms",
           "kforge_eager_vs_eager", "kforge_inductor_vs_inductor", "kforge_inductor_vs_inductor_range",
           "inductor_vs_itself", "inductor_vs_itself_range", "inductor_device_ms", "kforge_inductor_device_ms",
           "kforge_inductor_vs_inductor_device",
           "cold_compile_s", "warm_compile_s", "inductor_warm_compile_s", "replaced_ops", "kernels_beating_eager",
           "max_rel_err", "kforge_eager_rel_err", "kforge_inductor_rel_err", "inductor_rel_err",
           "kforge_inductor_op_calls_ms", "direct_vs_op_calls", "direct_vs_op_calls_range"]


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    return [v for v in vars(out).values() if isinstance(v, torch.Tensor)] if hasattr(out, "__dict__") else []


def rel_err(got, ref) -> float:
    errs = [((g.float() - r.float()).norm() / r.float().norm().clamp_min(1e-30)).item()
            for g, r in zip(_tensors(got), _tensors(ref))]
    return max(errs) if errs else float("nan")


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """The order of the configurations in each round: rotated by one per round, so no configuration always runs
    right after the same neighbour, and at least ``rounds`` rounds, rounded up to whole rotations, so every
    configuration runs in every position equally often (a slot's position effect reaches every configuration
    alike). The sixth and seventh sessions' tables had 8 rounds of 5 configurations: three of them ran first twice,
    two once, and Inductor timed against itself read 0.96-1.03x."""
    n = len(names)
    return [names[r % n:] + names[:r % n] for r in range(-(-rounds // n) * n)]


def reps_for(fastest_ms: float, slot_ms: float = 40.0, lo: int = 4, hi: int = 32) -> int:
    """Timed calls per configuration per round: enough that a round's slot of the fastest configuration lasts about
    ``slot_ms`` (a 2 ms transformer gets 20 calls, the 35 ms VAE the minimum), within [lo, hi]. The sixth session's
    run timed every model 4 times per slot, and Inductor's ResNet-50 against itself read 1.03x."""
    return max(lo, min(hi, math.ceil(slot_ms / max(fastest_ms, 1e-3))))


def slot_reps(fns: dict, inputs) -> int:
    """``reps_for`` the fastest of ``fns`` (3 timed calls each after a warm-up)."""
    from forge_backend.measure import Timer

    timer = Timer(torch.device("cuda", 0), flush_bytes=4)
    return reps_for(min(timer.time(lambda: fn(*inputs), warmup=1, repeats=3).median_us / 1e3 for fn in fns.values()))


def interleaved_ms(fns: dict, inputs, rounds: int = 8, reps: int | None = None) -> dict[str, list[float]]:
    """Per configuration, its median ms per call in each round. The configurations are timed in alternating rounds
    (each round: every configuration, ``reps`` timed calls (``slot_reps``) after one warm-up, in ``round_orders``),
    so that a drift of the host's speed during the run (other work, clock changes) reaches every configuration
    alike. Host-bound models (ResNet-50 at batch 1, the reduced-depth transformers) are sensitive to it; the
    per-round ratios show how much, and ``inductor_again`` (Inductor's compiled model timed in a second slot of each
    round) shows what two timings of the very same code differ by."""
    from forge_backend.measure import Timer

    timer = Timer(torch.device("cuda", 0), flush_bytes=4)
    if reps is None:
        reps = slot_reps(fns, inputs)
    samples: dict = {name: [] for name in fns}
    for order in round_orders(list(fns), rounds):
        for name in order:
            fn = fns[name]
            t = timer.time(lambda: fn(*inputs), warmup=1, repeats=reps)
            samples[name].append(t.median_us / 1e3)
    return samples


@dataclasses.dataclass(frozen=True)
class DeviceWork:
    """One configuration's GPU work per forward, from the profiler: ``ms`` of device time and the ``launches`` behind it
    (kernels, copies and memsets). In a host-bound model each launch is host time, so a configuration that launches
    more can wait longer with less GPU time."""

    ms: float
    launches: float


def device_work(fns: dict, inputs, rounds: int = 3, iters: int = 3) -> dict[str, DeviceWork]:
    """Per configuration, the median over ``rounds`` (in ``round_orders``) of its GPU time per forward (the sum of the
    device time of every kernel, copy and memset it ran: torch.profiler, ``profile_kernels.per_kernel``) and of its
    launches per forward. Host time is not in it, so two configurations that launch the same kernels read the same
    however busy the host is; the wall times (``interleaved_ms``) are what a caller waits."""
    from profile_kernels import kernel_table

    ms: dict = {name: [] for name in fns}
    launches: dict = {name: [] for name in fns}
    for order in round_orders(list(fns), rounds):
        for name in order:
            table = kernel_table(fns[name], inputs, iters)
            ms[name].append(sum(r["us_per_forward"] for r in table) / 1e3)
            launches[name].append(sum(r["calls_per_forward"] for r in table))
    return {name: DeviceWork(statistics.median(ms[name]), statistics.median(launches[name])) for name in fns}


def ratio_range(base: list[float], new: list[float]) -> list[float]:
    """Lowest, median and highest per-round speedup of ``new`` over ``base`` (rounds paired: both ran in the same
    round, so a drift of the host's speed between rounds cancels in each ratio)."""
    ratios = [b / n for b, n in zip(base, new)]
    return [min(ratios), statistics.median(ratios), max(ratios)]


def first_call_s(fn, inputs) -> tuple[float, object]:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn(*inputs)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def profile(fn, inputs, path: Path) -> None:
    """Where a compiled model spends its time: dynamo counters and the top ops by host and device time."""
    from torch._dynamo.utils import counters
    from torch.profiler import ProfilerActivity, profile as torch_profile

    fn(*inputs)
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            fn(*inputs)
        torch.cuda.synchronize()
    avg = prof.key_averages()
    text = [f"dynamo counters: { {k: dict(v) for k, v in counters.items() if v} }",
            avg.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60),
            avg.table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=60)]
    path.write_text("\n".join(text))


def compiler(opts: dict, mode: str | None):
    """``torch.compile`` for Inductor and for kforge+Inductor, with ``mode`` when given. torch.compile takes a mode or
    options, not both: with a mode, kforge's options travel as KFORGE_* environment variables (set by ``bench``)."""
    def inductor(model):
        return _stepped(torch.compile(model, mode=mode), mode)

    def kforge_inductor(model, on_report=None):
        from forge_backend.backend import make_backend

        backend = make_backend(on_report=on_report)  # what backend="kforge" is, with the compile's reports
        if mode is None:
            return torch.compile(model, backend=backend, options={**opts, "inner": "inductor"})
        return _stepped(torch.compile(model, backend=backend, mode=mode), mode)
    return inductor, kforge_inductor


def gate_rows(reports) -> list[dict]:
    """The reports' gate decisions as small dicts: floats rounded, identical decisions (one signature in repeated
    blocks) once, with how many ``nodes`` they were made for."""
    rows = []
    for d, n in Counter(d for r in reports for d in r.gate).items():
        row = {**dataclasses.asdict(d), "total_us": d.total_us, "replaced": d.replaced, "nodes": n}
        rows.append({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()})
    return rows


def _stepped(fn, mode: str | None):
    """Under CUDA graphs (``reduce-overhead``) a call's outputs live in the graph's memory pool and a later replay
    of another graph may overwrite them: every call starts a new step, and returns copies, so the outputs this
    benchmark keeps for comparison stay valid. The copy is timed in both configurations alike."""
    if mode != "reduce-overhead":
        return fn

    def call(*args):
        torch.compiler.cudagraph_mark_step_begin()
        return _cloned(fn(*args))
    return call


def _cloned(out):
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, (list, tuple)):
        return type(out)(_cloned(o) for o in out)
    if isinstance(out, dict):
        return {k: _cloned(v) for k, v in out.items()}
    return out


def kforge_env(opts: dict) -> dict[str, str]:
    return {f"KFORGE_{k.upper()}": str(int(v) if isinstance(v, bool) else v) for k, v in opts.items()} | {
        "KFORGE_INNER": "inductor"}


def run_options(iterations: int, cache: Path, check: bool = False, fold_conv_bn: bool | None = None) -> dict:
    """kforge's options for every kforge compile of a run (``fold_conv_bn``: Note [a batch norm folded into its
    convolution], kforge's default unless ``--fold-conv-bn`` or ``--no-fold-conv-bn`` says)."""
    opts = {"search_iterations": iterations, "search_seconds": 240, "cache_dir": cache, "check": check}
    return opts | ({} if fold_conv_bn is None else {"fold_conv_bn": fold_conv_bn})


def bench(spec: str, cache: Path, iterations: int, profile_dir: Path | None = None, check: bool = False,
          mode: str | None = None, timing_rounds: int = 8, fold_conv_bn: bool | None = None,
          op_calls: bool = False) -> dict:
    """``op_calls``: also time kforge+Inductor with its generated code calling the op (``direct_calls=False``), in
    the same rounds (Note [Inductor's code calls the kernel, not the op] in forge_backend/inductor_call.py)."""
    from torch._dynamo.utils import counters

    from forge_backend.backend import make_backend
    from forge_backend.gpu_memory import poison_cached_memory
    from forge_backend.modelspec import load
    from forge_backend.store.local import LocalStore

    loaded = load(spec)
    model, inputs = loaded.model, loaded.inputs
    opts = run_options(iterations, cache, check, fold_conv_bn)
    inductor_compile, kforge_compile = compiler(opts, mode)
    with torch.no_grad(), mock.patch.dict(os.environ, kforge_env(opts) if mode else {}):
        ref = model(*inputs)
        ref_sum = float(sum(t.double().sum() for t in _tensors(ref)))
        torch._dynamo.reset()
        ind = inductor_compile(model)
        ind_compile, out_ind = first_call_s(ind, inputs)
        reports = []
        counters.clear()
        kfe = torch.compile(model, backend=make_backend(on_report=reports.append), options={**opts, "inner": "eager"})
        cold, _ = first_call_s(kfe, inputs)
        poison_cached_memory(torch.device("cuda", 0))  # Note [stale memory can look like a right answer]
        out_e = kfe(*inputs)
        eager_counters = dict(counters["kforge"])
        counters.clear()
        inductor_reports = []
        kfi = kforge_compile(model, on_report=inductor_reports.append)
        first_call_s(kfi, inputs)
        poison_cached_memory(torch.device("cuda", 0))
        out_i = kfi(*inputs)
        inductor_counters = dict(counters["kforge"])
        configs = {"eager": model, "inductor": ind, "kforge_eager": kfe, "kforge_inductor": kfi, "inductor_again": ind}
        if op_calls:
            kfo = torch.compile(model, backend=make_backend(), options={**opts, "inner": "inductor",
                                                                        "direct_calls": False})
            first_call_s(kfo, inputs)
            poison_cached_memory(torch.device("cuda", 0))
            op_calls_err = rel_err(kfo(*inputs), ref)
            configs["kforge_inductor_op_calls"] = kfo
            del kfo  # freed with configs, before the warm compiles
        counters.clear()
        reps = slot_reps(configs, inputs)
        rounds = interleaved_ms(configs, inputs, rounds=timing_rounds, reps=reps)
        ms = {name: statistics.median(v) for name, v in rounds.items()}
        work = device_work({k: fn for k, fn in configs.items() if k != "inductor_again"}, inputs)
        gpu_ms = {k: w.ms for k, w in work.items()}
        call_counters = dict(counters["kforge"])  # kernel calls and layout fallbacks while timing
        if profile_dir is not None:
            stem = Path(spec.partition("::")[0]).stem
            for name, fn in (("kforge_eager", kfe), ("eager", model), ("kforge_inductor", kfi), ("inductor", ind)):
                profile(fn, inputs, profile_dir / f"profile_{stem}_{name}.txt")
        again = model(*inputs)  # eager once more: is eager deterministic, and did anything overwrite ``ref``?
        ref_sum_after = float(sum(t.double().sum() for t in _tensors(ref)))
        del ind, kfe, kfi, configs
        torch._dynamo.reset()  # warm compiles: Inductor's caches and kforge's cache are both warm now
        ind_warm, _ = first_call_s(inductor_compile(model), inputs)
        torch._dynamo.reset()
        kf_warm, _ = first_call_s(kforge_compile(model), inputs)
    eager, inductor, kforge_eager, kforge_inductor = (ms[k] for k in ("eager", "inductor", "kforge_eager",
                                                                       "kforge_inductor"))
    keys = {key for r in reports for _, key, _ in r.replaced}
    store = LocalStore(cache)
    beating = sum(1 for k in keys if (rec := store.get(k)) and rec.decision == "kernel"
                  and (rec.timings.get("speedup_vs_eager") or 0) > 1.0)
    name, _, setting = spec.partition("::")
    setting = setting + (f" mode={mode}" if mode else "")
    op_row = {} if not op_calls else {
        "kforge_inductor_op_calls_ms": ms["kforge_inductor_op_calls"],
        "direct_vs_op_calls": ms["kforge_inductor_op_calls"] / kforge_inductor,
        "direct_vs_op_calls_range": ratio_range(rounds["kforge_inductor_op_calls"], rounds["kforge_inductor"]),
        "kforge_inductor_op_calls_device_ms": gpu_ms["kforge_inductor_op_calls"],
        "kforge_inductor_op_calls_rel_err": op_calls_err}
    return op_row | {"model": Path(name).stem, "setting": setting, "eager_ms": eager, "inductor_ms": inductor,
            "kforge_eager_ms": kforge_eager, "kforge_inductor_ms": kforge_inductor,
            "kforge_eager_vs_eager": eager / kforge_eager, "kforge_inductor_vs_inductor": inductor / kforge_inductor,
            "kforge_inductor_vs_inductor_range": ratio_range(rounds["inductor"], rounds["kforge_inductor"]),
            "kforge_eager_vs_eager_range": ratio_range(rounds["eager"], rounds["kforge_eager"]), "round_ms": rounds,
            "reps_per_round": reps,
            "inductor_vs_itself": inductor / ms["inductor_again"],
            "inductor_vs_itself_range": ratio_range(rounds["inductor"], rounds["inductor_again"]),
            "eager_device_ms": gpu_ms["eager"], "inductor_device_ms": gpu_ms["inductor"],
            "kforge_eager_device_ms": gpu_ms["kforge_eager"], "kforge_inductor_device_ms": gpu_ms["kforge_inductor"],
            "kforge_inductor_vs_inductor_device": gpu_ms["inductor"] / gpu_ms["kforge_inductor"],
            "launches_per_forward": {k: w.launches for k, w in work.items()},
            "cold_compile_s": cold, "warm_compile_s": kf_warm, "inductor_compile_s": ind_compile,
            "inductor_warm_compile_s": ind_warm, "replaced_ops": sum(len(r.replaced) for r in reports),
            "kernels_beating_eager": beating, "replaced_keys": sorted(keys),
            # conv + batch norm chains folded on the Inductor path (Note [a batch norm folded into its convolution])
            "folded_convs": sum(r.folded for r in inductor_reports),
            "max_rel_err": max(rel_err(out_e, ref), rel_err(out_i, ref)),
            "kforge_eager_rel_err": rel_err(out_e, ref), "kforge_inductor_rel_err": rel_err(out_i, ref),
            "inductor_rel_err": rel_err(out_ind, ref),  # Inductor's own distance from eager, for scale
            # what happened on each path (replaced nodes, layout fallbacks, cache hits, checked calls...)
            "kforge_eager_counters": eager_counters, "kforge_inductor_counters": inductor_counters,
            "timing_counters": call_counters, "eager_rerun_rel_err": rel_err(again, ref),
            "kforge_eager_vs_inductor_rel_err": rel_err(out_e, out_ind), "ref_overwritten": ref_sum_after != ref_sum,
            "gate_decisions": gate_rows(inductor_reports)}


def results_stem(check: bool = False, mode: str | None = None) -> str:
    """models, models_check (timings not comparable) or models_<mode>: runs of different kinds never overwrite."""
    return "models_check" if check else f"models_{mode.replace('-', '_')}" if mode else "models"


def merge(dirs: list[Path], out: Path, stem: str = "models", layout: str | None = None) -> None:
    """One ``stem``.json/.md from the parts of a run split over GPUs (run_device.sh models-split, models-quiet);
    ``layout`` says how the parts ran (default: side by side)."""
    import json

    files = [d if d.suffix == ".json" else d / f"{stem}.json" for d in dirs]  # a part's directory or its JSON
    parts = [json.loads(f.read_text()) for f in files if f.is_file()]
    if not parts:
        log(f"nothing to merge: no {stem}.json in {', '.join(map(str, dirs))}")
        return
    env = {**parts[0]["environment"], "command": " + ".join(p["environment"]["command"] for p in parts),
           "split": layout or f"{len(parts)} processes side by side, one GPU and its own CPU cores each"}
    rows = [r for p in parts for r in p["rows"]]
    write_results(out / stem, env, rows, COLUMNS, titled("kforge end-to-end models", env))
    log(f"merged {len(rows)} rows; kernels beating eager, summed over models: "
        f"{sum(r.get('kernels_beating_eager', 0) for r in rows)}")


# Note [a run that searches sees no shipped records]
# kernels_cache/ ships records for the example models' signatures (measured on an H200). A process's kforge looks
# them up after its local cache, so a run that found them would re-verify shipped kernels instead of searching: its
# kforge+eager compile time, search counts and "kernels beating eager" would describe the shipment, not the search.
# Every committed row so far comes from runs that searched from an empty cache, so by default this benchmark points
# KFORGE_SHIPPED_DIR at an empty folder; --shipped measures what a user's first compile on an H200 gets instead.


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=DEFAULT, help="comma-separated example[::setting], or 'every' (EVERY: "
                                                      "each setting issue 6 names)")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=8, help="interleaved timing rounds per model, rounded up to whole "
                                                         "rotations of the five configurations (more for a noisy host)")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "h200")
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--shipped", action="store_true",
                    help="let the shipped records (kernels_cache/) answer misses, as on a user's first compile; by "
                         "default the run sees none, so kforge's first compile searches every signature it needs")
    ap.add_argument("--profile", action="store_true", help="also write a torch.profiler summary per model")
    ap.add_argument("--check", action="store_true",
                    help="compare every kernel call with PyTorch (Note [checking inside a model]); slow, for finding "
                         "the op behind a max_rel_err far above Inductor's own")
    ap.add_argument("--mode", default=None, help="torch.compile mode for Inductor and kforge+Inductor, e.g. "
                                                 "reduce-overhead (Note [torch.compile's mode])")
    ap.add_argument("--merge", type=Path, nargs="+", default=None, metavar="DIR",
                    help="only merge the models.json of these directories, or these JSON files (the parts of one "
                         "run, split over GPUs or calls), into --out")
    ap.add_argument("--layout", default=None, help="with --merge: how the parts ran, for the results' header")
    ap.add_argument("--fold-conv-bn", action=argparse.BooleanOptionalAction, default=None,
                    help="compile kforge with fold_conv_bn on or off (default: kforge's default, on)")
    ap.add_argument("--op-calls", action="store_true",
                    help="also time kforge+Inductor with its code calling the kforge op instead of the kernels "
                         "(direct_calls=False), in the same rounds: the columns kforge_inductor_op_calls_ms and "
                         "direct_vs_op_calls (that time over kforge+Inductor's)")
    args = ap.parse_args()
    if args.op_calls and args.mode:
        ap.error("--op-calls compares Python-wrapper calls; with --mode the options travel as environment variables "
                 "for both kforge compiles alike: run it without --mode")
    if args.merge:
        merge(args.merge, args.out, results_stem(args.check, args.mode), args.layout)
        return
    logging.basicConfig(format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kforge").setLevel(logging.INFO)  # which kernels were used or left to PyTorch, and why
    if not torch.cuda.is_available():
        print("bench_models needs a CUDA GPU; none is visible here.")
        return
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="kforge-models-"))
    if not args.shipped:  # Note [a run that searches sees no shipped records]
        without_shipped_records()
    env = environment(shlex.join(["python"] + sys.argv))
    rows = []
    for item in (EVERY if args.models == "every" else args.models).split(","):
        model, _, setting = item.partition("::")
        spec = f"{EXAMPLES / model}.py" + (f"::{setting}" if setting else "")
        try:
            row = bench(spec, cache, args.iterations, args.out if args.profile else None, args.check, args.mode,
                        args.rounds, args.fold_conv_bn, args.op_calls)
        except Exception as e:  # one broken model must not lose the others; reported in the table
            log(f"{item}: FAILED {type(e).__name__}: {str(e)[:400]}")
            rows.append({"model": model, "setting": setting, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            continue
        rows.append(row)
        log(f"{item}: " + ", ".join(f"{k}={row[k]:.3g}" if isinstance(row[k], float) else f"{k}={row[k]}"
                                    for k in COLUMNS[2:]))
        log(f"{item}: counters eager path {row['kforge_eager_counters']}, inductor path "
            f"{row['kforge_inductor_counters']}, while timing {row['timing_counters']}; eager rerun rel err "
            f"{row['eager_rerun_rel_err']:.3g}, kforge eager vs Inductor {row['kforge_eager_vs_inductor_rel_err']:.3g}, "
            f"reference overwritten: {row['ref_overwritten']}")
        title = titled("kforge end-to-end models", env) + (", check=True: timings not comparable" if args.check else "")
        write_results(args.out / results_stem(args.check, args.mode), env, rows, COLUMNS, title)
        torch.cuda.empty_cache()
    distinct = {k for r in rows for k in r.get("replaced_keys", [])}
    log(f"kernels beating eager, summed over models: {sum(r.get('kernels_beating_eager', 0) for r in rows)}; "
        f"distinct signatures replaced: {len(distinct)}")


if __name__ == "__main__":
    main()
