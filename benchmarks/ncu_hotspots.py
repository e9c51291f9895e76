"""Where a profiled kernel's warps wait: a summary of Nsight Compute's per-instruction source page.

    python benchmarks/ncu_hotspots.py FILE.sass.csv [--top 15]

``run_device.sh ncu`` writes FILE.sass.csv (``ncu --page source --print-source sass --csv``). This prints the warp
stall samples summed by reason, then the instructions that hold the most samples with their main reasons, so a
kernel's bottleneck (a load's latency, a barrier, shared-memory traffic, issue) can be read without the GUI.
"""
from __future__ import annotations

import argparse
import csv
from collections import Counter
from pathlib import Path


def load(path: Path) -> list[tuple[str, list[dict[str, str]]]]:
    """Per profiled kernel (a run may profile several, e.g. a scratch fill before the kernel): its name and one dict
    per SASS instruction."""
    rows = list(csv.reader(path.read_text().splitlines()))
    starts = [i for i, r in enumerate(rows) if r and r[0] == "Kernel Name"] or [0]
    kernels = []
    for a, b in zip(starts, starts[1:] + [len(rows)]):
        part = rows[a:b]
        start = next((i for i, r in enumerate(part) if r and r[0] == "Address"), None)
        if start is None:
            continue
        name = part[0][1] if part[0] and part[0][0] == "Kernel Name" and len(part[0]) > 1 else "?"
        header = part[start]
        kernels.append((name, [dict(zip(header, r)) for r in part[start + 1:] if len(r) == len(header)]))
    if not kernels:
        raise SystemExit(f"{path}: no 'Address' header row; is it ncu's --page source --csv output?")
    return kernels


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def stall_columns(row: dict[str, str]) -> list[str]:
    return [k for k in row if k.startswith("stall_") and not k.endswith("(Not Issued)")]


def summarise(path: Path, top: int) -> str:
    return "\n".join(summarise_kernel(name, rows, top) for name, rows in load(path))


def summarise_kernel(name: str, rows: list[dict[str, str]], top: int) -> str:
    if not rows:
        return f"{name}: no instructions"
    cols = stall_columns(rows[0])
    by_reason = Counter({c.removeprefix("stall_"): sum(_num(r[c]) for r in rows) for c in cols})
    total = sum(by_reason.values()) or 1.0
    lines = [f"{name}: {int(total)} warp stall samples over {len(rows)} instructions"]
    lines += [f"  {reason:18s} {n / total:6.1%}" for reason, n in by_reason.most_common() if n / total >= 0.01]
    lines.append(f"  top {top} instructions by samples (share, executed, main reasons):")
    hot = sorted(rows, key=lambda r: _num(r.get("Warp Stall Sampling (All Samples)", "0")), reverse=True)[:top]
    for r in hot:
        samples = _num(r.get("Warp Stall Sampling (All Samples)", "0"))
        reasons = sorted(((_num(r[c]), c.removeprefix("stall_")) for c in cols), reverse=True)[:2]
        why = ", ".join(f"{reason} {n / max(samples, 1):.0%}" for n, reason in reasons if n > 0)
        lines.append(f"  {samples / total:6.1%} {int(_num(r.get('Instructions Executed', '0'))):>9d}  "
                     f"{r['Source'].strip()[:60]:60s} {why}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    for path in args.files:
        print(summarise(path, args.top))


if __name__ == "__main__":
    main()
