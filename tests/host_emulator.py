"""Run a template's generated CUDA kernel on the CPU, for kernels that no GPU has run yet.

The kernel's own source is compiled by the host C++ compiler against the CUDA headers (their 16-bit types and
conversions are host code too), with a shim (a precompiled header) for what only a GPU has:

* every CUDA thread of a block is a fiber of one OS thread, run until it waits at a barrier or ends; a barrier
  (``__syncthreads``, or a warp's for its shuffles and votes) is released once every live thread of its block or
  warp waits there, and one that can never be released (some thread waits elsewhere) fails the run at once. The
  threads run in thread order, and in reverse order on every other run of a HostKernel, so a read of another
  thread's write with no barrier between gives two runs that disagree (the verifier's repeat run) or reads poison.
  The blocks of the grid run one after another, the dynamic shared memory poisoned before each; a static
  ``__shared__`` array is one function-local static array. Atomics are plain read-modify-writes (one OS thread);
* each inline PTX statement is read and replaced by a host call. ``cp.async`` copies keep PTX's rules: a copy is
  only known to have landed after its thread's ``cp.async.wait_group`` allows it, so by default it lands exactly
  then (as late as the rules let it), or as it is issued (``early_copies``); its addresses must be aligned to its
  size and lie in the block's shared memory and in a buffer of the launch. Vector stores must be aligned and lie in
  a buffer. A PTX statement the table below does not know is refused, not guessed;
* every buffer is surrounded by guard bytes that must come back unchanged, and the inputs must too.

What it cannot see: timing, bank conflicts, a wrong ``__launch_bounds__``, and anything between blocks that run at
once (cooperative launches and clusters are refused; a spin wait fails). It checks a kernel's index arithmetic,
its barriers and its copies' bookkeeping; it does not replace the GPU verifier.
"""
from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from forge_backend.cards import OperatorCard
from forge_backend.contract import Candidate, ResolvedLaunch, resolve_plan
from forge_backend.runtime.nvrtc import include_dir
from forge_backend.signature import to_dtype
from forge_backend.verify import VerifyReport, verify

GUARD = 256  # bytes on each side of every buffer
GUARD_BYTE = 0x5A


class NotEmulated(Exception):
    """The kernel uses something the host emulator does not model."""


class TooManyThreads(NotEmulated):
    """The plan's grid holds more CUDA threads than the caller lets the host run (``max_threads``)."""


class EmulatorFault(RuntimeError):
    """A kernel broke one of the emulator's rules (the verifier reports it as a failed launch)."""


SHIM = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <setjmp.h>
#include <ucontext.h>
#include <type_traits>
#include <vector>

#define __launch_bounds__(...)
constexpr std::size_t EMU_STACK = 256 * 1024;  // a thread's stack: its local arrays live there
struct EmuDim { unsigned x = 0, y = 0, z = 0; };
// every CUDA thread of a block is a fiber (its own stack, started by makecontext, then switched by _setjmp and
// _longjmp, which keep the signal mask alone: swapcontext's system call each switch doubled the run) of one OS
// thread; a fiber runs until it
// waits at a barrier or ends, and the scheduler (emu_launch) releases a barrier once every live thread of its scope
// waits there
struct EmuCopy { unsigned dst; const void* src; int size, bytes; };
enum EmuState { EMU_READY, EMU_AT_BLOCK, EMU_AT_WARP, EMU_DONE };
struct EmuFiber {
  ucontext_t ctx;  // to start it
  jmp_buf jb;      // where it waits
  bool started = false;
  std::unique_ptr<char[]> stack;  // left uninitialised: only what a thread uses is touched
  EmuDim tid;
  unsigned lane = 0, warp = 0;
  EmuState state = EMU_READY;
  std::vector<EmuCopy> open;                 // cp.async copies not yet committed
  std::vector<std::vector<EmuCopy>> groups;  // committed, not yet waited for
};
inline EmuFiber* emu_cur = nullptr;
inline jmp_buf emu_scheduler_jb;
inline void emu_to_scheduler() {  // the current fiber waits; the scheduler goes on
  if (!_setjmp(emu_cur->jb)) _longjmp(emu_scheduler_jb, 1);
}
#define threadIdx (emu_cur->tid)
inline EmuDim blockIdx, gridDim, blockDim;

[[noreturn]] inline void emu_fail(const char* what) {
  const EmuDim t = emu_cur ? emu_cur->tid : EmuDim{};
  std::fprintf(stderr, "emulator: %s (block %u %u %u, thread %u %u %u)\n", what, blockIdx.x, blockIdx.y, blockIdx.z,
               t.x, t.y, t.z);
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

inline void emu_wait_at(EmuState where) {
  emu_cur->state = where;
  emu_to_scheduler();
}
inline void __syncthreads() { emu_wait_at(EMU_AT_BLOCK); }

// cp.async: a thread's copies land, at the latest, when its wait_group allows (Note in host_emulator.py)
inline bool emu_copies_early = false;
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
  if (emu_copies_early) emu_land(c); else emu_cur->open.push_back(c);
}
inline void emu_commit() { emu_cur->groups.push_back(emu_cur->open); emu_cur->open.clear(); }
inline void emu_wait_group(int n) {
  auto& groups = emu_cur->groups;
  while (static_cast<int>(groups.size()) > n) {
    for (const auto& c : groups.front()) emu_land(c);
    groups.erase(groups.begin());
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
// the device's math functions and cache-hinted loads and stores, on the host
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __exp2f(float x) { return std::exp2(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : x > 1.f ? 1.f : x; }
inline float __tanhf(float x) { return std::tanh(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
template <class A, class B> std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <class A, class B> std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
// cvt.rn.{bf16x2,f16x2}.f32 d, a, b: a into the upper half, b into the lower
inline unsigned emu_cvt_bf16x2(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(b, a);
  unsigned u; std::memcpy(&u, &h, 4); return u;
}
inline unsigned emu_cvt_f16x2(float a, float b) {
  const __half2 h = __floats2half2_rn(b, a);
  unsigned u; std::memcpy(&u, &h, 4); return u;
}
// a warp's lanes exchange values through the warp's slots, between two of the warp's barriers; every lane of the
// warp must take part (the templates pass the full mask, as they must where every lane calls)
struct EmuWarp { unsigned char slot[32][32]; };
inline EmuWarp* emu_warps = nullptr;
template <class V> V emu_from_lane(unsigned mask, V v, unsigned src) {
  static_assert(sizeof(V) <= 32, "a value of more than 32 bytes");
  if (mask != 0xffffffffu) emu_fail("a warp intrinsic with a partial mask");
  EmuWarp& w = emu_warps[emu_cur->warp];
  std::memcpy(w.slot[emu_cur->lane], &v, sizeof(V));
  emu_wait_at(EMU_AT_WARP);
  V r;
  std::memcpy(&r, w.slot[src], sizeof(V));
  emu_wait_at(EMU_AT_WARP);
  return r;
}
template <class V> V __shfl_sync(unsigned mask, V v, int src, int width = 32) {
  return emu_from_lane(mask, v, (emu_cur->lane & ~(width - 1)) + (src & (width - 1)));
}
template <class V> V __shfl_xor_sync(unsigned mask, V v, int lane_mask, int width = 32) {
  const unsigned src = emu_cur->lane ^ lane_mask;
  return emu_from_lane(mask, v, (src & ~(width - 1)) == (emu_cur->lane & ~(width - 1)) ? src : emu_cur->lane);
}
template <class V> V __shfl_down_sync(unsigned mask, V v, unsigned delta, int width = 32) {
  const unsigned lane = emu_cur->lane;
  return emu_from_lane(mask, v, (lane & (width - 1)) + delta < static_cast<unsigned>(width) ? lane + delta : lane);
}
template <class V> V __shfl_up_sync(unsigned mask, V v, unsigned delta, int width = 32) {
  return emu_from_lane(mask, v, (emu_cur->lane & (width - 1)) >= delta ? emu_cur->lane - delta : emu_cur->lane);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  if (mask != 0xffffffffu) emu_fail("a warp intrinsic with a partial mask");
  EmuWarp& w = emu_warps[emu_cur->warp];
  w.slot[emu_cur->lane][0] = pred != 0;
  emu_wait_at(EMU_AT_WARP);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l) bits |= static_cast<unsigned>(w.slot[l][0]) << l;
  emu_wait_at(EMU_AT_WARP);
  return bits;
}
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == 0xffffffffu; }
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0u; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_from_lane(mask, 0, emu_cur->lane); }

// atomics: plain read-modify-writes (every thread of the launch is a fiber of one OS thread)
#define EMU_ATOMIC(name, update) \
  template <class V, class W> V name(V* p, W v) { V o = *p; update; return o; }
EMU_ATOMIC(atomicAdd, *p = o + v)
EMU_ATOMIC(atomicMax, if (v > o) *p = v)
EMU_ATOMIC(atomicMin, if (v < o) *p = v)
EMU_ATOMIC(atomicExch, *p = v)
template <class V, class W> V atomicCAS(V* p, W c, W v) {
  V o = *p;
  if (o == c) *p = v;
  return o;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __nanosleep(unsigned) { emu_fail("a spin wait (the block's other threads run only at its barriers)"); }
template <class V> V __ldg(const V* p) { return *p; }
template <class V> V __ldcg(const V* p) { return *p; }
template <class V> V __ldca(const V* p) { return *p; }
template <class V> V __ldlu(const V* p) { return *p; }
template <class V> V __ldcv(const V* p) { return *p; }
template <class V> V __ldcs(const V* p) { return *p; }
template <class V> void __stcg(V* p, V v) { *p = v; }
template <class V> void __stwb(V* p, V v) { *p = v; }
template <class V> void __stwt(V* p, V v) { *p = v; }
template <class V> void __stcs(V* p, V v) { *p = v; }

// a kernel argument: converts to whatever pointer type the kernel's parameter has
struct EmuArg { void* p; template <class U> operator U*() const { return static_cast<U*>(p); } };
"""

MAIN = r"""
// a launch: the blocks one after another; a block's threads as fibers, run in thread order (or the reverse, so
// that a read of what another thread writes without a barrier between shows one way or the other)
inline bool emu_reverse = false;
inline std::function<void()>* emu_body = nullptr;
inline void emu_fiber_main() {
  (*emu_body)();
  emu_wait_group(0);
  emu_cur->state = EMU_DONE;
  _longjmp(emu_scheduler_jb, 1);  // never comes back: the fiber is made again for the next block
}

inline void emu_launch(EmuDim grid, EmuDim block, std::size_t smem_bytes, std::function<void()> body) {
  std::vector<unsigned char> smem(smem_bytes + 16);
  emu_smem = smem.data();
  emu_smem_bytes = smem_bytes;
  emu_body = &body;
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z, nwarps = (n + 31) / 32;
  std::vector<EmuWarp> warps(nwarps);
  emu_warps = warps.data();
  std::vector<EmuFiber> fibers(n);
  for (unsigned t = 0; t < n; ++t) {
    fibers[t].stack.reset(new char[EMU_STACK]);
    fibers[t].tid = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
    fibers[t].lane = t % 32;
    fibers[t].warp = t / 32;
  }
  for (unsigned bz = 0; bz < grid.z; ++bz)
  for (unsigned by = 0; by < grid.y; ++by)
  for (unsigned bx = 0; bx < grid.x; ++bx) {
    blockIdx = {bx, by, bz};
    std::memset(smem.data(), 0xA5, smem.size());  // poisoned: a read of what no copy wrote shows
    for (auto& f : fibers) {
      f.state = EMU_READY;
      f.open.clear();
      f.groups.clear();
      f.started = false;
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.get();
      f.ctx.uc_stack.ss_size = EMU_STACK;
      f.ctx.uc_link = nullptr;
      makecontext(&f.ctx, emu_fiber_main, 0);
    }
    for (;;) {
      for (unsigned i = 0; i < n; ++i) {
        EmuFiber& f = fibers[emu_reverse ? n - 1 - i : i];
        if (f.state != EMU_READY) continue;
        emu_cur = &f;
        if (!_setjmp(emu_scheduler_jb)) {
          if (f.started) _longjmp(f.jb, 1);
          f.started = true;
          setcontext(&f.ctx);
        }
      }
      emu_cur = nullptr;
      // every thread now waits at a barrier or has ended: release a warp whose live lanes all wait at its barrier,
      // else the block if all its live threads wait at __syncthreads
      bool released = false, live = false;
      for (unsigned w = 0; w < nwarps; ++w) {
        bool all = true, any = false;
        for (unsigned t = 32 * w; t < std::min(n, 32 * w + 32); ++t) {
          if (fibers[t].state == EMU_DONE) continue;
          any = true;
          all = all && fibers[t].state == EMU_AT_WARP;
        }
        live = live || any;
        if (any && all) {
          for (unsigned t = 32 * w; t < std::min(n, 32 * w + 32); ++t)
            if (fibers[t].state == EMU_AT_WARP) fibers[t].state = EMU_READY;
          released = true;
        }
      }
      if (!live) break;
      if (released) continue;
      bool all_block = true;
      for (auto& f : fibers) all_block = all_block && (f.state == EMU_DONE || f.state == EMU_AT_BLOCK);
      if (!all_block) emu_fail("a barrier that not every live thread of its warp or block reached");
      for (auto& f : fibers)
        if (f.state == EMU_AT_BLOCK) f.state = EMU_READY;
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string dir = argv[1];
  emu_copies_early = argv[2][0] == '1';
  emu_reverse = argv[2][1] == '1';
  std::vector<std::vector<unsigned char>> bufs;
  for (int i = 0; i < NBUFS; ++i) {
    FILE* f = std::fopen((dir + "/buf" + std::to_string(i) + ".bin").c_str(), "rb");
    if (!f) return 2;
    std::fseek(f, 0, SEEK_END);
    const long n = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    bufs.emplace_back(n);
    if (std::fread(bufs.back().data(), 1, n, f) != static_cast<std::size_t>(n)) return 2;
    std::fclose(f);
  }
  for (auto& b : bufs) emu_buffers.push_back({b.data() + GUARD_BYTES, b.size() - 2 * GUARD_BYTES});
LAUNCHES
  for (int i = 0; i < NBUFS; ++i) {
    FILE* f = std::fopen((dir + "/buf" + std::to_string(i) + ".out").c_str(), "wb");
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
    if re.search(r"extern\s+__shared__", source):
        raise NotEmulated("a dynamic __shared__ declaration the emulator does not read")
    return re.sub(r"\b__shared__\b", "static", source)


def _scalar(kind: str, value) -> str:
    if kind == "f32":
        return "(float)" + ("INFINITY" if value == float("inf") else "-INFINITY" if value == float("-inf")
                            else "NAN" if value != value else repr(float(value)))
    return f"(int){value}" if kind == "i32" else f"(long long){value}LL"


def host_source(candidate: Candidate, launches: tuple[ResolvedLaunch, ...], buffers: list[str]) -> str:
    """The candidate's source made host code, and a main that runs ``launches`` in order over ``buffers`` (names as
    the plan's arguments give them: "in:NAME", "out:I", "scratch:NAME"), read from and written back to files."""
    src = translate_asm(shared_arrays(candidate.source)).replace('extern "C" __global__', "")
    if re.search(r"cooperative_groups|__cluster_dims__", src):
        raise NotEmulated("thread-block clusters or cooperative groups")
    calls = []
    for l in launches:
        args = [f"EmuArg{{bufs[{buffers.index(f'{kind}:{payload}')}].data() + {GUARD}}}"
                if kind in ("in", "out", "scratch") else _scalar(kind, payload) for kind, payload in l.args]
        grid, block = ", ".join(f"{g}u" for g in l.grid), ", ".join(f"{b}u" for b in l.block)
        calls.append(f"  emu_launch({{{grid}}}, {{{block}}}, {l.smem}, [&] {{ {l.kernel}({', '.join(args)}); }});")
    return src + MAIN.replace("NBUFS", str(len(buffers))).replace("GUARD_BYTES", str(GUARD)) \
        .replace("LAUNCHES", "\n".join(calls))


def compiler() -> str | None:
    return shutil.which("g++") or shutil.which("c++")


FLAGS = ("-std=c++20", "-O1", "-w", "-U_FORTIFY_SOURCE")  # no __longjmp_chk: the fibers jump between stacks


def shim_header() -> Path:
    """SHIM as a precompiled header, built once per machine (by the hash of its text, the flags and the compiler):
    the CUDA headers take most of a kernel's compile time."""
    tag = hashlib.sha256("\0".join((SHIM, *FLAGS, include_dir(), compiler())).encode()).hexdigest()[:16]
    home = Path(tempfile.gettempdir()) / f"kforge-host-emulator-{tag}"
    header = home / "shim.h"
    if not (home / "shim.h.gch").exists():
        home.mkdir(parents=True, exist_ok=True)
        header.write_text(SHIM)
        part = home / f"shim.h.gch.{os.getpid()}"
        r = subprocess.run([compiler(), *FLAGS, f"-I{include_dir()}", "-x", "c++-header", str(header), "-o",
                            str(part)], capture_output=True, text=True)
        if r.returncode:
            raise NotEmulated(f"the host compiler refused the shim: {r.stderr[-3000:]}")
        os.replace(part, home / "shim.h.gch")
    return header


class HostKernel:
    """A candidate's plan for one card, run on the host: ``launch_into`` and ``allocate_outputs`` as the GPU
    launcher has them (runtime/launch.py), so the project's verifier can take it on CPU tensors, and ``run`` over raw
    numpy buffers. A launch that breaks one of the emulator's rules raises EmulatorFault with what broke."""

    def __init__(self, card: OperatorCard, candidate: Candidate, workdir: Path, *, num_sms: int = 2,
                 early_copies: bool = False, max_threads: int | None = None):
        self.card, self.workdir, self.early = card, Path(workdir), early_copies
        self.launches, scratch = resolve_plan(candidate, card.sizes, card.floats, num_sms)
        if any(l.cooperative for l in self.launches):
            raise NotEmulated("a cooperative launch (its blocks wait for each other; here they run one at a time)")
        threads = sum(math.prod(l.grid) * math.prod(l.block) for l in self.launches)
        if max_threads is not None and threads > max_threads:
            raise TooManyThreads(f"{threads} CUDA threads, more than {max_threads} for the host")
        self.scratch = {f"scratch:{s.name}": s for s in scratch}
        used = {f"{kind}:{payload}" for l in self.launches for kind, payload in l.args if kind in ("in", "out")}
        self.buffers = [f"in:{t.name}" for t in card.inputs if f"in:{t.name}" in used] + \
            [f"out:{t.name.removeprefix('out')}" for t in card.outputs] + list(self.scratch)
        self.source = host_source(candidate, self.launches, self.buffers)
        self.kept: dict[str, np.ndarray] = {}  # persistent scratch between launches
        self.runs = 0
        self.exe = self.workdir / f"k{hashlib.sha256((SHIM + self.source).encode()).hexdigest()[:16]}"

    def compile(self) -> None:
        """Build the host program once (by its source's hash); NotEmulated where the host compiler refuses it."""
        if self.exe.exists():
            return
        header = shim_header()
        cpp = self.exe.with_suffix(".cpp")
        cpp.write_text(self.source)
        r = subprocess.run([compiler(), *FLAGS, f"-I{include_dir()}", "-include", str(header), str(cpp),
                            "-o", str(self.exe)], capture_output=True, text=True)
        if r.returncode:
            raise NotEmulated(f"the host compiler refused the kernel: {r.stderr[-3000:]}")

    def run(self, buffers: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every launch over ``buffers`` (in: and out: names, each the raw storage as a flat numpy array; scratch
        comes from the plan). Returns what each buffer holds after (guards stripped)."""
        self.compile()
        bufs = dict(buffers)
        for name, s in self.scratch.items():
            if s.persist and name in self.kept:
                bufs[name] = self.kept[name]
            else:
                bufs[name] = np.full(s.nbytes, 0 if s.zero else 0xA5, np.uint8)
        guard = np.full(GUARD, GUARD_BYTE, np.uint8)
        for i, name in enumerate(self.buffers):
            raw = np.ascontiguousarray(bufs[name]).view(np.uint8)
            (self.workdir / f"buf{i}.bin").write_bytes(np.concatenate([guard, raw, guard]).tobytes())
        mode = f"{int(self.early)}{self.runs % 2}"  # every other run takes the block's threads in reverse order
        self.runs += 1
        r = subprocess.run([str(self.exe), str(self.workdir), mode], capture_output=True, text=True, timeout=300)
        if r.returncode:
            raise EmulatorFault(f"the kernel broke a rule on the host: {r.stderr.strip()[-2000:]}")
        out = {}
        for i, name in enumerate(self.buffers):
            got = np.frombuffer((self.workdir / f"buf{i}.out").read_bytes(), np.uint8)
            if not ((got[:GUARD] == GUARD_BYTE).all() and (got[-GUARD:] == GUARD_BYTE).all()):
                raise EmulatorFault(f"{name}: a guard written (a store outside the buffer)")
            body = got[GUARD:-GUARD].view(bufs[name].dtype)
            if name.startswith("in:") and not np.array_equal(got[GUARD:-GUARD],
                                                              np.ascontiguousarray(bufs[name]).view(np.uint8)):
                raise EmulatorFault(f"{name}: an input written")
            if name in self.scratch and self.scratch[name].persist:
                self.kept[name] = body.copy()
            out[name] = body
        return out

    # the launcher's interface, for verify() on CPU tensors
    def allocate_outputs(self) -> list[torch.Tensor]:
        return [torch.empty_strided(t.spec.shape, t.spec.stride, dtype=to_dtype(t.spec.dtype))
                for t in self.card.outputs]

    def launch_into(self, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        named = {f"in:{t.name}": x for t, x in zip(self.card.inputs, inputs)} | \
            {f"out:{t.name.removeprefix('out')}": o for t, o in zip(self.card.outputs, outputs)}
        got = self.run({name: _span(named[name]).numpy() for name in self.buffers if name in named})
        for t, o in zip(self.card.outputs, outputs):
            _span(o).copy_(torch.from_numpy(got[f"out:{t.name.removeprefix('out')}"].copy()))


def _span(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t``'s storage span (from its first element to its last), as a uint8 view."""
    n = 1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride())) if t.numel() else 0
    return t.as_strided((n,), (1,), t.storage_offset()).view(torch.uint8)


def verify_on_host(card: OperatorCard, candidate: Candidate, workdir: Path, trials=None, **kernel) -> VerifyReport:
    """The project's verifier (every trial, or ``trials``) over ``candidate`` run on the host; ``kernel`` goes to
    HostKernel. NotEmulated (before any run) where the emulator cannot take it."""
    host = HostKernel(card, candidate, workdir, **kernel)
    host.compile()
    return verify(card, host.launch_into, host.allocate_outputs, torch.device("cpu"), trials)
