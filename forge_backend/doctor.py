"""`kforge doctor`: what works on this machine and what to do about the rest."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .config import KforgeConfig
from .errors import BadOption, KforgeError


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    warn: bool = False


def _torch() -> Check:
    import torch

    return Check("torch", True, f"{torch.__version__} on Python {platform.python_version()}")


def _gpu() -> Check:
    import torch

    if not torch.cuda.is_available():
        return Check("GPU", False, "no CUDA GPU visible: kforge captures graphs and leaves every op to PyTorch; "
                                   "kernels need an NVIDIA GPU (sm_80 or newer)", warn=True)
    from .search.templates.common import SMS
    from .search.templates.target import Target

    major, minor = torch.cuda.get_device_capability()
    gpu, t = f"{torch.cuda.get_device_name()} (sm_{major}{minor})", Target(major * 10 + minor)
    if not t.served:  # Note [templates for the card's architecture] in search/templates/target.py
        return Check("GPU", False, f"{gpu}: kforge's kernel templates need sm_80 or newer, so every op stays with "
                                   "PyTorch here (an LLM proposer may still try)", warn=True)
    layouts = "every template layout" if t.sm90_features else "the templates without sm_90's cluster and relay layouts"
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    grids = "" if sms == SMS else (f"; grids are sized for the H200's {SMS} SMs, but the relay's take this GPU's {sms}"
                                   " (Note [the GPU's SM count in a plan] in contract.py)" if t.sm90_features else
                                   f"; grids are sized for the H200's {SMS} SMs")
    return Check("GPU", True, f"{gpu}, {sms} SMs, torch CUDA {torch.version.cuda}: {layouts}, blocks of up to "
                              f"{t.smem_limit // 1024} KB of shared memory{grids}")


def _other_gpus() -> Check | None:
    """The host's other GPUs, where there are any: a model on a GPU of the current one's arch runs kforge's kernels
    there (Note [a kernel called with tensors on another GPU] in runtime/launch.py), one of another arch keeps
    PyTorch's ops unless it is made current (Note [a card of another GPU's arch] in runtime/cuda_provider.py), and
    prewarm searches on GPUs of one arch."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return None
    from .signature import arch_of

    here = torch.cuda.current_device()
    archs = {i: arch_of(torch.device("cuda", i)) for i in range(torch.cuda.device_count())}
    others = [i for i in archs if i != here]
    odd = [i for i in others if archs[i] != archs[here]]
    listed = ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)} ({archs[i]})" for i in others)
    if not odd:
        return Check("GPUs", True, f"{listed}: the current GPU's arch, so models there run kforge's kernels")
    return Check("GPUs", False, f"{listed}: a model on {', '.join(f'cuda:{i}' for i in odd)} (not {archs[here]}) keeps "
                                "PyTorch's ops unless that GPU is made current (torch.cuda.set_device) before "
                                "compiling; prewarm's --gpus takes GPUs of one arch", warn=True)


def _nvrtc() -> Check:
    try:
        from .runtime.nvrtc import compile_source, include_dir, nvrtc_version

        compile_source('extern "C" __global__ void kforge_doctor(float* x) { x[threadIdx.x] = 1.f; }', "sm_90")
        return Check("NVRTC", True, f"NVRTC {nvrtc_version()} compiles for sm_90; headers in {include_dir()}")
    except (KforgeError, ImportError, OSError, RuntimeError) as e:
        return Check("NVRTC", False, f"{str(e).strip()}. Install cuda-bindings and nvidia-cuda-nvrtc (pip install "
                                     "kforge[nvrtc]) and the CUDA headers (CUDA_HOME)")


def _nvcc() -> Check:
    path = shutil.which("nvcc")
    if not path:
        return Check("nvcc", False, "not on PATH (optional: NVRTC is what kforge uses)", warn=True)
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    return Check("nvcc", True, out.splitlines()[-1] if out else path)


def _cache(cfg: KforgeConfig) -> Check:
    try:
        cfg.cache_dir.mkdir(parents=True, exist_ok=True)
        probe = cfg.cache_dir / ".doctor"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        return Check("cache", False, f"{cfg.cache_dir} is not writable ({e}); set KFORGE_CACHE_DIR")
    from .store.queue import MissQueue

    queued = len(MissQueue(cfg.cache_dir).keys())  # Note [a miss kept for later] in store/queue.py
    todo = f"; {queued} missed signatures queued: search them with kforge prewarm --queued" if queued else ""
    return Check("cache", True, f"{cfg.cache_dir} (KFORGE_CACHE_DIR): {_holdings(cfg.cache_dir)}{todo}")


def _holdings(cache_dir: Path) -> str:
    """What a cache directory holds: its records by decision, its search trees and its size on disk. The store is
    opened only where its database exists (doctor creates none)."""
    from .store.local import LocalStore, searches_dir

    parts = []
    if (cache_dir / "records" / "cache.db").is_file():
        with LocalStore(cache_dir) as store:
            st = store.stats()
            models = []
            for folder in store.models():  # Note [a cache directory that GPU models share] in store/local.py
                with folder:
                    models.append((folder.root.name, len(folder)))
        corrupt = f", {st['corrupt']} corrupt (kforge cache verify)" if st["corrupt"] else ""
        beside = f"; and in GPU models' folders: {', '.join(f'{k} for {name}' for name, k in models)}" if models else ""
        parts.append(f"{st['entries']} records ({st['kernel']} kernels, {st['pytorch']} kept PyTorch{corrupt}{beside})")
    else:
        parts.append("no records yet")
    trees = searches_dir(cache_dir)
    parts.append(f"{sum(1 for _ in trees.glob('*.json')) if trees.is_dir() else 0} search trees")
    parts.append(f"{_in_units(_size(cache_dir))} on disk")
    return ", ".join(parts)


def _in_units(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _size(directory: Path) -> int:
    """The bytes of every file under ``directory`` (files that vanish while it is walked are left out)."""
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def _team(cfg: KforgeConfig) -> Check | None:
    """The team store (store/team.py), when one is configured: reachable, how many records, writable."""
    if not cfg.team_store:
        return None
    from .store.team import TeamStore, TeamStoreUnavailable

    team = TeamStore(cfg.team_store)
    if not team.directory.is_dir():
        return Check("team store", False, team.missing() + "; or unset KFORGE_TEAM_STORE")
    n = f"{len(team.keys())} records"
    models = [(m.directory.name, len(m.keys())) for m in team.models()]  # Note [a team of several GPU models]
    if models:
        n += f" (and in GPU models' folders: {', '.join(f'{k} for {name}' for name, k in models)})"
    try:
        team.check_writable()
    except TeamStoreUnavailable as e:
        return Check("team store", False, f"{e}: its {n} are looked up, but this machine's winners will not "
                                          "be published", warn=True)
    return Check("team store", True, f"{team.directory}: {n}, writable (KFORGE_TEAM_STORE)")


def _llm(cfg: KforgeConfig) -> Check:
    if not cfg.llm_model:
        return Check("LLM", False, "KFORGE_LLM_MODEL is not set: the template proposer works offline; set it (and "
                                   "KFORGE_LLM_BASE_URL for a local server) to use --proposer llm", warn=True)
    try:
        from .search.llm.client import check_endpoint
    except ImportError as e:
        return Check("LLM", False, f"LLM proposer unavailable: {e}")
    status = check_endpoint(cfg)
    return Check("LLM", status.ok, status.message)


def run_checks(check_llm: bool = True) -> list[Check]:
    try:
        cfg = KforgeConfig.load()
    except BadOption as e:
        return [Check("config", False, str(e))]
    checks = [Check("config", True, f"inner={cfg.inner} search={cfg.search} proposer={cfg.proposer}"),
              _torch(), _gpu(), *filter(None, [_other_gpus()]), _nvrtc(), _nvcc(), _cache(cfg),
              *filter(None, [_team(cfg)])]
    if check_llm:
        checks.append(_llm(cfg))
    return checks
