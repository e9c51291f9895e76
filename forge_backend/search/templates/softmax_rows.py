"""The softmax's row sources for its strategies ``group`` and ``block`` (``rows_source``), ``cluster``, ``pipe`` and
``split`` (softmax.py describes each), and the header every softmax kernel starts with (``header``), which reads a
fused card's inputs through its prologue (``fused_loader``)."""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from .common import (PREAMBLE, ROW_SETUP, TMA_HELPERS, cdiv, chunk_of, cluster_combine, consts, output_spec, row_fill,
                     row_loop, row_of_source, typedefs, walk_head)
from .fused import row_loader
from .softmax_card import in_dtype, is_fused, launch_order

_MAX = "\n#pragma unroll\n for (int j = 0; j < VEC; ++j) m = fmaxf(m, to_f(p.v[j]));"
_SUM = "\n#pragma unroll\n for (int j = 0; j < VEC; ++j) s += sexp(to_f(p.v[j]), m);"
_ONLINE = """float pm = -CUDART_INF_F;
#pragma unroll
 for (int j = 0; j < VEC; ++j) pm = fmaxf(pm, to_f(p.v[j]));
 const float mn = fmaxf(ms.x, pm); float t = ms.y * sexp(ms.x, mn);
#pragma unroll
 for (int j = 0; j < VEC; ++j) t += sexp(to_f(p.v[j]), mn);
 ms = make_float2(mn, t);"""


def _stats(src: str, online: bool, ld: str = "ldp") -> str:
    """Statistics of this group's values: float m (max), s (sum of exp(x - m))."""
    if online:
        return f"""
  float2 ms = make_float2(-CUDART_INF_F, 0.f);{row_loop(src, _ONLINE, ld)}
  ms = group_all<NT, TPR>(ms, MaxSum(), red2);
  const float m = ms.x, s = ms.y;"""
    return f"""
  float m = -CUDART_INF_F;{row_loop(src, _MAX, ld)}
  m = group_all<NT, TPR>(m, Max(), red);
  float s = 0.f;{row_loop(src, _SUM, ld)}
  s = group_all<NT, TPR>(s, Sum(), red);"""


def _write(src: str, log: bool, stream: bool = False, ld: str = "ldp") -> str:
    """Normalise and store this thread's packs from ``src`` (``reg``, ``smem``, ``global`` or ``mixed``: the packs
    past the kept ones re-read from global first, while they are the freshest lines in L2, then the kept ones)."""
    val = "to_f(p.v[j]) - m - lse" if log else "__expf(to_f(p.v[j]) - m) * inv"
    pre = "const float lse = __logf(s);" if log else "const float inv = 1.f / s;"
    st = "stp_cs" if stream else "stp"
    body = f"PO o;\n#pragma unroll\n for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>({val});\n {st}<TO, VEC>(yr + col, o);"
    last = ld + "_cs" if stream else ld
    if src == "mixed":
        return f"\n  {pre}{_rest_loop(body, last)}{row_loop('smem', body, ld, nit='KEEP')}"
    return f"\n  {pre}{row_loop(src, body, last)}"


def _rest_loop(body: str, load: str) -> str:
    """``body`` on this thread's packs past the kept ones (KEEP..NIT-1), read from global with ``load``; unrolled,
    so that all of a thread's loads are in flight at once."""
    return f"""
#pragma unroll
  for (int i = KEEP; i < NIT; ++i) {{
    const int col = cbeg + (i * NT + lane) * VEC;
    if (col < cend) {{ const P p = {load}<T, VEC>(xr + col); {body} }}
  }}"""


def _mixed_stats(ld: str) -> str:
    """Online (max, sum) of this block's chunk for ``cache=smem`` with ``keep``: the kept packs (already in shared
    memory), then the rest streamed from global, so that the rest are the lines this block read last."""
    return f"""
  float2 ms = make_float2(-CUDART_INF_F, 0.f);{row_loop("smem", _ONLINE, ld, nit="KEEP")}{_rest_loop(_ONLINE, ld)}
  ms = group_all<NT, NT>(ms, MaxSum(), red2);
  const float m = ms.x, s = ms.y;"""


def _ld(card: OperatorCard) -> str:
    """The pack load of the softmax's input: ``ldp`` from memory, or ``ldx`` evaluating a fused prologue."""
    return "ldx" if is_fused(card) else "ldp"


def _x_params(card: OperatorCard) -> str:
    if not is_fused(card):
        return "const T* __restrict__ x"
    return ", ".join(f"const T{i}* __restrict__ x{i}" for i in range(len(card.inputs)))


def _x_row(card: OperatorCard, row: str) -> str:
    """The declaration of ``xr``, row ``row``'s input (a pointer, or the fused inputs' row pointers)."""
    if not is_fused(card):
        return f"const T* xr = x + {row} * (long long)COLS;"
    return f"const XRow xr = x_row({', '.join(f'x{i}' for i in range(len(card.inputs)))}, {row});"


def in_args(card: OperatorCard) -> list[str]:
    return [f"in:{t.name}" for t in card.inputs] if is_fused(card) else ["in:self"]


def fused_loader(card: OperatorCard) -> str:
    """Types and functions of a fused prologue (fused.row_loader): XRow, x_row, fx and ldx / ldx_cs."""
    return row_loader(str(card.scalars["expr"]), [t.spec for t in card.inputs], output_spec(card, 0))


def header(card: OperatorCard, p: dict[str, Any], **sizes: int) -> str:
    return f"""{PREAMBLE}
{typedefs(T=in_dtype(card), TO=output_spec(card, 0).dtype)}
{consts(COLS=card.sizes["cols"], VEC=p["vec"], **sizes)}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
{fused_loader(card) if is_fused(card) else ""}"""


# The row cache ``c`` of this thread's row (TPR threads per row, NIT packs each): registers, or this row's slice of
# the block's dynamic shared memory (``smem_cache_bytes`` of it per row).
_CACHE_DECL = {"reg": "P c[NIT];", "none": "",
               "smem": "extern __shared__ __align__(16) unsigned char dsm[];\n"
                       "  P* c = reinterpret_cast<P*>(dsm) + (threadIdx.x / TPR) * (NIT * TPR);"}


def smem_cache_bytes(cols: int, threads: int, vec: int, isz: int) -> int:
    """Shared memory that caches ``cols`` columns spread over ``threads`` threads, in whole packs per thread."""
    return cdiv(cols, threads * vec) * threads * vec * isz


def rows_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    block, vec, cache = p["block"], p["vec"], p["cache"]
    tpr = p["tpr"] if p["strategy"] == "group" else block
    nit = cdiv(card.sizes["cols"], tpr * vec)
    decl = _CACHE_DECL[cache]
    ld = _ld(card)
    fill = row_fill(cache, ld) if cache != "none" else ""
    src = cache if cache != "none" else "global"
    setup = ROW_SETUP.replace("const T* xr = x + (ok ? row : 0) * (long long)COLS;", _x_row(card, "(ok ? row : 0)"))
    assert "XRow" in setup or not is_fused(card), "ROW_SETUP no longer declares xr as the softmax expects"
    order, row_of = launch_order(card), ""
    # Note [rows that share a broadcast row run together] in common.py
    if p.get("order") == "bcast" and order is not None:
        launch_row = ("  const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;\n"
                      "  const bool ok = row < rows;")
        assert launch_row in setup, "ROW_SETUP no longer computes the row as the launch order expects"
        setup = setup.replace(launch_row, "  const long long lr = (long long)blockIdx.x * RPB + threadIdx.x / TPR;\n"
                                          "  const bool ok = lr < rows;\n  const long long row = ok ? row_of(lr) : lr;")
        row_of = row_of_source(output_spec(card, 0), order) + "\n"
    return header(card, p, TPR=tpr, NT=block, RPB=block // tpr, NIT=nit) + row_of + f"""
extern "C" __global__ __launch_bounds__(NT) void softmax_rows({_x_params(card)}, TO* __restrict__ y, long long rows) {{
  __shared__ float red[32];
  __shared__ float2 red2[32];{setup}
  {decl}{fill}{_stats(src, p.get("online", False), ld)}{_write(src, log, ld=ld)}
}}
"""


CLUSTER_STATIC_SMEM = 1024  # the cluster kernel's own __shared__ (reduction scratch, part, stat), rounded up


def cluster_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    cols, block, vec, cs = card.sizes["cols"], p["block"], p["vec"], p["cs"]
    cache, stream = p.get("cache", "reg"), p.get("stream", False)
    src = cache if cache != "none" else "global"
    chunk = chunk_of(cols, cs, vec)
    ld = _ld(card)
    kept = p.get("keep")  # valid() allows it only below the chunk's packs (Note [a chunk kept in part] in softmax.py)
    fill = _CACHE_DECL[cache] + (row_fill(cache, ld) if cache != "none" else "")  # TPR = NT: one row per block
    stats = _stats(src, cache == "none", ld)
    sizes: dict[str, int] = {}
    if kept is not None:  # Note [a chunk kept in part] in softmax.py
        src, sizes = "mixed", {"KEEP": kept}
        fill = _CACHE_DECL["smem"] + row_fill("smem", ld, nit="KEEP")
        stats = _mixed_stats(ld)
    if p.get("tma"):  # Note [a chunk fetched by the copy engine] in common.py
        n = "min(KEEP * NT * VEC, cend - cbeg)" if kept is not None else "(cend - cbeg)"
        fill = _CACHE_DECL["smem"] + f"""
  __shared__ __align__(8) unsigned long long bar;
  bulk_fill(dsm, xr + cbeg, (unsigned)({n} * sizeof(T)), &bar);"""
    head = header(card, p, TPR=block, NT=block, CS=cs, CHUNK=chunk, NIT=cdiv(chunk, block * vec), **sizes)
    return head + (TMA_HELPERS if p.get("tma") else "") + f"""
// One cluster of CS blocks per row; block `rank` takes columns [rank * CHUNK, (rank + 1) * CHUNK){" in registers" if cache == "reg" else ""}.
// The cluster shape sits on a declaration: the contract's kernel pattern wants `void NAME(` on the definition.
extern "C" __global__ __cluster_dims__(CS, 1, 1) void softmax_cluster({_x_params(card)}, TO* __restrict__ y);
extern "C" __global__ __launch_bounds__(NT) void softmax_cluster({_x_params(card)}, TO* __restrict__ y) {{
  __shared__ float red[32];
  __shared__ float2 red2[32];
  __shared__ float2 part, stat;
  const int lane = threadIdx.x;
  const long long row = blockIdx.x / CS;
  const int rank = blockIdx.x % CS;
  const bool ok = true;
  {_x_row(card, "row")}
  TO* yr = y + row * (long long)COLS;
  const int cbeg = rank * CHUNK, cend = min(cbeg + CHUNK, COLS);
  {fill}{stats}
  if (threadIdx.x == 0) part = make_float2(m, s);
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
{cluster_combine("part", "stat", "float2", "MaxSum", "make_float2(-CUDART_INF_F, 0.f)", "CS")}
  __cluster_barrier_arrive();  // done reading the other blocks' shared memory
  __syncthreads();
  {{
    const float m = stat.x, s = stat.y;{_write(src, log, stream, ld)}
  }}
  __cluster_barrier_wait();  // no block leaves while another may still read its `part`
}}
"""


def pipe_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    cols, block, vec, cs = card.sizes["cols"], p["block"], p["vec"], p["cs"]
    stream, ld = p.get("stream", False), _ld(card)
    chunk = chunk_of(cols, cs, vec)
    load = ld + "_cs" if stream else ld
    next_row = _x_row(card, "nrow").replace(" xr = ", " xn = ")
    prefetch = f"""{{
      {next_row}
#pragma unroll
      for (int i = 0; i < NIT; ++i) {{
        const int col = cbeg + (i * NT + lane) * VEC;
        if (col < cend) nx[i] = {load}<T, VEC>(xn + col);
      }}
    }}"""
    return header(card, p, TPR=block, NT=block, CS=cs, CHUNK=chunk, NIT=cdiv(chunk, block * vec)) + f"""
// A fixed number of clusters of CS blocks walk the rows; block `rank` takes columns [rank * CHUNK, (rank + 1) * CHUNK)
// of every row its cluster visits. The chunk of the current row sits in shared memory while the loads of the next
// row's chunk fly into registers (nx), so this row's statistics, barrier and stores overlap the next row's loads.
// The cluster shape sits on a declaration: the contract's kernel pattern wants `void NAME(` on the definition.
extern "C" __global__ __cluster_dims__(CS, 1, 1) void softmax_pipe({_x_params(card)}, TO* __restrict__ y, long long rows);
extern "C" __global__ __launch_bounds__(NT) void softmax_pipe({_x_params(card)}, TO* __restrict__ y, long long rows) {{
  __shared__ float red[32];
  __shared__ float2 red2[32];
  __shared__ float2 part[2], stat;  // part by row parity: a block may write the next row's before others read this
  extern __shared__ __align__(16) unsigned char dsm[];
  P* c = reinterpret_cast<P*>(dsm);
  const int lane = threadIdx.x;
  const int rank = blockIdx.x % CS;
  const long long ncl = gridDim.x / CS;
  const bool ok = true;
  const int cbeg = rank * CHUNK, cend = min(cbeg + CHUNK, COLS);
{walk_head("row", "rows", "blockIdx.x / CS", prefetch, "cbeg + (i * NT + lane) * VEC < cend", "c[i * NT + lane]")}
{_stats("smem", False)}
    if (threadIdx.x == 0) part[it & 1] = make_float2(m, s);
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
{cluster_combine("part[it & 1]", "stat", "float2", "MaxSum", "make_float2(-CUDART_INF_F, 0.f)", "CS")}
    __syncthreads();
    {{
      const float m = stat.x, s = stat.y;
      TO* yr = y + row * (long long)COLS;{_write("smem", log, stream, ld)}
    }}
    __syncthreads();  // every thread has read `stat` before the next row's is written
  }}
  __cluster_barrier_arrive();  // no block leaves while another may still read its `part`
  __cluster_barrier_wait();
}}
"""


def split_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    rows, cols = card.sizes["rows"], card.sizes["cols"]
    block, vec, splits = p["block"], p["vec"], p["splits"]
    chunk = chunk_of(cols, splits, vec)
    head = header(card, p, TPR=block, NT=block, S=splits, CHUNK=chunk, TOTAL=rows * splits, REV=int(p["reverse"]))
    return head + f"""
// Pass 1: block b = row * S + k writes the (max, sum) of chunk k of its row.
extern "C" __global__ __launch_bounds__(NT) void softmax_part({_x_params(card)}, float2* __restrict__ part) {{
  __shared__ float2 red2[32];
  const int lane = threadIdx.x;
  const long long row = blockIdx.x / S;
  const int k = blockIdx.x % S;
  const bool ok = true;
  {_x_row(card, "row")}
  const int cbeg = k * CHUNK, cend = min(cbeg + CHUNK, COLS);{_stats("global", True, _ld(card))}
  if (threadIdx.x == 0) part[blockIdx.x] = make_float2(m, s);
}}

// Pass 2: every chunk combines its row's S partials (same order in every block) and writes its outputs.
extern "C" __global__ __launch_bounds__(NT) void softmax_fin({_x_params(card)}, const float2* __restrict__ part, TO* __restrict__ y) {{
  __shared__ float2 red2[32];
  const long long b = REV ? (TOTAL - 1 - (long long)blockIdx.x) : (long long)blockIdx.x;
  const int lane = threadIdx.x;
  const long long row = b / S;
  const int k = (int)(b % S);
  const bool ok = true;
  {_x_row(card, "row")}
  TO* yr = y + row * (long long)COLS;
  const int cbeg = k * CHUNK, cend = min(cbeg + CHUNK, COLS);
  float2 ms = make_float2(-CUDART_INF_F, 0.f);
  for (int i = threadIdx.x; i < S; i += NT) ms = MaxSum()(ms, part[row * S + i]);
  ms = group_all<NT, NT>(ms, MaxSum(), red2);
  const float m = ms.x, s = ms.y;{_write("global", log, p.get("stream", False), _ld(card))}
}}
"""
