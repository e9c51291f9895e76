"""Run a template's generated CUDA kernel on the CPU, for kernels that no GPU has run yet.

The kernel's own source is compiled by the host C++ compiler against the CUDA headers (their 16-bit types and
conversions are host code too), with a shim (a precompiled header) for what only a GPU has:

* every CUDA thread is a fiber of one OS thread, run until it waits at a barrier, polls, or ends; a barrier
  (``__syncthreads``, or a warp's for its shuffles and votes) is released once every live thread of its block or
  warp waits there, and one that can never be released (some thread of the block waits elsewhere) fails the run at
  once. The threads run in thread order, and in reverse order on every other run of a HostKernel, so a read of
  another thread's write with no barrier between gives two runs that disagree (the verifier's repeat run) or reads
  poison. Atomics are plain read-modify-writes (one OS thread);
* the blocks of a launch run one cluster at a time (one block where the kernel declares no cluster shape), or all at
  once where they wait for each other: a cooperative launch, or a kernel that polls (an mbarrier's ``try_wait``, a
  relaxed or acquire load, a loop with an empty body). Every block has its own shared memory, poisoned as it starts
  and again as it ends (so a cluster peer read after its owner left reads poison), its static ``__shared__`` objects
  at one offset in every block. A poll lets every other thread run once before it looks again; a run in which the
  threads only poll and wait for many rounds, and nothing changes, fails: a wait that nothing can end;
* each inline PTX statement is read and replaced by a host call. ``cp.async`` copies keep PTX's rules: a copy is
  only known to have landed after its thread's ``cp.async.wait_group`` allows it, so by default it lands exactly
  then (as late as the rules let it), or as it is issued (``early_copies``); its addresses must be aligned to its
  size and lie in the block's shared memory and in a buffer of the launch. A bulk copy counted on an mbarrier lands
  as issued (``early_copies``) or once a round of the scheduler has done nothing else, one copy of a block at a time,
  oldest first (newest first in the reverse order). An mbarrier completes a phase once its arrivals and its bytes are
  in; one used before its init, arrived on too often, or with its bytes written over fails the run, and a thread
  whose arrival completes a phase lets the block's other threads run before its own warp goes on. Vector stores
  must be aligned and lie in a buffer. A PTX statement the table below does not know is refused, not guessed;
* every buffer is surrounded by guard bytes that must come back unchanged, and the inputs must too.

What it cannot see: timing, bank conflicts, a wrong ``__launch_bounds__``, and the memory model (every write is seen
at once by every thread: a missing fence or a relaxed access where an acquire is needed does not show). It checks a
kernel's index arithmetic, its barriers, its pipelines' bookkeeping and its blocks' protocols; it does not replace
the GPU verifier.
"""
from __future__ import annotations

import hashlib
import itertools
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
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <sys/mman.h>
#include <ucontext.h>
#include <type_traits>
#include <utility>
#include <vector>

#define __launch_bounds__(...)
constexpr std::size_t EMU_STACK = 64 * 1024;   // a thread's stack: its local arrays live there
constexpr std::size_t EMU_STATIC = 48 * 1024;  // a block's static __shared__ objects; its dynamic shared memory follows
constexpr unsigned EMU_IDLE_LIMIT = 20000;     // scheduler rounds of polls with nothing done: a wait nothing can end
struct EmuDim { unsigned x = 0, y = 0, z = 0; };
// every CUDA thread of the blocks that run at once is a fiber (its own stack, started by makecontext, then switched
// by GCC's __builtin_setjmp and __builtin_longjmp: swapcontext's system call each switch doubled the run, and libc's
// _longjmp's cleanup walk cost a third of a shuffle-heavy one) of one OS thread; a fiber runs until it waits at a
// barrier, polls, or ends, and the scheduler (emu_run) releases a barrier once every live thread of its scope waits
// there
// a switch: GCC's own setjmp and longjmp (a frame, a stack pointer and a label), the longjmp in a function of its
// own, as GCC asks
struct EmuJmp { void* b[5]; };
[[noreturn]] __attribute__((noinline)) inline void emu_jump(EmuJmp& j) { __builtin_longjmp(j.b, 1); }
struct EmuCopy { unsigned dst; const void* src; int size, bytes; };
enum EmuState { EMU_READY, EMU_POLL, EMU_AT_BLOCK, EMU_AT_WARP, EMU_DONE };
struct EmuWarp { unsigned char slot[2][32][32]; };  // two sets: a warp operation takes one barrier
struct EmuMbar { unsigned count, pending, phase; long long tx; };  // an mbarrier: arrivals and bytes still owed
struct EmuCluster { unsigned size = 1, live = 0, arrived = 0, phase = 0; };
struct EmuBlock {
  EmuDim idx;
  unsigned char* smem = nullptr;  // EMU_STATIC bytes of static __shared__ objects, then the dynamic shared memory
  std::size_t smem_bytes = 0;
  std::vector<EmuWarp> warps;
  std::map<unsigned, EmuMbar> mbars;  // by shared address
  EmuCluster* cluster = nullptr;
  EmuBlock** peers = nullptr;  // the blocks of its cluster, by rank
  unsigned live = 0;           // threads not ended
};
struct EmuFiber {
  ucontext_t ctx;  // to start it
  EmuJmp jb;       // where it waits
  bool started = false;
  char* stack = nullptr;  // left uninitialised: only what a thread uses is touched
  EmuDim tid;
  unsigned lane = 0, warp = 0;
  unsigned warp_ops = 0;  // the warp operations it has taken part in: the slot set of the next is warp_ops % 2
  EmuBlock* blk = nullptr;
  EmuState state = EMU_READY;
  unsigned cl_target = 0;                    // the cluster barrier phase its arrive waits for (0: none)
  std::vector<EmuCopy> open;                 // cp.async copies not yet committed
  std::vector<std::vector<EmuCopy>> groups;  // committed, not yet waited for
};
inline EmuFiber* emu_cur = nullptr;
inline EmuJmp emu_scheduler_jb;
inline unsigned long long emu_work = 0;  // what a poll may wait for: arrivals, flags, atomics, copies landed, ends
inline void emu_to_scheduler() {  // the current fiber waits; the scheduler goes on
  if (!__builtin_setjmp(emu_cur->jb.b)) emu_jump(emu_scheduler_jb);
}
#define threadIdx (emu_cur->tid)
#define blockIdx (emu_cur->blk->idx)
inline EmuDim gridDim, blockDim;

[[noreturn]] inline void emu_fail(const char* what) {
  const EmuDim t = emu_cur ? emu_cur->tid : EmuDim{}, b = emu_cur ? emu_cur->blk->idx : EmuDim{};
  std::fprintf(stderr, "emulator: %s (block %u %u %u, thread %u %u %u)\n", what, b.x, b.y, b.z, t.x, t.y, t.z);
  std::fflush(stderr);
  std::_Exit(3);
}
[[noreturn]] inline void __trap() { emu_fail("__trap()"); }

// the launch's buffers, for the bounds of vector accesses
struct EmuBuffer { unsigned char* p; std::size_t n; };
inline std::vector<EmuBuffer> emu_buffers;
inline void emu_in_buffer(const void* p, std::size_t n, const char* what) {
  auto a = static_cast<const unsigned char*>(p);
  for (const auto& b : emu_buffers) if (a >= b.p && a + n <= b.p + b.n) return;
  emu_fail(what);
}

// the current thread's block's shared memory: a 32-bit shared address is an offset into it
inline unsigned char* emu_smem() { return emu_cur->blk->smem; }
inline std::size_t emu_smem_bytes() { return emu_cur->blk->smem_bytes; }
inline unsigned __cvta_generic_to_shared(const void* p) {
  auto a = static_cast<const unsigned char*>(p);
  if (a < emu_smem() || a > emu_smem() + emu_smem_bytes())
    emu_fail("__cvta_generic_to_shared outside the shared memory");
  return static_cast<unsigned>(a - emu_smem());
}
inline unsigned char* emu_dynamic_smem() { return emu_smem() + EMU_STATIC; }
// a static __shared__ object: at one offset (given at its first use) of every block's first EMU_STATIC bytes
inline std::size_t emu_static_top = 0;
inline std::size_t emu_static_alloc(std::size_t size, std::size_t align) {
  const std::size_t off = (emu_static_top + align - 1) / align * align;
  if (off + size > EMU_STATIC) emu_fail("static __shared__ objects of more than 48 KB");
  emu_static_top = off + size;
  return off;
}
template <class T, std::size_t A, int ID> T& emu_static_shared() {
  static const std::size_t off = emu_static_alloc(sizeof(T), A > alignof(T) ? A : alignof(T));
  return *reinterpret_cast<T*>(emu_smem() + off);
}

inline void emu_wait_at(EmuState where) {
  emu_cur->state = where;
  emu_to_scheduler();
}
inline void __syncthreads() { emu_wait_at(EMU_AT_BLOCK); }
// a spin wait's turn: the thread lets every other thread run once before it looks again
inline void emu_poll() { emu_wait_at(EMU_POLL); }
inline void __nanosleep(unsigned) { emu_poll(); }

// cp.async: a thread's copies land, at the latest, when its wait_group allows (Note in host_emulator.py)
inline bool emu_copies_early = false;
inline void emu_land(const EmuCopy& c) {
  if (c.bytes > 0) std::memcpy(emu_smem() + c.dst, c.src, c.bytes);
  std::memset(emu_smem() + c.dst + c.bytes, 0, c.size - c.bytes);
}
inline void emu_cp_async(unsigned dst, const void* src, int size, int bytes) {
  if (dst % size || reinterpret_cast<std::uintptr_t>(src) % size) emu_fail("a misaligned cp.async");
  if (dst + size > emu_smem_bytes()) emu_fail("a cp.async past the shared memory");
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

// mbarriers: the state sits beside the block (its 8 bytes hold a mark, so data written over one shows); a phase
// completes once its arrivals are all in and every byte it expects has landed
constexpr unsigned long long EMU_MBAR_MARK = 0x6D62617272696572ull;
inline EmuMbar& emu_mbar(EmuBlock* b, unsigned addr) {
  auto it = b->mbars.find(addr);
  if (it == b->mbars.end()) emu_fail("an mbarrier used before its init");
  unsigned long long v;
  std::memcpy(&v, b->smem + addr, 8);
  if (v != (EMU_MBAR_MARK ^ addr)) emu_fail("an mbarrier's bytes written over");
  return it->second;
}
inline void emu_mbar_step(EmuMbar& m) {
  if (m.pending == 0 && m.tx == 0) { ++m.phase; m.pending = m.count; }
}
inline void emu_mbar_init(unsigned addr, unsigned count) {
  if (addr % 8 || addr + 8 > emu_smem_bytes()) emu_fail("an mbarrier misaligned or outside the shared memory");
  if (count == 0 || count >= (1u << 20)) emu_fail("an mbarrier count outside 1..2^20-1");
  emu_cur->blk->mbars[addr] = EmuMbar{count, count, 0, 0};
  const unsigned long long v = EMU_MBAR_MARK ^ addr;
  std::memcpy(emu_smem() + addr, &v, 8);
  ++emu_work;
}
// a thread whose arrival completes a phase lets the scheduler take its block's round again from the block's first
// thread (emu_run), so a thread that waits on that phase runs before the arriving thread's warp goes on: an arrival
// before the warp is done with what the phase hands over shows
inline bool emu_restart = false;
inline void emu_mbar_arrive(unsigned addr, unsigned bytes = 0) {
  EmuMbar& m = emu_mbar(emu_cur->blk, addr);
  if (m.pending == 0) emu_fail("an mbarrier arrived on more times than its count in one phase");
  const unsigned phase = m.phase;
  m.tx += bytes;
  --m.pending;
  emu_mbar_step(m);
  ++emu_work;
  if (m.phase != phase) {
    emu_restart = true;
    emu_wait_at(EMU_READY);
  }
}
inline unsigned emu_mbar_done(unsigned addr, unsigned parity) {
  return (emu_mbar(emu_cur->blk, addr).phase & 1u) != (parity & 1u);
}
inline unsigned emu_mbar_try_wait(unsigned addr, unsigned parity) {  // a failed try lets the others run first
  if (emu_mbar_done(addr, parity)) return 1;
  emu_poll();
  return emu_mbar_done(addr, parity);
}
// cp.async.bulk into this block's shared memory, counted on an mbarrier: it lands as it is issued (early copies) or
// once nothing else can happen (emu_run), one copy of a block at a time, oldest first or newest first
struct EmuBulk { EmuBlock* blk; unsigned dst, bar, bytes; const void* src; };
inline std::vector<EmuBulk> emu_bulk;
inline void emu_bulk_land(const EmuBulk& c) {
  std::memcpy(c.blk->smem + c.dst, c.src, c.bytes);
  EmuMbar& m = emu_mbar(c.blk, c.bar);
  m.tx -= c.bytes;
  emu_mbar_step(m);
  ++emu_work;
}
inline void emu_cp_bulk(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  if (dst % 16 || reinterpret_cast<std::uintptr_t>(src) % 16 || bytes % 16 || bytes == 0)
    emu_fail("a bulk copy misaligned or not a multiple of 16 bytes");
  if (dst + bytes > emu_smem_bytes()) emu_fail("a bulk copy past the shared memory");
  emu_in_buffer(src, bytes, "a bulk copy from outside every buffer");
  emu_mbar(emu_cur->blk, bar);
  const EmuBulk c{emu_cur->blk, dst, bar, bytes, src};
  if (emu_copies_early) emu_bulk_land(c); else emu_bulk.push_back(c);
}

// loads that poll and stores that publish, in global memory
template <class V> V emu_poll_load(const void* p) {
  if (reinterpret_cast<std::uintptr_t>(p) % sizeof(V)) emu_fail("a misaligned polling load");
  emu_in_buffer(p, sizeof(V), "a polling load outside every buffer");
  emu_poll();
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V> void emu_flag_store(void* p, V v) {
  if (reinterpret_cast<std::uintptr_t>(p) % sizeof(V)) emu_fail("a misaligned flag store");
  emu_in_buffer(p, sizeof(V), "a flag store outside every buffer");
  std::memcpy(p, &v, sizeof(V));
  ++emu_work;
}
inline void emu_load_v4(const void* p, unsigned& a, unsigned& b, unsigned& c, unsigned& d) {
  if (reinterpret_cast<std::uintptr_t>(p) % 16) emu_fail("a misaligned vector load");
  emu_in_buffer(p, 16, "a vector load outside every buffer");
  unsigned v[4];
  std::memcpy(v, p, 16);
  a = v[0], b = v[1], c = v[2], d = v[3];
}

template <int N> inline void emu_store(void* p, const unsigned (&v)[N]) {
  if (reinterpret_cast<std::uintptr_t>(p) % (4 * N)) emu_fail("a misaligned vector store");
  emu_in_buffer(p, 4 * N, "a vector store outside every buffer");
  std::memcpy(p, v, 4 * N);
}

// thread-block clusters: a split barrier over the cluster's live threads, and a peer block's shared memory
inline void emu_cluster_step(EmuCluster* c) {
  if (c->arrived > 0 && c->arrived == c->live) { ++c->phase; c->arrived = 0; }
}
inline void __cluster_barrier_arrive() {
  EmuCluster* c = emu_cur->blk->cluster;
  if (emu_cur->cl_target) emu_fail("a cluster barrier arrived on twice without a wait");
  emu_cur->cl_target = c->phase + 1;
  ++c->arrived;
  emu_cluster_step(c);
  ++emu_work;
}
inline void __cluster_barrier_wait() {
  EmuCluster* c = emu_cur->blk->cluster;
  if (!emu_cur->cl_target) emu_fail("a cluster barrier waited on without an arrive");
  while (c->phase < emu_cur->cl_target) emu_poll();
  emu_cur->cl_target = 0;
}
template <class T> T* __cluster_map_shared_rank(T* p, unsigned rank) {
  EmuBlock* b = emu_cur->blk;
  if (rank >= b->cluster->size) emu_fail("a cluster rank outside the cluster");
  auto a = reinterpret_cast<const unsigned char*>(p);
  if (a < b->smem || a >= b->smem + b->smem_bytes) emu_fail("__cluster_map_shared_rank outside the shared memory");
  return reinterpret_cast<T*>(b->peers[rank]->smem + (a - b->smem));
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
// mul.rn.{bf16x2,f16x2}: each half's product is exact in float, then rounded once, as the device rounds it
inline unsigned emu_mul_bf16x2(unsigned a, unsigned b) {
  __nv_bfloat162 x, y; std::memcpy(&x, &a, 4); std::memcpy(&y, &b, 4);
  return emu_cvt_bf16x2(__high2float(x) * __high2float(y), __low2float(x) * __low2float(y));
}
inline unsigned emu_mul_f16x2(unsigned a, unsigned b) {
  __half2 x, y; std::memcpy(&x, &a, 4); std::memcpy(&y, &b, 4);
  return emu_cvt_f16x2(__high2float(x) * __high2float(y), __low2float(x) * __low2float(y));
}
// a warp's lanes exchange values through the warp's slots across one of the warp's barriers; every lane of the
// warp must take part (the templates pass the full mask, as they must where every lane calls). Successive operations
// take the two slot sets in turn: a lane that writes the next operation's slots cannot pass its barrier before every
// lane has read this one's
template <class V> V emu_from_lane(unsigned mask, V v, unsigned src) {
  static_assert(sizeof(V) <= 32, "a value of more than 32 bytes");
  if (mask != 0xffffffffu) emu_fail("a warp intrinsic with a partial mask");
  auto& slot = emu_cur->blk->warps[emu_cur->warp].slot[emu_cur->warp_ops++ % 2];
  std::memcpy(slot[emu_cur->lane], &v, sizeof(V));
  emu_wait_at(EMU_AT_WARP);
  V r;
  std::memcpy(&r, slot[src], sizeof(V));
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
  auto& slot = emu_cur->blk->warps[emu_cur->warp].slot[emu_cur->warp_ops++ % 2];
  slot[emu_cur->lane][0] = pred != 0;
  emu_wait_at(EMU_AT_WARP);
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l) bits |= static_cast<unsigned>(slot[l][0]) << l;
  return bits;
}
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == 0xffffffffu; }
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0u; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_from_lane(mask, 0, emu_cur->lane); }

// atomics: plain read-modify-writes (every thread of the launch is a fiber of one OS thread)
#define EMU_ATOMIC(name, update) \
  template <class V, class W> V name(V* p, W v) { V o = *p; update; ++emu_work; return o; }
EMU_ATOMIC(atomicAdd, *p = o + v)
EMU_ATOMIC(atomicMax, if (v > o) *p = v)
EMU_ATOMIC(atomicMin, if (v < o) *p = v)
EMU_ATOMIC(atomicExch, *p = v)
template <class V, class W> V atomicCAS(V* p, W c, W v) {
  V o = *p;
  if (o == c) *p = v;
  ++emu_work;
  return o;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
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
// a launch: its blocks in waves (the whole grid at once where the kernel's blocks wait for each other, else one
// cluster at a time, a cluster of one block where the kernel has no cluster shape); a wave's threads as fibers, run
// in thread order (or the reverse, so that a read of what another thread writes without a barrier between shows one
// way or the other)
inline bool emu_reverse = false;
inline std::function<void()>* emu_body = nullptr;
inline void emu_end_thread() {
  EmuFiber& f = *emu_cur;
  EmuBlock& b = *f.blk;
  f.state = EMU_DONE;
  EmuCluster* c = b.cluster;
  if (f.cl_target == c->phase + 1) --c->arrived;  // its arrival in the open phase leaves with it
  --c->live;
  emu_cluster_step(c);
  ++emu_work;
  if (--b.live == 0) {
    for (const auto& x : emu_bulk)
      if (x.blk == &b) emu_fail("a block ended with a bulk copy in flight");
    std::memset(b.smem, 0xA5, b.smem_bytes);  // a peer that reads it after it ended reads poison
    b.mbars.clear();
  }
}
inline void emu_fiber_main() {
  (*emu_body)();
  emu_wait_group(0);
  emu_end_thread();
  emu_jump(emu_scheduler_jb);  // never comes back: the fiber is made again for the next wave
}

inline bool emu_blockwise = false;  // each block runs as far as it can before the next (else every thread a step)
inline void emu_resume(EmuFiber& f) {
  emu_cur = &f;
  if (!__builtin_setjmp(emu_scheduler_jb.b)) {
    if (f.started) emu_jump(f.jb);
    f.started = true;
    setcontext(&f.ctx);
  }
  emu_cur = nullptr;
}

// one pass over threads [lo, hi) (whole blocks of nt), in the run's order: every ready thread (and polling one, with
// polls) runs until it waits; a completed mbarrier phase takes the pass back to its block's first thread. Returns
// whether a thread polled
inline bool emu_pass(std::vector<EmuFiber>& fibers, std::size_t lo, std::size_t hi, std::size_t nt, bool polls) {
  bool polled = false;
  for (std::size_t i = 0; i < hi - lo; ++i) {
    EmuFiber& f = fibers[emu_reverse ? hi - 1 - i : lo + i];
    if (f.state != EMU_READY && !(polls && f.state == EMU_POLL)) continue;
    emu_resume(f);
    polled = polled || f.state == EMU_POLL;
    if (emu_restart) {
      emu_restart = false;
      const std::size_t b = static_cast<std::size_t>(&f - fibers.data()) / nt * nt;
      i = (emu_reverse ? hi - b - nt : b - lo) - 1;
    }
  }
  return polled;
}

// a block's barriers (its nt threads from t0): a warp whose live lanes all wait at the warp's barrier goes on, else the
// block if all its live threads wait at __syncthreads; a block with no thread to run and a barrier that nothing can
// release fails the run. Returns whether a thread became ready
inline bool emu_release(EmuFiber* t0, std::size_t nt) {
  bool released = false, running = false, all_block = true, live = false;
  for (std::size_t w = 0; w < nt; w += 32) {
    bool all = true, any = false;
    for (std::size_t t = w; t < std::min(nt, w + 32); ++t) {
      const EmuState s = t0[t].state;
      if (s == EMU_DONE) continue;
      any = true;
      all = all && s == EMU_AT_WARP;
      running = running || s == EMU_READY || s == EMU_POLL;
      all_block = all_block && s == EMU_AT_BLOCK;
    }
    live = live || any;
    if (any && all) {
      for (std::size_t t = w; t < std::min(nt, w + 32); ++t)
        if (t0[t].state == EMU_AT_WARP) t0[t].state = EMU_READY;
      released = true;
    }
  }
  if (!live || released || running) return released;
  if (!all_block) {
    emu_cur = t0;
    emu_fail("a barrier that not every live thread of its warp or block reached");
  }
  for (std::size_t t = 0; t < nt; ++t)
    if (t0[t].state == EMU_AT_BLOCK) t0[t].state = EMU_READY;
  ++emu_work;
  return true;
}

// the scheduler: in a round every ready or polling thread runs until it waits (blockwise: each block in turn, its
// polls once, then as far as its own barriers let it), then every block's barriers are released; where nothing was done
// in a round (no arrival, flag, atomic, block barrier, copy or end), one bulk copy of each block that has any lands,
// and after EMU_IDLE_LIMIT such rounds of polls alone the run fails: a wait that nothing can end
inline void emu_run(std::vector<EmuBlock>& blocks, std::vector<EmuFiber>& fibers, std::size_t nt) {
  const std::size_t nb = blocks.size();
  unsigned idle = 0;
  for (;;) {
    const unsigned long long work = emu_work;
    bool polled = false;
    if (emu_blockwise) {
      for (std::size_t j = 0; j < nb; ++j) {
        const std::size_t k = emu_reverse ? nb - 1 - j : j;
        bool polls = true;  // its polls look once, then its ready threads run for as long as its barriers release
        do polled = emu_pass(fibers, k * nt, (k + 1) * nt, nt, std::exchange(polls, false)) || polled;
        while (blocks[k].live && emu_release(&fibers[k * nt], nt));
      }
    } else {
      polled = emu_pass(fibers, 0, fibers.size(), nt, true);
    }
    bool live = false;
    for (std::size_t k = 0; k < nb; ++k)
      if (blocks[k].live) {
        live = true;
        emu_release(&fibers[k * nt], nt);
      }
    if (!live) break;
    if (emu_work != work) { idle = 0; continue; }
    if (!emu_bulk.empty()) {  // nothing else happened: one bulk copy of each block that has any lands
      std::vector<EmuBulk> rest;
      std::vector<const EmuBlock*> landed;
      const std::size_t m = emu_bulk.size();
      for (std::size_t i = 0; i < m; ++i) {
        const EmuBulk c = emu_bulk[emu_reverse ? m - 1 - i : i];
        if (std::find(landed.begin(), landed.end(), c.blk) != landed.end()) { rest.push_back(c); continue; }
        landed.push_back(c.blk);
        emu_bulk_land(c);
      }
      if (emu_reverse) std::reverse(rest.begin(), rest.end());
      emu_bulk = rest;
      idle = 0;
      continue;
    }
    if (polled && ++idle > EMU_IDLE_LIMIT) {
      for (auto& f : fibers) if (f.state == EMU_POLL) { emu_cur = &f; break; }
      emu_fail("a wait that nothing can end (every thread polls or waits, and nothing changes)");
    }
  }
}

// the blocks of a wave: each its shared memory (poisoned: a read of what nothing wrote shows), its warps' slots, its
// cluster's barrier and peers; each thread a fiber on a stack of its own
inline void emu_wave(const std::vector<EmuDim>& ids, EmuDim block, std::size_t smem_bytes, EmuDim cluster) {
  const unsigned nt = block.x * block.y * block.z, cs = cluster.x * cluster.y * cluster.z;
  const std::size_t nb = ids.size(), bytes = (EMU_STATIC + smem_bytes + 16 + 1023) / 1024 * 1024;
  std::vector<EmuBlock> blocks(nb);
  std::vector<EmuCluster> clusters(nb / cs);
  std::vector<EmuBlock*> peers(nb);
  std::vector<std::unique_ptr<unsigned char, decltype(&std::free)>> mem;
  for (std::size_t i = 0; i < nb; ++i) {
    EmuBlock& b = blocks[i];
    b.idx = ids[i];
    mem.emplace_back(static_cast<unsigned char*>(std::aligned_alloc(1024, bytes)), &std::free);
    b.smem = mem.back().get();
    b.smem_bytes = EMU_STATIC + smem_bytes;
    std::memset(b.smem, 0xA5, bytes);
    b.warps.resize((nt + 31) / 32);
    b.live = nt;
    const unsigned rank = b.idx.x % cluster.x + cluster.x * (b.idx.y % cluster.y + cluster.y * (b.idx.z % cluster.z));
    b.cluster = &clusters[i / cs];
    b.cluster->size = cs;
    b.cluster->live += nt;
    peers[i / cs * cs + rank] = &b;
    b.peers = &peers[i / cs * cs];
  }
  const std::size_t n = nb * nt;
  void* stacks = mmap(nullptr, n * EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
  if (stacks == MAP_FAILED) emu_fail("no memory for the threads' stacks");
  std::vector<EmuFiber> fibers(n);
  for (std::size_t i = 0; i < n; ++i) {
    EmuFiber& f = fibers[i];
    const unsigned t = i % nt;
    f.blk = &blocks[i / nt];
    f.stack = static_cast<char*>(stacks) + i * EMU_STACK;
    f.tid = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
    f.lane = t % 32;
    f.warp = t / 32;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = EMU_STACK;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, emu_fiber_main, 0);
  }
  emu_run(blocks, fibers, nt);
  munmap(stacks, n * EMU_STACK);
}

// whole: every block of the grid at once (a cooperative launch, or blocks that poll each other); else one cluster
// at a time
inline void emu_launch(EmuDim grid, EmuDim block, std::size_t smem_bytes, EmuDim cluster, bool whole,
                       std::function<void()> body) {
  if (grid.x % cluster.x || grid.y % cluster.y || grid.z % cluster.z) emu_fail("a grid of a part of a cluster");
  emu_body = &body;
  gridDim = grid;
  blockDim = block;
  std::vector<EmuDim> ids;
  for (unsigned cz = 0; cz < grid.z; cz += cluster.z)
  for (unsigned cy = 0; cy < grid.y; cy += cluster.y)
  for (unsigned cx = 0; cx < grid.x; cx += cluster.x) {
    for (unsigned z = cz; z < cz + cluster.z; ++z)
    for (unsigned y = cy; y < cy + cluster.y; ++y)
    for (unsigned x = cx; x < cx + cluster.x; ++x) ids.push_back({x, y, z});
    if (!whole) { emu_wave(ids, block, smem_bytes, cluster); ids.clear(); }
  }
  if (whole) emu_wave(ids, block, smem_bytes, cluster);
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string dir = argv[1];
  emu_copies_early = argv[2][0] == '1';
  emu_reverse = argv[2][1] == '1';
  emu_blockwise = argv[2][2] == '1';
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
    # paired conversions and products: cvt.rn.bf16x2.f32, mul.rn.f16x2, ...
    (r"(cvt|mul)\.rn\.(bf16x2|f16x2)(?:\.f32)? %(\d), %(\d), %(\d);",
     lambda m, ops: f"({ops[int(m[3])]} = emu_{m[1]}_{m[2]}({ops[int(m[4])]}, {ops[int(m[5])]}))"),
    # mbarriers, bulk copies counted on them, and the fences around them (one OS thread: nothing to order)
    (r"mbarrier\.init\.shared(?:::cta)?\.b64 \[%(\d)\], (%\d|\d+);",
     lambda m, ops: f"emu_mbar_init({ops[int(m[1])]}, {_ptx_value(m[2], ops)})"),
    (r"mbarrier\.arrive\.shared(?:::cta)?\.b64 _, \[%(\d)\];", lambda m, ops: f"emu_mbar_arrive({ops[int(m[1])]})"),
    (r"mbarrier\.arrive\.expect_tx\.shared(?:::cta)?\.b64 _, \[%(\d)\], (%\d|\d+);",
     lambda m, ops: f"emu_mbar_arrive({ops[int(m[1])]}, {_ptx_value(m[2], ops)})"),
    (r"\{ \.reg \.pred p; mbarrier\.try_wait\.parity\.shared(?:::cta)?\.b64 p, \[%(\d)\], (%\d|\d+); "
     r"selp\.u32 %(\d), 1, 0, p; \}",
     lambda m, ops: f"({ops[int(m[3])]} = emu_mbar_try_wait({ops[int(m[1])]}, {_ptx_value(m[2], ops)}))"),
    (r"cp\.async\.bulk\.shared::cluster\.global\.mbarrier::complete_tx::bytes \[%(\d)\], \[%(\d)\], %(\d), \[%(\d)\];",
     lambda m, ops: f"emu_cp_bulk({ops[int(m[1])]}, {ops[int(m[2])]}, {ops[int(m[3])]}, {ops[int(m[4])]})"),
    (r"fence\.mbarrier_init\.release\.cluster;|fence\.proxy\.async(?:\.shared::cta)?;", lambda m, ops: "(void)0"),
    # polls and flags in global memory; loads with an L2 policy (a policy is a number nothing here reads)
    (r"ld\.(?:relaxed|acquire|volatile)\.gpu\.global\.(u32|u64) %(\d), \[%(\d)\];",
     lambda m, ops: f"({ops[int(m[2])]} = emu_poll_load<{_UINT[m[1]]}>({ops[int(m[3])]}))"),
    (r"st\.(?:relaxed|release)\.gpu\.global\.(u32|u64) \[%(\d)\], %(\d);",
     lambda m, ops: f"emu_flag_store<{_UINT[m[1]]}>({ops[int(m[2])]}, {ops[int(m[3])]})"),
    (r"createpolicy\.fractional\.L2::evict_(?:first|last|normal|unchanged)\.b64 %(\d), 1\.0;",
     lambda m, ops: f"({ops[int(m[1])]} = 0ull)"),
    (r"ld\.global\.nc\.L2::cache_hint\.v4\.u32 \{%(\d),%(\d),%(\d),%(\d)\}, \[%(\d)\], %(\d);",
     lambda m, ops: f"emu_load_v4({ops[int(m[5])]}, {', '.join(ops[int(m[i])] for i in range(1, 5))})"),
]
_UINT = {"u32": "unsigned", "u64": "unsigned long long"}


def _ptx_value(text: str, ops: list[str]) -> str:
    """A PTX operand that is either %N (the asm's operand N) or a literal number."""
    return ops[int(text[1:])] if text.startswith("%") else text


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
    """The dynamic shared array as a pointer to the block's dynamic shared memory; each static one as a reference to
    its place in the block's static shared memory (``emu_static_shared``: one offset in every block, so a peer of a
    cluster finds it at the same place)."""
    source = re.sub(r"extern\s+__shared__\s+(__align__\(\d+\)\s+)?([\w ]+?)\s+(\w+)\[\];",
                    r"\2* \3 = reinterpret_cast<\2*>(emu_dynamic_smem());", source)
    if re.search(r"extern\s+__shared__", source):
        raise NotEmulated("a dynamic __shared__ declaration the emulator does not read")
    count = itertools.count()

    def static(m: re.Match) -> str:
        align, kind = m[2] or "0", m[3]
        decls = []
        for d in _split_top(m[4], ","):
            dm = re.fullmatch(r"\s*(\w+)((?:\[[^\[\]]+\])*)\s*", d)
            if not dm:
                raise NotEmulated(f"a __shared__ declarator the emulator does not read: {d.strip()!r}")
            dims = "".join(f"[({n})]" for n in re.findall(r"\[([^\[\]]+)\]", dm[2]))  # a `>` inside stays inside
            decls.append(f"auto& {dm[1]} = emu_static_shared<{kind}{dims}, {align}, {next(count)}>();")
        return m[1] + " ".join(decls)

    source = re.sub(r"(?m)^([ \t]*)__shared__\s+(?:__align__\((\d+)\)\s+)?((?:(?:unsigned|signed|long|short|const)\s+)*"
                    r"\w+(?:<[^;<>]*>)?)\s+([^;]+);", static, source)
    if re.search(r"\b__shared__\b", source):
        raise NotEmulated("a __shared__ declaration the emulator does not read")
    return source


def spin_waits(source: str) -> str:
    """Every loop with an empty body (``while (cond) { }`` or ``while (cond);``: a spin wait) gets a poll, so that the
    threads it waits for run."""
    out, pos = [], 0
    for m in re.finditer(r"\bwhile\s*\(", source):
        if m.start() < pos:
            continue
        end = _balanced(source, m.end() - 1)
        body = re.match(r"\s*(\{\s*\}|;)", source[end:])
        if body and not re.search(r"\}[ \t]*$", source[:m.start()]):  # not the tail of a do { } while (...);
            out += [source[pos:end], " { emu_poll(); }"]
            pos = end + body.end()
    return "".join(out) + source[pos:]


def cluster_shapes(source: str) -> tuple[str, dict[str, str]]:
    """``source`` without its ``__cluster_dims__(...)`` attributes, and each kernel's cluster shape (C++ expressions,
    by kernel name)."""
    shapes = {}

    def drop(m: re.Match) -> str:
        shapes[m[2]] = m[1]
        return m[0].replace(f"__cluster_dims__({m[1]})", "")

    return re.sub(r"__cluster_dims__\(([^()]*)\)\s*void\s+(\w+)\s*\(", drop, source), shapes


def _scalar(kind: str, value) -> str:
    if kind == "f32":
        return "(float)" + ("INFINITY" if value == float("inf") else "-INFINITY" if value == float("-inf")
                            else "NAN" if value != value else repr(float(value)))
    return f"(int){value}" if kind == "i32" else f"(long long){value}LL"


def host_source(candidate: Candidate, launches: tuple[ResolvedLaunch, ...], buffers: list[str]) -> str:
    """The candidate's source made host code, and a main that runs ``launches`` in order over ``buffers`` (names as
    the plan's arguments give them: "in:NAME", "out:I", "scratch:NAME"), read from and written back to files. A
    cooperative launch, or one of a kernel whose threads poll, runs its whole grid at once; any other, one cluster
    (or block) at a time."""
    if re.search(r"cooperative_groups", candidate.source):
        raise NotEmulated("cooperative groups")
    src, shapes = cluster_shapes(candidate.source)
    if "__cluster_dims__" in src:
        raise NotEmulated("a __cluster_dims__ that is not on a kernel's declaration: `__cluster_dims__(..) void NAME(`")
    src = spin_waits(translate_asm(shared_arrays(src))).replace('extern "C" __global__', "")
    polls = bool(re.search(r"\b(?:emu_poll|emu_poll_load<[^>]*>|emu_mbar_try_wait|__nanosleep)\(", src))
    calls = []
    for l in launches:
        args = [f"EmuArg{{bufs[{buffers.index(f'{kind}:{payload}')}].data() + {GUARD}}}"
                if kind in ("in", "out", "scratch") else _scalar(kind, payload) for kind, payload in l.args]
        grid, block = ", ".join(f"{g}u" for g in l.grid), ", ".join(f"{b}u" for b in l.block)
        cluster = ", ".join(f"(unsigned)({c.strip()})" for c in shapes.get(l.kernel, "1, 1, 1").split(","))
        whole = "true" if l.cooperative or polls else "false"
        calls.append(f"  emu_launch({{{grid}}}, {{{block}}}, {l.smem}, {{{cluster}}}, {whole}, "
                     f"[&] {{ {l.kernel}({', '.join(args)}); }});")
    return src + MAIN.replace("NBUFS", str(len(buffers))).replace("GUARD_BYTES", str(GUARD)) \
        .replace("LAUNCHES", "\n".join(calls))


def compiler() -> str | None:
    return shutil.which("g++") or shutil.which("c++")


FLAGS = ("-std=c++20", "-O1", "-w", "-U_FORTIFY_SOURCE")


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
            raise NotEmulated(f"the host compiler refused the kernel (exit {r.returncode}): {r.stderr[-3000:]}")

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
        # every other run takes the threads in reverse order; every other pair of runs, block by block
        mode = f"{int(self.early)}{self.runs % 2}{self.runs // 2 % 2}"
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
