"""The ``resident`` strategy: a softmax whose whole input fits on chip, read once, then written once.

Note [a tensor held on chip whole]
The relay (relay.py) streams rows through K slots per SM, so a slot waits on chip for its row's exchange while the
loads behind it wait for the slot. Its timeline at [64, 262144] bf16 (twentieth session, trace_session20.json) reads
no write for the first 7.4-8.2 us, the last arrival at 15.4-15.9 us and a 4 us tail of writes: between the head and
the tail, reads and writes together move about 2.7 TB/s, well under the copy bandwidth, because each freed slot waits
on a statistic that waits on pieces of other blocks.

That input is 32 MB. One block per SM holds 227 KB of shared memory and 256 KB of registers, 63 MB over the H200's
132 SMs, so 32 MB fit: here block ``b`` takes the ``EP`` packs (16 bytes each) from ``b * EP`` of the flattened
tensor, the first ``SP`` of them into shared memory by bulk copies of ``CH`` packs (each counted on its own mbarrier),
the rest (``RPT`` packs a thread) into registers. Nothing is freed, so no load waits for a slot. As each copy lands,
the threads fold its packs into an online (max, sum of exp) per row segment; a block's packs span at most two rows
(EP <= a row's packs). Warp 0 publishes the block's two partials as marked words (relay.py's put_part and epoch: the
scratch is kept between launches, Note [rows relayed through global memory], marks), then polls the words of the
blocks that share its rows, combines them in block order (bit-identical in every block and run) and the block writes
its packs from chip. Every block must be resident at once (a block polls its neighbours): the launch is cooperative,
as the relay's. A fused prologue whose values are values of the input's type (softmax.py's _once_ok, the soft cap) is
evaluated once, as a pack is folded, and its rounded values replace the raw pack in place (the same thread writes and
later reads each pack, and no copy engine writes the buffer again, so no fence is needed).

Measured (twenty-first session, one H200, same run as each case's relay root; results/h200/probe_session21_resident*
and trace_session21_resident.*), it lost everywhere: softmax [64, 262144] bf16 28.0 us at best (46.0 at worst) over
the layouts probed, against the relay's 24.1-24.3; [64, 248320] bf16 33.9-34.7 against 23.7; the soft cap 62.8-70.4
against 35.8-36.2; the sampling softmax bf16 -> fp32 58.9-65.4 against 33.0-33.6. The timeline of a block's thread 0 (35.4 us; 14 copies of
16 KB issued at once) has the first copy landing at 8.2 us and the last at 16.9 (32 MiB read in about 15 us, 2.2
TB/s), the fold of the last packs ending near 22 us, the statistics at 24 us and the writes at 31 us. A kernel that
only reads 1 GiB reads at 4.2-4.3 TB/s, by bulk copies in either order or by plain loads (benchmarks/read_bandwidth.py,
read_bandwidth_session21_1024mib.md; 3.7-3.9 TB/s at 256 MiB, times that hold CuPy's launch, so bounds), so these
reads ran at about half the DRAM's rate at that size. The twenty-second session measured reads of this size alone, the
start event queued behind the flush (read_bandwidth_session22_32mib.md, _64mib.md): 32 MiB read in 11.6-11.8 us by
events (2.85-2.89 TB/s, the kernel's launch on the GPU included), by bulk copies of 16 or 32 KB, 2-6 in flight, in
either order, or by plain loads; 64 MiB in 18.8-19.1 us (3.5 TB/s); a copy of 32 MiB into 32 MiB in 17.8 us. So much of
the gap is the size: a kernel that reads 32 MB before it writes any of it needs about 11.7 us to read, plus about 8 to
write, and cannot reach 80% of the copy bandwidth at [64, 262144] bf16 (19.7 us) however it reads; the reads and the
writes, one after the other, pay both phases in full. Copies a few at a time (Note [copies in flight]) brought the first
landing to 4.4 us and the kernel to 28.0 us at best (512 threads, two copies in flight); a loader warp of its own did
not help (30.5-34.3 us). So this is an action of the softmax's search (``strategy -> resident``), not a seed.

Note [copies in flight]
Knob ``depth``: at most DEPTH of a block's copies in flight, the next issued as each lands (by thread 0 between its
folds, or with knob ``loader`` by a warp that does nothing else). Without it every copy is issued at the start.
"""
from __future__ import annotations

from typing import Any

from ...contract import Launch
from .common import SMEM_LIMIT, SMS, cdiv, flag_knob, knob, launch

RESIDENT_KEYS = ("nt", "rpt", "ch")  # and, optional, ``depth`` and ``loader`` (Note [copies in flight])
_STATIC_SMEM = 1024  # the kernel's own __shared__: mbarriers (<= 64), the reduction scratch, two statistics


def resident_defaults(rows: int, cols: int, isz: int) -> dict[str, Any]:
    """1024 threads, copies of 16 KB, and the fewest packs a thread holds in registers that leave the rest within
    shared memory."""
    p = {"strategy": "resident", "vec": 16 // isz, "nt": 1024, "rpt": 0, "ch": 1024}
    ep = block_packs(rows, cols, isz)
    p["rpt"] = max(0, cdiv(ep - _smem_packs_max(), compute_threads(p)))
    return p


def block_packs(rows: int, cols: int, isz: int) -> int:
    """EP: the 16-byte packs of the flattened tensor each block takes (the last block may take fewer)."""
    return cdiv(rows * cols * isz // 16, SMS)


def _smem_packs_max(smem: int = SMEM_LIMIT) -> int:
    return (smem - _STATIC_SMEM) // 16


def compute_threads(p: dict[str, Any]) -> int:
    """The threads that fold and write: all of them, or all but a loader warp (knob ``loader``)."""
    return p["nt"] - 32 * ("loader" in p)


def smem_packs(p: dict[str, Any], rows: int, cols: int, isz: int) -> int:
    """SP: a block's packs held in shared memory (the rest of its EP are in registers)."""
    return max(0, block_packs(rows, cols, isz) - p["rpt"] * compute_threads(p))


def resident_valid(p: dict[str, Any], rows: int, cols: int, isz: int, smem: int = SMEM_LIMIT) -> bool:
    """Only the strategy's knobs, in range: 16-byte packs, rows of whole packs, a block's packs within two rows
    (EP <= a row's packs), the shared part within shared memory in at most 64 copies, at most 4 packs a thread in
    registers (16 of its 64 registers at 1024 threads); optionally 1-64 copies in flight (``depth``) and a loader
    warp (``loader``, present or absent)."""
    if set(p) - {"depth", "loader"} != {"strategy", "vec", *RESIDENT_KEYS} or p.get("loader", True) is not True:
        return False
    nt, rpt, ch, vec, depth = (p.get(k, 1) for k in ("nt", "rpt", "ch", "vec", "depth"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (nt, rpt, ch, vec, depth)):
        return False
    if vec * isz != 16 or cols % vec or nt not in (256, 512, 1024) or not 0 <= rpt <= 4 or not 64 <= ch <= 4096:
        return False
    if not 1 <= depth <= 64:
        return False
    ep, sp = block_packs(rows, cols, isz), smem_packs(p, rows, cols, isz)
    return ep <= cols // vec and sp <= _smem_packs_max(smem) and cdiv(sp, ch) <= 64 and rows * cols < 2**40


def resident_actions(p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Threads halved or doubled with the same register bytes a block, one pack a thread more or fewer in registers,
    copies twice or half as large (the caller filters the invalid ones)."""
    acts = [(f"nt {p['nt']} -> {nt}", {**p, "nt": nt, "rpt": p["rpt"] * p["nt"] // nt})
            for nt in (p["nt"] // 2, p["nt"] * 2) if p["rpt"] * p["nt"] % nt == 0]
    acts += [knob(p, "rpt", p["rpt"] + 1), knob(p, "rpt", p["rpt"] - 1)]
    acts += [knob(p, "depth", d) for d in (2, 4, 8) if d != p.get("depth")] + [flag_knob(p, "loader")]
    if "depth" in p:
        acts.append((f"depth {p['depth']} -> all", {k: v for k, v in p.items() if k != "depth"}))
    return acts + [knob(p, "ch", p["ch"] * 2), knob(p, "ch", p["ch"] // 2)]


def resident_consts(p: dict[str, Any], rows: int, cols: int, isz: int) -> dict[str, int]:
    sp = smem_packs(p, rows, cols, isz)
    nch = max(1, cdiv(sp, p["ch"]))
    return {"NT": p["nt"], "NCT": compute_threads(p), "RPT": p["rpt"], "CH": p["ch"],
            "EP": block_packs(rows, cols, isz), "SP": sp, "NCH": nch, "DEPTH": min(nch, p.get("depth", nch)), "CP": cols // p["vec"],
            "NPK": rows * cols // p["vec"]}


def resident_launch(kernel: str, p: dict[str, Any], args: list[str], rows: int, cols: int, isz: int) -> Launch:
    """One block per SM, cooperative (every block resident at once, or a launch error)."""
    return launch(kernel, SMS, p["nt"], args, smem_packs(p, rows, cols, isz) * 16, cooperative=True)


def resident_scratch() -> dict[str, tuple[int, bool, bool]]:
    """Two marked 64-bit partials a block, then the epoch and the blocks' count: zeroed once, kept between launches."""
    return {"part": (SMS * 2 * 8 + 8, True, True)}


def resident_kernel(name: str, params: str, once: bool, write: str) -> str:
    """The resident softmax kernel (see the Note). The caller's header defines T, P (a pack of VEC T), PO, TO, VEC,
    ``resident_consts``, relay.py's helpers (put_part, get_part, part_value, relay_epoch, relay_mark, bar_*,
    slot_load) and ``stat_weight(sum)``; with ``once``, also ``xv(T) -> float`` (the prologue) and ``narrow(float)
    -> T``: each pack is replaced by its prologue's rounded values as it is folded, where it lies. ``write`` stores the
    outputs of ``const P p`` at ``y + gp * VEC`` from ``const float m, w`` (the row's max and ``stat_weight`` of its
    sum)."""
    fold = """
#pragma unroll
      for (int j = 0; j < VEC; ++j) p.v[j] = narrow(xv(p.v[j]));""" if once else ""
    back_smem, back_reg = ("\n      sm[j] = p;", "\n      rp[i] = p;") if once else ("", "")
    return f"""
// A pack into a thread's (max, sum of exp): the sum is rescaled only when the max grows, which after a thread's first
// packs is rare, and the exps of a pack share one test of the max against -inf.
__device__ __forceinline__ float2 fold_pack(float2 ms, const P& p) {{
  float pm = -CUDART_INF_F;
#pragma unroll
  for (int j = 0; j < VEC; ++j) pm = fmaxf(pm, to_f(p.v[j]));
  if (pm > ms.x) ms = make_float2(pm, ms.y * sexp(ms.x, pm));
  if (ms.x != -CUDART_INF_F) {{
#pragma unroll
    for (int j = 0; j < VEC; ++j) ms.y += __expf(to_f(p.v[j]) - ms.x);
  }}
  return ms;
}}

extern "C" __global__ __launch_bounds__(NT, 1) void {name}({params},
    unsigned long long* __restrict__ part, long long rows) {{
  extern __shared__ __align__(128) unsigned char dsm[];
  P* sm = reinterpret_cast<P*>(dsm);
  __shared__ __align__(8) unsigned long long full[NCH];
  __shared__ float2 red2[32];
  __shared__ float2 stat[2];
  __shared__ unsigned fin;
  const long long NB = gridDim.x;
  const long long f = (long long)blockIdx.x * EP;  // this block's first pack
  const int cnt = (int)max(0LL, min((long long)EP, NPK - f));  // its packs: SP in shared memory, then registers
  const int scnt = min(SP, cnt);
  const long long r0 = f / CP, bnd = (r0 + 1) * CP;  // its first row, and the first pack of the next
  unsigned* ctl = reinterpret_cast<unsigned*>(part + 2 * NB);
  const int tid = threadIdx.x;
  auto issue = [&](int c) {{  // copy c into its place, counted on its own mbarrier
    const int n = min(CH, scnt - c * CH);
    if (c < NCH && n > 0) slot_load(sm + c * CH, x + (f + c * CH) * VEC, (unsigned)(n * 16), full + c);
  }};
  KF_TRACE_BLOCK(tid == 0, 0);
  const unsigned epoch = tid == 0 ? relay_epoch(ctl) : 0u;  // Note [the epoch read before the first copies] (relay.py)
  if (tid == 0) {{
    fin = 0;
    for (int c = 0; c < NCH; ++c) bar_init(full + c, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (int c = 0; c < DEPTH; ++c) issue(c);
    KF_TRACE(true, 0, 0);
  }}
  P rp[RPT > 0 ? RPT : 1];
#pragma unroll
  for (int i = 0; i < RPT; ++i) {{
    const int j = SP + i * NCT + tid;
    if (tid < NCT && j < cnt) rp[i] = ldp<T, VEC>(x + (f + j) * VEC);
  }}
  unsigned mark = 0;
  if (tid < 32) mark = relay_mark(epoch, ctl, &fin, 1);
  __syncthreads();  // the mbarriers are initialised
  float2 a0 = make_float2(-CUDART_INF_F, 0.f), a1 = a0;  // this thread's (max, sum) of row r0 and of row r0 + 1
  if (NCT < NT && tid == NCT && DEPTH < NCH)  // a loader warp of its own (Note [copies in flight])
    for (int c = 0; c < NCH; ++c) {{
      bar_wait(full + c, 0u);
      issue(c + DEPTH);
    }}
  for (int c = 0; c < NCH && tid < NCT; ++c) {{
    const int end = min((c + 1) * CH, scnt);
    if (c * CH >= end) break;
    bar_wait(full + c, 0u);
    KF_TRACE(tid == 0, 1, c);
    if (NCT == NT && DEPTH < NCH && tid == 0) issue(c + DEPTH);  // Note [copies in flight]
    for (int j = c * CH + tid; j < end; j += NCT) {{
      P p = sm[j];{fold}{back_smem}
      if (f + j < bnd) a0 = fold_pack(a0, p); else a1 = fold_pack(a1, p);
    }}
  }}
#pragma unroll
  for (int i = 0; i < RPT; ++i) {{
    const int j = SP + i * NCT + tid;
    if (tid < NCT && j < cnt) {{
      P p = rp[i];{fold}{back_reg}
      if (f + j < bnd) a0 = fold_pack(a0, p); else a1 = fold_pack(a1, p);
    }}
  }}
  KF_TRACE(tid == 0, 2, 1);
  a0 = group_all<NT, NT>(a0, MaxSum(), red2);
  a1 = group_all<NT, NT>(a1, MaxSum(), red2);
  if (tid < 32) {{
    if (tid == 0) {{ put_part(part + 2 * blockIdx.x, a0, mark); put_part(part + 2 * blockIdx.x + 1, a1, mark); }}
    KF_TRACE(tid == 0, 2, 0);
    // each of the block's rows: the partials of every block that has packs in it, in block order
    for (int s = 0; s < 2; ++s) {{
      const long long row = r0 + s;
      if (row >= rows || (s == 1 && f + cnt <= bnd)) break;
      const long long blo = row * CP / EP, bhi = min(NB - 1, ((row + 1) * CP - 1) / EP);
      float2 a;
      for (unsigned spins = 0;; ++spins) {{
        bool have = true;
        a = make_float2(-CUDART_INF_F, 0.f);
        for (long long bb = blo + tid; bb <= bhi; bb += 32) {{
          const unsigned long long w = get_part(part + 2 * bb + (row - bb * EP / CP));
          have = have && (unsigned)(w >> 63) == mark;
          a = MaxSum()(a, part_value(w));
        }}
        if (__all_sync(0xffffffffu, have)) break;
        if (spins > (1u << 26)) __trap();  // a grid not resident at once would wait forever
      }}
      a = group_all<32, 32>(a, MaxSum(), (float2*)nullptr);
      if (tid == 0) stat[s] = a;
    }}
    KF_TRACE(tid == 0, 3, 0);
  }}
  __syncthreads();
  const float m0 = stat[0].x, w0 = stat_weight(stat[0].y), m1 = stat[1].x, w1 = stat_weight(stat[1].y);
  for (int j = tid; j < scnt && tid < NCT; j += NCT) {{
    const P p = sm[j];
    const long long gp = f + j;
    const float m = gp < bnd ? m0 : m1, w = gp < bnd ? w0 : w1;{write}
  }}
  KF_TRACE(tid == 0, 4, 0);
#pragma unroll
  for (int i = 0; i < RPT; ++i) {{
    const int j = SP + i * NCT + tid;
    if (tid < NCT && j < cnt) {{
      const P p = rp[i];
      const long long gp = f + j;
      const float m = gp < bnd ? m0 : m1, w = gp < bnd ? w0 : w1;{write}
    }}
  }}
  KF_TRACE_BLOCK((tid & 31) == 0, 1);
}}
"""
