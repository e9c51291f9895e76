"""What benchmarks/plans/two_machines.sh's five prewarms did, phase by phase, and whether each phase shows what the
team store promises (Note [a prewarm split across machines] in forge_backend/prewarm.py, Note [a search a teammate is
running] in forge_backend/store/team_markers.py).

    python benchmarks/two_machines_summary.py JSON_DIR [--out two_machines.md]

JSON_DIR holds ``machine0.json`` .. ``machine4.json`` (``kforge prewarm --json``). A machine whose file is missing
(its prewarm failed or ran out of time) is reported as such, and its phase's checks as not made.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

PHASES = {
    "A": ((0, 1), "two machines, --shard 0/2 and 1/2, one team"),
    "B": ((2,), "a third machine, the whole model, after A"),
    "C": ((3, 4), "two machines at once, no shard, a fresh team"),
}


@dataclass(frozen=True)
class Check:
    phase: str
    what: str
    ok: bool | None  # None: not made (a machine's results are missing)
    detail: str


def load(json_dir: Path) -> dict[int, list[dict]]:
    """Each machine's result rows, by machine number; a machine without its file is left out."""
    out = {}
    for n in range(5):
        path = json_dir / f"machine{n}.json"
        if path.is_file():
            out[n] = json.loads(path.read_text())["results"]
    return out


def searched(rows: list[dict]) -> set[str]:
    return {r["key"] for r in rows if r["status"] == "searched"}


def other_shards(rows: list[dict]) -> set[str]:
    """The signatures a sharded prewarm left to the other machines (prewarm.plan's status for them)."""
    return {r["key"] for r in rows if r["status"].startswith("skipped: shard ")}


def kernels(rows: list[dict]) -> set[str]:
    return {r["key"] for r in rows if r["status"] == "searched" and r["decision"] == "kernel"}


def checks(results: dict[int, list[dict]]) -> list[Check]:
    """The promises of each phase, checked against the machines' rows."""
    out = []
    missing = lambda ns: [n for n in ns if n not in results]  # noqa: E731
    if gone := missing((0, 1)):
        out.append(Check("A", "the shards split the searches", None, f"no results from machine(s) {gone}"))
    else:
        a, b = searched(results[0]), searched(results[1])
        left_a, left_b = other_shards(results[0]), other_shards(results[1])
        out.append(Check("A", "the shards split the searches: none searched twice, each left to the other searched "
                              "there", bool(a | b) and not (a & b) and left_a <= b and left_b <= a,
                         f"machine 0 searched {len(a)} and left {len(left_a)} to machine 1, which searched "
                         f"{len(left_a & b)} of them; machine 1 searched {len(b)} and left {len(left_b)}, machine 0 "
                         f"searched {len(left_b & a)} of them; both searched {len(a & b)}"))
    if gone := missing((0, 1, 2)):
        out.append(Check("B", "a third machine searches nothing", None, f"no results from machine(s) {gone}"))
    else:
        found = kernels(results[0]) | kernels(results[1])
        rows = {r["key"]: r for r in results[2]}
        taken = {k for k in found if rows.get(k, {}).get("status") == "shipped"}
        out.append(Check("B", "a third machine searches nothing and takes each kernel from the team, re-verified",
                         not searched(results[2]) and taken == found,
                         f"searched {len(searched(results[2]))}; took {len(taken)} of the team's {len(found)} kernels"))
    if gone := missing((3, 4)):
        out.append(Check("C", "the markers split the searches", None, f"no results from machine(s) {gone}"))
    else:
        c, d = searched(results[3]), searched(results[4])
        out.append(Check("C", "the markers split the searches: none searched twice", not (c & d),
                         f"machine 3 searched {len(c)}, machine 4 {len(d)}, both {len(c & d)}"))
    return out


def table(rows: list[dict]) -> list[str]:
    lines = ["| op | inputs | status | decision | kforge us | speedup | seconds |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        kf, s = r.get("kforge_us"), r.get("speedup_vs_eager")
        lines.append(f"| {r['op']} | {r['inputs']} | {r['status']} | {r['decision'] or '-'} | "
                     f"{'-' if kf is None else f'{kf:.1f}'} | {'-' if s is None else f'{s:.2f}x'} | "
                     f"{r['seconds']:.1f} |")
    return lines


def report(results: dict[int, list[dict]]) -> str:
    lines = ["# Two machines, one team store (benchmarks/plans/two_machines.sh)", ""]
    for c in checks(results):
        verdict = "not checked" if c.ok is None else ("yes" if c.ok else "**no**")
        lines.append(f"- {c.phase}: {c.what}: {verdict} ({c.detail})")
    for phase, (machines, what) in PHASES.items():
        lines += ["", f"## Phase {phase}: {what}"]
        for n in machines:
            lines += ["", f"### machine {n}", ""]
            lines += table(results[n]) if n in results else ["(no results: see its log)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json_dir", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    text = report(load(args.json_dir))
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
