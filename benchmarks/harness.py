"""Shared pieces of the benchmarks: environment facts and JSON + markdown writers (one format for all)."""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import torch


def environment(command: str) -> dict[str, Any]:
    import forge_backend

    env = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "command": command,
           "torch": torch.__version__, "python": platform.python_version(), "kforge": forge_backend.__version__}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    try:
        from forge_backend.runtime.nvrtc import nvrtc_version

        env["nvrtc"] = nvrtc_version()
    except Exception as e:  # informational only
        env["nvrtc"] = f"unavailable: {e}"
    return env


def titled(what: str, env: dict[str, Any]) -> str:
    """A results table's title naming the GPU its environment ran on (the device may lend an H100 where an H200 was
    asked for: a table's title must not say otherwise)."""
    return f"{what} ({env.get('gpu') or 'no GPU'})"


def write_results(path: Path, env: dict[str, Any], rows: Sequence[dict[str, Any]], columns: Sequence[str],
                  title: str, notes: Sequence[str] = ()) -> None:
    """``path``.json with the environment and rows, and ``path``.md with the same as a table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps({"environment": env, "rows": list(rows)}, indent=1))
    lines = [f"# {title}", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    lines += [""] + [f"{n}" for n in notes] + ([""] if notes else [])
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "---|" * len(columns))
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |")
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    return "" if v is None else str(v)


def name_matches(name: str, patterns: Sequence[str]) -> bool:
    """``name`` contains one of ``patterns`` (every name matches when there are none). Each pattern is matched whole:
    row and case names hold commas ("softmax [64, 262144]", "[64,262144]"), and a pattern split on them matched
    unrelated names. A pattern that starts with ``=`` names one exactly ("=softmax [64,262144] bf16" leaves out the
    soft-capped and narrow cases whose names contain it)."""
    return not patterns or any(name == pat[1:] if pat.startswith("=") else pat in name for pat in patterns)


def without_shipped_records() -> str:
    """Point this process's kforge at an empty shipped-records folder, so a benchmark's first compile searches every
    signature it misses instead of re-verifying kernels_cache/ (Note [a run that searches sees no shipped records] in
    bench_models.py). Returns the folder."""
    os.environ["KFORGE_SHIPPED_DIR"] = tempfile.mkdtemp(prefix="kforge-no-shipped-")
    return os.environ["KFORGE_SHIPPED_DIR"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
