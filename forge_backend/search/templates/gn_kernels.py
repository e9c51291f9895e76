"""The group norm's device code for its strategies ``split``, ``sync``, ``cluster`` and ``pipe`` (one candidate each,
``generate_chunks``) and the source of its ``relay`` (``relay_source``); group_norm.py describes the strategies and
chooses among them, and ``lag`` has a module of its own (gn_lag.py)."""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from .common import (PREAMBLE, TMA_HELPERS, align_of, card_tensors, cdiv, chunk_of, cluster_combine, consts, eps_arg,
                     input_spec, launch, main_itemsize, make_candidate, plan_params, walk_head)
from . import gn_shared
from .relay import relay_consts
from .relay_pipeline import RELAY_HELPERS, relay_kernel

_GN_EXTRA = r"""
struct Sum2 { __device__ __forceinline__ float2 operator()(float2 a, float2 b) const { return make_float2(a.x + b.x, a.y + b.y); } };
// Combine the K partials of group gi in a fixed order: every block of the group gets bit-identical stats.
__device__ __forceinline__ float4 group_stats(const float4* part, long long gi, float4* red4) {
  float4 st = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int i = threadIdx.x; i < K; i += NT) st = Chan()(st, __ldcg(part + gi * K + i));
  return group_all<NT, NT>(st, Chan(), red4);
}
"""


def _gn_normalise(card: OperatorCard, src: str, stream: bool = False,
                  stats: str = "group_stats(part, gi, red4)") -> str:
    """Finalise the group's (count, mean, M2) ``stats``, write mean/rstd once per group, then normalise this
    block's chunk (cached or re-read)."""
    coef, val = gn_shared.affine(card, "p")
    out = gn_shared.stat_stores(card, "gi")
    body = f"""const int c = g * D + (int)(e / HW); {coef} PO o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>({val});
      {"stp_cs" if stream else "stp"}<TO, VEC>(yg + e, o);"""
    if src == "mixed":  # Note [a chunk kept in part] in softmax.py: the re-read packs first, then the kept ones
        loop = f"""
#pragma unroll
  for (int i = KEEP; i < NIT; ++i) {{
    const I e = beg + ((I)i * NT + threadIdx.x) * VEC;
    if (e < end) {{ const P p = {"ldp_cs" if stream else "ldp"}<T, VEC>(xg + e); {body} }}
  }}
#pragma unroll
  for (int i = 0; i < KEEP; ++i) {{
    const I e = beg + ((I)i * NT + threadIdx.x) * VEC;
    if (e < end) {{ const P p = cache[i * NT + threadIdx.x]; {body} }}
  }}"""
    elif src in ("reg", "smem"):
        slot = "cache[i]" if src == "reg" else "cache[i * NT + threadIdx.x]"
        loop = f"""
#pragma unroll
  for (int i = 0; i < NIT; ++i) {{
    const I e = beg + ((I)i * NT + threadIdx.x) * VEC;
    if (e < end) {{ const P p = {slot}; {body} }}
  }}"""
    else:
        loop = f"""
#pragma unroll 4
  for (I e = beg + threadIdx.x * VEC; e < end; e += NT * VEC) {{ const P p = {"ldp_cs" if stream else "ldp"}<T, VEC>(xg + e); {body} }}"""
    return f"""
  const float4 st = {stats};
  const float mean = st.y, rstd = rsqrtf(fmaxf(st.z / st.x, 0.f) + eps);
  if (k == 0 && threadIdx.x == 0) {{ {" ".join(out)} }}
  // ATen stores mean/rstd in their output dtype and normalises with the stored values.
  const float m_r = round_to<TM>(mean), r_r = round_to<TR>(rstd);
  const int g = (int)(gi % G);
  TO* yg = y + gi * GS;{loop}"""


def generate_chunks(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    """The candidate of a ``split``, ``sync``, ``cluster`` or ``pipe`` layout: its blocks each take a chunk of a
    group (``p`` is valid: group_norm.generate checks it)."""
    k, ch, nit = _chunking(card, p)
    source, launches, scratch = _CHUNK_KERNELS[p["strategy"]](card, p, _chunks_head(card, p, k, ch, nit), k, nit)
    desc = "group_norm " + " ".join(f"{k_}={v}" for k_, v in sorted(p.items())) + f" K={k}"
    return make_candidate(source, launches, desc, p, align_of(p["vec"], card_tensors(card)), scratch)


def _chunking(card: OperatorCard, p: dict[str, Any]) -> tuple[int, int, int]:
    """K (a group's chunks, one a block), CH (a chunk's elements) and NIT (the packs a thread holds or walks)."""
    vec, block, gs = p["vec"], p["block"], card.sizes["group_size"]
    if p["strategy"] == "split":
        return p["k"], chunk_of(gs, p["k"], vec), 1
    if p["strategy"] in ("cluster", "pipe"):
        ch = chunk_of(gs, p["cs"], vec)
        return p["cs"], ch, cdiv(ch, block * vec)
    nit = p["bpt"] // (vec * main_itemsize(card))
    ch = block * nit * vec
    return cdiv(gs, ch), ch, nit


def _chunks_head(card: OperatorCard, p: dict[str, Any], k: int, ch: int, nit: int) -> str:
    """The kernels' common header: types, sizes, packs and the combine of a group's partials."""
    gs, ng = card.sizes["group_size"], card.sizes["N"] * card.sizes["G"]
    return f"""{PREAMBLE}
{gn_shared.types(card)}
typedef {"long long" if gs > 2**31 - 1 - ch else "int"} I;
{consts(GS=gs, K=k, CH=ch, NIT=nit, VEC=p["vec"], NT=p["block"], HW=card.sizes["HxW"], D=card.sizes["ch_per_group"],
        G=card.sizes["G"], TOTAL=ng * k, REV=int(p.get("reverse", False)), NG=ng,
        **({"KEEP": p["keep"]} if "keep" in p else {}))}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
{_GN_EXTRA}{TMA_HELPERS if p.get("tma") else ""}"""


# The kernels' parameters before and after their own, as plan_params takes them (plan argument, C++, present when).
_COMMON_ARGS = [("in:input", "const T* __restrict__ x", ""), ("in:weight", "const TW* __restrict__ w", "weight"),
                ("in:bias", "const TB* __restrict__ b", "bias"), ("scratch:part", "float4* __restrict__ part", "")]


def _tail_args(card: OperatorCard) -> list[tuple[str, str, str]]:
    return [("out:0", "TO* __restrict__ y", ""), ("out:1", "TM* __restrict__ mean_out", "out1"),
            ("out:2", "TR* __restrict__ rstd_out", "out2"), (eps_arg(card, 1e-5), "float eps", "")]


# Chunk k of group gi: [beg, end) of the group's elements, and the group's input.
_CHUNK = """
  const I beg = (I)k * CH, end = min(beg + (I)CH, (I)GS);
  const T* xg = x + gi * GS;"""

_Kernels = tuple[str, list, Any]  # the source, its launches, its scratch


def _split(card: OperatorCard, p: dict[str, Any], head: str, k: int, nit: int) -> _Kernels:
    """Two launches: each chunk's partial to scratch, then every block combines its group's and normalises."""
    ng, block = card.sizes["N"] * card.sizes["G"], p["block"]
    params, args = plan_params(card, _COMMON_ARGS + _tail_args(card))
    source = head + f"""
// Pass 1: block b = group * K + k writes (count, mean, M2) of chunk k, from sums shifted by the chunk's first value.
extern "C" __global__ __launch_bounds__(NT) void gn_stats(const T* __restrict__ x, float4* __restrict__ part) {{
  __shared__ float2 red2[32];
  const long long gi = blockIdx.x / K;
  const int k = blockIdx.x % K;{_CHUNK}
  const float shift = beg < end ? to_f(xg[beg]) : 0.f;
  float2 a = make_float2(0.f, 0.f);
#pragma unroll 4
  for (I e = beg + threadIdx.x * VEC; e < end; e += NT * VEC) {{
    const P p = ldp<T, VEC>(xg + e);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {{ const float d = to_f(p.v[j]) - shift; a.x += d; a.y += d * d; }}
  }}
  a = group_all<NT, NT>(a, Sum2(), red2);
  if (threadIdx.x == 0) {{
    const float n = (float)max(end - beg, (I)0);
    part[blockIdx.x] = n > 0.f ? make_float4(n, shift + a.x / n, fmaxf(a.y - a.x * a.x / n, 0.f), 0.f)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
  }}
}}

// Pass 2: every block combines its group's K partials, then normalises its chunk.
extern "C" __global__ __launch_bounds__(NT) void gn_apply({params}) {{
  __shared__ float4 red4[32];
  const long long bi = REV ? (TOTAL - 1 - (long long)blockIdx.x) : (long long)blockIdx.x;
  const long long gi = bi / K;
  const int k = (int)(bi % K);{_CHUNK}{_gn_normalise(card, "global", p.get("stream", False))}
}}
"""
    launches = [launch("gn_stats", ng * k, block, ["in:input", "scratch:part"]),
                launch("gn_apply", ng * k, block, args)]
    return source, launches, {"part": (ng * k * 16, False)}


def _cluster(card: OperatorCard, p: dict[str, Any], head: str, k: int, nit: int) -> _Kernels:
    """One cluster a group, its blocks' partials combined through distributed shared memory."""
    ng, block, vec, isz = card.sizes["N"] * card.sizes["G"], p["block"], p["vec"], main_itemsize(card)
    params, args = plan_params(card, _COMMON_ARGS[:3] + _tail_args(card))
    src = "mixed" if "keep" in p else p["cache"]  # valid() allows keep only below NIT
    source = head + f"""
// One cluster of K blocks per group; block k keeps chunk k of the group (in registers or shared memory), the
// blocks exchange their (count, mean, M2) through distributed shared memory and combine them in rank order, so
// every block of the group gets bit-identical stats. The cluster shape sits on a declaration: the contract's
// kernel pattern wants `void NAME(` on the definition.
extern "C" __global__ __cluster_dims__(K, 1, 1) void gn_cluster({params});
extern "C" __global__ __launch_bounds__(NT) void gn_cluster({params}) {{
  __shared__ float red[32];
  __shared__ float4 cpart, cstat;
  const long long gi = blockIdx.x / K;
  const int k = blockIdx.x % K;{_CHUNK}{_gn_sync_stats(src, p.get("tma", False))}
  if (threadIdx.x == 0) cpart = make_float4(n, mb, q, 0.f);
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
{cluster_combine("cpart", "cstat", "float4", "Chan", "make_float4(0.f, 0.f, 0.f, 0.f)", "K")}
  __cluster_barrier_arrive();  // done reading the other blocks' shared memory
  __syncthreads();{_gn_normalise(card, src, p.get("stream", False), "cstat")}
  __cluster_barrier_wait();  // no block leaves while another may still read its `cpart`
}}
"""
    smem = (p.get("keep", nit) if src == "mixed" else nit) * block * vec * isz if p["cache"] == "smem" else 0
    return source, [launch("gn_cluster", ng * k, block, args, smem)], None


def _pipe(card: OperatorCard, p: dict[str, Any], head: str, k: int, nit: int) -> _Kernels:
    """A fixed set of clusters walking the groups, the next group's chunk loading while this one's is written."""
    block, vec, isz = p["block"], p["vec"], main_itemsize(card)
    params, args = plan_params(card, _COMMON_ARGS[:3] + _tail_args(card))
    load = "ldp_cs" if p.get("stream", False) else "ldp"
    prefetch = f"""{{
      const T* xn = x + ngi * GS;
#pragma unroll
      for (int i = 0; i < NIT; ++i) {{
        const I e = beg + ((I)i * NT + threadIdx.x) * VEC;
        if (e < end) nx[i] = {load}<T, VEC>(xn + e);
      }}
    }}"""
    source = head + f"""
// A fixed number of clusters of K blocks walk the groups; block k takes chunk k of every group its cluster visits.
// The current group's chunk sits in shared memory while the loads of the next group's chunk fly into registers
// (nx), so this group's statistics, barrier and stores overlap the next group's loads. Stats as in gn_cluster.
// The cluster shape sits on a declaration: the contract's kernel pattern wants `void NAME(` on the definition.
extern "C" __global__ __cluster_dims__(K, 1, 1) void gn_pipe({params});
extern "C" __global__ __launch_bounds__(NT) void gn_pipe({params}) {{
  __shared__ float red[32];
  __shared__ float4 cpart[2], cstat;  // cpart by parity: a block may publish the next group's before others read
  extern __shared__ __align__(16) unsigned char dsm[];
  P* cache = reinterpret_cast<P*>(dsm);
  const int k = blockIdx.x % K;
  const long long ncl = gridDim.x / K;
  const I beg = (I)k * CH, end = min(beg + (I)CH, (I)GS);
  const float n = (float)(end - beg);
{walk_head("gi", "NG", "blockIdx.x / K", prefetch, "beg + ((I)i * NT + threadIdx.x) * VEC < end",
           "cache[i * NT + threadIdx.x]")}
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < NIT; ++i) {{
      if (beg + ((I)i * NT + threadIdx.x) * VEC < end) {{
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += to_f(cache[i * NT + threadIdx.x].v[j]);
      }}
    }}
    const float mb = group_all<NT, NT>(s, Sum(), red) / n;
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < NIT; ++i) {{
      if (beg + ((I)i * NT + threadIdx.x) * VEC < end) {{
#pragma unroll
        for (int j = 0; j < VEC; ++j) {{ const float d = to_f(cache[i * NT + threadIdx.x].v[j]) - mb; q += d * d; }}
      }}
    }}
    q = group_all<NT, NT>(q, Sum(), red);
    if (threadIdx.x == 0) cpart[it & 1] = make_float4(n, mb, q, 0.f);
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
{cluster_combine("cpart[it & 1]", "cstat", "float4", "Chan", "make_float4(0.f, 0.f, 0.f, 0.f)", "K")}
    __syncthreads();
    {{{_gn_normalise(card, "smem", p.get("stream", False), "cstat")}
    }}
    __syncthreads();  // every thread has read `cstat` before the next group's is written
  }}
  __cluster_barrier_arrive();  // no block leaves while another may still read its `cpart`
  __cluster_barrier_wait();
}}
"""
    return source, [launch("gn_pipe", p["clusters"] * k, block, args, nit * block * vec * isz)], None


def _sync(card: OperatorCard, p: dict[str, Any], head: str, k: int, nit: int) -> _Kernels:
    """One launch: a group's blocks take tickets in order and wait for each other's partials (Note [ticket barrier
    progress] in group_norm.py)."""
    ng, block = card.sizes["N"] * card.sizes["G"], p["block"]
    params, args = plan_params(card, _COMMON_ARGS + [("scratch:sync", "int* __restrict__ sync", "")] + _tail_args(card))
    source = head + f"""
// One launch. See Note [ticket barrier progress] in group_norm.py: sync[0] hands out chunks in order, sync[1 + group]
// counts the group's published partials.
extern "C" __global__ __launch_bounds__(NT) void gn_sync({params}) {{
  __shared__ float red[32];
  __shared__ float4 red4[32];
  __shared__ int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(sync, 1);
  __syncthreads();
  const int t = ticket;
  const long long gi = t / K;
  const int k = t % K;{_CHUNK}{_gn_sync_stats(p.get("cache", "reg"))}
  if (threadIdx.x == 0) {{
    part[t] = make_float4(n, mb, q, 0.f);
    __threadfence();
    atomicAdd(sync + 1 + gi, 1);
    while (*(volatile int*)(sync + 1 + gi) < K) {{ }}
    __threadfence();
  }}
  __syncthreads();{_gn_normalise(card, {"reg": "reg", "smem": "smem"}.get(p.get("cache", "reg"), "global"),
                                  p.get("stream", False))}
}}
"""
    smem = p["bpt"] * block if p.get("cache") == "smem" else 0
    return source, [launch("gn_sync", ng * k, block, args, smem)], {"part": (ng * k * 16, False),
                                                                     "sync": ((1 + ng) * 4, True)}


_CHUNK_KERNELS = {"split": _split, "cluster": _cluster, "pipe": _pipe, "sync": _sync}


SYNC_STATIC_SMEM = 1024  # gn_sync's own __shared__ (reduction scratch, ticket), rounded up


def _shifted_sums(load: str) -> str:
    """n, mb (mean) and q (M2) of this block's chunk from sums shifted by its first value, each pack read by ``load``
    (at element ``e``)."""
    return f"""
  const float n = (float)(end - beg);
  const float shift = to_f(xg[beg]);
  float2 a = make_float2(0.f, 0.f);
#pragma unroll
  for (int i = 0; i < NIT; ++i) {{
    const I e = beg + ((I)i * NT + threadIdx.x) * VEC;
    if (e < end) {{
      const P p = {load};
#pragma unroll
      for (int j = 0; j < VEC; ++j) {{ const float d = to_f(p.v[j]) - shift; a.x += d; a.y += d * d; }}
    }}
  }}
  a = group_all<NT, NT>(a, Sum2(), red2);
  const float mb = shift + a.x / n, q = fmaxf(a.y - a.x * a.x / n, 0.f);"""


def _bulk_fill(packs: str) -> str:
    """C++: the chunk's first ``packs`` packs (at most the chunk) into ``dsm`` by the copy engine (Note [a chunk
    fetched by the copy engine] in common.py)."""
    return f"""
  __shared__ __align__(8) unsigned long long bar;
  bulk_fill(dsm, xg + beg, (unsigned)(min((I){packs} * VEC, end - beg) * sizeof(T)), &bar);"""


def _gn_sync_stats(cache: str, tma: bool = False) -> str:
    """This block's chunk statistics for ``gn_sync`` and ``gn_cluster``: n, mb (mean) and q (M2); with ``reg``
    (registers) or ``smem`` (dynamic shared memory: bigger chunks, more groups resident) the chunk stays in
    ``cache`` for the write, with ``none`` it is summed once, shifted by its first value, and not kept; ``mixed``
    keeps its first KEEP packs per thread. ``tma``: shared memory is filled by the copy engine."""
    if cache == "mixed":  # the kept packs into shared memory, then shifted sums over them and the re-read rest
        fill = _bulk_fill("KEEP * NT") if tma else """
#pragma unroll
  for (int i = 0; i < KEEP; ++i) {
    const I e = beg + ((I)i * NT + threadIdx.x) * VEC;
    if (e < end) cache[i * NT + threadIdx.x] = ldp<T, VEC>(xg + e);
  }"""
        return """
  __shared__ float2 red2[32];
  extern __shared__ __align__(16) unsigned char dsm[];
  P* cache = reinterpret_cast<P*>(dsm);""" + fill + \
            _shifted_sums("i < KEEP ? cache[i * NT + threadIdx.x] : ldp<T, VEC>(xg + e)")
    if cache == "none":
        return """
  __shared__ float2 red2[32];""" + _shifted_sums("ldp<T, VEC>(xg + e)")
    decl, slot = ("P cache[NIT];", "cache[i]") if cache == "reg" else (
        "extern __shared__ __align__(16) unsigned char dsm[];\n  P* cache = reinterpret_cast<P*>(dsm);",
        "cache[i * NT + threadIdx.x]")
    fill = _bulk_fill("NIT * NT") if tma else f"""
#pragma unroll
  for (int i = 0; i < NIT; ++i) {{
    const I e = beg + ((I)i * NT + threadIdx.x) * VEC;
    if (e < end) {slot} = ldp<T, VEC>(xg + e);
  }}"""
    return f"""
  {decl}{fill}
  const float n = (float)(end - beg);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NIT; ++i) {{
    if (beg + ((I)i * NT + threadIdx.x) * VEC < end) {{
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += to_f({slot}.v[j]);
    }}
  }}
  const float mb = group_all<NT, NT>(s, Sum(), red) / n;
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < NIT; ++i) {{
    if (beg + ((I)i * NT + threadIdx.x) * VEC < end) {{
#pragma unroll
      for (int j = 0; j < VEC; ++j) {{ const float d = to_f({slot}.v[j]) - mb; q += d * d; }}
    }}
  }}
  q = group_all<NT, NT>(q, Sum(), red);"""


_RELAY_STATS = r"""
typedef float4 V;  // (count, mean, M2): Chan's combine
typedef Chan Op;
__device__ __forceinline__ V ident() { return make_float4(0.f, 0.f, 0.f, 0.f); }
// A piece's word holds (mean, M2), M2 >= 0; its count follows from its place in the group.
__device__ __forceinline__ float2 pack_stat(V v) { return make_float2(v.y, v.z); }
__device__ __forceinline__ V unpack_stat(float2 f, int i) {
  return make_float4((float)min(PE, COLS - i * PE), f.x, f.y, 0.f);
}
"""

_RELAY_REDUCE = """
      P pk[NPL];
      float s1 = 0.f;
#pragma unroll
      for (int i = 0; i < NPL; ++i)
        if (c0 + wc + (i * 32 + lane) * VEC < COLS) {
          pk[i] = sp[i * 32 + lane];
#pragma unroll
          for (int j = 0; j < VEC; ++j) s1 += to_f(pk[i].v[j]);
        }
      s1 = group_all<32, 32>(s1, Sum(), (float*)nullptr);
      const float nv = (float)max(0, min(PE / NW, COLS - c0 - wc));
      const float mv = nv > 0.f ? s1 / nv : 0.f;
      float q = 0.f;
#pragma unroll
      for (int i = 0; i < NPL; ++i)
        if (c0 + wc + (i * 32 + lane) * VEC < COLS) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) { const float d = to_f(pk[i].v[j]) - mv; q += d * d; }
        }
      q = group_all<32, 32>(q, Sum(), (float*)nullptr);
      const V v = make_float4(nv, mv, q, 0.f);"""


# Note [weights loaded before the wait]
# The relay's writers wait for their piece's group statistic, then normalise. Each pack needs its channel's weight and
# bias, two 2-byte global loads, and the first version issued them after that wait, right before their first use.
# Nsight Compute on [1,512,256,256] bf16 (thirteenth session, results/h200/ncu/gn_relay_bf16_session13.*): 12% of the
# kernel's warp-stall samples sat on the conversion of the first weight (long scoreboard), next to the 13% on the wait
# itself. They do not depend on the statistic, so the writers now load them before they wait, into registers
# (while that is at most 8 packs a lane), and the two latencies overlap. The arithmetic is ATen's fused form as before
# (ca = rstd * w, cb = b - ca * mean). Timed against the code before, alternately in one call, two rounds
# (probe_session13_weights_ab.json): fp32 [1,512,128,128] 22.3 and 22.1 us against 22.6 and 22.4, [1,512,256,256]
# 70.0 and 70.0 against 70.8 and 71.3; but bf16 [1,512,256,256], the profiled kernel, 43.7 and 43.7 against 43.4 and
# 43.5. The stall samples moved to other waits rather than going away: about 1.3% faster in fp32, 0.6% slower there.
def relay_source(card: OperatorCard, p: dict[str, Any]) -> tuple[str, list[str]]:
    """Note [rows relayed through global memory] (relay.py) with groups as rows: a warp's (count, mean, M2) from its
    packs (two passes over registers), combined with Chan's formula in warp and then piece order; the resolver of a
    group's first piece stores mean and rstd; the writers normalise with the stored (rounded) values, as ATen does."""
    gs = card.sizes["group_size"]
    has_w, has_b = input_spec(card, "weight") is not None, input_spec(card, "bias") is not None
    prefetch, early = "", relay_consts(p, gs)["NPL"] <= 8  # at most 16 registers of weights a lane
    if has_w or has_b:  # ATen's fused form, as _gn_normalise; Note [weights loaded before the wait]
        wv, bv = ("wv[i]", "bv[i]") if early else ("to_f(w[gg * D + e / HW])", "to_f(b[gg * D + e / HW])")
        coef = (f"const float ca = {f'r_r * {wv}' if has_w else 'r_r'}; "
                f"const float cb = {bv if has_b else '0.f'} - ca * m_r;")
        val = "to_f(p.v[j]) * ca + cb"
        loads = " ".join(load for load in ("wv[i] = to_f(w[c]);" if has_w else "",
                                           "bv[i] = to_f(b[c]);" if has_b else "") if load)
        prefetch = "" if not early else f"""
      float wv[NPL], bv[NPL];
#pragma unroll
      for (int i = 0; i < NPL; ++i) {{
        const int e = c0 + wc + (i * 32 + lane) * VEC, c = (int)(row % G) * D + e / HW;
        if (e < COLS) {{ {loads} }}
      }}"""
    else:
        coef, val = "", "(to_f(p.v[j]) - m_r) * r_r"
    outs = " ".join(store for store in gn_shared.stat_stores(card, "row") if store)
    resolve = f"""
          const float mean = a.y, rstd = rsqrtf(fmaxf(a.z / a.x, 0.f) + eps);
          if (c0 == 0) {{ {outs} }}
          const float2 fin = make_float2(round_to<TM>(mean), round_to<TR>(rstd));"""
    write = f"""
      const float m_r = st.x, r_r = st.y;
      TO* yg = y + row * COLS;
      const int gg = (int)(row % G);
#pragma unroll
      for (int i = 0; i < NPL; ++i) {{
        const int e = c0 + wc + (i * 32 + lane) * VEC;
        if (e < COLS) {{
          const P p = sp[i * 32 + lane];
          {coef}
          PO o;
#pragma unroll
          for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>({val});
          stp<TO, VEC>(yg + e, o);
        }}
      }}"""
    params, args = plan_params(card, gn_shared.tensor_items(card))
    head = f"""{PREAMBLE}
{gn_shared.types(card)}
{consts(COLS=gs, VEC=p["vec"], HW=card.sizes["HxW"], D=card.sizes["ch_per_group"], G=card.sizes["G"],
        **relay_consts(p, gs, vbytes=16))}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
"""
    kernel = relay_kernel("gn_relay", p, params, _RELAY_REDUCE, resolve, write, prefetch)
    return head + RELAY_HELPERS + _RELAY_STATS + kernel, args
