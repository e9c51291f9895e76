"""One ops row's winning kernel timed four ways in one run: is a search's time the time the compiled graph gets?

    python benchmarks/worker_vs_graph.py --row "group_norm [2, 1536, 64, 64] float32" [--iterations 2] [--out DIR]

In the twenty-second session's ops run U the search's worker timed the [2,1536,64,64] fp32 group norm's root at 28.5
us, and the same kernel called from ``torch.compile``'s graph ran 30.3 us (30.1-30.7 in later calls, 29.4 us by the
profiler, one kernel per call; copy_and_kernel_probes_session22.md). This tool compiles the row as bench_ops.py does
(kforge with the rest eager, a fresh cache, ``--iterations`` of search), takes the kernel it replaced the op with, and
times, in rounds of rotated order with the Timer every benchmark uses:

* ``graph``: the compiled function on the row's inputs (what ops.json's kforge_us times);
* ``launcher_row``: a Launcher for the record's candidate, in this process, on the row's own tensors;
* ``launcher_fresh``: the same Launcher on inputs made as the worker makes them (verify.make_inputs, seed 99);
* ``worker``: the search worker's ``remeasure`` of the same candidate (its process, its fresh inputs).

``graph`` against ``launcher_row`` is the graph's cost; ``launcher_row`` against ``launcher_fresh`` the inputs';
``launcher_fresh`` against ``worker`` the process's. Writes worker_vs_graph.json/.md under ``--out``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_models import round_orders  # noqa: E402
from bench_ops import kforge_options  # noqa: E402
from harness import environment, name_matches, write_results  # noqa: E402
from rows import ROWS  # noqa: E402

VARIANTS = ("graph", "launcher_row", "launcher_fresh", "worker")


def the_row(pattern: str):
    """The one row ``pattern`` names (harness.name_matches; a leading ``=`` names it exactly)."""
    found = [row for row in ROWS if name_matches(row.name, [pattern])]
    if len(found) != 1:
        names = ", ".join(r.name for r in found) or "none"
        raise SystemExit(f"--row {pattern!r} must name one row; it matches {len(found)}: {names}")
    return found[0]


def same_tensors(tensors, card) -> bool:
    """The row's tensors are the card's inputs in order (shapes, dtypes, strides): a launcher can take them as they
    are."""
    from forge_backend.signature import to_dtype

    specs = [t.spec for t in card.inputs]
    return len(tensors) == len(specs) and all(
        tuple(t.shape) == tuple(s.shape) and t.dtype == to_dtype(s.dtype) and tuple(t.stride()) == tuple(s.stride)
        for t, s in zip(tensors, specs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--row", required=True, help='one ops row, e.g. "group_norm [2, 1536, 64, 64] float32"')
    ap.add_argument("--iterations", type=int, default=2, help="search iterations of the compile (the root and one)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    row = the_row(args.row)
    if not torch.cuda.is_available():
        print("worker_vs_graph needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.backend import make_backend
    from forge_backend.measure import Timer
    from forge_backend.runtime.launch import Launcher
    from forge_backend.runtime.nvrtc import compile_candidate
    from forge_backend.runtime.worker import WorkerClient
    from forge_backend.store.local import LocalStore
    from forge_backend.verify import make_inputs

    dev = torch.device("cuda", 0)
    cache = Path(tempfile.mkdtemp(prefix="kforge-wvg-"))
    fn, inputs = row.build(dev)
    reports = []
    kf = torch.compile(fn, backend=make_backend(on_report=reports.append),
                       options=kforge_options(args.iterations, cache))
    with torch.no_grad():
        kf(*inputs)
    keys = [key for r in reports for _, key, _ in r.replaced]
    if len(keys) != 1:
        raise SystemExit(f"{row.name}: the compile replaced {len(keys)} nodes; this tool compares one kernel")
    rec = LocalStore(cache).get(keys[0])
    if rec is None or rec.candidate is None:
        raise SystemExit(f"{row.name}: no kernel record for the replaced node's key {keys[0][:16]}...")
    card, cand = rec.card_obj(), rec.candidate_obj()
    major, minor = torch.cuda.get_device_capability(dev)
    cubin = compile_candidate(cand, f"sm_{major}{minor}", cache).cubin
    launcher = Launcher(card, cand, cubin, dev)
    fresh = make_inputs(card, "normal", 99, dev)
    own = list(inputs) if same_tensors(inputs, card) else None
    client = WorkerClient(cache, 0)
    request = {"cmd": "remeasure", "card": card.to_json(), "candidate": cand.to_json(), "cubin": cubin, "runs": 1}
    timer = Timer(dev)
    timed = {
        "graph": lambda: timer.time(lambda: kf(*inputs)).median_us,
        "launcher_row": (lambda: timer.time(lambda: launcher(own)).median_us) if own is not None else None,
        "launcher_fresh": lambda: timer.time(lambda: launcher(fresh)).median_us,
        "worker": lambda: float(client.call(request)["times_us"][0]),
    }
    names = [v for v in VARIANTS if timed[v] is not None]
    results = []
    try:
        with torch.no_grad():
            for i, order in enumerate(round_orders(names, args.rounds)):
                for name in order:
                    results.append({"variant": name, "round": i, "us": timed[name]()})
    finally:
        client.close()
    summary = {v: statistics.median(r["us"] for r in results if r["variant"] == v) for v in names}
    print(f"{row.name}: {cand.description}")
    print(f"  the search's record: kforge_us {rec.timings.get('kforge_us')}, remeasured {rec.timings.get('remeasured_us')}")
    for v in names:
        print(f"  {v:15s} {summary[v]:7.1f} us (median of {sum(r['variant'] == v for r in results)} rounds)")
    if own is None:
        print("  launcher_row skipped: the row's tensors are not the card's inputs in order")
    if args.out:
        notes = [f"- row: {row.name}; kernel: {cand.description}",
                 f"- the search's record: kforge_us {rec.timings.get('kforge_us')}, remeasured_us "
                 f"{rec.timings.get('remeasured_us')}",
                 "- medians over rounds: " + ", ".join(f"{v} {summary[v]:.1f} us" for v in names)]
        write_results(args.out / "worker_vs_graph", environment("python " + " ".join(sys.argv)), results,
                      ["variant", "round", "us"], "One kernel timed in the compiled graph, in process and in the worker",
                      notes)


if __name__ == "__main__":
    main()
