"""Two sets of kernel records for the same signatures, timed side by side in one run: is the new kernel faster?

    python benchmarks/compare_records.py --old kernels_cache --new BUNDLE [--rounds 2] [--out DIR]

For every key whose record is a kernel in both directories (a bundle from `kforge cache export`, or kernels_cache/),
the worker verifies and times the old record's kernel and the new one's, alternately, ``--rounds`` times each (the
search's verifier and device-event timer, fresh inputs: the same path as probe_variants.py), so that each ratio
compares times from one run. Writes ``compare.json`` and ``compare.md`` under ``--out``: per key the op, the first
input, both medians, old / new, and the % of the measured copy bandwidth of each. A kernel that fails the verifier
here is reported as failed, never timed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import environment, write_results  # noqa: E402

from forge_backend.cards import OperatorCard  # noqa: E402
from forge_backend.contract import Candidate  # noqa: E402
from forge_backend.errors import CandidateFailure  # noqa: E402
from forge_backend.store import ShippedStore  # noqa: E402
from forge_backend.store.record import KernelRecord  # noqa: E402

TITLE = "Kernel records against the same signatures' records searched again, one run"
COLUMNS = ("op", "input", "old_us", "new_us", "old_over_new", "old_pct_bw", "new_pct_bw", "old_params", "new_params")


def kernel_records(directory: Path) -> dict[str, KernelRecord]:
    """The kernel records (not ``pytorch`` decisions) of a directory of ``<key>.json`` files, by key, read as the
    shipped tier reads kernels_cache/ (an exported bundle's index.json is not a key)."""
    store = ShippedStore(directory)
    recs = {key: store.read(key) for key in store.keys()}
    return {key: rec for key, rec in recs.items() if rec.decision == "kernel" and rec.candidate}


def common_keys(old: dict[str, KernelRecord], new: dict[str, KernelRecord]) -> list[str]:
    """Keys with a kernel on both sides, in the old directory's order; a record whose signature differs between the
    sides (the same key, so only a hand-edited file) is refused. Cards may differ: they carry each run's baselines."""
    keys = [k for k in old if k in new]
    for k in keys:
        if old[k].signature != new[k].signature:
            raise SystemExit(f"{k}: the two records' signatures differ")
    return keys


def summarise(card: dict[str, Any], old: list[dict[str, Any]], new: list[dict[str, Any]],
              old_params: Any, new_params: Any) -> dict[str, Any]:
    """One row from the rounds of each side: medians of the timed rounds, their ratio, or the failure."""
    first = card["inputs"][0]
    row: dict[str, Any] = {"op": card["op"], "input": f"{first['dtype']}{first['shape']}",
                           "old_params": json.dumps(old_params, sort_keys=True),
                           "new_params": json.dumps(new_params, sort_keys=True)}
    for side, rounds in (("old", old), ("new", new)):
        failed = [r["failed"] for r in rounds if "failed" in r]
        if failed:
            row[f"{side}_failed"] = failed[0]
            continue
        row[f"{side}_us"] = statistics.median(r["time_us"] for r in rounds)
        row[f"{side}_pct_bw"] = statistics.median(r["pct_bw"] for r in rounds)
        row[f"{side}_times_us"] = [r["time_us"] for r in rounds]
    if "old_us" in row and "new_us" in row:
        row["old_over_new"] = row["old_us"] / row["new_us"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", type=Path, required=True, help="records as they were (e.g. kernels_cache)")
    ap.add_argument("--new", type=Path, required=True, help="records searched again (an exported bundle)")
    ap.add_argument("--rounds", type=int, default=2, help="timings of each side, alternating (default 2)")
    ap.add_argument("--out", type=Path, default=Path("."), help="write compare.json and compare.md here")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    old, new = kernel_records(args.old), kernel_records(args.new)
    keys = common_keys(old, new)
    if not keys:
        raise SystemExit(f"no key has a kernel record in both {args.old} and {args.new}")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("compare_records needs a CUDA GPU; none is visible here.")
    from forge_backend.runtime.nvrtc import compile_candidate
    from forge_backend.runtime.worker import WorkerClient

    def timed(client: WorkerClient, card: OperatorCard, rec: KernelRecord) -> dict[str, Any]:
        cand = Candidate.from_json(rec.candidate)
        try:
            cubin = compile_candidate(cand, card.arch).cubin
        except CandidateFailure as e:
            return {"failed": f"{e.stage}: {e.message[:200]}"}
        r = client.call({"cmd": "evaluate", "card": card.to_json(), "candidate": cand.to_json(), "cubin": cubin})
        if not r["ok"]:
            return {"failed": f"{r['verify_report']['failed_check']}: {r['verify_report']['message'][:200]}"}
        return {"time_us": r["time_us"], "pct_bw": r["pct_bw"]}

    env = environment("python benchmarks/compare_records.py " + " ".join(sys.argv[1:]))
    rows: list[dict[str, Any]] = []
    client = WorkerClient(None, 0, timeout_s=60)
    try:
        for key in keys:
            card = OperatorCard.from_json(old[key].card)
            sides: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
            for _ in range(args.rounds):
                for side, recs in (("old", old), ("new", new)):
                    sides[side].append(timed(client, card, recs[key]))
            row = summarise(old[key].card, sides["old"], sides["new"], old[key].candidate.get("params"),
                            new[key].candidate.get("params"))
            row["key"] = key
            rows.append(row)
            write_results(args.out / "compare", env, rows, COLUMNS, TITLE)  # a run cut short keeps its rows
            print(f"{row['op']} {row['input']}: old {row.get('old_us', row.get('old_failed'))} "
                  f"new {row.get('new_us', row.get('new_failed'))}", flush=True)
    finally:
        client.close()


if __name__ == "__main__":
    main()
