"""sum / mean / amax / amin over the trailing dims of a contiguous tensor, as ``rows x cols`` -> ``rows``.

Also the engine behind the NCHW global average pool (pool.py): rows = N*C, cols = H*W.

Strategies (``params["strategy"]``):

* ``tile``   short rows (cols <= 256): the block loads R consecutive rows (one contiguous span of memory) into shared
             memory with coalesced vector loads, then each thread reduces one row. For HxW = 49 rows a per-row
             mapping reads 98-byte rows with scattered accesses; the tile reads the same bytes as 16-byte vectors.
* ``group``  TPR <= 32 threads per row, several rows per block.
* ``block``  one block per row.
* ``split``  few long rows: per-chunk partials to scratch, then one block per row combines them in a fixed order.

All accumulation is fp32 (max/min exact), in a fixed order: bit-identical repeats.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from ...signature import TensorSpec
from .common import (FLOAT_DTYPES, ITEMSIZE, PREAMBLE, SMS, STATIC_SMEM_LIMIT, align_of, best_vec, cdiv, clamp, consts,
                     flat_contiguous, launch, main_input, make_candidate, output_spec, pow2_ceil, pow2_floor,
                     scale_knob, typedefs, vec_ok)

OPS = {"aten.sum.dim_IntList": "sum", "aten.mean.dim": "mean", "aten.amax.default": "amax",
       "aten.amin.default": "amin"}
STRATEGIES = ("tile", "group", "block", "split")
_INIT = {"sum": "0.f", "mean": "0.f", "amax": "-CUDART_INF_F", "amin": "CUDART_INF_F"}
_OP = {"sum": "Sum", "mean": "Sum", "amax": "MaxNan", "amin": "MinNan"}


@dataclass(frozen=True)
class Rows:
    """What a row reduction needs to know: shape, tensors and the reduction kind."""

    rows: int
    cols: int
    x: TensorSpec
    y: TensorSpec
    kind: str  # sum | mean | amax | amin
    what: str  # for descriptions


def rows_of(card: OperatorCard) -> Rows | None:
    """The row view of a reduction card, or None when the reduced dims are not the trailing contiguous ones."""
    if card.op not in OPS or not card.inputs:
        return None
    x, y = main_input(card), output_spec(card, 0)
    if y is None or x.dtype not in FLOAT_DTYPES or y.dtype not in FLOAT_DTYPES or x.numel == 0:
        return None
    nd = len(x.shape)
    dims = card.scalars.get("dim") or list(range(nd))
    dims = sorted(d + nd if d < 0 else d for d in dims)
    if nd == 0 or dims != list(range(nd - len(dims), nd)) or not x.is_contiguous():
        return None
    rows, cols = card.sizes["rows"], card.sizes["cols"]
    if y.numel != rows or not flat_contiguous(y):
        return None
    return Rows(rows, cols, x, y, OPS[card.op], OPS[card.op])


def matches(card: OperatorCard) -> bool:
    return rows_of(card) is not None


def _rows(card: OperatorCard) -> Rows:
    r = rows_of(card)
    assert r is not None, f"{card.op} is not a trailing-dims reduction"
    return r


# ---------------------------------------------------------------------------------------------------------------------
# parameters


def defaults_rows(r: Rows, strategy: str) -> dict[str, Any]:
    vec = best_vec(r.cols, [r.x])
    if strategy == "tile":
        per_row = r.cols * ITEMSIZE[r.x.dtype]
        block = clamp(pow2_floor(max(r.rows // (2 * SMS), 1)), 32, 256)
        while block > 32 and block * per_row > 32 * 1024:
            block //= 2
        tvec = 16 // ITEMSIZE[r.x.dtype]
        while tvec > 1 and not vec_ok(tvec, tvec, [r.x]):
            tvec //= 2
        return {"strategy": "tile", "vec": tvec, "block": block}
    if strategy == "group":
        return {"strategy": "group", "vec": vec, "tpr": clamp(pow2_ceil(cdiv(r.cols, vec * 4)), 1, 32), "block": 128}
    if strategy == "block":
        return {"strategy": "block", "vec": vec, "block": clamp(pow2_ceil(cdiv(r.cols, vec * 8)), 64, 512)}
    return {"strategy": "split", "vec": vec, "block": 256,
            "splits": clamp(cdiv(8 * SMS, r.rows), 2, max(2, r.cols // 8192))}


def root_rows(r: Rows) -> dict[str, Any]:
    if r.cols <= 64:
        order = ("tile", "group")
    elif r.cols * ITEMSIZE[r.x.dtype] <= 8192:
        order = ("group",)
    elif r.rows >= 2 * SMS:
        order = ("block",)
    else:
        order = ("split", "block")
    return next(p for s in order + STRATEGIES if valid_rows(r, p := defaults_rows(r, s)))


def valid_rows(r: Rows, p: dict[str, Any]) -> bool:
    s, vec, block = p.get("strategy"), p.get("vec", 0), p.get("block", 0)
    if s not in STRATEGIES or block % 32 or not 32 <= block <= 1024:
        return False
    if s == "tile":
        return (r.cols <= 256 and vec_ok(vec, vec, [r.x]) and block * r.cols * ITEMSIZE[r.x.dtype] <= STATIC_SMEM_LIMIT
                and block <= 256 and cdiv(block * r.cols // vec, block) <= 64)
    if not vec_ok(vec, r.cols, [r.x]):
        return False
    if s == "group":
        return p.get("tpr") in (1, 2, 4, 8, 16, 32)
    if s == "block":
        return block <= max(64, pow2_ceil(cdiv(r.cols, vec)))
    splits = p.get("splits", 0)
    return 2 <= splits <= r.cols // vec and r.rows * splits <= 2**31 - 1


def actions_rows(r: Rows, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    acts = [(f"strategy {p['strategy']} -> {s}", defaults_rows(r, s)) for s in STRATEGIES if s != p["strategy"]]
    acts += scale_knob(p, "vec") + scale_knob(p, "block") + scale_knob(p, "tpr") + scale_knob(p, "splits")
    seen, out = set(), []
    for label, q in acts:
        key = tuple(sorted(q.items()))
        if q != p and key not in seen and valid_rows(r, q):
            seen.add(key)
            out.append((label, q))
    return out


def seeds_rows(r: Rows) -> list[dict[str, Any]]:
    root = root_rows(r)
    return [root] + [q for s in STRATEGIES if s != root["strategy"] and valid_rows(r, q := defaults_rows(r, s))]


# ---------------------------------------------------------------------------------------------------------------------
# code generation

_EXTRA = r"""
struct MinNan { __device__ __forceinline__ float operator()(float a, float b) const { return (a != a || a < b) ? a : b; } };
"""


def _header(r: Rows, p: dict[str, Any], **sizes: int) -> str:
    idx = "long long" if r.cols * max(r.rows, 1) > 2**31 - 1 else "int"
    return f"""{PREAMBLE}{_EXTRA}
{typedefs(T=r.x.dtype, TO=r.y.dtype)}
typedef {idx} I;
{consts(COLS=r.cols, VEC=p["vec"], NT=p["block"], **sizes)}
typedef Pack<T, VEC> P;
__device__ __forceinline__ float finish(float a) {{ return {"a * (1.f / (float)COLS)" if r.kind == "mean" else "a"}; }}
"""


def _accumulate(kind: str) -> str:
    return f"\n#pragma unroll\n for (int j = 0; j < VEC; ++j) a = {_OP[kind]}()(a, to_f(p.v[j]));"


def _rows_source(r: Rows, p: dict[str, Any]) -> str:
    tpr = p["tpr"] if p["strategy"] == "group" else p["block"]
    return _header(r, p, TPR=tpr, RPB=p["block"] // tpr) + f"""
extern "C" __global__ __launch_bounds__(NT) void reduce_rows(const T* __restrict__ x, TO* __restrict__ y, long long rows) {{
  __shared__ float red[32];
  const int lane = threadIdx.x % TPR;
  const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;
  const T* xr = x + row * (long long)COLS;
  float a = {_INIT[r.kind]};
  if (row < rows) {{
#pragma unroll 4
    for (I col = lane * VEC; col < COLS; col += TPR * VEC) {{ const P p = ldp<T, VEC>(xr + col); {_accumulate(r.kind)} }}
  }}
  a = group_all<NT, TPR>(a, {_OP[r.kind]}(), red);
  if (row < rows && lane == 0) y[row] = from_f<TO>(finish(a));
}}
"""


def _tile_source(r: Rows, p: dict[str, Any]) -> str:
    block, vec = p["block"], p["vec"]
    tile = block * r.cols
    if r.cols % 2 == 0:  # rotate each thread's start column so an even row length spreads over the smem banks
        row_loop = f"""int j = threadIdx.x % COLS;
#pragma unroll 8
    for (int k = 0; k < COLS; ++k) {{ a = {_OP[r.kind]}()(a, to_f(t[j])); j = (j + 1 == COLS) ? 0 : j + 1; }}"""
    else:
        row_loop = f"""
#pragma unroll 8
    for (int k = 0; k < COLS; ++k) a = {_OP[r.kind]}()(a, to_f(t[k]));"""
    return _header(r, p, TILE=tile, ITER=cdiv(tile // vec, block)) + f"""
// Block b reduces rows [b * NT, b * NT + NT): one contiguous span, loaded as vectors, then one row per thread.
extern "C" __global__ __launch_bounds__(NT) void reduce_tile(const T* __restrict__ x, TO* __restrict__ y, long long rows) {{
  __shared__ __align__(16) T tile[TILE];
  const long long r0 = (long long)blockIdx.x * NT;
  const int nrows = (int)min((long long)NT, rows - r0);
  const T* src = x + r0 * COLS;
  if (nrows == NT) {{  // full tile: every load issued before the first store (TILE is a multiple of VEC)
    P buf[ITER];
#pragma unroll
    for (int k = 0; k < ITER; ++k) {{ const int i = (k * NT + threadIdx.x) * VEC; if (i < TILE) buf[k] = ldp<T, VEC>(src + i); }}
#pragma unroll
    for (int k = 0; k < ITER; ++k) {{ const int i = (k * NT + threadIdx.x) * VEC; if (i < TILE) stp<T, VEC>(tile + i, buf[k]); }}
  }} else {{
    const int n = nrows * COLS;
    for (int i = threadIdx.x * VEC; i < n; i += NT * VEC) {{
      if (i + VEC <= n) stp<T, VEC>(tile + i, ldp<T, VEC>(src + i));
      else for (int k = i; k < n; ++k) tile[k] = src[k];
    }}
  }}
  __syncthreads();
  if (threadIdx.x < nrows) {{
    const T* t = tile + threadIdx.x * COLS;
    float a = {_INIT[r.kind]};
    {row_loop}
    y[r0 + threadIdx.x] = from_f<TO>(finish(a));
  }}
}}
"""


def _split_source(r: Rows, p: dict[str, Any]) -> str:
    splits = p["splits"]
    chunk = cdiv(cdiv(r.cols, splits), p["vec"]) * p["vec"]
    return _header(r, p, S=splits, CHUNK=chunk) + f"""
// Pass 1: block b = row * S + k reduces chunk k of its row into part[b].
extern "C" __global__ __launch_bounds__(NT) void reduce_part(const T* __restrict__ x, float* __restrict__ part) {{
  __shared__ float red[32];
  const long long row = blockIdx.x / S;
  const I beg = (I)(blockIdx.x % S) * CHUNK;
  const I end = min(beg + (I)CHUNK, (I)COLS);
  const T* xr = x + row * (long long)COLS;
  float a = {_INIT[r.kind]};
#pragma unroll 4
  for (I col = beg + threadIdx.x * VEC; col < end; col += NT * VEC) {{ const P p = ldp<T, VEC>(xr + col); {_accumulate(r.kind)} }}
  a = group_all<NT, NT>(a, {_OP[r.kind]}(), red);
  if (threadIdx.x == 0) part[blockIdx.x] = a;
}}

// Pass 2: one block per row combines its S partials in a fixed order.
extern "C" __global__ __launch_bounds__(NT) void reduce_fin(const float* __restrict__ part, TO* __restrict__ y) {{
  __shared__ float red[32];
  float a = {_INIT[r.kind]};
  for (int i = threadIdx.x; i < S; i += NT) a = {_OP[r.kind]}()(a, part[(long long)blockIdx.x * S + i]);
  a = group_all<NT, NT>(a, {_OP[r.kind]}(), red);
  if (threadIdx.x == 0) y[blockIdx.x] = from_f<TO>(finish(a));
}}
"""


def generate_rows(r: Rows, p: dict[str, Any], x_name: str = "self") -> Candidate:
    if not valid_rows(r, p):
        raise ValueError(f"reduction params {p} are not valid for rows={r.rows} cols={r.cols}")
    s, block, vec = p["strategy"], p["block"], p["vec"]
    rows_arg = f"i64:{r.rows}"
    scratch = None
    if s == "tile":
        launches = [launch("reduce_tile", cdiv(r.rows, block), block, [f"in:{x_name}", "out:0", rows_arg])]
        src = _tile_source(r, p)
    elif s in ("group", "block"):
        rpb = block // p["tpr"] if s == "group" else 1
        launches = [launch("reduce_rows", cdiv(r.rows, rpb), block, [f"in:{x_name}", "out:0", rows_arg])]
        src = _rows_source(r, p)
    else:
        launches = [launch("reduce_part", r.rows * p["splits"], block, [f"in:{x_name}", "scratch:part"]),
                    launch("reduce_fin", r.rows, block, ["scratch:part", "out:0"])]
        src, scratch = _split_source(r, p), {"part": (r.rows * p["splits"] * 4, False)}
    desc = f"{r.what} {s} " + " ".join(f"{k}={v}" for k, v in sorted(p.items()) if k != "strategy")
    return make_candidate(src, launches, desc, p, align_of(vec, [r.x]), scratch)


# family API --------------------------------------------------------------------------------------------------------


def root_params(card: OperatorCard) -> dict[str, Any]:
    return root_rows(_rows(card))


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    return seeds_rows(_rows(card))


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    return valid_rows(_rows(card), p)


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return actions_rows(_rows(card), p)


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    return generate_rows(_rows(card), p)
