"""What `kforge ui` shows while real searches run: its JSON polled as a command (a prewarm) searches.

    python benchmarks/ui_watch.py --out DIR [--cache-dir DIR] [--every 1.0] -- COMMAND...

Starts the UI's server (forge_backend/ui/server.py, the one `kforge ui` runs) on a free loopback port over the cache
directory, runs COMMAND, and polls /api/searches every ``--every`` seconds until COMMAND exits. It writes to DIR:
- ``polls.json``: each poll that differed from the one before (time, and each search's state, iterations and best);
- ``views/KEY.json`` and ``views/KEY_best.json``: each search's view and its best node's, read after COMMAND ended;
- ``views/kernels.json``: the kernels view (the record tiers a compile would use), read after COMMAND ended;
- ``ui_watch.md``: a table of the polls, so a person can see searches go from live to finished.
The device script runs it as its ``ui`` stage (benchmarks/run_device.sh). CPU-tested in tests/test_ui_watch.py.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge_backend.ui.server import UiServer  # noqa: E402


def fetch(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def brief(listing: dict[str, Any]) -> dict[str, Any]:
    """What a poll keeps of one search."""
    return {k: listing[k] for k in ("key", "op", "tensors", "state", "iterations", "iterations_budget",
                                    "best_speedup", "best_pct_roofline", "decision")}


def watch(base: str, command: list[str], every: float) -> tuple[int, list[dict[str, Any]]]:
    """Run ``command``; poll ``base``/api/searches until it exits. Its exit status, and the polls that changed."""
    proc = subprocess.Popen(command)
    t0, polls, last = time.monotonic(), [], None
    while True:
        done = proc.poll() is not None
        now = [brief(s) for s in fetch(base + "api/searches")["searches"]]
        if now != last:
            polls.append({"t_s": round(time.monotonic() - t0, 2), "searches": now})
            last = now
        if done:
            return proc.returncode, polls
        time.sleep(every)


def save_views(base: str, polls: list[dict[str, Any]], out: Path) -> None:
    views = out / "views"
    views.mkdir(parents=True, exist_ok=True)
    for s in polls[-1]["searches"] if polls else []:
        view = fetch(f"{base}api/searches/{s['key']}")
        (views / f"{s['key']}.json").write_text(json.dumps(view, indent=1))
        if view["best_id"] is not None:
            node = fetch(f"{base}api/searches/{s['key']}/nodes/{view['best_id']}")
            (views / f"{s['key']}_best.json").write_text(json.dumps(node, indent=1))
    (views / "kernels.json").write_text(json.dumps(fetch(f"{base}api/kernels"), indent=1))


def table(polls: list[dict[str, Any]], status: int) -> str:
    lines = [f"# kforge ui while the command ran (exit status {status})", "",
             "| t (s) | search | state | iterations | best speedup | % of roofline |", "|---|---|---|---|---|---|"]
    for p in polls:
        for s in p["searches"]:
            best = f"{s['best_speedup']:.2f}x" if s["best_speedup"] else "-"
            roof = f"{s['best_pct_roofline']:.0f}%" if s["best_pct_roofline"] else "-"
            its = f"{s['iterations']}/{s['iterations_budget']}" if s["iterations_budget"] else str(s["iterations"])
            lines.append(f"| {p['t_s']} | {s['op']} {s['tensors']} | {s['state']} | {its} | {best} | {roof} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache-dir", type=Path, default=None, help="default: KFORGE_CACHE_DIR, as the command's")
    ap.add_argument("--every", type=float, default=1.0)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to run after --")
    if args.cache_dir is None:
        from forge_backend.config import KforgeConfig

        args.cache_dir = KforgeConfig.load().cache_dir
    server = UiServer(args.cache_dir, "127.0.0.1", 0)
    server.start()
    try:
        status, polls = watch(server.url, command, args.every)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "polls.json").write_text(json.dumps(polls, indent=1))
        save_views(server.url, polls, args.out)
    finally:
        server.shutdown()
        server.server_close()
    kernels = json.loads((args.out / "views" / "kernels.json").read_text())
    tiers = "; ".join(f"{t['name']}: {t['records']} records" if t["readable"] else f"{t['name']}: {t['problem']}"
                      for t in kernels["tiers"])
    answering = sum(k["answers"] for k in kernels["kernels"] if k["tier"] == "local")
    (args.out / "ui_watch.md").write_text(table(polls, status) + f"\nKernels view after the command: {tiers}; "
                                          f"{answering} local records answer a compile here.\n")
    print(table(polls, status)[-2000:])
    return status


if __name__ == "__main__":
    sys.exit(main())
