"""The ``relay`` strategy: long rows streamed through the whole GPU, their statistics relayed through global memory.

Note [rows relayed through global memory]
The one-pass cluster kernels (softmax.py, group_norm.py) hold a row's chunk on chip while its cluster agrees on the
row's statistics, then write it. At [64, 262144] fp32 (a 1 MB row per cluster of 16 blocks, 64 KB each) 21 clusters
are resident, so the 64 rows run as three waves and one row, and within a block the loads, the cluster barrier and
the stores follow one another (Nsight Compute, ninth session: long-scoreboard and barrier stalls).

Here no block owns a row. The tensor is cut into pieces of PE elements of one row (PPR pieces per row, the last one
shorter); piece ``g`` goes to block ``g mod NB`` (NB = one block per SM), so a block's pieces lie in successive rows.
Each block runs a warp-specialised pipeline over K shared-memory slots, synchronised by four mbarriers per slot
(full, reduced, ready, empty):

* the loader warp fills a slot with one bulk copy (cp.async.bulk, its bytes counted on ``full``), the first K pieces
  at once and each later one as soon as the consumers have written the slot's previous piece (``empty``);
* NW consumer warps each take a fixed share of the piece: reduce it (softmax: max and sum of exp; group norm: count,
  mean, M2) into ``wpart`` (``reduced``), and LAG pieces later normalise and store it once its row is resolved
  (``ready``), then free the slot (``empty``);
* the publisher warp combines the warps' partials in warp order and stores the piece's partial as one 64-bit word
  whose top bit is this launch's mark (below). A single-copy-atomic store is the data and its flag at once, so no
  fence orders them (the first version, a warp per worker publishing with an acquire-release add on a row counter,
  ran 62-320 us at [64, 262144] fp32: probe_relay_v1.json);
* NC resolver warps, resolver c taking pieces c, c + NC, ..., read the row's PPR words until all are marked, combine
  them in piece order (bit-identical in every run and every block) and hand the row's statistic to the consumers.
  NC <= K: a resolver whose first piece was a slot's second use would wait on ``reduced`` one phase early, and
  ``try_wait.parity`` reads that parity as done. The GPU tests caught it (NC = 4 over K = 3 slots gave one fp16
  layout a wrong statistic); tests/test_relay_protocol.py reproduces it in a model of the warps.

So every SM streams its pieces continuously; a piece waits on chip only for its row's exchange, and the rows finish
in order across the whole GPU instead of in waves of whole rows. Publishing never waits on a resolve: when one warp
did both, each piece's publish waited for the previous piece's row, one global round trip per piece (56 us at
[64, 262144] fp32 against 38.8 us decoupled, eleventh session).

Measured (H200, eleventh session, same runs as each root; probe_relay*.json): softmax [64, 262144] fp32 38.8 us
(81% of the copy bandwidth) against the cluster's 43.6; bf16 26.6-26.8 against 27.5; group norm [1,512,256,256]
bf16 45.3 against 55.2, fp32 75.4 against 94.2; [1,512,128,128] fp32 24.4 against 32.5. With more pieces a group
than SMs (ops run I): [1,128,1024,1024] bf16 151.0 us against the eighth session's 203.0; fp32 (512 pieces a group)
393.6 against the split's 394.6-397.1 in the same search, a tie. It is the root of softmaxes with rows of >= 256 KB
and group norms with groups of >= 512 KB (1 MB before the thirteenth session), both of >= 16 MB in all
(softmax.root_params, group_norm.root_params), and a seed wherever else it is valid.

Progress: a block's pieces are NB apart, so one row holds at most c = ceil(PPR / NB) of them, in a run of the block's
successive pieces; with LAG >= c - 1 the consumers reduce the last of them before they wait for the first one's row,
and every piece a resolver waits for is published by a block that waits on nothing later. (The first version asked
NB >= PPR; rows of up to 1024 pieces now qualify, and a resolver whose previous piece was in the same row reuses its
statistic instead of polling again.) That needs every block resident at once: the launch is cooperative
(contract.py), one block per SM of the GPU that launches it (the plan's ``num_sms``: Note [the GPU's SM count in a
plan] in contract.py), and a poll that never ends traps. A kernel of another stream that holds SMs only delays the
blocks that wait for them. ``relay_valid`` checks the rule for the H200's 132 blocks; a GPU with fewer SMs puts more
of a row's pieces in each block, so the kernel checks the rule again for its own grid as it starts, and where it
fails every block returns at once, its outputs unwritten (the verifier refuses the kernel there), instead of
waiting forever.

Marks: every launch writes every word once, so a word written by the previous launch carries the previous mark.
The scratch is kept between launches (Note [scratch kept between launches] in contract.py): zeroed on the first
launch, then as the last launch left it, with no fill kernel before each launch. After the words sit two counters,
an epoch and a count of blocks. The publisher and the resolvers read the epoch as they start, and this launch's mark
is its parity flipped (1 on a zeroed scratch, as before). Once every resolver of the grid has read it (the count; the
publisher's read is ordered before its block's resolvers count, Note [the publisher left out of the epoch's count]),
the last block advances the epoch and rearms the count, so the next launch writes the other mark and never reads a
word of this one as its own. tests/test_relay_protocol.py runs the model over launches
in a row on one scratch: an epoch that never advances lets a resolver take last launch's words. Measured against the
same kernel with its scratch zeroed before every launch (twelfth session, probe_session12_kept_scratch.json, same
run): softmax [64, 262144] fp32 37.2 against 39.3 us, bf16 24.1 against 26.1; group norm [1,512,256,256] bf16 42.7
against 43.8, [1,512,128,128] fp32 22.6 against 24.4.

Moves the input as it is in memory (a bulk copy moves bytes; a fused prologue runs in the consumers: Note [a
prologue run from the relay's slots] in softmax.py), in 16-byte packs, rows whose byte length is a multiple of 16.

Note [pieces re-read from L2: measured, not kept]
A row holds its slots from its load until its statistic is resolved, so at [1,128,1024,1024] fp32 (16 MB groups, four
32 KB pieces of a group per block) four of a block's six slots wait on each group and two load ahead: 381-383 us, 66%
of the copy bandwidth. The fourteenth session tried freeing a slot as soon as its piece was reduced: the writers
re-read the piece from global memory (an L2 hit, about 13 MB back), the statistic went to a ring of its own (lag + 2
entries, with ``taken`` mbarriers), and the CPU model of the warps (test_relay_protocol.py, extended) checked the
progress rules, tight at nc <= lag + 3. Every layout passed the GPU verifier (32 relay tests with nine new ones), but
it lost everywhere it was probed (probe_session14_reread.json, same runs as each root): re-read at the write, 45-55%
slower ([1,512,128,128] fp32 33.3 against 22.0 us); with the packs loaded a step ahead into registers, before the
step's reduce, 10-30% slower ([1,512,128,128] fp32 25.0 against 22.1, [1,512,256,256] bf16 53.3 against 41.9,
softmax [64,262144] bf16 29.6 against 24.3, [1,128,1024,1024] bf16 194.1 against 154.0) and only at the 16 MB fp32
groups 1.5% faster (376.9 against 382.8 us, k=4, lag=8). The consumers are latency-bound already (Nsight Compute,
thirteenth session); a second read to wait for costs more than the slots it frees. Not kept. What did free the
slots (twenty-sixth session): holding pieces in the writers' registers instead, a second place on chip with no read
to wait for (Note [pieces held in the writers' registers] in relay_held.py; [1,128,1024,1024] fp32 281.5 us, 89%).
"""
from __future__ import annotations

from typing import Any

from ...contract import NUM_SMS, Launch
from .common import SMEM_ADDR, SMEM_LIMIT, SMS, cdiv, flag_knob, knob, launch, scale_knob
from .relay_held import (MAX_REGS, held_head_bytes, held_knob, held_parts, held_progress_ok, held_regs,
                         held_writer_warps)

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

RELAY_KEYS = ("pe", "nw", "nc", "k", "lag")


def relay_defaults(isz: int) -> dict[str, Any]:
    """Slots of 32 KB split over 16 consumer warps, one resolver, 6 slots (192 KB of shared memory), a lag of 3
    pieces: the probe's best at [64, 262144] in both dtypes (eleventh session, probe_relay.json: fp32 38.8 us, bf16
    26.8 us; bf16's best, 26.6 us, had two resolvers)."""
    return {"strategy": "relay", "vec": 16 // isz, "pe": 32768 // isz, "nw": 16, "nc": 1, "k": 6, "lag": 3}


def _head(p: dict[str, Any], vbytes: int) -> int:
    """4 mbarriers per slot, the warps' partials (``vbytes`` each) and the row statistic per slot (and knob ``regs``'
    ring entries: Note [pieces held in the writers' registers] in relay_held.py), rounded up to 128 bytes so that the
    slots behind them start aligned."""
    return cdiv(p["k"] * (4 * 8 + p["nw"] * vbytes + 8) + held_head_bytes(p), 128) * 128


def relay_smem(p: dict[str, Any], isz: int, vbytes: int = 8) -> int:
    """Dynamic shared memory of a relay block: the head (``_head``), then the slots."""
    return _head(p, vbytes) + p["k"] * p["pe"] * isz


def relay_valid(p: dict[str, Any], rows: int, cols: int, isz: int, vbytes: int = 8,
                smem: int = SMEM_LIMIT) -> bool:
    """Only the relay's knobs, in range; 16-byte packs, rows of a multiple of 16 bytes, whole packs per lane of every
    warp, the slots within ``smem`` bytes of shared memory (the cap of the card's architecture: Note [templates for the
    card's architecture] in target.py), a lag that leaves loads in flight and covers a block's other pieces of the
    same row (Note [rows relayed through global memory]: progress), and at most 1024 pieces a row (each resolve reads
    them all)."""
    if set(p) - {"strategy", "vec", "hold", "writers", "ramp", "regs", *RELAY_KEYS}:
        return False  # another strategy's knob (keep, tma, ...): nothing here reads it
    if p.get("hold", True) is not True or p.get("writers", True) is not True:
        return False  # flags (Notes [a row's last piece before the next row's first], [writers of their own]):
        # present (True) or absent
    own = "writers" in p
    if own and "lag" in p:
        return False  # the writers wait for nothing but their piece's statistic: no lag
    pe, nw, nc, k, vec = (p.get(key) for key in ("pe", "nw", "nc", "k", "vec"))
    lag, ramp = 0 if own else p.get("lag"), p.get("ramp", 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (pe, nw, nc, k, lag, vec, ramp)):
        return False
    if "ramp" in p and not 1 <= ramp < k:
        return False  # Note [the first copies a few at a time]: fewer than the slots
    if vec * isz != 16 or cols % vec or pe % (32 * vec * max(nw, 1)) or not 1024 <= pe * isz <= 128 * 1024:
        return False
    if not (1 <= nw and 1 <= nc <= 4 and relay_threads(p) <= 1024 and (own or 1 <= lag) and k <= 16):
        return False
    ppr, regs = cdiv(cols, pe), p.get("regs", 0)
    if not held_regs(p, pe // (32 * vec * nw), relay_threads(p), isz):
        return False  # Note [pieces held in the writers' registers] in relay_held.py
    progress = (held_progress_ok(ppr, SMS, k, regs, nc) if regs else writers_progress_ok(ppr, SMS, k, nc)) if own \
        else progress_ok(ppr, SMS, k, lag, nc)
    return relay_smem(p, isz, vbytes) <= smem - 1024 and ppr <= 1024 and progress and rows * ppr < 2**40


def progress_ok(ppr: int, blocks: int, k: int, lag: int, nc: int) -> bool:
    """The relay's pipeline cannot deadlock or misread an mbarrier phase (Note [rows relayed through global memory],
    progress): loads stay ahead of the consumers (k >= lag + 2), the consumers reduce a block's last piece of a row
    before they wait for its first (lag >= ceil(ppr / blocks) - 1), and no resolver's first piece is a slot's second
    use (nc <= k). tests/test_relay_protocol.py checks it against a model of the kernel's warps."""
    return k >= lag + 2 and lag >= cdiv(ppr, blocks) - 1 and nc <= k


def writers_progress_ok(ppr: int, blocks: int, k: int, nc: int) -> bool:
    """The same with writers of their own (Note [writers of their own]): the reducers wait only for their slots, so
    a block's slots must hold every piece it has of one row (k >= ceil(ppr / blocks)), and one more that loads."""
    return k >= cdiv(ppr, blocks) + 1 and nc <= k


# Note [a row's statistic exchanged within its cluster: measured, not kept]
# Thirty-fifth session (trial commit 298943b, reverted in the next): knob ``cs`` ran the relay as NCL thread-block
# clusters of CS blocks, cluster c taking rows c, c + NCL, ..., each block a row's pieces rank, rank + CS, ...; a
# publisher stored each piece's word into every block of its cluster (st.shared::cluster) and arrived on their
# mbarriers with release at cluster scope, a resolver combined the row's words from its own shared memory, and a ring
# of entries with a second mbarrier kept a word from being overwritten before every block had read it (a CPU model of
# the warps and ten GPU verifier cases passed: results/h200/gpu_tests_session35_cluster.log). No scratch, no marks,
# no cooperative launch. It lost everywhere (H200, one probe run each, the root first and last;
# results/h200/probe_session35_cluster*.json): the driver fits only 15 clusters of 8, 7 of 16 or 30 of 4 such blocks
# at once (cuOccupancyMaxActiveClusters: 120 or 112 of the 132 SMs, the GPCs' sizes), so 16 clusters of 8 ran the
# last one as a second wave (softmax [64, 262144] bf16 45.5 us, group norm [1,512,128,128] fp32 33.1, against the
# roots' 23.4 and 20.4), and with clusters that fit, the rows split unevenly over fewer SMs: softmax 28.4-29.4 us
# (16 x 7, 8 x 15) against 23.5; [1,512,128,128] fp32 24.9-26.5 against 20.6; [2,1536,64,64] fp32 31.7-32.6 against
# 28.9.
#
# Note [the epoch read before the first copies]
# The publisher and the resolvers need this launch's mark, from the epoch in the kept scratch, before their first word.
# They read it as they started, after the block's __syncthreads, just as the loader issued the block's first bulk
# copies, and under those copies' load. The group norm [1,512,128,128] fp32 root's
# timeline (thirty-fifth session, results/h200/trace_session35/): pieces landed at 1.5-2.2 us and the median block
# published its first word at 2.9 us, but 34 of the 132 blocks (in pairs of neighbouring blocks) only at 5.9-8.1 us,
# each of their later pieces staying 3-5 us behind its arrival; every group waits for its slowest piece, so the
# first groups resolved at 8.4 us, nothing was written before 7.4 us of a 16.9 us span, and the full slots stalled
# the reads (at [2,1536,64,64] fp32: 50 blocks, first write at 6.9 us). The likely cause, not traced further: that
# read sits behind the copies' bytes, and the block's last warp to count itself in then fences and makes a global
# atomic under the same load. Lane 0 of those warps now issues the load before the block's __syncthreads, ahead of
# any copy, and uses it after. Measured in one run, each root twice beside the old code (--swap;
# results/h200/probe_session35_epoch_early.json): group norm [1,512,128,128] fp32 19.9 and 19.9 us against 20.1 and
# 20.6; [2,1536,64,64] fp32 27.9 and 28.0 against 29.7 and 28.8; [1,512,256,256] bf16 35.4 twice against 35.5 and
# 35.8; the softmaxes within their spread (bf16 23.3, 23.4 against 23.3, 24.2; fp32 35.8, 35.7 against 35.7, 35.5;
# the soft cap 32.9, 32.7 against 32.9, 33.4). Ops runs AE and AF (ops_session35_*.json): [2,1536,64,64] fp32 28.3
# us, 83% of the copy bandwidth (82% by graph replay); [1,512,128,128] fp32 20.4 us, 77% (21.8 in AE). Its timeline
# after the change (thirty-sixth session, results/h200/trace_session36_gn.log): first write at 4.4 us of a 15.4 us
# span (7.4 of 16.9 before).
# Measured, not kept, in the same session: counting each warp in at its end instead of right after its read (the
# read where it was; results/h200/probe_session35_epoch_at_end.json, each root twice, the old code beside it in the
# same run): no faster anywhere (group norm [1,512,128,128] fp32 22.7 and 22.3 us against 21.6 and 22.0; softmax
# [64,262144] fp32 36.5 and 36.6 against 35.9 and 36.0), the count's fence and atomic moving to the kernel's end.
#
# Note [the publisher left out of the epoch's count]
# The publisher needs the mark but need not count itself in: lane 0 reads the epoch before the block's __syncthreads
# (Note [the epoch read before the first copies]), and the block's resolvers count themselves in only after it, so
# the barrier (the ordering of membar.cta) puts the publisher's read before any count of its block, and the last
# count, which advances the epoch, comes after every block's reads. The publisher then issues no fence and no atomic
# before its first word: relay_mark_of takes the mark from the value read, and `fin` counts the NC resolvers.
# tests/test_relay_protocol.py models the block's barrier and finds stale words or a deadlock where the resolvers
# count before it. Measured (thirty-sixth session, each root beside the counting publisher in one run, twice, in two
# device calls; results/h200/probe_session36_uncounted.json, probe_session36_early_issue.json): group norm
# [1,512,128,128] fp32 20.3, 20.0, 20.0 and 19.9 us against 20.4, 20.8, 20.2 and 21.2; [2,1536,64,64] fp32 27.8,
# 27.7, 27.8, 27.6 against 28.2, 28.1, 28.2, 27.6; the softmax [64,262144] bf16 23.6, 23.6, 23.5, 23.9 against 23.5,
# 23.9, 24.2, 23.8; the soft cap 32.5, 32.7, 32.7, 32.9 against 32.6, 32.7, 33.0, 32.9.
# Measured, not kept, in the same runs: thread 0 issuing the block's first RAMP copies right after it initialises the
# barriers, before the block's __syncthreads (the loader starting at copy RAMP): the group norm [1,512,128,128] 20.0
# twice, 19.9 and 19.8 with the uncounted publisher; [2,1536,64,64] 28.6 and 28.4 (27.8, 27.9 with it); the softmax
# bf16 23.0 and 23.3 (23.7, 23.4); the soft cap 33.1, 33.2 (32.7, 32.9): nothing on top of the uncounted publisher.
#
# Note [the input's lines first out of the L2: measured, not kept]
# Thirty-seventh session (trial commit 866a1af, reverted in the commit after it): knob ``evict`` gave each bulk copy
# an L2 policy (createpolicy.fractional.L2::evict_first, cp.async.bulk ... .L2::cache_hint), so that the input, read
# once, would leave the L2 before the output's dirty lines and more of the output could still sit there when the
# kernel ends (prediction: [1,512,128,128] fp32 20.3 -> ~18.5 us by events, graph replay about the same). One run,
# each root with the knob beside the same layout without it, twice (results/h200/probe_session37_evict.json, plan
# benchmarks/plans/evict_first.sh; a copy of 64 MiB 18.5 us in the same run): group norm [1,512,128,128] fp32 20.2
# and 20.4 us against 20.3 and 20.2; [2,1536,64,64] fp32 27.7, 27.7 against 27.7, 27.6; softmax [64,262144] bf16
# 24.0, 23.9 against 23.4, 23.6; fp32 37.2, 37.3 against 36.2, 35.8; the soft cap 33.0, 33.2 against 32.9, 32.8. No
# gain anywhere, a loss in the softmaxes. An ops run with the knob in every relay root (ops_session37_evict.*, not
# merged into ops.json: the code it ran is gone) found [1,512,128,128] fp32 at 19.7 us (80% of the copy bandwidth, 81%
# by graph replay) with one slot fewer (k=6) and the knob, the noise edge of that row (20.3-20.4 us in the runs
# before; the same k=6 layout without the knob ran 20.4 in ops run AF). 73 relay GPU tests passed with the knob in
# every root, and three verifier cases of it (joint relay, writers of their own, pieces held in registers).
#
# Note [a short lag at the head: measured, not kept]
# The joint consumers write piece u after they have reduced piece u + LAG, so a block's first write waits for its
# piece LAG to land and be reduced. The bf16 softmax's root (trace_session38_softmax.log: k=6, lag 3, ramp 2) reads
# alone for its first 6.1 us; at 5-6 us its reads fall to 1.3 TB/s with no write yet, every slot of every block full
# (25 MB) and none freed. Forty-third session (trial commit 689cadd, reverted in the commit after it): knob
# ``lag0`` started the lag at LAG0 and grew it by one a piece up to LAG, piece u written once piece u + min(LAG, LAG0 +
# u) was reduced (LAG0 1, LAG 3: reduce 0, 1, write 0, reduce 2, 3, write 1, reduce 4, 5, write 2, then one each), a
# fixed schedule with no polling (which Note [writes as soon as their rows resolve: measured, not kept] lost to).
# Prediction: the first write near 4 us instead of 6.1, the dip at 5 us gone, 21.6 -> ~20.8 us. The progress rule
# took the shortest lag, the CPU model of the warps ran every setting it allows (with and without a ramp, two
# launches), and 8 GPU verifier cases passed (results/h200/gpu_tests_session43_head_lag.log). Measured (one run, the
# root, the variants, the root, the variants; results/h200/probe_session43_head_lag.json, plan
# benchmarks/plans/head_lag.sh, which needs the trial's code): slower at every first lag, the more the shorter it
# was. The softmax [64,262144] bf16 root 21.6 and 21.6 us against 25.6, 25.8 (LAG0 0), 24.1, 23.9 (1), 22.9, 23.0
# (2), and 25.2, 24.8 with 7 slots and a lag of 4 from 1; the soft cap 29.8, 30.0 against 33.1, 33.2 (0), 31.6,
# 31.4 (1), 30.8, 30.7 (2); fp32 34.9, 35.2 against 36.0, 36.1 (1). The timeline with a first lag of 1
# (trace_session43_head_lag.log): the first write came at 5.1 us (6.1), but from 4 to 5 us the DRAM moved nothing
# at all, every block's consumers waiting on their first row while the pieces that row needed sat unreduced behind
# other blocks' waits (publish -> own statistic 2.0 us at the median, as before), the last piece landed at 15.9 us
# (13.3) and the span grew to 19.7 us (17.4). A wait for a row that early costs every block, since every row waits
# for pieces of 16 blocks. Not kept: the lag of the roots stays whole from the first piece.
#
# Note [pieces ahead of the slots prefetched into the L2: measured, not kept]
# Forty-fourth session (trial commit a1de6f3, reverted in the commit after it): knob ``pf`` had the loader, once its
# first K copies were issued, prefetch the block's next PF pieces into the L2 (cp.async.bulk.prefetch.L2.global, which
# nothing waits on) and, with each later copy into a freed slot, the piece PF after it; with ``pfe`` the first
# prefetches went out before the first copies. The aim: the bf16 softmax's reads fall to 1.3 TB/s at 5-6 us, every
# slot full and no row resolved (trace_session38_softmax.log), so the DRAM could read the pieces that wait for slots
# then, and their copies into freed slots would come from the L2 while the DRAM writes. 8 GPU verifier cases passed
# (results/h200/gpu_tests_session44_l2_prefetch.log). Measured (one run, the root, the variants, the root, the
# variants; results/h200/probe_session44_l2_prefetch.json, plan benchmarks/plans/l2_prefetch.sh, which needs the
# trial's code), in us:
# - softmax [64,262144] bf16: the root 21.5, 21.6; PF 1 21.8, 21.9; PF 2 22.2, 22.3; PF 2 before the first copies
#   24.3, 23.9; seven slots, a lag of 4 and PF 1 21.8, 21.6;
# - the soft cap: the root 29.9, 30.0; PF 2 29.7, 29.7; PF 4 29.6, 29.8; PF 4 before the first copies 31.6, 31.9;
# - group norm [1,512,128,128] fp32: the root 19.7, 19.5; PF 2 20.1, 20.2; PF 4 20.0, 20.0; PF 2 early 21.8, 23.0;
# - softmax [64,262144] fp32: the root 35.0, 34.7; PF 2 36.1, 36.0.
# The bf16 softmax's timeline with PF 2 (results/h200/trace_session44_l2_prefetch.log): the slots' arrivals still dip
# at 5-6 us (1.4 TB/s), the first write at 6.1 us as before, the last arrival at 14.1 us (13.3) and the span 18.2 us
# (17.4). The prefetches take DRAM time from the copies that the first rows wait on, and the later copies came no
# sooner.
# A second trial in the same session (commit 93b3125, reverted in the commit after it) prefetched only when the DRAM
# would otherwise idle for the block: knob ``pfw`` had the loader, while its next slot was not free, poll that
# slot's ``empty`` and, once every copy it had issued had landed (mbarrier.test_wait on the last one's ``full``),
# prefetch its next piece, up to PF ahead. 8 GPU verifier cases passed (gpu_tests_session44_l2_prefetch_idle.log).
# One run, each twice (probe_session44_l2_prefetch_idle.json, plan l2_prefetch_idle.sh): the bf16 softmax root 21.7,
# 21.7 against PF 1 22.0, 21.7, PF 2 21.6, 21.9, seven slots 22.0, 21.7; the soft cap root 30.1, 30.1 against PF 2
# 30.2, 29.8, PF 4 29.7, 29.7 (and PF 4 as in the first trial 30.0, 29.8); the group norm 19.8, 19.8 against PF 1 19.9,
# 19.9, PF 2 19.7, 19.7; fp32 35.2, 35.3 against 35.0, 35.0. The timeline (trace_session44_l2_prefetch_idle.log) is
# the root's: span 17.4 us, first write at 6.1, last arrival at 13.3. Over both runs the soft cap with four pieces
# ahead ran 29.6-29.8 us against its root's 29.9-30.1, about 1%, still under 80% of the copy bandwidth (29.4 us);
# elsewhere ties or losses. Not kept.
#
# Note [copies in flight after the first: measured, not kept]
# The bf16 softmax's timeline by row (forty-fourth session, from the stamps of trace_session44_l2_prefetch_idle.log,
# whose layout tied the root): row 0's pieces were issued at 0.6 us and seen by the consumers at 1.9-2.8, its last
# partial published at 4.1, its statistic handed over at 5.3-6.4 and its pieces written at 7.0-7.9. A row's last
# publish to its first statistic took 1.0-2.7 us while the reads ran (rows 0-39) and 0.5-0.9 us in the write-only
# tail (rows 42-60): a poll of the scratch's words waits in the same memory queues as the slots' copies, and the
# consumers wait on those statistics at 5-8 us, where the reads dip. Knob ``depth`` (trial commit b6ac9b5, reverted in
# the commit after it) issued each copy after the first K only once the copy DEPTH before it had landed, so that the
# queues stay shorter (a ramp keeps only the first K copies that way). 8 GPU verifier cases passed
# (results/h200/gpu_tests_session44_copies_in_flight.log). One run, each twice (probe_session44_copies_in_flight.json,
# plan benchmarks/plans/copies_in_flight.sh, which needs the trial's code), in us: the softmax [64,262144] bf16 root
# 21.5, 21.7 against DEPTH 1 21.8, 21.7, DEPTH 2 21.6, 21.6, a ramp of 1 with DEPTH 1 22.6, 22.6, two resolvers 22.4,
# 22.6 (with DEPTH 1 22.6, 22.6); the soft cap root 30.2, 30.0 against DEPTH 1 30.4, 30.3, DEPTH 2 30.1, 30.4, a ramp of
# 1 32.5, 32.8; the group norm [1,512,128,128] fp32 root 19.7, 19.9 against DEPTH 1 19.9, 19.7, DEPTH 2 20.0, 19.8.
# With DEPTH 1 the timeline (trace_session44_copies_in_flight.log) kept the root's shape: first write at 6.1 us, last
# arrival at 13.8, span 17.7 us, a row's last publish to its statistic 1.0 us at the median. After the first K, a
# block's copies wait on its slots more than on each other, so the bound changed little. Not kept.
#
# Note [a row's words read more often, or less often: measured, not kept]
# A resolver reads its row's words once a round trip (one ld.relaxed.gpu a lane, looked at once it is back), and in
# the bf16 softmax's root a row's last publish to its first statistic took 1.2 us at the median
# (trace_session38_softmax.log). Forty-sixth session, three trials (each a trial commit, reverted; one probe run each,
# every layout twice, in us; plan benchmarks/plans/polls.sh, which needs the trial's code; the verifier passed every
# variant):
# - knob ``polls`` (c63dc0b): rows of up to 32 pieces, POLLS reads of each lane's word in flight, each reissued once
#   it is back unmarked, the first ones spaced by a chain of dependent shared-memory reads (the kernel contract
#   forbids __nanosleep). Prediction: a word seen after about one trip instead of one and a half. Slower everywhere,
#   whatever POLLS (probe_session46_polls_lds.json): the softmax [64,262144] bf16 root 21.8, 21.6 against 23.4-23.9
#   (POLLS 2, 4, 8); the soft cap 30.8, 30.1 against 33.2-34.5; the group norm [1,512,128,128] fp32 19.7, 19.9
#   against 24.1-24.3; fp32 34.8 twice against 37.1-38.2. With POLLS 4 a row's last publish to its statistic took
#   2.6 us at the median instead of 1.2 (trace_session46_polls_lds.log);
# - the same spaced by dependent integer products (ef9ce9d): worse the more reads in flight
#   (probe_session46_polls_alu.json): bf16 21.7 twice against 27.0, 27.1 (2) and 31.5, 32.0 (4); the soft cap 29.8,
#   29.9 against 40.0, 40.1 and 49.3, 49.5; the group norm 19.9, 19.7 against 25.7 twice and 30.0 twice; that
#   latency 7.3 us at the median with 4 (trace_session46_polls_alu.log);
# - the other way, knob ``backoff`` (24268ad): one read at a time as before, then a chain of 16, 64 or 256 dependent
#   products before the next (probe_session46_backoff.json): bf16 22.0, 21.7 against 21.9 twice (16), 21.9, 22.2
#   (64), 26.6 twice (256); the soft cap 30.3, 29.8 against 29.7, 30.3 (16), 30.5, 30.6 (64), 39.5 twice (256); the
#   group norm 20.0, 19.8 against 19.8, 20.0 (16), 20.0, 19.8 (64), 22.5, 22.7 (256). With 64 that latency was 1.0
#   us at the median, the root's (trace_session46_backoff.log).
# So more reads of the same words in flight make each one slower to see a new store, and fewer gain nothing until
# they cost a whole trip: the root's read a trip stays.
#
# Note [writes as soon as their rows resolve: measured, not kept]
# Same session and trial commit: knob ``eager`` had the joint relay's consumer warps write piece u as soon as its row
# was resolved instead of LAG pieces later: one loop polling ``ready`` of the oldest unwritten piece and ``full`` of
# the next (mbarrier.test_wait), writing when the row was resolved (or, waiting for it, once LAG pieces after it were
# reduced or all were), else reducing when the piece had landed. Every write comes no later than the lag's, so the
# progress rule stood; a CPU model of the warps ran every setting it allows over two launches with a ramp, and five
# GPU verifier cases passed (the limit of the rule: 538 pieces a row, a lag of 4; a prologue evaluated once; several
# resolvers; short last pieces). The bf16 softmax's timeline (trace_session36_softmax.log) put its first write at 6.9
# us of 19.2 (prediction: ~4 us, 23.5 -> ~21.5 us). One run, each root with the knob and with the knob and a lag of
# K - 2, beside the root without it, twice (results/h200/probe_session37_eager.json, plan eager_writes.sh): slower
# everywhere. The softmax [64,262144] bf16 26.7, 26.7 (26.9, 26.7 at lag 4) against 24.1, 24.1; [64,248320] bf16 26.0,
# 26.2 against 23.4, 23.3; fp32 36.9, 37.4 against 36.1, 36.4; the soft cap 38.6, 38.7 (lag 8: 38.7, 38.8) against
# 32.6, 32.8. Its timeline (trace_session37_eager.log): the first write did come sooner (5.1 us) and a row's statistic
# 0.5 us after its last publish (p50; 1.0 before), but the pieces' publishes spread (arrival -> publish at most 4.4 us,
# 1.8 before), every row waits for its slowest piece, the last piece arrived at 20.0 us (14.8) and the span grew to
# 22.5 us. Writing first delays the reduces that other blocks' rows wait for, and 16 warps polling two mbarriers
# take issue slots that try_wait's suspended warps leave free. Writers of their own (Note [writers of their own])
# remain the way to write as soon as a row resolves.
#
# Note [two relay blocks an SM: measured, not kept]
# Forty-first session (trial commit 5b24073, reverted in the commit after it): knob ``bps`` 2 launched two relay
# blocks on every SM (264 blocks, ``__launch_bounds__(NT, 2)``, the progress rules over 264 blocks), each with half
# the consumer warps and half the slots (at most 113 KB of shared memory and 384 threads a block), so that each SM ran
# two pipelines whose pieces wait for their rows independently, and two resolvers. Every layout passed the verifier.
# One run, each root and its layouts twice (results/h200/probe_session41_two_blocks.json, plan
# benchmarks/plans/two_blocks.sh): the softmax [64,262144] bf16 root 21.6 and 21.9 us, two blocks of 3 slots of 32
# KB with a lag of 1 22.2 and 22.0, of 6 of 16 KB 22.7-23.7, with writers of their own 24.8 twice; the group norm
# [1,512,128,128] fp32 root 19.8 and 19.4 (81.2% of the copy bandwidth), two blocks 20.2-22.0; the soft cap root 30.5
# twice, two blocks of 6 slots of 16 KB with a lag of 3 30.4 and 30.3, with a lag of 4 or 12 slots of 8 KB 31.8-32.0.
# Ties at best: one block an SM stays.
#
# Note [relay pieces of 48 KB: an action, not the root]
# The default layout (32 KB pieces, 6 slots, lag 3) was probed against others in the fifteenth session
# (results/h200/probe_session15_relay_pieces.json, three calls, each layout next to the root in the same call). 20,
# 24 or 28 consumer warps over pieces of 20-28 KB lost everywhere (softmax [64,262144] bf16 25.8-28.2 us against
# 24.3-24.5; group norm [1,512,128,128] fp32 24.1-29.3 against 22.4-22.7). Pieces of 48 KB in 4 slots with a lag of 2
# (the same 192 KB of slots) split the 2-byte group norms: faster at [1,512,256,256] bf16 (40.8-41.2 us against
# 41.9-42.7, alternately in one call; 39.6-40.9 with 24 warps) and [1,128,1024,1024] bf16 (151.5, 152.4 against
# 156.2, 157.2), slower at [1,256,512,512] bf16 (73.9, 74.5 against 70.6, 70.6) and [1,512,128,128] bf16 (15.0, 15.1
# against 14.6, 14.6), a tie in fp16, and slower in fp32 ([1,512,256,256] 77.5 against 70.0) and in the softmax
# (25.1-25.3 against 24.3-24.7). So the root stays, and the searches can reach the larger pieces (and 1.5 times the
# consumer warps) as one action each where they win.
def relay_resized(p: dict[str, Any], num: int, den: int) -> dict[str, Any]:
    """``p`` with pieces ``num / den`` times the size in the same shared memory: as many slots as the old slots' bytes
    hold (at least lag + 2), the lag cut to leave two loading (Note [relay pieces of 48 KB: an action, not the
    root])."""
    pe = p["pe"] * num // den
    k = max(3, p["k"] * p["pe"] // pe)
    return {**p, "pe": pe, "k": k} | ({"lag": max(1, min(p["lag"], k - 2))} if "lag" in p else {})


def relay_writers(p: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Writers of their own on or off (Note [writers of their own]): with them the lag goes, and half the consumer
    warps become writers; without them the lag leaves two slots loading (and no piece is held in registers)."""
    if "writers" in p:
        q = {key: v for key, v in p.items() if key not in ("writers", "regs")}
        return "writers True -> False", {**q, "nw": p["nw"] * 2, "lag": max(1, p["k"] - 2)}
    q = {key: v for key, v in p.items() if key != "lag"}
    return "writers False -> True", {**q, "writers": True, "nw": max(1, p["nw"] // 2)}


def relay_actions(p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Piece size, consumer and resolver warps, slots and lag halved or doubled, the lag and the slots one step either
    way, pieces 1.5 times larger or smaller in the same slot bytes, consumer warps 1.5 times more or fewer (the
    caller filters the invalid ones)."""
    acts = scale_knob(p, "pe") + scale_knob(p, "nw") + scale_knob(p, "nc") + scale_knob(p, "k") + scale_knob(p, "lag")
    acts += [(f"pieces {p['pe']} -> {q['pe']} in {q['k']} slots", q)
             for q in (relay_resized(p, 3, 2), relay_resized(p, 2, 3))]
    acts += [knob(p, "nw", p["nw"] * 3 // 2), knob(p, "nw", p["nw"] * 2 // 3), flag_knob(p, "hold"), relay_writers(p)]
    acts += [knob(p, "ramp", r) for r in (1, 2) if r != p.get("ramp")]
    if "writers" in p:  # Note [pieces held in the writers' registers] in relay_held.py
        acts += [held_knob(p, r) for r in (p.get("regs", 0) - 1, p.get("regs", 0) + 1) if 0 <= r <= MAX_REGS]
    if "ramp" in p:
        acts.append((f"ramp {p['ramp']} -> off", {key: v for key, v in p.items() if key != "ramp"}))
    if "lag" in p:
        acts += [knob(p, "lag", p["lag"] + 1), knob(p, "lag", p["lag"] - 1)]
    return acts + [knob(p, "k", p["k"] + 1), knob(p, "k", p["k"] - 1)]


def relay_threads(p: dict[str, Any]) -> int:
    """Threads of a relay block: NW consumer warps, NC resolvers, the loader and the publisher, and with knob
    ``writers`` NW writer warps (Note [writers of their own])."""
    return 32 * (p["nw"] * (2 if "writers" in p else 1) + p["nc"] + 2)


def relay_launch(kernel: str, p: dict[str, Any], args: list[str], isz: int, vbytes: int = 8) -> Launch:
    """The relay's launch: one block per SM, cooperative (every block resident at once, or a launch error). The
    guarantee costs nothing measurable: the same roots launched plainly on an idle H200 (where every block is resident
    either way) ran no faster (twenty-ninth session, probe_session29_launch_kinds.json, each twice: the softmax
    [64, 262144] bf16 23.4-23.6 us plain against 23.0-23.3, fp32 35.9 against 35.5, the soft cap 33.2-33.3 against
    32.8-33.0, the group norm [2, 1536, 64, 64] fp32 30.0 against 28.5), and an empty kernel's launch costs the same
    either way (launch_cost_session29.md)."""
    return launch(kernel, NUM_SMS, relay_threads(p), args, relay_smem(p, isz, vbytes), cooperative=True)


def relay_consts(p: dict[str, Any], cols: int, vbytes: int = 8) -> dict[str, int]:
    pe = p["pe"]
    return {"PE": pe, "PPR": cdiv(cols, pe), "NPL": pe // (32 * p["vec"] * p["nw"]), "NW": p["nw"],
            "NC": p["nc"], "NT": relay_threads(p), "K": p["k"],
            **({"LAG": p["lag"]} if "lag" in p else {}), **({"RAMP": p["ramp"]} if "ramp" in p else {}),
            **({"REGS": p["regs"], "NS": p["k"] + p["regs"]} if "regs" in p else {}),
            "HEAD": _head(p, vbytes)}


# Note [a pack's range test only where a row's last piece is short]
# A consumer lane tests each of its 16-byte packs against its row's end before it reads, reduces or writes it, and
# ptxas keeps each pack in a branch of its own: the softmax's write read one pack from the slot, took its exps and
# stored it before it read the next (four shared-memory round trips a piece where one does), and the reduce took its
# exps pack by pack (SASS of the bf16 softmax's root, compiled with NVRTC for sm_90 and read with nvdisasm). Where COLS
# is a multiple of PE every pack of every piece lies within its row (a warp's share is NPL whole packs of the piece,
# relay_valid), so ``pack_test`` leaves the test out and the write issues its four LDS.128 at once, the exps of a lane
# interleaved. Measured on the H200 (forty-seventh session, benchmarks/plans/guards.sh, one run, each root twice
# beside the same source without the tests; every swap passed the verifier; results/h200/probe_session47_guards_*):
# the soft cap 29.6, 29.5 us against 30.0, 30.2; the softmax [64,262144] bf16 21.6, 21.7 against 21.6, 21.7; fp32
# 34.9, 34.8 against 35.0, 35.1; the group norm [1,512,128,128] fp32 19.7, 19.9 against 19.7, 19.6. So the
# softmaxes' relay leaves the test out where it can, and the group norm's keeps it (a tie at best there). Ops run AL
# (ops_session47_guards.json, 25-iteration searches): the soft cap 29.7 us, 79.7% of the copy bandwidth by events and
# 80.1% by graph replay (30.1 us, 78.2% and 79.8% in run AK); the bf16 softmax 21.2 us, 74.4%, its search taking
# writers of their own (Note [writers of their own for whole pieces] in softmax.py; 21.6, 72.5% in run AI); fp32 35.0
# us, 90.1% (35.1, 89.4% in run AI).
def pack_test(cond: str, cols: int, pe: int) -> str:
    """``if (cond) `` for the block of a consumer's pack where a row's last piece is shorter than PE, else nothing
    (Note [a pack's range test only where a row's last piece is short])."""
    return f"if ({cond}) " if cols % pe else ""


def relay_scratch(rows: str, ppr: int) -> dict[str, tuple[str, bool, bool]]:
    """The pieces' partials, one marked 64-bit word each, then the epoch and the blocks' count (two 32-bit words):
    zeroed once and kept between launches (the Note, marks)."""
    return {"part": (f"{rows} * {ppr * 8} + 8", True, True)}


def relay_kernel(name: str, p: dict[str, Any], params: str, reduce_piece: str, resolve: str, write_piece: str,
                 prefetch: str = "", wrote_slot: bool = False) -> str:
    """The relay kernel ``name`` of layout ``p`` (see the Note): NW consumer warps, NC resolver warps, a loader and a
    publisher warp per block. The caller's header defines T, P (a pack of VEC T), COLS, VEC and ``relay_consts`` (NT:
    NW + NC + 2 warps); the partial type ``V`` with its combine ``Op`` and ``ident()``; and ``pack_stat(V) -> float2`` /
    ``unpack_stat(float2, i) -> V`` (the published word of piece ``i`` of a row: two floats, the second >= 0 or NaN).
    ``params`` are the kernel's own parameters (``x`` the input), before ``part`` and ``rows``. Hooks, with ``row``
    (long long), ``c0`` (the piece's first column), ``sp`` (this warp's packs of the slot) and ``lane`` in scope:

    * ``reduce_piece`` (every consumer lane) sets ``V v``, the warp's partial, the same in every lane, over
      columns ``c0 + wc ...`` (``wc`` = the warp's first column in the piece);
    * ``resolve`` (resolver lane 0, with ``c0`` of its piece) turns the row's combined ``V a`` into ``float2 fin``
      for the writers (and may store per-row outputs where ``c0 == 0``);
    * ``write_piece`` (every consumer lane) reads ``const float2 st`` and stores the warp's share of the piece;
    * ``prefetch`` (every consumer lane, before it waits for the row's statistic) loads what ``write_piece`` needs
      that does not depend on it (a group norm's per-channel weights: Note [weights loaded before the wait] in
      group_norm.py).

    Knob ``hold`` (Note [a row's last piece before the next row's first]): the loader issues a block's first piece of
    a row only once its previous piece, of the row before, has arrived.

    Knob ``writers`` (Note [writers of their own]): NW more warps write the pieces, and the consumers only reduce
    them.

    Knob ``ramp`` (Note [the first copies a few at a time]): the first K copies go RAMP at a time.

    Knob ``regs`` (Note [pieces held in the writers' registers] in relay_held.py): the writers hold REGS pieces in
    registers and free each slot as they take its piece; ``write_piece`` must read its packs as ``sp[i * 32 + lane]``.

    ``wrote_slot``: the consumers store into their share of the slot (Note [a prologue evaluated once, into its slot]
    in softmax.py), so before a slot is freed each lane orders its stores before the copy engine's next fill of it
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
  if (warp == NW + NC) {{  // the loader: the first K pieces, then each slot again once its consumers wrote it
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
  if (warp == NW + NC + 1) {{  // the publisher: each piece's partial, its warps' in warp order, as soon as reduced
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
{writers}  // resolver c: the pieces in slots c, c + NC, ... (every use of a slot, in order): wait until the piece's
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
{consumers}  KF_TRACE_BLOCK(lane == 0, 1);
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
# against 23.6 (exps_in_slot); 23.5, 23.4 against 23.9 and, with Note [a lean reduce] in softmax.py, 21.5, 21.4
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
