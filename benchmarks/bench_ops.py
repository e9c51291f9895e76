"""Per-operator benchmark on the GPU: eager, Inductor, kforge (after its search) and the roofline floor.

    python benchmarks/bench_ops.py [--rows softmax [--rows "group_norm [1, 128, 1024, 1024]" ...]] [--iterations 50]
        [--quick-iterations 12]
    python benchmarks/bench_ops.py --merge A=run_a/ops.json B=run_b/ops.json [--note TEXT] --out DIR

Every number comes from this one run: the copy bandwidth is measured here, and eager, Inductor and kforge are timed
by the same device-event timer (L2 flushed before every repeat; see forge_backend/measure.py). kforge runs through
``torch.compile(fn, backend=kforge)`` with a fresh cache, so its time includes calling the kernels from a graph;
its search happens on the first call. kforge runs its eager path (``inner="eager"``: the kernel timed alone) with
``fuse_pointwise`` on, as a user of that path would, so ``silu(x) * x`` is one kernel as it is in Inductor; rows of
one op are unaffected. Writes ops.json/.md and first_kernels.json/.md under --out.
"""
from __future__ import annotations

import argparse
import functools
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).parent))
from harness import environment, log, name_matches, titled, without_shipped_records, write_results  # noqa: E402
from rows import ROWS, SEED_ROWS  # noqa: E402

OPS_COLUMNS = ["op", "shape", "dtype", "eager_us", "inductor_us", "kforge_us", "floor_us", "pct_bw", "copy_us",
               "pct_copy", "speedup_vs_eager", "speedup_vs_inductor", "iterations_to_best", "search_s", "replaced",
               "inductor_kernel_us", "kforge_kernel_us", "copy_kernel_us", "pct_bw_kernel", "eager_graph_us",
               "inductor_graph_us", "kforge_graph_us", "copy_graph_us", "pct_bw_graph", "graph_calls"]
FIRST_COLUMNS = ["op", "shape", "dtype", "eager_us", "kforge_us", "floor_us", "pct_bw", "speedup_vs_eager"]
TOL = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 3e-2}
GRAPH_MIN_BYTES = 8 * 2**20  # Note [device time by graph replay]: smaller rows' calls would rotate inside the L2


def select_rows(rows, patterns) -> list:
    """The rows whose name contains any of ``patterns`` (all rows when there are none). Each pattern is matched whole:
    row names hold commas ("softmax [1, 8, 2048, 2048] bfloat16"), so a pattern is never split on them."""
    return [row for row in rows if name_matches(row.name, patterns)]


def _tensors(ts) -> list:
    """A row's outputs (or inputs) as a list: one tensor or several."""
    return list(ts) if isinstance(ts, (list, tuple)) else [ts]


def _nbytes(ts) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(ts))


def kforge_options(iterations: int, cache_dir: Path) -> dict:
    """How a row's kforge is compiled: the rest of the graph eager, pointwise groups fused, ``iterations`` of search."""
    return {"search_iterations": iterations, "search_seconds": 300, "cache_dir": cache_dir, "inner": "eager",
            "fuse_pointwise": True}


def kernel_us(timer, fn, what: str) -> float | None:
    """``timer.kernel_time(fn)``'s median (Note [kernel time beside event time]), or None, logged, when the profiler
    cannot split the calls: the row keeps its event times, which the targets are judged by."""
    try:
        return timer.kernel_time(fn).median_us
    except (RuntimeError, ValueError) as e:
        log(f"  kernel time of {what} not taken: {e}")
        return None


def graph_us(timer, calls, what: str) -> float | None:
    """``timer.graph_time(calls)``'s median (Note [device time by graph replay]), or None, logged, when the calls do
    not capture: the row keeps its other columns."""
    try:
        return timer.graph_time(calls).median_us
    except Exception as e:  # a capture can fail in many ways (a host sync, an allocation it refuses)
        log(f"  graph time of {what} not taken: {type(e).__name__}: {str(e)[:200]}")
        return None


def graph_columns(timer, contenders: dict[str, Callable], inputs: list, moved: int, device) -> dict:
    """Each contender (and a copy of the row's bytes) timed by graph replay, every captured call on its own copy of
    the inputs (Note [device time by graph replay]); empty for a row under GRAPH_MIN_BYTES."""
    from forge_backend.measure import copy_call, graph_calls

    if moved < GRAPH_MIN_BYTES:
        return {}
    n = graph_calls(moved)
    out: dict = {"graph_calls": n}
    out["copy_graph_us"] = graph_us(timer, [copy_call(device, moved) for _ in range(n)], "copy")
    sets = [list(inputs)] + [[t.clone() for t in inputs] for _ in range(n - 1)]
    for name, f in contenders.items():
        out[f"{name}_graph_us"] = graph_us(timer, [functools.partial(f, *s) for s in sets], name)
    return out


def bench_row(row, timer, bw, cache_dir: Path, iterations: int, device,
              trees_dir: Path) -> tuple[dict, list[dict]]:
    from forge_backend.backend import make_backend
    from forge_backend.measure import copy_call
    from forge_backend.store.local import LocalStore

    fn, inputs = row.build(device)
    with torch.no_grad():
        expected = fn(*inputs)
        moved = _nbytes(inputs) + _nbytes(expected)
        floor = moved / (bw * 1e3)
        copier = copy_call(device, moved)
        copy = timer.time(copier).median_us  # Note [a copy of the same bytes]
        copy_kernel = kernel_us(timer, copier, "copy")  # Note [kernel time beside event time]
        del copier
        eager = timer.time(lambda: fn(*inputs)).median_us
        torch._dynamo.reset()
        ind = torch.compile(fn)
        ind(*inputs)
        inductor = timer.time(lambda: ind(*inputs)).median_us
        inductor_kernel = kernel_us(timer, lambda: ind(*inputs), "Inductor")
        torch._dynamo.reset()
        reports = []
        kf = torch.compile(fn, backend=make_backend(on_report=reports.append),
                           options=kforge_options(iterations, cache_dir))
        t0 = time.perf_counter()
        got = kf(*inputs)
        search_s = time.perf_counter() - t0
        for g, e in zip(_tensors(got), _tensors(expected), strict=True):
            torch.testing.assert_close(g.float(), e.float(), rtol=TOL[row.dtype], atol=TOL[row.dtype])
        kforge = timer.time(lambda: kf(*inputs)).median_us
        kforge_kernel = kernel_us(timer, lambda: kf(*inputs), "kforge")
        graph = graph_columns(timer, {"eager": fn, "inductor": ind, "kforge": kf}, _tensors(inputs), moved, device)
    replaced = [op for r in reports for op, _, _ in r.replaced]
    store = LocalStore(cache_dir)
    for key in store.searches():
        if key in _SEEN:
            continue
        _SEEN.add(key)
        _NEW.append(key)
        s = store.get_search(key) or {}
        ok = [n for n in s.get("nodes", []) if n.get("status") == "ok"]
        best = min((n["time_us"] for n in ok), default=None)
        log(f"  search {s.get('op')}: {s.get('iterations')} it, stop {s.get('stop_reason')}, {len(ok)} ok of "
            f"{len(s.get('nodes', [])) - 1}, best {best} us vs eager {s.get('eager_us')}: {s.get('decision')}; "
            f"failures {_failures(s)}")
        _dump_tree(trees_dir, row, s)
    its, firsts, winners = [], [], []
    for r in reports:
        for op, key, _ in r.replaced:
            rec = store.get(key)
            its.append((rec.timings if rec else {}).get("iterations_to_best"))
            winners.append((rec.candidate or {}).get("description", "") if rec else "")
    for key in _NEW:  # every signature searched for this row, replaced or not
        firsts += _first_kernel(row, store.get_search(key) or {})
    _NEW.clear()
    out = {"op": row.op, "shape": list(row.shape), "dtype": str(row.dtype).removeprefix("torch."),
           "model": row.model, "eager_us": eager, "inductor_us": inductor, "kforge_us": kforge, "floor_us": floor,
           "pct_bw": 100.0 * floor / kforge, "copy_us": copy, "pct_copy": 100.0 * copy / kforge,
           "speedup_vs_eager": eager / kforge,
           "speedup_vs_inductor": inductor / kforge, "iterations_to_best": its[0] if len(its) == 1 else its,
           "search_s": search_s, "replaced": ",".join(o.removeprefix("aten.") for o in replaced) or "none",
           "iterations": iterations, "winner": "; ".join(w for w in winners if w),
           "inductor_kernel_us": inductor_kernel, "kforge_kernel_us": kforge_kernel, "copy_kernel_us": copy_kernel,
           "pct_bw_kernel": 100.0 * floor / kforge_kernel if kforge_kernel else None, **graph,
           "pct_bw_graph": 100.0 * floor / graph["kforge_graph_us"] if graph.get("kforge_graph_us") else None}
    return out, firsts


# Note [a copy of the same bytes]
# pct_bw compares a row with the bandwidth of a 2 GiB copy. A kernel that moves 64 MiB cannot reach that: a plain
# copy of 64 MiB (half read, half written) ran at 84% of it on the H200 in the thirteenth session (136 MiB: 95%,
# 1 GiB: 99%; probe --copy), since the first reads and the last writes do not overlap anything. Each row therefore
# also times, in the same run and with the same timer, a copy that moves the row's bytes (copy_us), and pct_copy =
# copy_us / kforge_us says how close the kernel comes to that. It is context for pct_bw, which stays the target's
# measure.
# The copy's speed depends on its size, not only on its bytes' count: a copy of a power of two plus a few KB (a group
# norm row's bytes: its input and output plus weight and bias) runs slower than the power of two. Measured on the
# H200 (thirty-third session, benchmarks/probe_copy_sizes.py, results/h200/probe_session33_copy_sizes.json, three
# rounds alternating, kernel time then graph replay): 64 MiB 15.3-15.6 us against 19.1-19.3 with 4 KB more (graph
# 17.6-17.8 against 26.1), 96 MiB 22.5-22.6 against 25.3-25.5 (25.7-25.8 against 38.1-38.3), 256 MiB 61.7-62.0
# against 64.8-65.3 (64.5 against 98.7-98.8), with the source and destination as far apart in both. So on the group
# norm rows copy_us and copy_graph_us understate how fast the same bytes can move (runs AC, AD: the anomaly the
# thirty-second session saw), and pct_copy there flatters the kernel; pct_bw and pct_bw_graph divide the 2 GiB copy's
# floor and are unaffected. Why the softmax [1, 16, 4096, 4096] rows' copy ran slow by graph replay (1 GiB, a power
# of two) is not explained.


_SEEN: set[str] = set()
_NEW: list[str] = []


def _dump_tree(trees_dir: Path, row, search: dict) -> None:
    """One line per node of the search (action, status, time, description), appended to one ``trees.txt`` (the
    device tool returns a limited number of files, so not one file per row)."""
    trees_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"# {row.name} {search.get('op')} eager {search.get('eager_us')} us floor {search.get('floor_us')} us "
             f"decision {search.get('decision')}"]
    for n in search.get("nodes", []):
        desc = (n.get("candidate") or {}).get("description", "")
        t = n.get("time_us")
        lines.append(f"{n.get('id'):>3} <- {n.get('parent')!s:>4} it {n.get('iteration'):>3} {n.get('status'):>6} "
                     f"{'' if t is None else f'{t:8.1f}us'} | {n.get('action')} | {desc} | "
                     f"{(n.get('failure_reason') or '')[:120]}")
    with open(trees_dir / "trees.txt", "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n\n")


def _failures(search: dict) -> dict:
    out: dict[str, int] = {}
    for n in search.get("nodes", []):
        if n.get("status") == "failed":
            key = f"{n.get('failure_stage')}:{(n.get('failure_reason') or '')[:60]}"
            out[key] = out.get(key, 0) + 1
    return out


def _first_kernel(row, search: dict) -> list[dict]:
    """The template library's root candidate (node 1), as timed during the search."""
    nodes = search.get("nodes") or []
    first = next((n for n in nodes if n.get("parent") == 0), None)
    if not first or first.get("time_us") is None:
        return []
    eager, floor = search["eager_us"], search["floor_us"]
    return [{"op": f"{row.op} ({search.get('op', '').removeprefix('aten.')})", "shape": list(row.shape),
             "dtype": str(row.dtype).removeprefix("torch."), "eager_us": eager, "kforge_us": first["time_us"],
             "floor_us": floor, "pct_bw": 100.0 * floor / first["time_us"],
             "speedup_vs_eager": eager / first["time_us"], "action": first.get("action")}]


def build_parser() -> argparse.ArgumentParser:
    """The command line, apart from main so a CPU test can check how --rows values are read."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", action="append", default=[], metavar="SUBSTRING",
                    help="only rows whose name contains this string (repeat for several; names hold commas, so a "
                         "value is never split: --rows \"softmax [64, 262144] bfloat16\")")
    ap.add_argument("--iterations", type=int, default=50, help="search iterations for the seed rows")
    ap.add_argument("--quick-iterations", type=int, default=12, help="search iterations for the other rows")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "h200")
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--merge", nargs="+", default=None, metavar="LABEL=OPS_JSON",
                    help="only merge these runs' ops.json into --out (no GPU): each row from one run, a later run's "
                         "row replacing an earlier one's of the same op, shape and dtype")
    ap.add_argument("--note", default=None, help="with --merge: why the runs were merged, for the table's header")
    return ap


def merge(runs: list[tuple[str, Path]], out: Path, note: str | None = None) -> None:
    """One ops.json/.md from several runs (Note [a table from several runs])."""
    import json

    parts = [(label, json.loads(path.read_text()), path.name) for label, path in runs]
    if not parts:
        raise ValueError("--merge needs at least one LABEL=OPS_JSON")
    first = parts[0][1]["environment"]
    gpus = {part["environment"].get("gpu") for _, part, _ in parts}
    if len(gpus) > 1:  # a row's percent of the copy bandwidth and its place beside the others are the GPU's own
        raise ValueError(f"--merge takes runs of one GPU; these ran on {', '.join(sorted(map(str, gpus)))}")
    env = {k: first[k] for k in ("gpu", "torch", "cuda", "nvrtc") if k in first}
    rows: dict[tuple, dict] = {}
    for label, part, name in parts:
        e = part["environment"]
        env[f"run {label}"] = f"{e.get('date')}: {e.get('command')} (copy bandwidth {e.get('copy_bandwidth_GBps')} " \
                              f"GB/s) -> {name}"
        for r in part["rows"]:
            rows[(r["op"], tuple(r["shape"]), r["dtype"])] = {**r, "run": label}  # a later run replaces the row
    notes = ["Every row's eager, Inductor and kforge times come from one run (column `run`); ratios never mix "
             "runs." + (f" {note}" if note else "")] + _notes(None)
    write_results(out / "ops", env, list(rows.values()), OPS_COLUMNS + ["run"],
                  titled("kforge per-operator benchmark", env), notes)


# Note [a table from several runs]
# A session may re-run some rows after a change (a fix, a new root), or split one run over two GPUs. The committed
# table then takes each row whole from one run: its eager, Inductor and kforge times and its floor (the run's own
# copy bandwidth), with the run's label in column `run` and every run's command in the header. A row re-run later
# replaces the earlier one; no ratio ever mixes runs. `--merge` writes that table from the runs' ops.json files.


def main() -> None:
    args = build_parser().parse_args()
    if args.merge:
        bad = [m for m in args.merge if "=" not in m]
        if bad:
            raise SystemExit(f"--merge takes LABEL=OPS_JSON; got {', '.join(bad)}")
        merge([(label, Path(path)) for label, _, path in (m.partition("=") for m in args.merge)], args.out, args.note)
        return
    if not torch.cuda.is_available():
        print("bench_ops needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.measure import Timer, measure_copy_bandwidth

    device = torch.device("cuda", 0)
    bw = measure_copy_bandwidth(device)
    timer = Timer(device)
    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="kforge-bench-"))
    without_shipped_records()  # every row searches (Note [a run that searches sees no shipped records])
    rows, firsts = [], []
    env = environment(shlex.join(["python"] + sys.argv))
    env["copy_bandwidth_GBps"] = round(bw, 1)
    for row in select_rows(ROWS, args.rows):
        its = args.iterations if row.name in SEED_ROWS else args.quick_iterations
        try:
            r, f = bench_row(row, timer, bw, cache_dir, its, device, args.out)
        except Exception as e:  # one broken row must not lose the others; it is reported as such
            log(f"{row.name}: FAILED {type(e).__name__}: {e}")
            rows.append({"op": row.op, "shape": list(row.shape), "dtype": str(row.dtype), "error": str(e)[:300]})
            continue
        rows.append(r)
        firsts += f
        log(f"{row.name}: eager {r['eager_us']:.1f} ind {r['inductor_us']:.1f} kforge {r['kforge_us']:.1f} "
            f"floor {r['floor_us']:.1f} ({r['pct_bw']:.0f}% bw; a copy of its bytes {r['copy_us']:.1f}), "
            f"{r['speedup_vs_eager']:.2f}x eager, {r['speedup_vs_inductor']:.2f}x ind; by kernel time kforge "
            f"{_us(r['kforge_kernel_us'])} ({_us(r['pct_bw_kernel'], '.0f')}% bw) ind {_us(r['inductor_kernel_us'])} "
            f"copy {_us(r['copy_kernel_us'])}); by graph replay kforge {_us(r.get('kforge_graph_us'))} "
            f"({_us(r.get('pct_bw_graph'), '.0f')}% bw) ind {_us(r.get('inductor_graph_us'))} eager "
            f"{_us(r.get('eager_graph_us'))} copy {_us(r.get('copy_graph_us'))} search {r['search_s']:.1f}s "
            f"[{r['replaced']}]")
        torch.cuda.empty_cache()
        write_results(args.out / "ops", env, rows, OPS_COLUMNS, titled("kforge per-operator benchmark", env),
                      _notes(bw))
    write_results(args.out / "first_kernels", env, firsts, FIRST_COLUMNS, "kforge first kernels (template roots)",
                  _notes(bw) + ["kforge_us here is the template library's first candidate for the signature, "
                                "as timed in the search worker against eager on the same inputs."])
    ok = [r for r in rows if "error" not in r]
    if ok:
        log(f"median speedup vs eager {statistics.median(r['speedup_vs_eager'] for r in ok):.2f}x, "
            f"vs Inductor {statistics.median(r['speedup_vs_inductor'] for r in ok):.2f}x over {len(ok)} rows")


def _us(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def _notes(bw: float | None) -> list[str]:
    """``bw``: the run's copy bandwidth; None for a table of several runs, each with its own."""
    per = f"{bw:.0f} GB/s (copy bandwidth measured in this run)" if bw is not None else \
        "the row's run's copy bandwidth"
    return [f"Timer: CUDA events around one call, median of 30 repeats after 5 warm-ups, a 512 MiB read before "
            f"every repeat flushes the L2 (Note [why flush before each repeat]). floor = (input + output bytes) / "
            f"{per}; pct_bw = floor / kforge_us; copy_us: a plain copy moving the row's bytes, same run and timer "
            f"(rows of runs before the thirteenth session have none); pct_copy = copy_us / kforge_us. The *_kernel_us "
            f"columns time the same flushed calls by the profiler's durations of the device work each queues, the "
            f"launch left out (Note [kernel time beside event time] in forge_backend/measure.py; rows of runs before "
            f"the twenty-ninth session have none); pct_bw_kernel = floor / kforge_kernel_us. The *_graph_us columns "
            f"time rows of >= 8 MiB by CUDA-graph replay, as the anchors do, each of graph_calls captured calls on "
            f"its own inputs, the L2 flushed before each replay (Note [device time by graph replay]; rows of runs "
            f"before the thirty-first session have none); pct_bw_graph = floor / kforge_graph_us. kforge = "
            f"torch.compile(fn, backend=kforge), rest of the graph eager, after a template MCTS search of "
            f"`iterations` iterations (50 for the seed rows)."]


if __name__ == "__main__":
    main()
