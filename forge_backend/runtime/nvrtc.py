"""Compile device source to a cubin with NVRTC (cuda-python's ``cuda.bindings.nvrtc``), cached on disk.

NVRTC needs no GPU, so CI compiles every built-in template for sm_90 with this same function. Measured on the
H200 machine (anchors/): NVRTC 0.12 s per small kernel against 66 s for torch's load_inline.

Note [cubin cache key]
sha256 over (source, arch, NVRTC version, compile options). Writes go to a temp file and are renamed into place, so
two processes compiling the same source at once both end with a whole file; a file that fails to load is a miss.

Note [NVRTC writes into the buffer it is given]
``nvrtcGetProgramLog`` and ``nvrtcGetCUBIN`` write into the Python object passed as their ``char*``. The buffers
were ``b" " * n``, and CPython returns its shared one-byte singleton for ``b" " * 1``: the empty log of every
successful compile (one byte, its terminating NUL) overwrote the process's ``b" "`` with ``b"\x00"``. On Python 3.12
the parser builds an f-string's literal parts through that singleton, so every module compiled from source afterwards
in the process lost the lone spaces of its f-strings: the template modules, imported after an LLM search had compiled
kernels, generated ``typedef __nv_bfloat16T;`` and NVRTC refused it (thirteenth and fourteenth sessions,
``benchmarks/repro_llm_then_compile.py``; ``tests/test_nvrtc_buffers.py`` pins it). Buffers are now fresh
``bytearray`` objects.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from torch._dynamo.utils import counters

from ..contract import Candidate, screen
from ..errors import CandidateFailure, ToolchainUnavailable
from ..fsutil import atomic_write

log = logging.getLogger("kforge")

BASE_OPTIONS = ("-std=c++17", "--use_fast_math", "-default-device")


@dataclass(frozen=True)
class CompiledKernel:
    cubin: bytes
    arch: str
    log: str
    cached: bool


@functools.lru_cache(maxsize=1)
def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ToolchainUnavailable("cuda-python (cuda.bindings) is not installed: pip install cuda-bindings") from e
    return nvrtc


@functools.lru_cache(maxsize=1)
def include_dir() -> str:
    """The CUDA include directory that holds cuda_fp16.h and friends."""
    try:
        import cuda.pathfinder as pf

        found = pf.find_nvidia_header_directory("cudart")
        if found:
            return str(found)
    except (ImportError, RuntimeError) as e:
        log.debug("cuda.pathfinder did not find the CUDA headers: %s", e)
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and Path(root, "include", "cuda_fp16.h").exists():
            return str(Path(root, "include"))
    raise ToolchainUnavailable("CUDA headers (cuda_fp16.h) not found; set CUDA_HOME or install the CUDA toolkit")


def nvrtc_version() -> str:
    err, major, minor = _nvrtc().nvrtcVersion()
    return f"{major}.{minor}"


def _check(result, what: str) -> None:
    nvrtc = _nvrtc()
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ToolchainUnavailable(f"NVRTC {what} failed: {result}")


def _program_log(prog) -> str:
    nvrtc = _nvrtc()
    err, n = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = bytearray(n)  # Note [NVRTC writes into the buffer it is given]
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.decode(errors="replace").rstrip("\x00").strip()


def cache_key(source: str, arch: str, options: tuple[str, ...]) -> str:
    blob = "\0".join((source, arch, nvrtc_version(), *options))
    return hashlib.sha256(blob.encode()).hexdigest()


def compile_source(source: str, arch: str = "sm_90", cache_dir: Path | None = None,
                   options: tuple[str, ...] = BASE_OPTIONS) -> CompiledKernel:
    """Compile to a cubin. Raises CandidateFailure('compile') with the log (line numbers included) on error."""
    key = cache_key(source, arch, options)
    path = Path(cache_dir, "cubin", f"{key}.cubin") if cache_dir else None
    if path is not None and path.exists():
        data = path.read_bytes()
        if data[:4] == b"\x7fELF":
            counters["kforge"]["cubin_cache_hit"] += 1
            return CompiledKernel(data, arch, "", True)
        log.warning("kforge: corrupt cubin cache entry %s ignored", path)
    nvrtc = _nvrtc()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"candidate.cu", 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), f"-I{include_dir()}".encode(), *(o.encode() for o in options)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        text = _program_log(prog)
        counters["kforge"]["nvrtc_compiles"] += 1
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CandidateFailure("compile", _first_error(text), text)
        err, n = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize")
        buf = bytearray(n)  # Note [NVRTC writes into the buffer it is given]
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
        _check(err, "nvrtcGetCUBIN")
        cubin = bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    if path is not None:
        atomic_write(path, cubin)
    return CompiledKernel(cubin, arch, text, False)


def compile_candidate(candidate: Candidate, arch: str = "sm_90", cache_dir: Path | None = None) -> CompiledKernel:
    """Screen, then compile. Contract violations become CandidateFailure('screen')."""
    from ..errors import ContractViolation

    try:
        screen(candidate)
    except ContractViolation as e:
        raise CandidateFailure("screen", str(e)) from e
    return compile_source(candidate.source, arch, cache_dir)


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if re.search(r"\berror\b", line):
            return line.strip()
    return text.splitlines()[0] if text else "compilation failed"
