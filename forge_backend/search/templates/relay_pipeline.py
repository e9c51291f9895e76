"""The relay's device code: ``RELAY_HELPERS`` (the mbarriers, bulk copies, marked words and epoch its kernels use)
and ``relay_kernel``, the warp-specialised pipeline of Note [rows relayed through global memory] in relay.py around
the reduce, resolve and write that each family gives it (softmax.py, gn_kernels.py). relay.py holds the layouts'
rules, knobs and launch. A Note named here without a file is relay.py's, but for the three at the end of this module
on the knobs ``writers``, ``hold`` and ``ramp``."""
from __future__ import annotations

from typing import Any

from .common import SMEM_ADDR
from .relay_held import held_parts, held_writer_warps

RELAY_HELPERS = SMEM_ADDR + r"""
__device__ __forceinline__ void bar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}
// One bulk copy of `bytes` (a multiple of 16) into a slot, counted on its `full` mbarrier.
__device__ __forceinline__ void slot_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}
// A piece's partial (a, b), b >= 0 or NaN, as one 64-bit word whose bit 63 is this launch's mark: a
// single-copy-atomic store is both the data and its flag, so no fence orders them.
__device__ __forceinline__ void put_part(unsigned long long* p, float2 v, unsigned mark) {
  const unsigned long long w = (unsigned long long)__float_as_uint(v.x) |
                               ((unsigned long long)((__float_as_uint(v.y) & 0x7fffffffu) | (mark << 31)) << 32);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(w) : "memory");
}
__device__ __forceinline__ unsigned long long get_part(const unsigned long long* p) {
  unsigned long long w;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
  return w;
}
__device__ __forceinline__ float2 part_value(unsigned long long w) {
  return make_float2(__uint_as_float((unsigned)w), __uint_as_float((unsigned)(w >> 32) & 0x7fffffffu));
}
// The epoch ctl[0] as the previous launch left it in the kept scratch (the Note, marks), read by lane 0 of each warp
// that needs this launch's mark before the block's first bulk copy is issued (Note [the epoch read before the first
// copies]).
__device__ __forceinline__ unsigned relay_epoch(const unsigned* ctl) {
  return *reinterpret_cast<const volatile unsigned*>(ctl);
}
// This launch's mark, from the epoch `e` that lane 0 read (relay_epoch), for a warp that does not count itself in
// (Note [the publisher left out of the epoch's count]).
__device__ __forceinline__ unsigned relay_mark_of(unsigned e) { return (__shfl_sync(0xffffffffu, e, 0) & 1u) ^ 1u; }
// This launch's mark, from the epoch `e` that lane 0 read (relay_epoch). Each of the block's `users` counting warps
// counts itself in `fin` once its read is done; the block's last counts the block in ctl[1], and the grid's last
// block, after every counting warp of the grid has read the epoch, rearms the count and advances the epoch for the
// next launch.
__device__ __forceinline__ unsigned relay_mark(unsigned e, unsigned* ctl, unsigned* fin, unsigned users) {
  if ((threadIdx.x & 31) == 0) {
    __threadfence();
    if (atomicAdd(fin, 1u) == users - 1) {
      __threadfence();
      if (atomicAdd(ctl + 1, 1u) == gridDim.x - 1) {
        ctl[1] = 0u;
        *reinterpret_cast<volatile unsigned*>(ctl) = e + 1u;
      }
    }
  }
  return relay_mark_of(e);
}
// Note [a relay's timeline]: KF_TRACE(cond, event, piece) marks the pipeline's steps and KF_TRACE_BLOCK(cond, event)
// a block's start and its consumers' end; benchmarks/trace_relay.py defines them to stamp the global timer, and
// everywhere else they are nothing.
#ifndef KF_TRACE
#define KF_TRACE(cond, e, t)
#define KF_TRACE_BLOCK(cond, e)
#endif
"""

def relay_kernel(name: str, p: dict[str, Any], params: str, reduce_piece: str, resolve: str, write_piece: str,
                 prefetch: str = "", wrote_slot: bool = False) -> str:
    """The relay kernel ``name`` of layout ``p`` (Note [rows relayed through global memory]): NW consumer warps, NC
    resolver warps, a loader and a publisher warp per block. The caller's header defines T, P (a pack of VEC T), COLS,
    VEC and ``relay_consts`` (NT: NW + NC + 2 warps); the partial type ``V`` with its combine ``Op`` and ``ident()``;
    and ``pack_stat(V) -> float2`` / ``unpack_stat(float2, i) -> V`` (the published word of piece ``i`` of a row: two
    floats, the second >= 0 or NaN). ``params`` are the kernel's own parameters (``x`` the input), before ``part`` and
    ``rows``. Hooks, with ``row`` (long long), ``c0`` (the piece's first column), ``sp`` (this warp's packs of the slot)
    and ``lane`` in scope:

    * ``reduce_piece`` (every consumer lane) sets ``V v``, the warp's partial, the same in every lane, over
      columns ``c0 + wc ...`` (``wc`` = the warp's first column in the piece);
    * ``resolve`` (resolver lane 0, with ``c0`` of its piece) turns the row's combined ``V a`` into ``float2 fin``
      for the writers (and may store per-row outputs where ``c0 == 0``);
    * ``write_piece`` (every consumer lane) reads ``const float2 st`` and stores the warp's share of the piece;
    * ``prefetch`` (every consumer lane, before it waits for the row's statistic) loads what ``write_piece`` needs
      that does not depend on it (a group norm's per-channel weights: Note [weights loaded before the wait] in
      gn_kernels.py).

    Knob ``hold`` (Note [a row's last piece before the next row's first]): the loader issues a block's first piece of
    a row only once its previous piece, of the row before, has arrived.

    Knob ``writers`` (Note [writers of their own]): NW more warps write the pieces, and the consumers only reduce
    them.

    Knob ``ramp`` (Note [the first copies a few at a time]): the first K copies go RAMP at a time.

    Knob ``regs`` (Note [pieces held in the writers' registers] in relay_held.py): the writers hold REGS pieces in
    registers and free each slot as they take its piece; ``write_piece`` must read its packs as ``sp[i * 32 + lane]``.

    ``wrote_slot``: the consumers store into their share of the slot (Note [a prologue evaluated once, into its slot] in
    softmax_relay.py), so before a slot is freed each lane orders its stores before the copy engine's next fill of it
    (fence.proxy.async)."""
    fence = '\n      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");' if wrote_slot else ""
    wait_row = """
        if (t > 0 && (blockIdx.x + t * NB) / PPR != (blockIdx.x + (t - 1) * NB) / PPR)
          bar_wait(full + (t - 1) % K, (unsigned)((t - 1) / K) & 1u);  // the previous row's last piece arrived""" \
        if "hold" in p else ""
    first = """      for (long long t = 0; t < K && t < n; ++t) {
        if (t >= RAMP) bar_wait(full + (t - RAMP), 0u);  // Note [the first copies a few at a time]
        issue(t);
      }""" if "ramp" in p else "      for (long long t = 0; t < K && t < n; ++t) issue(t);"
    # the progress rule (relay_valid) for this launch's block count: a block holds up to ceil(PPR / NB) of a row
    held = "(PPR + NB - 1) / NB"
    progress = (f"K + REGS >= {held}" if "regs" in p else f"K >= {held} + 1") if "writers" in p \
        else f"LAG >= {held} - 1"
    writers, consumers = (_writer_warps(reduce_piece, write_piece, prefetch, wrote_slot) if "writers" in p
                          else ("", _joint_warps(reduce_piece, write_piece, prefetch, fence)))
    h = held_parts("regs" in p)  # Note [pieces held in the writers' registers] in relay_held.py
    if "regs" in p:
        writers = held_writer_warps(write_piece, prefetch)
    return (_block_setup(name, params, h, progress) + _loader(wait_row, first) + _publisher(h) + writers
            + _resolvers(h, resolve) + f"""{consumers}  KF_TRACE_BLOCK(lane == 0, 1);
}}
""")


def _block_setup(name: str, params: str, h: dict[str, str], progress: str) -> str:
    """The kernel's signature and every warp's start: the mbarriers and slots in shared memory, the progress rule's
    test, this block's pieces, the epoch (Note [the epoch read before the first copies])."""
    return f"""
extern "C" __global__ __launch_bounds__(NT, 1) void {name}({params},
    unsigned long long* __restrict__ part, long long rows) {{
  extern __shared__ __align__(128) unsigned char dsm[];
  unsigned long long* full = reinterpret_cast<unsigned long long*>(dsm);  // the slot's bytes arrived
  unsigned long long* reduced = full + K;  // every consumer warp put its partial in wpart
  unsigned long long* ready = full + 2 * K;  // the row's statistic is in stat
  unsigned long long* empty = {h['empty_at']};  // every consumer warp wrote its share: the slot is free
  V* wpart = reinterpret_cast<V*>({h['wpart_at']});  // [K][NW]
  float2* stat = reinterpret_cast<float2*>(wpart + K * NW);  // [{h['stat_n']}]
  T* slots = reinterpret_cast<T*>(dsm + HEAD);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long NB = gridDim.x, np = rows * PPR;
  if (!({progress})) return;  // too few blocks for this layout (Note [rows relayed ...], progress): none waits
  const long long n = blockIdx.x < np ? (np - 1 - blockIdx.x) / NB + 1 : 0;  // this block's pieces: b, b + NB, ...
  unsigned* ctl = reinterpret_cast<unsigned*>(part + np);  // the epoch and the blocks that have read it
  __shared__ unsigned fin;  // the block's resolvers that have read the epoch (the publisher is not counted)
  // Note [the epoch read before the first copies]: lane 0 of the publisher and of each resolver
  const unsigned epoch = lane == 0 && (warp == NW + NC + 1 || (warp >= NW && warp < NW + NC)) ? relay_epoch(ctl) : 0u;
  KF_TRACE_BLOCK(threadIdx.x == 0, 0);
  if (threadIdx.x == 0) {{
    fin = 0;
    for (int j = 0; j < K; ++j) {{
      bar_init(full + j, 1); bar_init(reduced + j, NW); bar_init(ready + j, 1); bar_init(empty + j, {h['empty_count']});
    }}{h['ring_init']}
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }}
  __syncthreads();
"""


def _loader(wait_row: str, first: str) -> str:
    """The loader warp: the first K pieces (``first``), then each slot again once its consumers wrote it."""
    return f"""  if (warp == NW + NC) {{  // the loader: the first K pieces, then each slot again once its consumers wrote it
    if (lane == 0) {{
      auto issue = [&](long long t) {{{wait_row}
        const long long g = blockIdx.x + t * NB, row = g / PPR;
        const int c0 = (int)(g - row * PPR) * PE;
        slot_load(slots + (t % K) * PE, x + row * COLS + c0, (unsigned)(min(PE, COLS - c0) * sizeof(T)),
                  full + t % K);
        KF_TRACE(true, 0, t);
      }};
{first}
      for (long long v = 0; v + K < n; ++v) {{
        bar_wait(empty + v % K, (unsigned)(v / K) & 1u);
        issue(v + K);
      }}
    }}
    return;
  }}
"""


def _publisher(h: dict[str, str]) -> str:
    """The publisher warp: each piece's partial, its warps' combined in warp order, as one marked word."""
    return f"""  if (warp == NW + NC + 1) {{  // the publisher: each piece's partial, its warps' in warp order, as soon as reduced
    const unsigned mark = relay_mark_of(epoch);  // Note [the publisher left out of the epoch's count]
    for (long long u = 0; u < n; ++u) {{
      const int sl = (int)(u % K);
      bar_wait(reduced + sl, (unsigned)(u / K) & 1u);
      V a = lane < NW ? wpart[sl * NW + lane] : ident();
      a = group_all<32, 32>(a, Op(), (V*)nullptr);
      if (lane == 0) put_part(part + blockIdx.x + u * NB, pack_stat(a), mark);{h['publisher_free']}
      KF_TRACE(lane == 0, 2, u);
    }}
    return;
  }}
"""


def _resolvers(h: dict[str, str], resolve: str) -> str:
    """The NC resolver warps: wait for a row's marked words, combine them in piece order, hand the statistic on."""
    return f"""  // resolver c: the pieces in slots c, c + NC, ... (every use of a slot, in order): wait until the piece's
  // row is published, combine it in piece order
  if (warp >= NW) {{
    const unsigned mark = relay_mark(epoch, ctl, &fin, NC);
    long long last_row = -1;  // the row this warp resolved last, and (in lane 0) its statistic
    float2 last = make_float2(0.f, 0.f);
    for (long long u = warp - NW; u < n; u += NC) {{{h['resolver_wait']}
      const long long g = blockIdx.x + u * NB, row = g / PPR;
      const int c0 = (int)(g - row * PPR) * PE;
      if (row == last_row) {{  // this warp's previous piece was in the same row: its statistic stands{h['own_word']}
        if (lane == 0) {{
          stat[{h['si']}] = last;
          bar_arrive(ready + {h['si']});
          KF_TRACE(true, 3, u);
        }}
        continue;
      }}
      const unsigned long long* pr = part + row * PPR;
      V a;
      for (unsigned spins = 0;; ++spins) {{
        bool have = true;
        a = ident();
        for (int i = lane; i < PPR; i += 32) {{
          const unsigned long long w = get_part(pr + i);
          have = have && (unsigned)(w >> 63) == mark;
          a = Op()(a, unpack_stat(part_value(w), i));
        }}
        if (__all_sync(0xffffffffu, have)) break;
        if (spins > (1u << 26)) __trap();  // a grid not resident at once would wait forever
      }}
      a = group_all<32, 32>(a, Op(), (V*)nullptr);
      last_row = row;
      if (lane == 0) {{{resolve}
        stat[{h['si']}] = last = fin;
        bar_arrive(ready + {h['si']});
        KF_TRACE(true, 3, u);
      }}
    }}
    return;
  }}
"""


def _reduce_step(t: str, reduce_piece: str, after: str = "") -> str:
    """A consumer warp's reduce of its piece ``t`` (an expression) as it arrives: its partial into ``wpart``, then
    ``reduced``; ``after`` runs between the reduce and the signal."""
    return f"""
      const long long g = blockIdx.x + {t} * NB, row = g / PPR;
      const int c0 = (int)(g - row * PPR) * PE, sl = (int)({t} % K);
      bar_wait(full + sl, (unsigned)({t} / K) & 1u);
      KF_TRACE(warp == 0 && lane == 0, 1, {t});
      const P* sp = reinterpret_cast<const P*>(slots + sl * PE + wc);{reduce_piece}{after}
      if (lane == 0) {{
        wpart[sl * NW + warp] = v;
        bar_arrive(reduced + sl);
      }}"""


def _write_step(u: str, write_piece: str, prefetch: str, fence: str, first: str) -> str:
    """A warp's write of piece ``u`` (a variable) once its row's statistic is ready, then the slot freed (``empty``);
    ``first``: the condition of the warp that marks the trace."""
    return f"""
      const long long g = blockIdx.x + {u} * NB, row = g / PPR;
      const int c0 = (int)(g - row * PPR) * PE, sl = (int)({u} % K);{prefetch}
      bar_wait(ready + sl, (unsigned)({u} / K) & 1u);
      const float2 st = stat[sl];
      const P* sp = reinterpret_cast<const P*>(slots + sl * PE + wc);{write_piece}{fence}
      __syncwarp();  // every lane has read the slot
      if (lane == 0) bar_arrive(empty + sl);
      KF_TRACE({first}, 4, {u});"""


def _joint_warps(reduce_piece: str, write_piece: str, prefetch: str, fence: str) -> str:
    """The consumer warps that reduce each piece and write it LAG pieces later (Note [rows relayed through global
    memory])."""
    return f"""  const int wc = warp * (PE / NW);  // this warp's columns of every piece: [wc, wc + PE / NW)
  for (long long t = 0; t < n + LAG; ++t) {{
    if (t < n) {{{_reduce_step("t", reduce_piece)}
    }}
    if (t >= LAG) {{
      const long long u = t - LAG;{_write_step("u", write_piece, prefetch, fence, "warp == 0 && lane == 0")}
    }}
  }}
"""


# Note [writers of their own]
# In the relay as first built, each consumer warp both reduces a piece and, LAG pieces later, writes it once its row
# is resolved: one warp alternates the two, so a resolve that comes late holds up the reduces of the pieces after it
# as well, and the lag that keeps loads in flight is a guess at how long a resolve takes. With knob ``writers`` the
# block has NW reducer warps and NW writer warps (the same 19 warps as 16 consumers, when NW halves): the reducers
# take each piece as it arrives and never wait for a row, the writers wait only for their piece's statistic
# (``ready``) and free the slot. There is no lag; a block's slots must hold every piece it has of one row, plus one
# that loads (writers_progress_ok; tests/test_relay_protocol.py runs the model of the warps over every setting that
# rule allows, and shows that one slot fewer deadlocks). Writer warp j writes the columns reducer warp j reduced,
# which with a prologue evaluated once are the values that warp wrote back into the slot: each reducing lane fences
# its stores against the copy engine and the warp synchronises before it signals ``reduced``.
# Twentieth session, same run per case (results/h200/probe_session20_writers.json): the group norms' root since then
# (group_norm.own_writers: eight reducers, eight writers, seven slots of 32 KB): [1,512,256,256] bf16 37.1 us, 85% of
# the copy bandwidth, against the joint relay's 42.4 (74.5%); [1,128,1024,1024] bf16 140.1 against 155.3, fp32 354.1
# against 379.4. The softmaxes keep the joint relay: [64,262144] bf16 25.0 against 24.3 (and 24.3 again); fp32 36.4
# with seven slots (37.1 with six) against 37.1 and 37.4, 2% in one run, not enough to move a root that has held for
# nine sessions; the soft cap's relay once 38.5-43.4 against 36.3 and 36.4. An action either way (relay_writers).
#
# Note [a row's last piece before the next row's first]
# Knob ``hold``: the loader issues a block's first piece of a row only once the block's previous piece, the last it
# has of the row before, has arrived, so that the older row's pieces reach the chip ahead of the newer row's and its
# resolve is not kept waiting behind them. Mixed, in the same runs as above: softmax [64,262144] bf16 23.8 us against
# 24.3 twice, fp32 38.9 against 37.1 and 37.4; group norm [1,512,256,256] bf16 40.8 against 42.4 (the joint relay,
# both), fp32 73.5 against 71.0. An action, never a root.
# Note [the first copies a few at a time]
# Knob ``ramp``: the loader issues its first K copies RAMP at a time, each once the copy RAMP before it has landed,
# instead of all K at once. With every slot of every block requested at the start (25 MB at [64,262144] bf16), the
# memory system serves them all together and the first piece lands as late as the rest: the relay's timeline
# (benchmarks/trace_relay.py) has no write for the first 7.4-8.2 us of a 20.5 us kernel, and the resident kernel's
# (Note [a tensor held on chip whole] in resident.py) first 16 KB copy landed 6.7 us after it was issued with 14 a
# block in flight, 3.3 us with 4. A ramp only delays the loader's own copies behind its own earlier copies, so it
# cannot deadlock (tests/test_relay_protocol.py runs the model with it).
# Twenty-first session, same run per case, the root first and last (results/h200/probe_session21_ramp.json, from
# benchmarks/plans/ramp_probe.sh): softmax [64,262144] bf16 23.4 us with a ramp of 1 (24.0, 24.0, 24.4 with 2, 3, 4)
# against 24.2 and 24.3; fp32 36.0 (1), 36.3 (2) against 37.2 twice; the soft cap's relay once 34.3 (2), 34.8 (1),
# 36.1 (4) against 35.7 and 36.2; group norm writers [1,512,256,256] bf16 35.5 (2), 36.3 (3) against 36.7 twice,
# [1,512,128,128] fp32 20.6 (2) against 22.3 and 22.0, [1,128,1024,1024] fp32 355.3 (2) against 357.2 and 356.7.
# So the roots took it: a ramp of 1 in the plain softmaxes' joint relay, 2 with a prologue evaluated once and in the
# group norms' writers (softmax.defaults, group_norm.own_writers); ops run T has every such row on it. Thirty-eighth
# session: the plain softmaxes' root takes 2 as well. Every run of the session that timed both (results/h200/
# probe_session38_*.json) had 2 ahead: softmax [64,262144] bf16 23.3, 23.1 against 23.8 (poly_exp); 23.3, 23.4
# against 23.6 (exps_in_slot); 23.5, 23.4 against 23.9 and, with Note [a lean reduce] in softmax_relay.py, 21.5, 21.4
# against 23.4 (reduce_lean); fp32 34.7, 35.1 against 35.7 and 35.0, 34.8 against 36.0.
def _writer_warps(reduce_piece: str, write_piece: str, prefetch: str, wrote_slot: bool) -> tuple[str, str]:
    """Knob ``writers``: NW writer warps (NW + NC + 2 ...) write each piece as soon as its row is resolved, and the NW
    consumer warps only reduce, as soon as a piece arrives. Writer warp j writes the columns consumer warp j reduced
    (and, evaluating a prologue once, wrote back into the slot: each reducing lane fences its stores against the copy
    engine and the warp synchronises before it signals ``reduced``, from which ``ready`` follows)."""
    fence = """
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncwarp();  // every lane's values are in the slot before reduced, then ready, lets the writers read them""" \
        if wrote_slot else ""
    first_writer = "warp == NW + NC + 2 && lane == 0"  # the writer that marks the trace
    writers = f"""  if (warp >= NW + NC + 2) {{  // writer warp j = warp - (NW + NC + 2): consumer warp j's columns
    const int wc = (warp - NW - NC - 2) * (PE / NW);
    for (long long u = 0; u < n; ++u) {{{_write_step("u", write_piece, prefetch, "", first_writer)}
    }}
    KF_TRACE_BLOCK(lane == 0, 1);
    return;
  }}
"""
    consumers = f"""  const int wc = warp * (PE / NW);  // this warp's columns of every piece: [wc, wc + PE / NW)
  for (long long t = 0; t < n; ++t) {{{_reduce_step("t", reduce_piece, fence)}
  }}
"""
    return writers, consumers
