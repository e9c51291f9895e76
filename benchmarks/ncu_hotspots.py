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


def load(path: Path) -> tuple[str, list[dict[str, str]]]:
    """The kernel name and one dict per SASS instruction."""
    rows = list(csv.reader(path.read_text().splitlines()))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None:
        raise SystemExit(f"{path}: no 'Address' header row; is it ncu's --page source --csv output?")
    name = next((r[1] for r in rows[:start] if len(r) > 1 and r[0] == "Kernel Name"), "?")
    header = rows[start]
    return name, [dict(zip(header, r)) for r in rows[start + 1:] if len(r) == len(header)]


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def stall_columns(row: dict[str, str]) -> list[str]:
    return [k for k in row if k.startswith("stall_") and not k.endswith("(Not Issued)")]


def summarise(path: Path, top: int) -> str:
    name, rows = load(path)
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
