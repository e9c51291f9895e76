"""Knob ``regs`` of the relay's writers: pieces held in the writers' registers, so that a slot is free before its row
is resolved.

Note [pieces held in the writers' registers]
With writers of their own (Note [writers of their own] in relay_pipeline.py) a piece holds its slot from its load until
its row's statistic is resolved and the writers have written it. At [1,128,1024,1024] fp32 a group is 512 pieces of
32 KB, about four a block, and a piece waits about 13 us from its publish to its statistic (twentieth session's
timeline): four of a block's seven slots wait on each group while three load, and the steady state streams at 76% of the
copy bandwidth. The bytes a block can hold bound how far its loads run ahead of the statistics; the slots are all the
shared memory, but the register file (256 KB an SM) mostly idles.

With REGS = R, writer warp j copies its share of a piece from the slot into registers as soon as the piece is reduced
and frees the slot at once, so a block holds K pieces in slots and R more in its writers' registers (R x PE / NW
elements a writer lane). Writer j holds pieces u .. u + R - 1: it waits for piece u's statistic, writes it from
registers, then takes piece u + R from its slot into the registers u's values leave. The register array is indexed
by u mod R, so the loop over pieces is unrolled R times.

A slot is now freed before its piece is resolved, so what the writers' wait used to order needs its own order:

* the slot's ``empty`` counts the publisher beside the NW writers: it reads the warps' partials of the slot
  (``wpart``) once the slot is ``reduced``, and a late publisher would read the next piece's partials, or find
  ``reduced`` two phases on (``try_wait.parity`` reads that as done: the phase misread of the relay's Note);
* the resolvers wait for the scratch's words only, never for a slot: resolver c's wait on the slot's ``reduced`` would
  need the same arrival, and a resolver stays on one row until the whole grid has published it, so it would hold
  the block's later slots (the model deadlocks that way). Where a resolver's piece is in the row it resolved last, it
  waits for its own piece's word instead;
* the statistics and their ``ready`` mbarriers are a ring of NS = K + R entries, indexed by piece mod NS. The resolver
  of piece u writes entry u mod NS only once piece u is published, so reduced, so loaded after the writers took piece
  u - K, which they do after reading the statistic of piece u - K - R, the entry's previous user.

Measured (H200, twenty-sixth session, one probe run per case, the root first and last;
results/h200/probe_session26_relay_held*.json): [1,128,1024,1024] fp32 (four 32 KB pieces of a group a block)
**281.5 us, 89% of the copy bandwidth**, with four writers holding two pieces each, and 297.4 us with eight writers
holding one, against the root's 356.0 and 356.1 (71%); four writers holding one 301.5, holding none 363.1. So the
held bytes, not the warps, made the difference. At two pieces a block ([1,256,512,512] fp32) 133.4 us against
136.0-138.7 (none held, four writers: 139.4). It does not help where a block holds one piece of a group
([1,512,128,128] fp32 21.3-21.6 us against 20.6-21.5; [2,1536,64,64] fp32 29.3-30.3 against 28.3-29.4;
[1,512,256,256] fp32 69.6-70.7 against 68.4-69.7), nor in bf16, where only four writers have the registers to hold a
piece ([1,128,1024,1024] bf16 157.9 against 139.3-140.0; [1,512,256,256] 46.6 against 35.2-35.5; the softmax
[64,262144] 33.8 against the joint relay's 23.1-23.6). It is the root of 4-byte groups a block holds two or more
pieces of (group_norm.held_root) and an action of every relay with writers. Ops runs X and Y
(ops_session26_gn_big.json, ops_session26_gn_8mb.json): [1,128,1024,1024] fp32 283.5 us, 89%, 1.53x Inductor;
[1,256,512,512] fp32 133.8 us, 94%, 1.75x Inductor. Nsight Compute (results/h200/ncu/gn_relay_fp32_*): the held
root moves 3.73 TB/s from DRAM (77.5% of its peak) in 280.6 us, the writers root 2.96 TB/s in 353.6 us; most of the
held root's stall samples now wait on shared memory (64.5% of its 11.8 cycles between issues), not on statistics.

Progress: a block's pieces of one row must all be reduced before the first of them is resolved; the writers take R
pieces before they wait for any statistic, so K + R >= ceil(PPR / NB) (held_progress_ok; without regs the writers need
K >= ceil(PPR / NB) + 1). tests/test_relay_protocol.py runs the model of the warps with knob regs, checks what every
read finds (the slot's piece, the partials', the statistic's), finds every setting the rule allows running to the
end and one place fewer deadlocking, and fails without the ring, without the publisher's arrival, or with the
resolvers waiting for slots.
"""
from __future__ import annotations

from typing import Any

from .common import cdiv

SLOT_PACK = "sp[i * 32 + lane]"  # how a write hook reads pack i of its warp's share of the slot (relay_kernel)
MAX_REGS = 4
# registers a writer lane needs beside the held packs, by the input's item size. With the registers a lane may have
# (lane_registers), NVRTC (13.x, sm_90) spilled where 4-byte layouts had 32 (8 writers of 8 fp32 packs holding 2
# pieces: 64 + 32 = 96) or 2-byte ones 64 (8 writers of 8 bf16 packs holding 1), and not where they had 40 (4 writers
# of 16 fp32 packs holding 2) or 104 (4 of 16 bf16 packs holding 1); tests/test_relay_held.py compiles every layout
# the rule lets through and finds no spill
REGS_SPARE = {4: 40, 2: 72}


def lane_registers(threads: int) -> int:
    """The registers each lane of a block of ``threads`` may use at one block an SM (``__launch_bounds__(NT, 1)``):
    the register file is four sub-partitions of 16384, and a sub-partition holds every fourth warp, so the fullest one
    has ceil(warps / 4) of them; rounded down to the allocation unit of 8 (ptxas gave 19 warps 96 registers, not
    65536 / 608 = 107, and 11 warps 168)."""
    return min(255, 16384 // (cdiv(cdiv(threads, 32), 4) * 32)) // 8 * 8


def held_regs(p: dict[str, Any], npl: int, threads: int, isz: int) -> bool:
    """``regs`` within 1..MAX_REGS, with writers of their own, and the held packs (4 registers each) plus REGS_SPARE
    within a lane's registers (lane_registers), so that the held pieces are not spilled to local memory."""
    regs = p.get("regs")
    if regs is None:
        return True
    if isinstance(regs, bool) or not isinstance(regs, int) or not 1 <= regs <= MAX_REGS or "writers" not in p:
        return False
    return regs * npl * 4 + REGS_SPARE.get(isz, max(REGS_SPARE.values())) <= lane_registers(threads)


def held_progress_ok(ppr: int, blocks: int, k: int, regs: int, nc: int) -> bool:
    """The relay's progress rule with writers that hold ``regs`` pieces (the Note, progress); no more resolvers than
    slots, as everywhere in the relay."""
    return k + regs >= cdiv(ppr, blocks) and nc <= k


def held_knob(p: dict[str, Any], regs: int) -> tuple[str, dict[str, Any]]:
    """``p`` with ``regs`` pieces held (0: the key dropped, the plain writers)."""
    q = {key: v for key, v in p.items() if key != "regs"} | ({"regs": regs} if regs else {})
    return f"regs {p.get('regs', 0)} -> {regs}", q


def held_head_bytes(p: dict[str, Any]) -> int:
    """The ring's R extra ``ready`` mbarriers (rounded up to an even count, so that the partials behind them stay
    16-byte aligned) and statistics, 8 bytes each."""
    regs = p.get("regs", 0)
    return (regs + regs % 2) * 8 + regs * 8


def held_parts(held: bool) -> dict[str, str]:
    """The parts of relay_kernel's source that knob regs changes (the Note), without it and with it: where ``empty``
    and the warps' partials start (after NS ``ready`` mbarriers; the partials 16-byte aligned), the statistics'
    entry a resolver uses (``si``) and their count, the arrivals that free a slot, the ring's extra mbarriers, the
    publisher's arrival, the resolver's wait before its piece (its slot's ``reduced``, or none), and its wait for its
    own piece's word where it reuses a row's statistic."""
    if not held:
        return {"empty_at": "full + 3 * K", "wpart_at": "full + 4 * K", "stat_n": "K", "si": "sl",
                "empty_count": "NW", "ring_init": "", "publisher_free": "", "own_word": "",
                "resolver_wait": """
      const int sl = (int)(u % K);
      bar_wait(reduced + sl, (unsigned)(u / K) & 1u);"""}
    return {"empty_at": "full + 3 * K + REGS", "wpart_at": "full + 4 * K + (REGS + 1) / 2 * 2", "stat_n": "NS",
            "si": "ss", "empty_count": "NW + 1",
            "ring_init": "\n    for (int j = K; j < NS; ++j) bar_init(ready + j, 1);",
            "publisher_free": "\n      if (lane == 0) bar_arrive(empty + sl);  // its partials are read",
            "resolver_wait": """
      const int ss = (int)(u % NS);""",
            "own_word": """
        for (unsigned spins = 0; !__all_sync(0xffffffffu, (unsigned)(get_part(part + g) >> 63) == mark); ++spins)
          if (spins > (1u << 26)) __trap();  // its own piece published: reduced, so the writers are past entry ss"""}


def held_writer_warps(write_piece: str, prefetch: str) -> str:
    """The writer warps of knob ``regs`` (the Note): pieces u .. u + REGS - 1 of a writer's share in ``held``, the
    write hook reading them from there instead of the slot."""
    if SLOT_PACK not in write_piece:
        raise ValueError(f"a write hook for knob regs reads its packs as {SLOT_PACK}")
    write = write_piece.replace(SLOT_PACK, "held[r][i]")
    return f"""  if (warp >= NW + NC + 2) {{  // writer warp j = warp - (NW + NC + 2): consumer warp j's columns
    const int wc = (warp - NW - NC - 2) * (PE / NW);
    P held[REGS][NPL];  // Note [pieces held in the writers' registers]: pieces u .. u + REGS - 1, at u mod REGS
    auto take = [&](long long t, P (&h)[NPL]) {{  // piece t from its slot into h, then the slot freed
      const int sl = (int)(t % K);
      bar_wait(reduced + sl, (unsigned)(t / K) & 1u);
      const P* sp = reinterpret_cast<const P*>(slots + sl * PE + wc);
#pragma unroll
      for (int i = 0; i < NPL; ++i) h[i] = {SLOT_PACK};
      __syncwarp();  // every lane has read the slot
      if (lane == 0) bar_arrive(empty + sl);
    }};
#pragma unroll
    for (int r = 0; r < REGS; ++r)
      if (r < n) take(r, held[r]);
    for (long long u0 = 0; u0 < n; u0 += REGS) {{
#pragma unroll
      for (int r = 0; r < REGS; ++r) {{
        const long long u = u0 + r;
        if (u < n) {{
          const long long g = blockIdx.x + u * NB, row = g / PPR;
          const int c0 = (int)(g - row * PPR) * PE, ss = (int)(u % NS);{prefetch}
          bar_wait(ready + ss, (unsigned)(u / NS) & 1u);
          const float2 st = stat[ss];{write}
          if (u + REGS < n) take(u + REGS, held[r]);
          KF_TRACE(warp == NW + NC + 2 && lane == 0, 4, u);
        }}
      }}
    }}
    KF_TRACE_BLOCK(lane == 0, 1);
    return;
  }}
"""
