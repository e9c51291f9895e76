"""Run a template's generated CUDA kernel on the CPU, for kernels that no GPU has run yet.

The kernel's own source is compiled by the host C++ compiler against the CUDA headers (their 16-bit types and
conversions are host code too), with a shim for what only a GPU has:

* every thread of a block is an OS thread, and ``__syncthreads`` a barrier (one that never fills, because some
  thread skipped it, fails the run instead of hanging it); the blocks of the grid run one after another, the dynamic
  shared memory poisoned before each, and a static ``__shared__`` array is one function-local static array;
* each inline PTX statement is read and replaced by a host call. ``cp.async`` copies keep PTX's rules: a copy is
  only known to have landed after its thread's ``cp.async.wait_group`` allows it, so by default it lands exactly
  then (as late as the rules let it), or as it is issued (``early_copies``); its addresses must be aligned to its
  size and lie in the block's shared memory and in a buffer of the launch. Vector stores must be aligned and lie in
  a buffer. A PTX statement the table below does not know is refused, not guessed;
* every buffer is surrounded by guard bytes that must come back unchanged, and the inputs must too.

What it cannot see: timing, bank conflicts, a wrong ``__launch_bounds__``, memory-model questions between blocks
(blocks never run at once here), and warp-level intrinsics (shuffles, votes), which fail the run. It is a check of
a kernel's index arithmetic and of its copies' bookkeeping, not a substitute for the GPU verifier.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from forge_backend.cards import OperatorCard
from forge_backend.contract import Candidate, resolve_plan
from forge_backend.runtime.nvrtc import include_dir

GUARD = 256  # bytes on each side of every buffer
GUARD_BYTE = 0x5A


class NotEmulated(Exception):
    """The kernel uses something the host emulator does not model."""


SHIM = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#define __launch_bounds__(...)
struct EmuDim { unsigned x = 0, y = 0, z = 0; };
inline thread_local EmuDim threadIdx, blockIdx;
inline EmuDim gridDim, blockDim;

[[noreturn]] inline void emu_fail(const char* what) {
  std::fprintf(stderr, "emulator: %s (block %u %u %u, thread %u %u %u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z,
               threadIdx.x, threadIdx.y, threadIdx.z);
  std::fflush(stderr);
  std::_Exit(3);
}

// the launch's buffers, for the bounds of vector accesses
struct EmuBuffer { unsigned char* p; std::size_t n; };
inline std::vector<EmuBuffer> emu_buffers;
inline void emu_in_buffer(const void* p, std::size_t n, const char* what) {
  auto a = static_cast<const unsigned char*>(p);
  for (const auto& b : emu_buffers) if (a >= b.p && a + n <= b.p + b.n) return;
  emu_fail(what);
}

// one block's shared memory at a time
inline unsigned char* emu_smem = nullptr;
inline std::size_t emu_smem_bytes = 0;
inline unsigned __cvta_generic_to_shared(const void* p) {
  auto a = static_cast<const unsigned char*>(p);
  if (a < emu_smem || a > emu_smem + emu_smem_bytes) emu_fail("__cvta_generic_to_shared outside the shared memory");
  return static_cast<unsigned>(a - emu_smem);
}

struct EmuBarrier {
  std::mutex m;
  std::condition_variable cv;
  int live = 0, waiting = 0;
  long generation = 0;
  void wait() {
    std::unique_lock<std::mutex> l(m);
    const long g = generation;
    if (++waiting == live) { waiting = 0; ++generation; cv.notify_all(); return; }
    if (!cv.wait_for(l, std::chrono::seconds(30), [&] { return generation != g; }))
      emu_fail("a __syncthreads that not every live thread of the block reached");
  }
  void leave() {  // an exited thread no longer counts
    std::lock_guard<std::mutex> l(m);
    if (--live > 0 && waiting == live) { waiting = 0; ++generation; cv.notify_all(); }
  }
};
inline EmuBarrier emu_barrier;
inline void __syncthreads() { emu_barrier.wait(); }

// cp.async: a thread's copies land, at the latest, when its wait_group allows (Note in host_emulator.py)
struct EmuCopy { unsigned dst; const void* src; int size, bytes; };
inline bool emu_copies_early = false;
inline thread_local std::vector<EmuCopy> emu_open;
inline thread_local std::vector<std::vector<EmuCopy>> emu_groups;
inline void emu_land(const EmuCopy& c) {
  if (c.bytes > 0) std::memcpy(emu_smem + c.dst, c.src, c.bytes);
  std::memset(emu_smem + c.dst + c.bytes, 0, c.size - c.bytes);
}
inline void emu_cp_async(unsigned dst, const void* src, int size, int bytes) {
  if (dst % size || reinterpret_cast<std::uintptr_t>(src) % size) emu_fail("a misaligned cp.async");
  if (dst + size > emu_smem_bytes) emu_fail("a cp.async past the shared memory");
  if (bytes < 0 || bytes > size) emu_fail("a cp.async source size outside 0..size");
  if (bytes > 0) emu_in_buffer(src, bytes, "a cp.async from outside every buffer");
  const EmuCopy c{dst, src, size, bytes};
  if (emu_copies_early) emu_land(c); else emu_open.push_back(c);
}
inline void emu_commit() { emu_groups.push_back(emu_open); emu_open.clear(); }
inline void emu_wait_group(int n) {
  while (static_cast<int>(emu_groups.size()) > n) {
    for (const auto& c : emu_groups.front()) emu_land(c);
    emu_groups.erase(emu_groups.begin());
  }
}

template <int N> inline void emu_store(void* p, const unsigned (&v)[N]) {
  if (reinterpret_cast<std::uintptr_t>(p) % (4 * N)) emu_fail("a misaligned vector store");
  emu_in_buffer(p, 4 * N, "a vector store outside every buffer");
  std::memcpy(p, v, 4 * N);
}

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __expf(float x) { return std::exp(x); }
// cvt.rn.{bf16x2,f16x2}.f32 d, a, b: a into the upper half, b into the lower
inline unsigned emu_cvt_bf16x2(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(b, a);
  unsigned u; std::memcpy(&u, &h, 4); return u;
}
inline unsigned emu_cvt_f16x2(float a, float b) {
  const __half2 h = __floats2half2_rn(b, a);
  unsigned u; std::memcpy(&u, &h, 4); return u;
}
template <class V> [[noreturn]] V __shfl_xor_sync(unsigned, V, int) { emu_fail("a warp shuffle"); }
template <class V> V __ldcs(const V* p) { return *p; }
template <class V> void __stcs(V* p, V v) { *p = v; }

// a kernel argument: converts to whatever pointer type the kernel's parameter has
struct EmuArg { void* p; template <class U> operator U*() const { return static_cast<U*>(p); } };
"""

MAIN = r"""
int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string dir = argv[1];
  emu_copies_early = argv[2][0] == '1';
  std::vector<std::vector<unsigned char>> bufs;
  for (int i = 0; i < NARGS; ++i) {
    FILE* f = std::fopen((dir + "/arg" + std::to_string(i) + ".bin").c_str(), "rb");
    if (!f) return 2;
    std::fseek(f, 0, SEEK_END);
    const long n = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    bufs.emplace_back(n);
    if (std::fread(bufs.back().data(), 1, n, f) != static_cast<std::size_t>(n)) return 2;
    std::fclose(f);
  }
  for (auto& b : bufs) emu_buffers.push_back({b.data() + GUARD_BYTES, b.size() - 2 * GUARD_BYTES});
  std::vector<unsigned char> smem(SMEM_BYTES + 16);
  emu_smem = smem.data();
  emu_smem_bytes = SMEM_BYTES;
  gridDim = {GRID};
  blockDim = {BLOCK};
  const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
  for (unsigned bz = 0; bz < gridDim.z; ++bz)
  for (unsigned by = 0; by < gridDim.y; ++by)
  for (unsigned bx = 0; bx < gridDim.x; ++bx) {
    std::memset(smem.data(), 0xA5, smem.size());  // poisoned: a read of what no copy wrote shows
    emu_barrier.live = nthreads;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < nthreads; ++t)
      threads.emplace_back([&, bx, by, bz, t] {
        blockIdx = {bx, by, bz};
        threadIdx = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
        KERNEL(ARGS);
        emu_wait_group(0);
        emu_barrier.leave();
      });
    for (auto& th : threads) th.join();
  }
  for (int i = 0; i < NARGS; ++i) {
    FILE* f = std::fopen((dir + "/arg" + std::to_string(i) + ".out").c_str(), "wb");
    if (!f || std::fwrite(bufs[i].data(), 1, bufs[i].size(), f) != bufs[i].size()) return 2;
    std::fclose(f);
  }
  return 0;
}
"""

# PTX statements the emulator knows: pattern over the statement's text (spaces collapsed) -> host call, with {0},
# {1}, ... the operands in PTX's numbering (outputs first)
PTX = [
    (r"cp\.async\.c[ag]\.shared\.global \[%(\d)\], \[%(\d)\], (\d+), %(\d);",
     lambda m, ops: f"emu_cp_async({ops[int(m[1])]}, {ops[int(m[2])]}, {m[3]}, {ops[int(m[4])]})"),
    (r"cp\.async\.c[ag]\.shared\.global \[%(\d)\], \[%(\d)\], (\d+);",
     lambda m, ops: f"emu_cp_async({ops[int(m[1])]}, {ops[int(m[2])]}, {m[3]}, {m[3]})"),
    (r"cp\.async\.commit_group;", lambda m, ops: "emu_commit()"),
    (r"cp\.async\.wait_group %(\d);", lambda m, ops: f"emu_wait_group({ops[int(m[1])]})"),
    (r"cp\.async\.wait_all;", lambda m, ops: "(emu_commit(), emu_wait_group(0))"),
    (r"st\.global(?:\.cs)?\.v([24])\.b32 \[%(\d)\], \{([%\d, ]+)\};",
     lambda m, ops: f"emu_store<{m[1]}>({ops[int(m[2])]}, {{" +
     ", ".join(f"(unsigned)({ops[int(x.strip()[1:])]})" for x in m[3].split(",")) + "})"),
    (r"cvt\.rn\.bf16x2\.f32 %(\d), %(\d), %(\d);",
     lambda m, ops: f"({ops[int(m[1])]} = emu_cvt_bf16x2({ops[int(m[2])]}, {ops[int(m[3])]}))"),
    (r"cvt\.rn\.f16x2\.f32 %(\d), %(\d), %(\d);",
     lambda m, ops: f"({ops[int(m[1])]} = emu_cvt_f16x2({ops[int(m[2])]}, {ops[int(m[3])]}))"),
]


def _balanced(text: str, start: int) -> int:
    """The index just past the parenthesis that closes the one at ``start``, skipping string literals."""
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = text.index('"', i + 1)
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise NotEmulated("an asm statement without its closing parenthesis")


def _split_top(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses and string literals."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            j = text.index('"', i + 1)
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        depth += ch == "("
        depth -= ch == ")"
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    return parts + ["".join(cur)]


def _operand(text: str) -> str:
    m = re.fullmatch(r'\s*"[=+]?[rlfdnh]"\s*\((.*)\)\s*', text, re.S)
    if not m:
        raise NotEmulated(f"an asm operand the emulator does not read: {text.strip()!r}")
    return f"({m[1]})"


def translate_asm(source: str) -> str:
    """Every ``asm [volatile] ("PTX" : outputs : inputs : clobbers);`` of ``source`` as its host call."""
    out, pos = [], 0
    for m in re.finditer(r"\basm\b(\s+volatile)?\s*\(", source):
        if m.start() < pos:
            continue
        end = _balanced(source, m.end() - 1)
        body = source[m.end():end - 1]
        sections = _split_top(body, ":")
        ptx = " ".join("".join(re.findall(r'"((?:[^"\\]|\\.)*)"', sections[0])).split())
        ops = [_operand(o) for sec in sections[1:3] for o in _split_top(sec, ",") if o.strip()]
        for pattern, host in PTX:
            pm = re.fullmatch(pattern, ptx)
            if pm:
                out += [source[pos:m.start()], host(pm, ops)]
                break
        else:
            raise NotEmulated(f"PTX the host emulator does not know: {ptx!r}")
        pos = end
    return "".join(out) + source[pos:]


def shared_arrays(source: str) -> str:
    """The dynamic shared array as a pointer to the block's shared memory; a static one as a function-local static
    (one array for every thread of the block: the blocks run one after another)."""
    source = re.sub(r"extern\s+__shared__\s+(__align__\(\d+\)\s+)?([\w ]+?)\s+(\w+)\[\];",
                    r"\2* \3 = reinterpret_cast<\2*>(emu_smem);", source)
    source = re.sub(r"__shared__\s+(__align__\(\d+\)\s+)?([\w<>,: ]+?\s+\w+(?:\[[^\]]+\])+;)", r"static \1\2", source)
    if "__shared__" in re.sub(r"//[^\n]*", "", source):
        raise NotEmulated("a __shared__ declaration the emulator does not read")
    return source


def host_source(candidate: Candidate, kernel: str, nargs: int, grid: tuple[int, int, int],
                block: tuple[int, int, int], smem: int) -> str:
    src = translate_asm(shared_arrays(candidate.source)).replace('extern "C" __global__', "")
    main = MAIN.replace("NARGS", str(nargs)).replace("GUARD_BYTES", str(GUARD)).replace("SMEM_BYTES", str(smem)) \
        .replace("GRID", ", ".join(f"{g}u" for g in grid)).replace("BLOCK", ", ".join(f"{b}u" for b in block)) \
        .replace("KERNEL", kernel) \
        .replace("ARGS", ", ".join(f"EmuArg{{bufs[{i}].data() + {GUARD}}}" for i in range(nargs)))
    return SHIM + src + main


@dataclass(frozen=True)
class HostRun:
    """What a launch left in each of its buffers (guards stripped), by the plan's argument names."""
    buffers: dict[str, np.ndarray]


def compiler() -> str | None:
    return shutil.which("g++") or shutil.which("c++")


def run_launch(card: OperatorCard, candidate: Candidate, buffers: dict[str, np.ndarray], workdir: Path, *,
               num_sms: int = 2, early_copies: bool = False) -> HostRun:
    """Run the plan's single launch over ``buffers`` (the plan's argument names, "in:NAME" or "out:I", each the
    raw storage as a flat numpy array). Raises AssertionError with the emulator's message where the kernel breaks one
    of its rules, or where it wrote into a guard or an input."""
    (launch,), scratch = resolve_plan(candidate, card.sizes, card.floats, num_sms)
    if scratch or any(kind not in ("in", "out") for kind, _ in launch.args):
        raise NotEmulated("only one launch over inputs and outputs")
    names = [f"{kind}:{payload}" for kind, payload in launch.args]
    source = host_source(candidate, launch.kernel, len(names), launch.grid, launch.block, launch.smem)
    exe = workdir / f"k{hashlib.sha256(source.encode()).hexdigest()[:16]}"
    if not exe.exists():
        cpp = exe.with_suffix(".cpp")
        cpp.write_text(source)
        r = subprocess.run([compiler(), "-std=c++20", "-O1", "-w", "-pthread", f"-I{include_dir()}", str(cpp),
                            "-o", str(exe)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-4000:]
    guard = np.full(GUARD, GUARD_BYTE, np.uint8)
    for i, name in enumerate(names):
        raw = np.ascontiguousarray(buffers[name]).view(np.uint8)
        (workdir / f"arg{i}.bin").write_bytes(np.concatenate([guard, raw, guard]).tobytes())
    r = subprocess.run([str(exe), str(workdir), "1" if early_copies else "0"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"the kernel broke a rule on the host: {r.stderr.strip()[-2000:]}"
    out = {}
    for i, name in enumerate(names):
        got = np.frombuffer((workdir / f"arg{i}.out").read_bytes(), np.uint8)
        assert (got[:GUARD] == GUARD_BYTE).all() and (got[-GUARD:] == GUARD_BYTE).all(), f"{name}: a guard written"
        body = got[GUARD:-GUARD].view(buffers[name].dtype)
        if name.startswith("in:"):
            assert np.array_equal(body.view(np.uint8), np.ascontiguousarray(buffers[name]).view(np.uint8)), \
                f"{name}: an input written"
        out[name] = body
    return HostRun(out)
