"""Group norm (``aten.native_group_norm``): a split reduction over (N, G) groups of C/G channels x H x W.

SD-VAE shapes have N*G = 32 groups for 132 SMs, so every group is split across K blocks.
``split``: pass 1 writes per-chunk (count, mean, M2) to scratch; pass 2 blocks each combine their group's K partials
(Chan's formula, fixed order, so every block gets identical stats) and normalise their chunk.
``sync``: one launch; blocks take tickets (an atomic counter) so a group's K chunks belong to blocks that are all
running; each block publishes its chunk's partial, waits on the group's arrival counter, combines and writes.
``cache=reg`` keeps the chunk in registers (the input is read from DRAM once); ``cache=smem`` keeps it in
dynamic shared memory (also one read; up to 1 KB per thread, so bigger chunks and more of the tensor resident at
once; it lost on the H200: 74.5 us against 54.8 us for ``none`` at [1,512,256,256] bf16, probe_smem_group_norm.json);
``cache=none`` keeps nothing, so more blocks are resident, and re-reads the
chunk, from L2 while the resident chunks fit there.
``cluster``: one thread-block cluster of ``cs`` blocks per group (sm_90); each block keeps its chunk in registers
or shared memory, the blocks exchange their (count, mean, M2) through distributed shared memory behind the cluster
barrier and combine them in rank order (bit-identical stats in every block), then normalise from the cache: one
DRAM read, one launch, no scratch. Only for groups whose chunk fits (<= 16 blocks of <= 128 KB in registers or
<= 226 KB of shared memory). H200 probe (benchmarks/results/h200/probe_cluster_group_norm.json): it wins on
many small groups ([2,1536,64,64] bf16: 26.8 us against the sync root's 46.7 us; [1,512,128,128] fp32: 30.0
against 33.0 us) and loses on 2 MB groups ([1,512,256,256] bf16: 90.2 us against 55.2 us: one 128 KB block per
SM leaves nothing to overlap its loads with its stores). It is a seed, not a root: the search tries it early.
With ``keep`` (Note [a chunk kept in part] in softmax.py) a block keeps only its first ``keep`` packs per thread
in shared memory and re-reads the rest, so more blocks are resident. Seventh-session probe
(probe_kept_in_part.json, same run as each root): [1,512,256,256] bf16 49.2 us against the sync root's 55.4 us;
[2,1536,64,64] bf16 21.1 against 47.4 us; [1,512,128,128] fp32 24.7 against 32.4 us; 4 MB fp32 groups lose
(102.0 against 94.7 us). For groups of 256 KB or more a kept-in-part cluster is a seed (``kept_seed``).
``pipe``: the cluster layout walked by a fixed number of clusters (``clusters``, one block per SM by default):
each block keeps the current group's chunk in shared memory while the loads of its chunk of the next group are
already in flight into registers, so one group's statistics, barrier and stores overlap the next group's loads.
Groups of 256 KB or more. It lost every probe on the H200 (seventh session, probe_pipe.json: [1,512,256,256] bf16
111.8 us against the root's 55.1 us; [2,1536,64,64] bf16 35.2 against 47.3 us, where the cluster runs 26.8 us):
each cluster's walk serialises its groups, and the next group's loads only overlap what is left of this one.
``relay`` (relay.py): groups of >= 384 KB streamed through every SM, their statistics relayed through global memory,
with writers of their own; where a block holds two or more pieces of a 4-byte group its writers also hold pieces in
registers (held_root; Note [pieces held in the writers' registers] in relay_held.py).
``lag`` (gn_lag.py): nothing kept on chip; each group is read for its statistic and re-read from the L2 a group
or more later, when it is normalised. Slower than the relay wherever it was probed, so an action, not a seed.
``stream`` (split, sync, cluster and pipe) makes the last read of the input and the write of the output
streaming accesses (ld/st.global.cs), so the output does not push input that is still to be re-read out of L2.
Note [ticket barrier progress]
A block waits only for blocks holding the other tickets of its group. Tickets are taken in order by blocks that are
already resident, so every group but the newest is fully resident and finishes; the newest one gets the slots they
free. This needs K <= the blocks that can be resident at once; ``valid`` keeps K under half of an estimate of that.
Only integer atomics are used, so results stay bit-identical.
"""
from __future__ import annotations

from math import gcd
from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from .common import (FLOAT_DTYPES, REG_CACHE_BLOCK, REG_CACHE_THREAD, SMS, align_of, best_vec, card_tensors, cdiv,
                     chunk_of, clamp, filter_actions, flag_knob, flat_contiguous, kept_ok, knob, main_input,
                     main_itemsize, make_candidate, output_spec, param_ok, pow2_ceil, same_layout, scale_knob, tma_ok,
                     vec_ok)
from . import gn_lag
from .gn_kernels import SYNC_STATIC_SMEM, generate_chunks, relay_source
from .relay import relay_actions, relay_defaults, relay_launch, relay_scratch, relay_valid, relay_writers
from .target import layout_ok, smem_limit

OPS = ("aten.native_group_norm.default",)
STRATEGIES = ("sync", "split", "cluster", "pipe", "relay", "lag")


def matches(card: OperatorCard) -> bool:
    if card.op not in OPS or not card.inputs:
        return False
    x, y = main_input(card), output_spec(card, 0)
    if y is None or x.dtype not in FLOAT_DTYPES or y.dtype not in FLOAT_DTYPES or x.numel == 0:
        return False
    n, g = card.sizes.get("N", 0), card.sizes.get("G", 0)
    stats = [output_spec(card, i) for i in (1, 2)]
    return (x.is_contiguous() and same_layout(x, y) and g > 0 and card.sizes["C"] % g == 0
            and param_ok(card, "weight", card.sizes["C"]) and param_ok(card, "bias", card.sizes["C"])
            and all(s is None or (s.numel == n * g and flat_contiguous(s) and s.dtype in FLOAT_DTYPES)
                    for s in stats))


# ---------------------------------------------------------------------------------------------------------------------
# parameters


def defaults(card: OperatorCard, strategy: str) -> dict[str, Any]:
    gs = card.sizes["group_size"]
    vec = best_vec(gcd(card.sizes["HxW"], gs), card_tensors(card))
    if strategy == "relay":
        return relay_defaults(main_itemsize(card))
    if strategy == "lag":  # Note [a group re-read from the L2, a few groups later] in gn_lag.py
        return gn_lag.defaults(card)
    block = clamp(pow2_ceil(cdiv(gs, vec * 4)), 64, 512)  # small groups: fewer idle threads
    if strategy == "sync" and gs * main_itemsize(card) >= 2**20:
        # groups of >= 1 MB: re-read the chunk from L2 and stream the last read and the write. [1,512,256,256] ran
        # 54.8 us so against 66.7 us for the best register-cached variant in bf16, 94.9 against 94.0 us in fp32,
        # same run (benchmarks/results/h200/probe_smem_group_norm.json)
        p = {"strategy": "sync", "vec": vec, "block": 512, "bpt": 128, "cache": "none", "stream": True}
        if valid(card, p):
            return p
    if strategy == "sync":  # the fewest registers per thread that keep K <= 64 chunks per group
        for bpt in (16, 32, 64, 128, 256):
            p = {"strategy": "sync", "vec": vec, "block": block, "bpt": bpt, "cache": "reg", "stream": False}
            if valid(card, p) and _sync_k(card, p) <= 64:
                return p
        return p
    ng = card.sizes["N"] * card.sizes["G"]
    if strategy == "cluster":  # the fewest blocks per group whose chunk fits the block's registers, else smem
        for cache in ("reg", "smem"):
            for cs in (2, 4, 8, 16):
                ch = chunk_of(gs, cs, vec)
                p = {"strategy": "cluster", "vec": vec, "block": clamp(pow2_ceil(cdiv(ch, vec * 8)), 128, 1024),
                     "cs": cs, "cache": cache, "stream": False}
                if valid(card, p):
                    return p
        return p
    if strategy == "pipe":  # chunks of <= 128 KB: as many prefetch registers and as much shared memory per block
        cs = next((c for c in (2, 4, 8, 16) if chunk_of(gs, c, vec) * main_itemsize(card) <= 128 * 1024), 16)
        return {"strategy": "pipe", "vec": vec, "block": clamp(pow2_ceil(cdiv(chunk_of(gs, cs, vec), vec * 8)), 128,
                                                                1024),
                "cs": cs, "clusters": max(1, min(ng, SMS // cs)), "stream": False}
    k = clamp(cdiv(8 * SMS, ng), 1, max(1, cdiv(gs, block * vec)))
    return {"strategy": "split", "vec": vec, "block": block, "k": k, "reverse": True, "stream": False}


def root_params(card: OperatorCard) -> dict[str, Any]:
    gs, isz = card.sizes["group_size"], main_itemsize(card)
    if gs * isz >= 384 * 1024 and card.sizes["N"] * card.sizes["G"] * gs * isz >= 16 * 2**20:
        # Note [rows relayed through global memory] in relay.py; eleventh session, probe_relay_gn.json, same runs:
        # [1,512,256,256] bf16 45.3 us against the sync root's 55.2, fp32 75.4 against 94.2; [1,512,128,128] fp32
        # 24.4 against 32.5 (the kept-in-part cluster's 24.7 in the seventh session). Groups of 512 KB to 1 MB
        # since the thirteenth session: [1,512,128,128] bf16 (512 KB) 15.0 us against the kept-in-part cluster's
        # 18.8 in run J's search; [2,1536,64,64] fp32 (768 KB) 31.4 and 30.6 us against the kept-in-part cluster's
        # 34.7 and 34.6, alternately in one run (probe_session13_gn32.json). With writers of their own and seven
        # slots (own_writers) since the twentieth session, and from groups of 384 KB ([2,1536,64,64] bf16)
        # instead of 512 KB. Smaller groups keep the cluster roots that won their probes; the relay is a seed there
        p = writers_root(card)  # Note [relay pieces of 48 KB: an action, not the root]
        if valid(card, p):
            return held_root(card, p) or p
    kept = kept_seed(card)
    if kept is not None:  # groups of >= 256 KB: the kept-in-part cluster (kept_seed), where the first valid default,
        return kept  # the sync kernel, ran [2,1536,64,64] bf16 in 45.9 us against its 20.4 (thirteenth session)
    return next(p for s in STRATEGIES if valid(card, p := defaults(card, s)))


def writers_root(card: OperatorCard) -> dict[str, Any]:
    """The relay with writers of their own that roots groups of >= 384 KB (own_writers of the relay's defaults), and
    held_root starts from."""
    return own_writers(card, defaults(card, "relay"))


def own_writers(card: OperatorCard, p: dict[str, Any]) -> dict[str, Any]:
    """The relay layout ``p`` with writers of their own (Note [writers of their own] in relay_pipeline.py): half its
    consumer warps become writers, the lag goes, and the block takes seven slots where they fit (the most 32 KB pieces
    that do; six for 4-byte groups of which a block holds one piece at most: own_slots). Twentieth session, same runs
    (probe_session20_writers.json), against ``p`` itself: [1,512,256,256] bf16 37.1 us (85% of the copy bandwidth)
    against 42.4; [1,128,1024,1024] bf16 140.1 against 155.3 (with six slots 151.4, five 175.1), fp32 354.1 against
    379.4 (six: 375.2); on the other five group norms probed 0.3-5% faster than ``p``, within the spread of one layout
    timed twice there (19.0 and 19.8 us at [2,1536,64,64] bf16)."""
    q = relay_writers(p)[1]
    q = more if valid(card, more := {**q, "k": own_slots(card, q)}) else q
    # Note [the first copies a few at a time] in relay_pipeline.py
    return ramped if valid(card, ramped := {**q, "ramp": 2}) else q


def pieces_a_block(card: OperatorCard, pe: int) -> int:
    """The most pieces of PE elements of one group that a relay block holds (the group's pieces over the SMs)."""
    return cdiv(cdiv(card.sizes["group_size"], pe), SMS)


def own_slots(card: OperatorCard, p: dict[str, Any]) -> int:
    """The slots of own_writers: six for 4-byte groups of which a block holds one piece at most, else seven
    (Note [six slots where a block holds one piece of a group]); held_root takes the 4-byte groups of two or more."""
    return 6 if main_itemsize(card) == 4 and pieces_a_block(card, p["pe"]) == 1 else 7


# Note [six slots where a block holds one piece of a group]
# Thirty-seventh session. The [1,512,128,128] fp32 group norm's search in an ops run of trial code found its best
# with six slots instead of the root's seven (ops_session37_evict.*), and two probe runs, each layout twice in a run,
# agreed: six slots 19.8, 19.7 us against seven 20.1, 20.1 (results/h200/probe_session37_pieces.json), then 19.7,
# 20.0 against 20.3, 19.9, five 20.2, 19.8, four 22.0, 21.6 (probe_session37_slots.json, plan
# benchmarks/plans/gn_slots.sh): about 0.3 us, 1.5%, at the edge of the noise but on one side of it. Not traced. In
# the same run the other 4-byte groups of which a block holds one piece tied ([2,1536,64,64] fp32 27.5, 27.3 against
# 27.5, 27.8; [1,512,256,256] fp32 67.1, 66.3 against 66.6, 66.6), and the 2-byte ones lost or tied
# ([1,512,256,256] bf16 36.6, 36.7 against 35.6, 36.0; [1,512,128,128] bf16 14.6, 14.5 against 14.5, 14.6), so six
# slots root the first only; where a block holds two or more pieces of a group seven won before (the twentieth
# session, own_writers) and the held root keeps them. Ops run AH (ops_session37_slots.*): [1,512,128,128] fp32 19.7
# us, 79.9% of the copy bandwidth by events (the bar is 80%) and 80.1% by graph replay (77.7% and 78.6% in run AG);
# [2,1536,64,64] fp32 27.8 us (85.1%), [1,512,256,256] fp32 67.1 (94.0%). Measured, not kept, in the same runs: 16
# KB pieces in 13 slots, 24.2-25.1 us (a ramp of 2 or 4), and the root's ramp of 2 as 1 (22.2, 22.3) or 3 (20.5,
# 20.5).
# Thirty-eighth session, also measured and not kept: 28 KB pieces (7,168 elements; 37 a group, the last 16 KB), so
# that no block moves more than 252 KB where 32 KB pieces give 100 blocks 256 KB and 32 blocks 224: 24.4 us twice in
# seven slots and 22.7, 23.5 in six, against the root's 20.0 and 19.9 in the same run
# (results/h200/probe_session38_conv_gn_edges.json, plan benchmarks/plans/conv_gn_edges.sh).


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    root = root_params(card)
    # lag lost every probe (Note [a group re-read from the L2, a few groups later] in gn_lag.py): an action only
    others = [p for s in STRATEGIES if s not in (root["strategy"], "lag") and valid(card, p := defaults(card, s))]
    # the kept-in-part cluster right after the root: it won every probe of the groups it is made for, and an
    # 8-iteration search (a compile's default) only reaches its first three or four seeds; behind a root with
    # writers of their own, the relay without them, which it replaced (ties on three of six rows), and for 4-byte
    # groups the root with half its reducers (fewer_reducers)
    kept = kept_seed(card)
    joint = defaults(card, "relay") if "writers" in root else None
    writers = writers_root(card) if "regs" in root else root  # behind a held root, the root it replaced
    out = [root]
    for p in (writers, fewer_reducers(card, writers), joint, kept):
        if p is not None and p not in out and valid(card, p):
            out.append(p)
    return out + others


def held_root(card: OperatorCard, p: dict[str, Any]) -> dict[str, Any] | None:
    """For 4-byte groups of which a block holds two or more pieces (groups of >= 4.2 MB in 32 KB pieces), the relay
    with writers ``p`` with half its warps, each writer holding two pieces in registers (Note [pieces held in the
    writers' registers] in relay_held.py). Twenty-sixth session, one probe run per row, the root first and last
    (probe_session26_relay_held*.json): [1,128,1024,1024] fp32 (four pieces of a group a block) 281.5 us, 89% of the
    copy bandwidth, against the root's 356.0 and 356.1 (71%); [1,256,512,512] fp32 (two) 133.4 against 136.0-138.7.
    Where a block holds one piece of a group it lost or tied: [1,512,128,128] fp32 21.3-21.6 us against 20.6-21.5,
    [2,1536,64,64] fp32 29.3-30.3 against 28.3-29.4, [1,512,256,256] fp32 70.7 against 68.4-69.7; and in bf16,
    where only four writers can hold a piece, it lost ([1,128,1024,1024] 157.9 against 139.3-140.0)."""
    if main_itemsize(card) != 4 or pieces_a_block(card, p["pe"]) < 2:
        return None
    q = {**p, "nw": 4, "regs": 2}
    return q if valid(card, q) else None


def fewer_reducers(card: OperatorCard, root: dict[str, Any]) -> dict[str, Any] | None:
    """For 4-byte groups, the root with writers of their own (own_writers) with half its reducer and writer warps.
    Twenty-second session, same run per case, against the root timed first and last (probe_session22_gn_fp32.json):
    [2,1536,64,64] fp32 27.7 us against 28.7 and 28.9; [1,512,128,128] fp32 20.8 against 20.8 and 20.0;
    [1,128,1024,1024] fp32 360.3 against 352.5 and 353.1. In the searches of ops run U (ops_session22_gn_fp32.json),
    against the root in the same search: 21.4 against 22.1 us at [1,512,128,128] and 68.6 against 70.3 at
    [1,512,256,256] (the winner at both, as at [1,512,256,256] in run T), 29.2 against 28.5 at [2,1536,64,64], 139.6
    against 136.8 at [1,256,512,512], 359.7 against 355.3 at [1,128,1024,1024]: it wins on groups of 1-4 MB and
    ties or loses by 1-2% elsewhere. In bf16 it lost ([2,1536,64,64] bf16, twentieth session: 54.7% of the copy
    bandwidth against the root's 63.2%), so it is a seed of 4-byte groups only, second in line, not a root."""
    if "writers" not in root or main_itemsize(card) != 4 or root["nw"] < 8:
        return None
    return {**root, "nw": root["nw"] // 2}


def kept_seed(card: OperatorCard) -> dict[str, Any] | None:
    """A cluster that keeps half of each thread's packs in shared memory (Note [a chunk kept in part] in softmax.py),
    for groups of 256 KB or more: chunks of <= 64 KB where 16 blocks allow it, ~16 packs per thread. The probe's best
    layouts were of this shape ([1,512,128,128] fp32: 16 blocks of 256 threads, keep 8 of 16 packs; [2,1536,64,64]
    bf16: 8 blocks of 256, 6 of 12; [1,512,256,256] bf16: 16 of 512 threads, keep 8 of 16, 49.7 us, within 1% of the
    best, probe_kept_in_part.json). Eighth session, same run (probe_conv_window_gn_keep.json): this layout 50.9 us,
    the best (1024 threads, keep 6 or 7 of 8) 49.7 us. In the ops search this seed (iteration 2, 50.6 us) and two of
    its children (50.3, and 50.0 at iteration 38) were the three best, within 1.2%."""
    gs, isz = card.sizes["group_size"], main_itemsize(card)
    if gs * isz < 256 * 1024:
        return None
    vec = best_vec(gcd(card.sizes["HxW"], gs), card_tensors(card))
    cs = next((c for c in (2, 4, 8, 16) if chunk_of(gs, c, vec) * isz <= 64 * 1024), 16)
    block = clamp(pow2_ceil(cdiv(chunk_of(gs, cs, vec), vec * 16)), 128, 1024)
    p = {"strategy": "cluster", "vec": vec, "block": block, "cs": cs, "cache": "smem", "stream": True}
    p["keep"] = max(1, _packs(card, p) // 2)
    return p if valid(card, p) else None


def _packs(card: OperatorCard, p: dict[str, Any]) -> int:
    """Packs per thread of a cluster block's chunk (NIT)."""
    return cdiv(chunk_of(card.sizes["group_size"], p["cs"], p["vec"]), p["block"] * p["vec"])


def _sync_k(card: OperatorCard, p: dict[str, Any]) -> int:
    return cdiv(card.sizes["group_size"], p["block"] * (p["bpt"] // main_itemsize(card)))


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    s, vec, block = p.get("strategy"), p.get("vec", 0), p.get("block", 0)
    if not layout_ok(card, p):
        return False  # Note [templates for the card's architecture] in target.py
    if s == "relay":  # Note [rows relayed through global memory] in relay.py: groups as rows, of >= 256 KB
        gs, isz, ng = card.sizes["group_size"], main_itemsize(card), card.sizes["N"] * card.sizes["G"]
        return (isinstance(vec, int) and vec_ok(vec, gcd(card.sizes["HxW"], gs), card_tensors(card))
                and gs * isz >= 256 * 1024 and relay_valid(p, ng, gs, isz, vbytes=16, smem=smem_limit(card)))
    if s == "lag":
        return gn_lag.valid(card, p)
    if s not in STRATEGIES or block % 32 or not 32 <= block <= 1024:
        return False
    isz = main_itemsize(card)
    if "tma" in p and not tma_ok(p, isz):
        return False  # Note [a chunk fetched by the copy engine] in common.py: a cluster's chunk, 16-byte packs
    gs, hw = card.sizes["group_size"], card.sizes["HxW"]
    if not vec_ok(vec, gcd(hw, gs), card_tensors(card)):
        return False
    ng = card.sizes["N"] * card.sizes["G"]
    if not isinstance(p.get("stream", False), bool):
        return False
    if s == "split":
        k = p.get("k", 0)
        return 1 <= k <= max(1, cdiv(gs, vec)) and ng * k < 2**31 and isinstance(p.get("reverse"), bool)
    if s in ("cluster", "pipe"):
        cs = p.get("cs")
        if cs not in (2, 4, 8, 16) or ng * cs >= 2**31:
            return False
        ch = chunk_of(gs, cs, vec)
        if (cs - 1) * ch >= gs or block > max(128, pow2_ceil(cdiv(ch, vec))):
            return False  # every block of the cluster holds part of the group, and most threads hold some of it
        per_thread = cdiv(ch, block * vec) * vec * isz
        in_regs = per_thread <= REG_CACHE_THREAD and per_thread * block <= REG_CACHE_BLOCK
        in_smem = per_thread * block <= smem_limit(card) - SYNC_STATIC_SMEM
        if s == "pipe":  # the current chunk in shared memory, the next one in registers
            return 1 <= p.get("clusters", 0) <= ng and gs * isz >= 256 * 1024 and in_regs and in_smem
        if "keep" in p:  # Note [a chunk kept in part] in softmax.py
            return kept_ok(p, cdiv(ch, block * vec), isz, smem_limit(card) - SYNC_STATIC_SMEM)
        return {"reg": in_regs, "smem": in_smem}.get(p.get("cache"), False)
    bpt, cache = p.get("bpt", 0), p.get("cache", "reg")
    if bpt not in (16, 32, 64, 128, 256, 512, 1024) or bpt % (vec * isz) or cache not in ("reg", "smem", "none"):
        return False
    if cache == "reg" and (bpt > REG_CACHE_THREAD or bpt * block > REG_CACHE_BLOCK):
        return False
    if cache == "smem" and bpt * block > smem_limit(card) - SYNC_STATIC_SMEM:
        return False
    regs = 40 + (bpt // 4 if cache == "reg" else 0)  # rough estimate of registers per thread
    per_sm = min(2048 // block, 65536 // (block * regs))
    if cache == "smem":  # Note [ticket barrier progress]: the estimate must not count blocks that cannot be resident
        per_sm = min(per_sm, (smem_limit(card) + 1024) // (bpt * block + SYNC_STATIC_SMEM))
    resident = SMS * max(1, per_sm)
    return _sync_k(card, p) <= resident // 2 and ng * _sync_k(card, p) < 2**31


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    acts = [(f"strategy {p['strategy']} -> {s}", defaults(card, s)) for s in STRATEGIES if s != p["strategy"]]
    if p["strategy"] == "relay":
        return filter_actions(card, p, acts + relay_actions(p), valid)
    if p["strategy"] == "lag":
        return filter_actions(card, p, acts + gn_lag.actions(p), valid)
    for name in ("vec", "block", "k", "bpt", "cs", "clusters"):
        acts += scale_knob(p, name)
    if "reverse" in p:
        acts.append(knob(p, "reverse", not p["reverse"]))
    acts.append(knob(p, "stream", not p.get("stream", False)))
    whole = {k: v for k, v in p.items() if k not in ("keep", "tma")}
    if p["strategy"] in ("sync", "cluster"):
        caches = ("reg", "smem", "none") if p["strategy"] == "sync" else ("reg", "smem")
        acts += [knob(whole, "cache", c) for c in caches if c != p.get("cache", "reg")]
    if p["strategy"] == "cluster" and p.get("cache") == "smem":  # Note [a chunk kept in part] in softmax.py
        if "keep" in p:
            acts += scale_knob(p, "keep") + [knob(p, "keep", p["keep"] + 1),
                                             (f"keep {p['keep']} -> all", {k: v for k, v in p.items() if k != "keep"})]
        else:
            acts.append(knob(p, "keep", max(1, _packs(card, p) // 2)))
        acts.append(flag_knob(p, "tma"))
    return filter_actions(card, p, acts, valid)


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    if not valid(card, p):
        raise ValueError(f"group_norm params {p} are not valid for {card.op} sizes {card.sizes}")
    if p["strategy"] == "relay":
        ng, isz = card.sizes["N"] * card.sizes["G"], main_itemsize(card)
        source, args = relay_source(card, p)
        launches = [relay_launch("gn_relay", p, args + ["scratch:part", f"i64:{ng}"], isz, vbytes=16)]
        desc = "group_norm relay " + " ".join(f"{k}={v}" for k, v in sorted(p.items()) if k != "strategy")
        return make_candidate(source, launches, desc, p, align_of(p["vec"], card_tensors(card)),
                              relay_scratch(str(ng), cdiv(card.sizes["group_size"], p["pe"])))
    if p["strategy"] == "lag":
        return gn_lag.generate(card, p)
    return generate_chunks(card, p)
