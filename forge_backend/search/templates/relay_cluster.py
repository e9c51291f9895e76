"""Knob ``cs`` of the relay: a row's pieces reduced by the blocks of one thread-block cluster, which exchange the
pieces' partials through distributed shared memory instead of the global scratch.

Note [a row's statistic exchanged within its cluster]
In the relay (Note [rows relayed through global memory] in relay.py) a row's pieces go to PPR successive blocks of the
whole grid, each piece's partial is stored to a global word, and a resolver warp polls the row's words until every
one carries this launch's mark. Each statistic costs a store that travels to the L2 and polls that travel back, and
with writers of their own (Note [writers of their own]) the timeline of a 64 MiB row puts 1.5-3 us between a piece's
arrival and its write, most of it there: at [64, 262144] bf16 or [1, 512, 128, 128] fp32 that lag is the gap to a
copy, since the reads of a row must land before the row can be written.

With ``cs`` the grid is NCL clusters of CS blocks (``ncl``, by default as many as fit one block an SM). Cluster c
takes rows c, c + NCL, ..., and block ``rank`` of it takes pieces rank, rank + CS, ... of each (PPB = PPR / CS pieces
of a row a block). A block runs the relay's loader, NW reducer warps and NW writer warps over its K slots, and two
warps of its own:

* the publisher combines a piece's warp partials in warp order, as the relay does, and stores the piece's word into
  entry ``e`` (the row's index in the cluster's walk, mod RING) of every block of the cluster (``st.shared::cluster``,
  lane r to block r); after the block's last piece of the row lane r arrives on block r's ``xfull[e]`` with release
  semantics at cluster scope, which orders its stores before the arrival;
* the resolver waits on its own ``xfull[e]`` (acquire at cluster scope: CS arrivals, one a block), combines the
  row's PPR words in piece order exactly as the relay's resolver does (so every block of the cluster computes the
  same statistic bit for bit), arrives on every block's ``xempty[e]`` to say it has read the entry, and hands the
  statistic to the writers of each of the block's pieces of the row (``ready``).

Before it writes entry e again, for the row RING rows later, a publisher waits on its own ``xempty[e]`` (CS
arrivals): every block has read the entry. Nothing is global: there is no scratch, no mark and no epoch, and a
cluster waits only for its own blocks, which the hardware schedules together, so the launch needs no cooperative
guarantee; a cluster that cannot be resident with the others only runs later. Every block's mbarriers are
initialised before a cluster barrier that every thread passes, and every thread passes a second one at the end, so
no block leaves while another may still store into its shared memory or arrive on its mbarriers.

Progress: a block's PPB pieces of a row must all be loaded before the row can resolve, and its slots free only as
rows are written, so K >= PPB + 1 (one more slot keeps a load in flight). The rest follows the chain the waits form:
the resolver of a row sets ``stat`` of its pieces' slots after the row's last word, which this block's publisher
stored only after its reducers took the piece from the slot, which the loader filled only after the writers freed
the slot's previous piece, so no statistic is overwritten before it is read; and an entry is rewritten only after
every block has read it. tests/test_relay_cluster.py runs a model of the warps of a cluster under random schedules
and checks both, with one slot fewer deadlocking and a publisher that skips its wait on ``xempty`` caught.
"""
from __future__ import annotations

from typing import Any

from .common import SMEM_LIMIT, SMS, cdiv, knob

CLUSTER_SIZES = (2, 4, 8, 16)  # 16 is a non-portable size on sm_90 (launch.py opts in)
CLUSTER_KEYS = ("cs", "ncl", "ring")
RELAY_KEYS_USED = ("pe", "nw", "k")  # the relay knobs the cluster exchange reads (no resolvers, no lag)

CLUSTER_HELPERS = r"""
// Distributed shared memory (sm_90): this block's shared address of `p`, mapped into block `rank` of the cluster.
__device__ __forceinline__ unsigned peer_addr(const void* p, unsigned rank) {
  unsigned a;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(smem_addr(p)), "r"(rank));
  return a;
}
__device__ __forceinline__ void peer_put(unsigned addr, float2 v) {
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(v.x), "f"(v.y) : "memory");
}
__device__ __forceinline__ void peer_arrive(unsigned addr) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(addr) : "memory");
}
__device__ __forceinline__ void bar_wait_cluster(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                 "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}
"""


def cluster_defaults(p: dict[str, Any], cs: int = 8) -> dict[str, Any]:
    """The relay layout ``p`` (with writers of their own) exchanging within clusters of ``cs`` blocks: as many
    clusters as there are SMs for, a ring of two entries; the resolvers' count and the lag go."""
    q = {key: v for key, v in p.items() if key not in ("nc", "lag", "hold", "regs")}
    return {**q, "writers": True, "cs": cs, "ncl": SMS // cs, "ring": 2}


def cluster_threads(p: dict[str, Any]) -> int:
    """NW reducer warps, NW writer warps, the loader, the publisher and the resolver."""
    return 32 * (2 * p["nw"] + 3)


def cluster_head(p: dict[str, Any], ppr: int, vbytes: int) -> int:
    """Bytes before the slots: the slots' four mbarriers each, the ring's two, the warps' partials (``vbytes`` each,
    16-byte aligned behind an even count of mbarriers), a statistic a slot, the ring's words; rounded up to 128."""
    k, ring = p["k"], p["ring"]
    return cdiv((4 * k + 2 * ring) * 8 + k * p["nw"] * vbytes + k * 8 + ring * ppr * 8, 128) * 128


def cluster_smem(p: dict[str, Any], ppr: int, isz: int, vbytes: int) -> int:
    return cluster_head(p, ppr, vbytes) + p["k"] * p["pe"] * isz


def cluster_progress_ok(ppr: int, cs: int, k: int) -> bool:
    """A block's slots hold its every piece of a row and one more that loads (the Note, progress)."""
    return ppr % cs == 0 and k >= ppr // cs + 1


def cluster_valid(p: dict[str, Any], rows: int, cols: int, isz: int, vbytes: int) -> bool:
    """Only the cluster relay's knobs (and the relay's ``ramp``), in range: writers of their own, a cluster size that
    divides the row's pieces, at most one block an SM in all, 16-byte packs with whole packs for every warp, the
    slots and the ring within shared memory, and the progress rule."""
    if set(p) - {"strategy", "vec", "writers", "ramp", *RELAY_KEYS_USED, *CLUSTER_KEYS}:
        return False
    if p.get("writers") is not True:
        return False
    vals = [p.get(key) for key in ("pe", "nw", "k", "vec", "cs", "ncl", "ring")] + [p.get("ramp", 1)]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return False
    pe, nw, k, vec, cs, ncl, ring, ramp = vals
    if cs not in CLUSTER_SIZES or not 1 <= ncl <= SMS // cs or not 1 <= ring <= 8 or not 2 <= k <= 16:
        return False
    if "ramp" in p and not 1 <= ramp < k:
        return False
    if vec * isz != 16 or cols % vec or pe % (32 * vec * nw) or not 1024 <= pe * isz <= 128 * 1024:
        return False
    ppr = cdiv(cols, pe)
    if not (1 <= nw and cluster_threads(p) <= 1024 and ppr <= 1024 and cluster_progress_ok(ppr, cs, k)):
        return False
    return cluster_smem(p, ppr, isz, vbytes) <= SMEM_LIMIT - 1024 and rows * ppr < 2**40


def cluster_actions(p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Cluster size halved or doubled (as many clusters as fit), clusters one fewer, the ring one entry either way,
    and back to the global exchange (the caller filters the invalid ones)."""
    acts = [(f"cs {p['cs']} -> {c}", {**p, "cs": c, "ncl": SMS // c}) for c in (p["cs"] // 2, p["cs"] * 2)]
    acts += [knob(p, "ncl", p["ncl"] - 1), knob(p, "ring", p["ring"] + 1), knob(p, "ring", p["ring"] - 1)]
    back = {key: v for key, v in p.items() if key not in CLUSTER_KEYS} | {"nc": 1}
    return acts + [("exchange cluster -> global", back)]


def cluster_consts(p: dict[str, Any], cols: int, vbytes: int) -> dict[str, int]:
    """The kernel's constants (relay.py's relay_consts with knob ``cs``)."""
    pe, ppr = p["pe"], cdiv(cols, p["pe"])
    return {"PE": pe, "PPR": ppr, "PPB": ppr // p["cs"], "NPL": pe // (32 * p["vec"] * p["nw"]), "NW": p["nw"],
            "NT": cluster_threads(p), "K": p["k"], "CS": p["cs"], "RING": p["ring"],
            **({"RAMP": p["ramp"]} if "ramp" in p else {}), "HEAD": cluster_head(p, ppr, vbytes)}


def cluster_relay_kernel(name: str, p: dict[str, Any], params: str, reduce_piece: str, resolve: str,
                         write_piece: str, prefetch: str = "", wrote_slot: bool = False) -> str:
    """The cluster relay kernel ``name`` (the Note) with relay_kernel's hooks and header (relay.py: T, P, COLS, VEC, V,
    Op, ident, pack_stat, unpack_stat; the constants of ``cluster_consts`` and HEAD), and RELAY_HELPERS and
    CLUSTER_HELPERS before it. ``resolve`` runs in resolver lane 0 with ``c0`` the block's first column of the row
    (0 only in the cluster's first block) and ``row``; ``params`` are the kernel's own parameters, before ``rows``."""
    fence = """
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncwarp();  // every lane's values are in the slot before reduced (then ready) lets the writers read them""" \
        if wrote_slot else ""
    first = """      for (long long t = 0; t < K && t < n; ++t) {
        if (t >= RAMP) bar_wait(full + (t - RAMP), 0u);  // Note [the first copies a few at a time] (relay.py)
        issue(t);
      }""" if "ramp" in p else "      for (long long t = 0; t < K && t < n; ++t) issue(t);"
    piece = """
      const long long row = cid + (t / PPB) * ncl;
      const int c0 = (int)(rank + (t % PPB) * CS) * PE, sl = (int)(t % K);"""
    return f"""
extern "C" __global__ __cluster_dims__(CS, 1, 1) void {name}({params}, long long rows);
extern "C" __global__ __launch_bounds__(NT, 1) void {name}({params}, long long rows) {{
  extern __shared__ __align__(128) unsigned char dsm[];
  unsigned long long* full = reinterpret_cast<unsigned long long*>(dsm);  // the slot's bytes arrived
  unsigned long long* reduced = full + K;  // every reducer warp put its partial in wpart
  unsigned long long* ready = full + 2 * K;  // the piece's row statistic is in stat
  unsigned long long* empty = full + 3 * K;  // every writer warp wrote its share: the slot is free
  unsigned long long* xfull = full + 4 * K;  // [RING] every block of the cluster stored its words of the entry's row
  unsigned long long* xempty = xfull + RING;  // [RING] every block of the cluster read the entry
  V* wpart = reinterpret_cast<V*>(xempty + RING);  // [K][NW]
  float2* stat = reinterpret_cast<float2*>(wpart + K * NW);  // [K]
  float2* xw = stat + K;  // [RING][PPR]: the words of a row's pieces, stored here by the blocks that reduced them
  T* slots = reinterpret_cast<T*>(dsm + HEAD);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned rank = blockIdx.x % CS;
  const long long cid = blockIdx.x / CS, ncl = gridDim.x / CS;
  const long long nr = cid < rows ? (rows - 1 - cid) / ncl + 1 : 0;  // this cluster's rows: cid, cid + ncl, ...
  const long long n = nr * PPB;  // this block's pieces: PPB of each row, in row order
  if (threadIdx.x == 0) {{
    for (int j = 0; j < K; ++j) {{
      bar_init(full + j, 1); bar_init(reduced + j, NW); bar_init(ready + j, 1); bar_init(empty + j, NW);
    }}
    for (int e = 0; e < RING; ++e) {{ bar_init(xfull + e, CS); bar_init(xempty + e, CS); }}
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }}
  cluster_sync_all();  // every block's mbarriers are initialised before a peer arrives on one
  if (warp == NW) {{  // the loader: the first K pieces, then each slot again once its writers wrote it
    if (lane == 0) {{
      auto issue = [&](long long t) {{{piece}
        slot_load(slots + sl * PE, x + row * COLS + c0, (unsigned)(min(PE, COLS - c0) * sizeof(T)), full + sl);
      }};
{first}
      for (long long v = 0; v + K < n; ++v) {{
        bar_wait(empty + v % K, (unsigned)(v / K) & 1u);
        issue(v + K);
      }}
    }}
  }} else if (warp == NW + 1) {{  // the publisher: each piece's word into every block's entry of its row
    for (long long t = 0; t < n; ++t) {{
      const int sl = (int)(t % K);
      bar_wait(reduced + sl, (unsigned)(t / K) & 1u);
      V a = lane < NW ? wpart[sl * NW + lane] : ident();
      a = group_all<32, 32>(a, Op(), (V*)nullptr);
      const long long j = t / PPB;
      const int e = (int)(j % RING), i = (int)(rank + (t % PPB) * CS);
      if (t % PPB == 0 && j >= RING) bar_wait_cluster(xempty + e, (unsigned)(j / RING - 1) & 1u);  // all read it
      if (lane < CS) {{
        peer_put(peer_addr(xw + e * PPR + i, lane), pack_stat(a));
        if (t % PPB == PPB - 1) peer_arrive(peer_addr(xfull + e, lane));  // after this lane's stores of the row
      }}
    }}
  }} else if (warp == NW + 2) {{  // the resolver: each row of the cluster, once every block stored its words
    for (long long j = 0; j < nr; ++j) {{
      const int e = (int)(j % RING);
      bar_wait_cluster(xfull + e, (unsigned)(j / RING) & 1u);
      V a = ident();
      for (int i = lane; i < PPR; i += 32) a = Op()(a, unpack_stat(xw[e * PPR + i], i));
      a = group_all<32, 32>(a, Op(), (V*)nullptr);
      __syncwarp();  // every lane has read the entry
      if (lane < CS) peer_arrive(peer_addr(xempty + e, lane));
      if (lane == 0) {{
        const long long row = cid + j * ncl;
        const int c0 = (int)rank * PE;{resolve}
        for (long long t = j * PPB; t < (j + 1) * PPB; ++t) {{
          stat[t % K] = fin;
          bar_arrive(ready + t % K);
        }}
      }}
    }}
  }} else if (warp > NW + 2) {{  // writer warp j = warp - (NW + 3): reducer warp j's columns of every piece
    const int wc = (warp - NW - 3) * (PE / NW);
    for (long long t = 0; t < n; ++t) {{{piece}{prefetch}
      bar_wait(ready + sl, (unsigned)(t / K) & 1u);
      const float2 st = stat[sl];
      const P* sp = reinterpret_cast<const P*>(slots + sl * PE + wc);{write_piece}
      __syncwarp();  // every lane has read the slot
      if (lane == 0) bar_arrive(empty + sl);
    }}
  }} else {{  // reducer warp: its columns [wc, wc + PE / NW) of every piece, as it arrives
    const int wc = warp * (PE / NW);
    for (long long t = 0; t < n; ++t) {{{piece}
      bar_wait(full + sl, (unsigned)(t / K) & 1u);
      const P* sp = reinterpret_cast<const P*>(slots + sl * PE + wc);{reduce_piece}{fence}
      if (lane == 0) {{
        wpart[sl * NW + warp] = v;
        bar_arrive(reduced + sl);
      }}
    }}
  }}
  cluster_sync_all();  // no block leaves while a peer may still store into its shared memory or arrive on it
}}
"""
