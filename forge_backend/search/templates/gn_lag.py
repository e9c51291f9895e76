"""Group norm strategy ``lag``: each group read twice, the second time from the L2 (see the Note).

Note [a group re-read from the L2, a few groups later]
The relay (relay.py) holds every piece of a group on chip from its load until the group's statistic is known. At 16 MB
groups ([1,128,1024,1024] fp32) a piece waits about 16 us there, and the slots that hold it (seven of 32 KB a block)
are what bound the steady state: 76% of the copy bandwidth in the twentieth session's trace, 72% for the whole row.
This kernel keeps nothing on chip between the two uses of a byte. Every warp of a one-wave grid owns a fixed run of
every group (the same offsets in each). At step s it reads its run of group s for the statistic and, in the same
loop, re-reads its run of group s - LAG and writes that run's output; the re-read comes from the L2 if the bytes read
since (LAG groups of input and LAG - 1 of output, with streaming hints on the output and the re-read) have not pushed
them out. So DRAM sees one read and one write of each byte, as a copy does, while the L2 serves the third access.

Statistics: a warp's run gives (count, mean, M2) from sums shifted by its first value; the warps of a block publish
theirs into shared memory and the last one to arrive combines them in warp order (Chan's formula) and publishes the
block's; the last block to arrive at a group combines all blocks' in block order, stores mean and rstd (rounded as
ATen stores them) and raises the group's count past the blocks. The statistic does not depend on which warp or block
arrives last, so it is bit-identical from run to run. One warp of a block fetches a group's statistic into shared
memory and the block's other warps read it there. A warp issues its first loads of group s, then waits for the
statistic of group s - LAG; every block publishes group s - LAG before it waits on anything later, so with every
block resident (a cooperative launch) the walk always progresses.

The scratch (partials, statistics, counts, then an epoch and an exit count) is kept between launches (Note [scratch
kept between launches] in contract.py): counts only grow, launch e's blocks wait for e * (NB + 1) + NB + 1 (unsigned,
so wrapping is harmless), and the last block to leave advances the epoch and rearms the exit count.

Measured on the H200 (twenty-fifth session, benchmarks/results/h200/probe_session25_gn_lag*.json, each line one probe
run with the relay root timed first and last): slower than the relay everywhere, so an action of the search, not a
seed.
- First build (every warp read its statistic from global memory): [1,128,1024,1024] fp32 669.5-780.6 us against the
  relay's 356.6 and 356.9; [2,1536,64,64] fp32 693.7-747.4 against 28.5 and 28.7, about 10 us a group whatever the
  lag, which halved once 8448 warps a step no longer read the same two words (next line). The CuPy prototype before
  it (benchmarks/gn_lag_proto.py, in git at 0cef092; gn_lag_proto_session25.json) ran as slowly, 692-839 us.
- The statistic shared through shared memory: fp32 494.1-625.6 against 358.8 and 359.2 (lag 2 with 1024 threads
  best); [1,128,1024,1024] bf16 287.7-386.0 against 140.5 and 140.6; [2,1536,64,64] fp32 330.7 us at a lag of 3
  (301.4 in a later run), 4.5-5 us a group. The first loads issued before the wait: no better (498.2-591.0 against
  357.3 twice). The first read
  kept in L2 (evict_last, knob ``keep``) or the re-read dropped from it (``again=first``): 496.5-503.0 against 357.6
  and 358.9.
- Nsight Compute (results/h200/ncu/gn_lag_*): at a lag of 1 the re-read does hit the L2 (DRAM moved 2.18 TB/s x 505.7
  us = 1.10 GB against the tensor's 1.07 GB read plus written, L2 hit rate 61%), but a third of the warps' stall
  samples wait for a statistic (the spins on it) and DRAM is 45% busy; at a lag of 2 the waits are shorter but the
  32 MB held push most re-reads out (3.19 TB/s x 487.1 us = 1.55 GB, 39% hits). A statistic needs every warp of the
  grid to finish the group, then two levels of combining: the chain is as long as a step, and one lag is too short to
  hide it while two are too long for the L2.

Note [a statistic published before the wait]
With knob ``early`` a step is two passes: a warp reads its run of group s and publishes the run's partial, and only
then waits for group s - LAG's statistic and re-reads and writes that group. So group s's statistic is combined while
the grid writes group s - LAG, instead of after it. A block's warps may then be one group further apart (a warp
publishes group s before it has seen group s - LAG's statistic), so the ring of partials and the table of statistics
take one more entry each (the model in tests/test_gn_lag.py finds LAG entries overwritten). Same run
(probe_session25_gn_lag_early.json): [1,128,1024,1024] fp32 452.9 us at a lag of 1 with 1024 threads (the best lag
layout measured; 495.9 with 512 x 2, 533.3 at a lag of 2) against the relay's 356.3 and 357.6; bf16 283.7 and 287.2
against 140.7. Better than the default order (494.1-591.0 us in earlier runs), still 27% slower than the relay: an
action, like the strategy.
"""
from __future__ import annotations

from math import gcd
from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from . import gn_shared
from .common import (PREAMBLE, SMS, align_of, best_vec, card_tensors, consts, flag_knob, knob, launch,
                     main_itemsize, make_candidate, plan_params, vec_ok)

BLOCKS = (128, 256, 512, 1024)
AGAIN = ("cs", "ld", "first")  # the re-read: ld.global.cs, a plain read-only load, or an L2 evict_first policy
MAX_LAG = 3
# A block's ring of warp partials in shared memory. In the first LAG steps no warp waits, so a block's warps may be
# LAG groups apart; after that a warp at step s has seen group s - LAG's statistic, which needed its own block's last
# warp to have combined group s - LAG's partials and freed their entry. So LAG entries suffice (the model in
# tests/test_gn_lag.py finds a ring one entry shorter overwritten).
RING = MAX_LAG
# The block's statistics in shared memory, by group: a warp at step s has seen group s - LAG's statistic, so every
# warp of the grid has published group s - LAG, and read group s - 2 LAG's statistic before that; the groups its
# block's warps may still read are the LAG from s - 2 LAG + 1 to s - LAG, so LAG entries suffice (the model in
# tests/test_gn_lag.py finds one entry fewer replaced before it is read).
STATS = MAX_LAG
L2_BUDGET = 32 * 2**20  # the input bytes a lag may keep waiting for their re-read: under the H200's 50 MB L2
THREADS_PER_SM = 1024  # NT * BPB: 64 registers a thread


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    """Only this strategy's knobs, in range: packs that never straddle a channel (16 bytes for the hinted loads), a
    one-wave grid of at most 1024 threads an SM, a lag of 1-3 groups whose input fits 32 MB of the L2 (the Note's premise:
    the re-read is an L2 hit) and unrolls of 1, 2 or 4 packs a stream."""
    if set(p) - {"strategy", "vec", "block", "bpb", "lag", "unroll", "keep", "again", "early"}:
        return False
    vec, block, bpb, lag, unroll = (p.get(k) for k in ("vec", "block", "bpb", "lag", "unroll"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (vec, block, bpb, lag, unroll)):
        return False
    if p.get("keep", True) is not True or p.get("early", True) is not True or p.get("again", "cs") not in AGAIN:
        return False
    if (p.get("keep") or p.get("again") == "first") and vec * main_itemsize(card) != 16:
        return False  # the hinted loads move 16 bytes
    gs, hw = card.sizes["group_size"], card.sizes["HxW"]
    return (vec_ok(vec, gcd(hw, gs), card_tensors(card)) and block in BLOCKS and bpb >= 1
            and block * bpb <= THREADS_PER_SM and 1 <= lag <= MAX_LAG and unroll in (1, 2, 4)
            and lag * gs * main_itemsize(card) <= L2_BUDGET)


def defaults(card: OperatorCard) -> dict[str, Any]:
    gs = card.sizes["group_size"]
    vec = best_vec(gcd(card.sizes["HxW"], gs), card_tensors(card))
    # four packs a stream fit 64 registers a thread in fp32, two in 16-bit types (four spilled there)
    return {"strategy": "lag", "vec": vec, "block": 512, "bpb": 2, "lag": 1,
            "unroll": 4 if main_itemsize(card) == 4 else 2}


def actions(p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    acts = [knob(p, "block", b) for b in BLOCKS if b != p["block"]]
    acts += [knob(p, "bpb", b) for b in (1, 2, 4, 8) if b != p["bpb"]]
    acts += [knob(p, "lag", v) for v in (p["lag"] - 1, p["lag"] + 1)]
    acts += [knob(p, "unroll", u) for u in (1, 2, 4) if u != p["unroll"]]
    acts += [knob(p, "again", a) for a in AGAIN if a != p.get("again", "cs")]
    return acts + [flag_knob(p, "keep"), flag_knob(p, "early")]


_HELPERS = r"""
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
// Lane 0 gets the Chan combine of lanes 0..31, always in the same order.
__device__ __forceinline__ float4 warp_chan(float4 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float4 u = make_float4(__shfl_down_sync(~0u, v.x, o), __shfl_down_sync(~0u, v.y, o),
                                 __shfl_down_sync(~0u, v.z, o), 0.f);
    v = Chan()(v, u);
  }
  return v;
}
__device__ __forceinline__ uint4 ld_hint(const void* p, unsigned long long pol) {
  uint4 r;
  asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
  return r;
}
"""


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    """The kernel of the Note for layout ``p``."""
    gs, ng = card.sizes["group_size"], card.sizes["N"] * card.sizes["G"]
    vec, nt, bpb, lag, unroll = p["vec"], p["block"], p["bpb"], p["lag"], p["unroll"]
    early = int(bool(p.get("early")))  # Note [a statistic published before the wait]: one more entry each
    nb = SMS * bpb
    coef, val = gn_shared.affine(card, "q[u]")
    load_first = "as_pack(ld_hint(xr + v * VEC, keep))" if p.get("keep") else "ldp<T, VEC>(xr + v * VEC)"
    again = p.get("again", "cs")
    load_again = {"cs": "ldp_cs<T, VEC>(xw + v * VEC)", "ld": "ldp<T, VEC>(xw + v * VEC)",
                  "first": "as_pack(ld_hint(xw + v * VEC, drop))"}[again]
    outs = " ".join(s for s in gn_shared.stat_stores(card, "gr") if s)
    params, args = plan_params(card, gn_shared.tensor_items(card) + [
        ("scratch:lag", "unsigned char* __restrict__ scratch", "")])
    step = _step(bool(early), load_first, load_again, coef, val, outs)
    source = f"""{PREAMBLE}
{gn_shared.types(card)}
{consts(GS=gs, NG=ng, HW=card.sizes["HxW"], D=card.sizes["ch_per_group"], G=card.sizes["G"], VEC=vec, NT=nt,
        W=nt // 32, NB=nb, BPB=bpb, LAG=lag, UNR=unroll, RING=RING + early, SR=STATS + early)}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
{_HELPERS}
__device__ __forceinline__ P as_pack(uint4 r) {{ return *reinterpret_cast<P*>(&r); }}

// Note [a group re-read from the L2, a few groups later] in gn_lag.py.
extern "C" __global__ __launch_bounds__(NT, BPB) void gn_lag({params}) {{
  __shared__ float4 wpart[RING][W];
  __shared__ int wcnt[RING];
  __shared__ float2 sstat[SR];  // statistics fetched for the block, tagged with their group
  __shared__ int stag[SR], sclaim[SR];
  __shared__ unsigned base_s;
  float4* part = reinterpret_cast<float4*>(scratch);                 // [NG][NB] blocks' (count, mean, M2)
  float2* stat = reinterpret_cast<float2*>(part + (long long)NG * NB);  // [NG] rounded (mean, rstd)
  unsigned* cnt = reinterpret_cast<unsigned*>(stat + NG);             // [NG] arrivals, then the epoch and exits
  unsigned* epoch = cnt + NG;
  if (threadIdx.x < RING) wcnt[threadIdx.x] = 0;
  if (threadIdx.x < SR) stag[threadIdx.x] = sclaim[threadIdx.x] = -1;
  if (threadIdx.x == 0) base_s = *(volatile unsigned*)epoch * (unsigned)(NB + 1);
  __syncthreads();
  const unsigned base = base_s;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr long long GV = GS / VEC, SV = (GV + (long long)NB * W - 1) / ((long long)NB * W);
  const long long vb = min(((long long)blockIdx.x * W + warp) * SV, GV), ve = min(vb + SV, GV);
  unsigned long long keep = 0, drop = 0;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(keep));
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(drop));
  for (int s = 0; s < NG + LAG; ++s) {{
    const int gr = s, gw = s - LAG;
    const bool rd = gr < NG, wr = gw >= 0;
{step}  }}
  __syncthreads();
  if (threadIdx.x == 0) {{  // the last block out advances the epoch and rearms the exit count
    __threadfence();
    if (atomicAdd(epoch + 1, 1u) == (unsigned)(NB - 1)) {{
      epoch[1] = 0;
      __threadfence();
      epoch[0] += 1;
    }}
  }}
}}
"""
    nbytes = ng * nb * 16 + ng * 8 + ng * 4 + 8
    launches = [launch("gn_lag", nb, nt, args, 0, cooperative=True)]
    desc = "group_norm lag " + " ".join(f"{k}={v}" for k, v in sorted(p.items()) if k != "strategy")
    return make_candidate(source, launches, desc, p, align_of(vec, card_tensors(card)), {"lag": (nbytes, True, True)})


def _indent(text: str, spaces: int) -> str:
    return "".join((line if line.startswith("#") else " " * spaces + line)
                   for line in text.splitlines(keepends=True))


def _step(early: bool, load_first: str, load_again: str, coef: str, val: str, outs: str) -> str:
    """One step of the walk (C++ inside the loop over s): read group gr for its statistic, re-read and write group gw,
    publish gr's partial; with ``early`` (Note [a statistic published before the wait]) two passes, the publication
    between them. The pieces below are shared by both orders."""
    head = """    const T* xr = x + (long long)gr * GS;
    const T* xw = x + (long long)gw * GS;
    TO* yw = y + (long long)gw * GS;
    const int gg = gw % G;
    const float shift = rd && vb < ve ? to_f(xr[vb * VEC]) : 0.f;
"""
    wait = """    float m_r = 0.f, r_r = 0.f;
    if (wr) {  // group gw's statistic: fetched from global memory by one warp of the block, the others read it here
      const int sl = gw % SR;
      float2 st = make_float2(0.f, 0.f);
      if (lane == 0) {
        if (*(volatile int*)&stag[sl] != gw) {
          if (atomicMax(&sclaim[sl], gw) < gw) {
            while (ld_acquire(cnt + gw) - base < (unsigned)(NB + 1)) { }
            sstat[sl] = __ldcg(stat + gw);
            __threadfence_block();
            *(volatile int*)&stag[sl] = gw;
          } else {
            while (*(volatile int*)&stag[sl] != gw) { }
          }
        }
        __threadfence_block();
        const volatile float* vs = reinterpret_cast<volatile float*>(&sstat[sl]);
        st = make_float2(vs[0], vs[1]);
      }
      m_r = __shfl_sync(~0u, st.x, 0);
      r_r = __shfl_sync(~0u, st.y, 0);
    }
"""
    acc = """#pragma unroll
for (int j = 0; j < VEC; ++j) { const float d = to_f(p[u].v[j]) - shift; sx += d; sxx += d * d; }
"""
    store = f"""const int c = gg * D + (int)(v * VEC / HW);
{coef}
PO o;
#pragma unroll
for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>({val});
stp_cs<TO, VEC>(yw + v * VEC, o);
"""
    # the publication: the warp's partial, the block's (its last warp), the group's (its last block); each level a
    # gate that ``exit`` closes (a `continue` at the end of a step, or a brace around the rest)
    warp_part = """#pragma unroll
for (int o = 16; o > 0; o >>= 1) { sx += __shfl_xor_sync(~0u, sx, o); sxx += __shfl_xor_sync(~0u, sxx, o); }
const float n = (float)((ve - vb) * VEC);
const int r = gr % RING;
int last = 0;
if (lane == 0) {
  wpart[r][warp] = n > 0.f ? make_float4(n, shift + sx / n, fmaxf(sxx - sx * sx / n, 0.f), 0.f)
                           : make_float4(0.f, 0.f, 0.f, 0.f);
  __threadfence_block();
  last = atomicAdd(&wcnt[r], 1) == W - 1;
}
"""
    block_part = """__threadfence_block();  // the last warp of the block: its warps' partials, in warp order
float4 acc = warp_chan(lane < W ? wpart[r][lane] : make_float4(0.f, 0.f, 0.f, 0.f));
last = 0;
if (lane == 0) {
  wcnt[r] = 0;
  part[(long long)gr * NB + blockIdx.x] = acc;
  __threadfence();
  last = atomicAdd(cnt + gr, 1u) - base == (unsigned)(NB - 1);
}
"""
    group_part = f"""__threadfence();  // the last block of the group: every block's partial, in block order
acc = make_float4(0.f, 0.f, 0.f, 0.f);
for (int i = 0; i < (NB + 31) / 32; ++i) {{
  const float4 v = lane + 32 * i < NB ? __ldcg(part + (long long)gr * NB + lane + 32 * i)
                                      : make_float4(0.f, 0.f, 0.f, 0.f);
  acc = Chan()(acc, v);
}}
acc = warp_chan(acc);
if (lane == 0) {{
  const float mean = acc.y, rstd = rsqrtf(fmaxf(acc.z / acc.x, 0.f) + eps);
  {outs}
  stat[gr] = make_float2(round_to<TM>(mean), round_to<TR>(rstd));  // ATen normalises with the stored values
  __threadfence();
  atomicAdd(cnt + gr, 1u);
}}
"""
    if early:
        return head + f"""    float sx = 0.f, sxx = 0.f;
    if (rd) {{  // knob early: group gr's loads and its statistic's publication before the wait for group gw's
#pragma unroll 1
      for (long long v0 = vb + lane; v0 < ve; v0 += 32 * UNR) {{
        P p[UNR];
#pragma unroll
        for (int u = 0; u < UNR; ++u) if (v0 + 32 * u < ve) {{ const long long v = v0 + 32 * u; p[u] = {load_first}; }}
#pragma unroll
        for (int u = 0; u < UNR; ++u) {{
          if (v0 + 32 * u < ve) {{
{_indent(acc, 12)}          }}
        }}
      }}
{_indent(warp_part, 6)}      if (__shfl_sync(~0u, last, 0)) {{
{_indent(block_part, 8)}        if (__shfl_sync(~0u, last, 0)) {{
{_indent(group_part, 10)}        }}
      }}
    }}
    if (!wr) continue;
""" + wait + f"""#pragma unroll 1
    for (long long v0 = vb + lane; v0 < ve; v0 += 32 * UNR) {{
      P q[UNR];
#pragma unroll
      for (int u = 0; u < UNR; ++u) if (v0 + 32 * u < ve) {{ const long long v = v0 + 32 * u; q[u] = {load_again}; }}
#pragma unroll
      for (int u = 0; u < UNR; ++u) {{
        const long long v = v0 + 32 * u;
        if (v < ve) {{
{_indent(store, 10)}        }}
      }}
    }}
"""
    return head + f"""    // The first pass's loads of group gr go out before the wait for group gw's statistic, so the DRAM reads of this
    // step overlap the last step's statistic being combined. Each pass issues UNR loads of each stream before it
    // uses any: the hinted loads are volatile asm, which the compiler does not move above earlier stores.
    const long long v00 = vb + lane;
    P p[UNR];
    if (rd) {{
#pragma unroll
      for (int u = 0; u < UNR; ++u) if (v00 + 32 * u < ve) {{ const long long v = v00 + 32 * u; p[u] = {load_first}; }}
    }}
""" + wait + f"""    float sx = 0.f, sxx = 0.f;
    for (long long v0 = v00; v0 < ve; v0 += 32 * UNR) {{
      P q[UNR];
#pragma unroll
      for (int u = 0; u < UNR; ++u) {{
        const long long v = v0 + 32 * u;
        if (v < ve) {{
          if (rd && v0 != v00) p[u] = {load_first};
          if (wr) q[u] = {load_again};
        }}
      }}
#pragma unroll
      for (int u = 0; u < UNR; ++u) {{
        const long long v = v0 + 32 * u;
        if (v < ve) {{
          if (rd) {{
{_indent(acc, 12)}          }}
          if (wr) {{
{_indent(store, 12)}          }}
        }}
      }}
    }}
    if (!rd) continue;
{_indent(warp_part, 4)}    if (!__shfl_sync(~0u, last, 0)) continue;
{_indent(block_part, 4)}    if (!__shfl_sync(~0u, last, 0)) continue;
{_indent(group_part, 4)}"""
