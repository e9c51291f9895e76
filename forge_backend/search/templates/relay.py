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
prologue run from the relay's slots] in softmax_relay.py), in 16-byte packs, rows whose byte length is a multiple of 16.

This module holds the layouts' rules, knobs, launch and constants; the device code is relay_pipeline.py's, and so are
the Notes on the knobs it runs: Note [writers of their own], Note [a row's last piece before the next row's first]
(``hold``) and Note [the first copies a few at a time] (``ramp``).

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
from .common import SMEM_LIMIT, SMS, cdiv, flag_knob, knob, launch, scale_knob
from .relay_held import MAX_REGS, held_head_bytes, held_knob, held_progress_ok, held_regs

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
    ppr = cdiv(cols, pe)
    if not held_regs(p, pe // (32 * vec * nw), relay_threads(p), isz):
        return False  # Note [pieces held in the writers' registers] in relay_held.py
    return relay_smem(p, isz, vbytes) <= smem - 1024 and ppr <= 1024 and relay_progress_ok(p, ppr, SMS) and \
        rows * ppr < 2**40


def relay_progress_ok(p: dict[str, Any], ppr: int, blocks: int) -> bool:
    """The progress rule of ``p``'s layout (held pieces, writers of their own, or a lag) for ``ppr`` pieces a row over
    ``blocks`` blocks: the rule the kernel checks again for its own grid as it starts."""
    k, nc = p["k"], p["nc"]
    if "writers" in p:
        regs = p.get("regs", 0)
        return held_progress_ok(ppr, blocks, k, regs, nc) if regs else writers_progress_ok(ppr, blocks, k, nc)
    return progress_ok(ppr, blocks, k, p["lag"], nc)


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
# writers of their own (Note [writers of their own for whole pieces] in softmax_relay.py; 21.6, 72.5% in run AI); fp32
# 35.0 us, 90.1% (35.1, 89.4% in run AI).
def pack_test(cond: str, cols: int, pe: int) -> str:
    """``if (cond) `` for the block of a consumer's pack where a row's last piece is shorter than PE, else nothing
    (Note [a pack's range test only where a row's last piece is short])."""
    return f"if ({cond}) " if cols % pe else ""


def relay_scratch(rows: str, ppr: int) -> dict[str, tuple[str, bool, bool]]:
    """The pieces' partials, one marked 64-bit word each, then the epoch and the blocks' count (two 32-bit words):
    zeroed once and kept between launches (the Note, marks)."""
    return {"part": (f"{rows} * {ppr * 8} + 8", True, True)}
