"""Shared pieces of the template generators: dtype tables, the CUDA preamble every template starts with, launch and
candidate builders, and small helpers for enumerating valid knob changes.

Leaf of the templates package: imports only the contract and the card types.

Note [baked constants]
A candidate is compiled for exactly one signature, so generators bake the sizes that shape the code (row length,
vector width, iterations per thread) into the source as ``constexpr``. Loops then have compile-time trip counts, the
per-thread row cache is a register array indexed by constants, and divisions by channel counts become multiply-
shift. Only sizes that merely bound a loop (rows) travel as launch arguments.

Note [safe exp]
Softmax statistics use ``sexp(v, m) = m == -inf ? 0 : exp(v - m)``. A chunk or thread whose values are all -inf
(or that holds no values) then contributes (m=-inf, s=0) instead of NaN, so partial -inf entries give 0 like
PyTorch. The final output uses the plain exp, so a row that is entirely -inf still gives NaN, as PyTorch does.

Note [roundings off the MIO pipe]
A fused expression rounds each bf16 or fp16 intermediate the way eager stores it (Note [fused rounding] in fused.py):
``round_to<T>``. Written as ``to_f(from_f<T>(x))`` that is one ``F2F.BF16.F32`` per rounding, a conversion the SM
issues through its MIO queue to a unit of 16 lanes per SM (where ``MUFU.EX2`` also goes), while the paired conversion
``cvt.rn.bf16x2.f32`` (``F2FP.BF16.F32.PACK_AB``, the one the compiler already uses to store packs) is not. The soft
cap rounds three times an element, and Nsight Compute put 26% of the soft-capped relay's stall samples on MIO
throttles at its F2F instructions (sixteenth session, results/h200/ncu/softcap_relay_once_f2f.*). So ``round_to``
of a 16-bit type converts x to both halves of a pair and widens one of them: the same round-to-nearest-even result
(NaN stays NaN), two instructions, neither on the MIO pipe. Same run, every other line of the source the same
(probe_variants.py ``--swap``, results/h200/probe_session16_paired_rounding.json), the soft-capped softmax
[64, 262144] bf16 -> fp32: cluster 49.0 us against 53.3 with F2F and 53.8 with an integer rounding (five ALU
instructions); relay (once, 16 KB pieces, 10 slots) 35.8 against 41.8 and 43.4. A softmax whose prologue rounds
nothing (``to_float32(x0)``) ran the same with all three (33.6-33.9 us). The last single conversions left in the
template seeds were a norm prologue's result packs (``ldx`` of fused.py, one F2F an element of MMDiT's residual adaLN
norm); converting those in pairs as well was timed and not kept (sixteenth session, same run, --swap,
results/h200/probe_session16_norm_prologue_pairs.json): 16.5 against 16.2 us, 17.2 against 16.9 in 32-thread groups.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from ...cards import OperatorCard
from ...contract import Candidate, Launch, Scratch
from ...signature import TensorSpec

CTYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
FLOAT_DTYPES = frozenset(CTYPE)
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one block may use on sm_90 (dynamic, opt-in above 48 KB)
SM_SMEM = 228 * 1024  # shared memory of one SM (sm_90), of which each resident block also takes 1 KB
STATIC_SMEM_LIMIT = 48 * 1024  # static __shared__ arrays must stay under this
REG_CACHE_BLOCK = 128 * 1024  # bytes of row a block may hold in registers (half the 256 KB register file)
REG_CACHE_THREAD = 256  # bytes one thread may hold (64 registers)
INT32_MAX = 2**31 - 1
SMS = 132  # H200 SM count; only used to size grids so that every SM has work

PREAMBLE = r"""#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
// Round a float through T and back (ATen stores some statistics in the input dtype and reuses the rounded value).
template <typename T> __device__ __forceinline__ float round_to(float x) { return to_f(from_f<T>(x)); }
// 16-bit types: the paired conversion (F2FP), not the single one (F2F, the MIO pipe; Note [roundings off the MIO pipe]):
// x rounded into both halves of a pair
__device__ __forceinline__ unsigned bf16_pair(float x) { unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(r) : "f"(x)); return r; }
__device__ __forceinline__ unsigned f16_pair(float x) { unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(r) : "f"(x)); return r; }
template <> __device__ __forceinline__ float round_to<__nv_bfloat16>(float x) { return __uint_as_float(bf16_pair(x) << 16); }
template <> __device__ __forceinline__ float round_to<__half>(float x) { return __half2float(__ushort_as_half((unsigned short)f16_pair(x))); }

// N elements of T moved as one (up to 16-byte) access; the generator only uses it on N-aligned offsets.
template <typename T, int N> struct __align__(sizeof(T) * N) Pack { T v[N]; };
template <typename T, int N> __device__ __forceinline__ Pack<T, N> ldp(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}
template <typename T, int N> __device__ __forceinline__ void stp(T* p, const Pack<T, N>& x) {
  *reinterpret_cast<Pack<T, N>*>(p) = x;
}

// The same, with streaming cache hints: a last read (ld.global.cs) and a write that should not stay in L2
// (st.global.cs), so that data a kernel re-reads later is not evicted by its own output.
template <typename T, int N> __device__ __forceinline__ Pack<T, N> ldp_cs(const T* p) {
  Pack<T, N> r;
  if constexpr (sizeof(r) == 16) *reinterpret_cast<uint4*>(&r) = __ldcs(reinterpret_cast<const uint4*>(p));
  else if constexpr (sizeof(r) == 8) *reinterpret_cast<uint2*>(&r) = __ldcs(reinterpret_cast<const uint2*>(p));
  else if constexpr (sizeof(r) == 4) *reinterpret_cast<unsigned*>(&r) = __ldcs(reinterpret_cast<const unsigned*>(p));
  else r = *reinterpret_cast<const Pack<T, N>*>(p);
  return r;
}
template <typename T, int N> __device__ __forceinline__ void stp_cs(T* p, const Pack<T, N>& x) {
  if constexpr (sizeof(x) == 16) __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&x));
  else if constexpr (sizeof(x) == 8) __stcs(reinterpret_cast<uint2*>(p), *reinterpret_cast<const uint2*>(&x));
  else if constexpr (sizeof(x) == 4) __stcs(reinterpret_cast<unsigned*>(p), *reinterpret_cast<const unsigned*>(&x));
  else *reinterpret_cast<Pack<T, N>*>(p) = x;
}

__device__ __forceinline__ float sexp(float v, float m) { return m == -CUDART_INF_F ? 0.f : __expf(v - m); }

struct Sum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
struct Max { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
// Max that propagates NaN like torch.amax.
struct MaxNan { __device__ __forceinline__ float operator()(float a, float b) const { return (a != a || a > b) ? a : b; } };
// Online-softmax statistics (max, sum of exp(x - max)).
struct MaxSum {
  __device__ __forceinline__ float2 operator()(float2 a, float2 b) const {
    const float m = fmaxf(a.x, b.x);
    return make_float2(m, a.y * sexp(a.x, m) + b.y * sexp(b.x, m));
  }
};
// Chan's parallel combine of (count, mean, M2): exact, deterministic for a fixed order.
struct Chan {
  __device__ __forceinline__ float4 operator()(float4 a, float4 b) const {
    const float n = a.x + b.x;
    if (n == 0.f) return a;
    const float d = b.y - a.y, f = b.x / n;
    return make_float4(n, a.y + d * f, a.z + b.z + d * d * a.x * f, 0.f);
  }
};

__device__ __forceinline__ float shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
__device__ __forceinline__ float2 shfl_xor(float2 v, int o) {
  return make_float2(__shfl_xor_sync(0xffffffffu, v.x, o), __shfl_xor_sync(0xffffffffu, v.y, o));
}
__device__ __forceinline__ float4 shfl_xor(float4 v, int o) {
  return make_float4(__shfl_xor_sync(0xffffffffu, v.x, o), __shfl_xor_sync(0xffffffffu, v.y, o),
                     __shfl_xor_sync(0xffffffffu, v.z, o), __shfl_xor_sync(0xffffffffu, v.w, o));
}

// All-reduce over groups of TPR consecutive threads of an NT-thread block (TPR <= 32, or TPR == NT).
// Every thread of a group gets the same value, computed in the same order (bit-identical across runs).
// The whole block must call it (shuffles use the full mask; the block path uses __syncthreads).
template <int NT, int TPR, class V, class Op> __device__ __forceinline__ V group_all(V v, Op op, V* red) {
#pragma unroll
  for (int o = (TPR < 32 ? TPR : 32) / 2; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  if constexpr (TPR > 32) {
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int i = 1; i < NT / 32; ++i) v = op(v, red[i]);
  }
  return v;
}
"""


# fp32 math of one pointwise op on ``v`` (elementwise and fused families), keyed by expression.OPS names
POINTWISE_MATH = {
    "relu": "v < 0.f ? 0.f : v",  # keeps NaN, like PyTorch
    "sigmoid": "1.f / (1.f + __expf(-v))",
    "silu": "v / (1.f + __expf(-v))",
    "tanh": "tanhf(v)",
    "gelu": "0.5f * v * (1.f + erff(v * 0.70710678118654752f))",
    "gelu_tanh": "0.5f * v * (1.f + tanhf(0.79788456080286536f * (v + 0.044715f * v * v * v)))",
}


def float_literal(v: float) -> str:
    """An exact float literal (C++17 hex float), rounded to fp32 like ATen's opmath scalar."""
    if math.isnan(v):
        return "CUDART_NAN_F"
    if math.isinf(v):
        return "CUDART_INF_F" if v > 0 else "-CUDART_INF_F"
    return f"((float){float(v).hex()})"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2_floor(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)


def pow2_ceil(n: int) -> int:
    return 1 << (max(int(n), 1) - 1).bit_length()


def clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def ctype(dtype: str) -> str:
    return CTYPE[dtype]


def input_spec(card: OperatorCard, name: str) -> TensorSpec | None:
    for t in card.inputs:
        if t.name == name:
            return t.spec
    return None


def output_spec(card: OperatorCard, index: int) -> TensorSpec | None:
    for t in card.outputs:
        if t.name == f"out{index}":
            return t.spec
    return None


def main_input(card: OperatorCard) -> TensorSpec:
    return card.inputs[0].spec


def all_float(specs: Iterable[TensorSpec | None]) -> bool:
    return all(s is None or s.dtype in FLOAT_DTYPES for s in specs)


def is_dense(spec: TensorSpec) -> bool:
    """Non-overlapping and dense (contiguous in some dim order): flat storage index covers 0..numel-1 once."""
    dims = sorted((st, sz) for sz, st in zip(spec.shape, spec.stride) if sz != 1)
    expect = 1
    for st, sz in dims:
        if st != expect:
            return False
        expect *= sz
    return True


def same_layout(a: TensorSpec, b: TensorSpec) -> bool:
    """Same shape, dense, and the same strides on every non-trivial dim: flat index i means the same element."""
    if a.shape != b.shape or not (is_dense(a) and is_dense(b)):
        return False
    return all(sa == sb for sz, sa, sb in zip(a.shape, a.stride, b.stride) if sz != 1)


def flat_contiguous(spec: TensorSpec) -> bool:
    """Row-major contiguous once size-1 dims are ignored (so ``[rows, 1]`` keepdim outputs index as ``row``)."""
    expect = 1
    for sz, st in reversed(list(zip(spec.shape, spec.stride))):
        if sz == 1:
            continue
        if st != expect:
            return False
        expect *= sz
    return True


def vec_ok(vec: int, n: int, specs: Iterable[TensorSpec]) -> bool:
    """A vector of ``vec`` elements fits every tensor: n divisible, at most 16 bytes, storage offset aligned."""
    if vec < 1 or vec & (vec - 1) or n % vec:
        return False
    return all(vec * ITEMSIZE[s.dtype] <= 16 and s.offset_align % (vec * ITEMSIZE[s.dtype]) == 0 for s in specs)


def best_vec(n: int, specs: list[TensorSpec]) -> int:
    """Widest valid vector (16 bytes for the widest element type), down to 1."""
    vec = 16 // min(ITEMSIZE[s.dtype] for s in specs)
    while vec > 1 and not vec_ok(vec, n, specs):
        vec //= 2
    return vec


def align_of(vec: int, specs: Iterable[TensorSpec]) -> int:
    """Pointer alignment the runtime must check for a kernel that moves ``vec`` elements at a time."""
    return max((vec * ITEMSIZE[s.dtype] for s in specs), default=1) if vec > 1 else 1


def launch(kernel: str, grid: Any, block: Any, args: list[str], smem: Any = 0, cooperative: bool = False) -> Launch:
    grid = tuple(grid) if isinstance(grid, (list, tuple)) else (grid,)
    block = tuple(block) if isinstance(block, (list, tuple)) else (block,)
    return Launch(kernel, tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block)), tuple(args),
                  smem, cooperative)


def make_candidate(source: str, launches: list[Launch], description: str, params: dict[str, Any], align: int = 1,
                   scratch: dict[str, tuple[Any, ...]] | None = None) -> Candidate:
    """``scratch`` maps a buffer's name to (bytes, zero) or (bytes, zero, persist): contract.Scratch."""
    return Candidate(
        source=source,
        launches=tuple(launches),
        scratch=tuple((k, Scratch(*spec)) for k, spec in (scratch or {}).items()),
        description=description,
        params=tuple(sorted(params.items())),
        requires_align=align,
    )


def consts(**values: int) -> str:
    """``constexpr`` lines; values past int32 become long long."""
    return "\n".join(f"constexpr {'long long' if abs(v) > INT32_MAX else 'int'} {k} = {v};" for k, v in values.items())


def typedefs(**dtypes: str) -> str:
    return "\n".join(f"typedef {CTYPE[d]} {k};" for k, d in dtypes.items())


# ---------------------------------------------------------------------------------------------------------------------
# row loops shared by softmax and the row norms. The kernel defines: T, P = Pack<T, VEC>, VEC, TPR, NIT, `lane`,
# `ok` (this thread's row exists), `xr` (row pointer), `cbeg`/`cend` (column range), and for caches `c`.


# The per-thread row set-up of a kernel with RPB rows per block of NT threads, TPR threads per row, over a
# ``long long rows`` argument and tensors ``x`` (in) and ``y`` (out) of COLS columns.
ROW_SETUP = """
  const int lane = threadIdx.x % TPR;
  const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;
  const bool ok = row < rows;
  const T* xr = x + (ok ? row : 0) * (long long)COLS;
  TO* yr = y + row * (long long)COLS;
  const int cbeg = 0, cend = COLS;"""


def row_strides(out: TensorSpec, x: TensorSpec) -> list[tuple[int, int, int]]:
    """(divisor, size, stride) per leading dim of ``out`` (rows x last dim) that moves ``x``, an input that
    broadcasts to ``out`` over the leading dims: row ``row``'s index in that dim is ``row / divisor % size``, and it
    moves ``x`` by ``stride`` elements (0-stride broadcast dims left out)."""
    lead, pad = len(out.shape) - 1, len(out.shape) - len(x.shape)
    strides, divisor = [], 1
    for d in range(lead - 1, -1, -1):
        size = out.shape[d]
        own = x.shape[d - pad] if d >= pad else 1
        if size > 1 and own > 1:
            strides.append((divisor, size, x.stride[d - pad]))
        divisor *= size
    return strides


def broadcasts_over_rows(x: TensorSpec, out: TensorSpec) -> bool:
    """``x`` is a row input of ``out``: same last dim at stride 1, leading dims of 1 or ``out``'s (aligned right)."""
    if not x.shape or len(x.shape) > len(out.shape) or x.shape[-1] != out.shape[-1] or x.stride[-1] != 1:
        return False
    return all(a in (1, b) for a, b in zip(reversed(x.shape), reversed(out.shape)))


# Note [rows that share a broadcast row run together]
# A fused row kernel's input may broadcast over some leading dims: Gemma's causal mask [1, 1, S, S] against scores
# [1, 8, S, S]. In row order the eight heads' rows that read mask row i lie S rows apart, so each mask row is fetched
# again after 2 S rows of other traffic have gone through the L2. ``order=bcast`` launches the rows with those dims
# innermost (``row_order``): consecutive rows, in one block or in neighbouring blocks, read the same mask row while it
# is on chip. The output rows are the same rows; only which block takes which row changes. ``row_terms`` is the index
# arithmetic of the generated ``row_of`` and the CPU tests check it against numpy's transpose.
def row_order(out: TensorSpec, xs: Iterable[TensorSpec]) -> list[int] | None:
    """The leading dims of ``out`` (those of size > 1) in launch order, last fastest, with the dims some ``x``
    broadcasts over innermost; None where that is the row-major order already."""
    lead = [d for d in range(len(out.shape) - 1) if out.shape[d] > 1]
    xs = list(xs)

    def broadcast(d: int) -> bool:
        pads = [(x, len(out.shape) - len(x.shape)) for x in xs]
        return any(d < pad or x.shape[d - pad] == 1 for x, pad in pads)

    shared = [d for d in lead if broadcast(d)]
    order = [d for d in lead if d not in shared] + shared
    return None if not shared or order == lead else order


def row_terms(out: TensorSpec, order: list[int]) -> list[tuple[int, int]]:
    """(size, row-major stride in rows) per dim of ``order``, fastest first: launch index ``r`` is row
    ``sum((r / prod(earlier sizes)) % size * stride)``."""
    lead = len(out.shape) - 1
    mult = {d: math.prod(out.shape[d + 1:lead]) for d in range(lead)}
    return [(out.shape[d], mult[d]) for d in reversed(order)]


def row_of_source(out: TensorSpec, order: list[int]) -> str:
    """``row_of(r)``: the row that launch index ``r`` takes (Note [rows that share a broadcast row run together])."""
    body = "".join(f"\n  row += (r % {size}LL) * {stride}LL; r /= {size}LL;" for size, stride in row_terms(out, order))
    return f"__device__ __forceinline__ long long row_of(long long r) {{\n  long long row = 0;{body}\n  return row;\n}}"


def rows_aligned(vec: int, out: TensorSpec, xs: Iterable[TensorSpec]) -> bool:
    """Every row of every ``x`` starts on a whole pack of ``vec`` elements."""
    return all(st % vec == 0 for x in xs for _, _, st in row_strides(out, x))


def row_offset(out: TensorSpec, x: TensorSpec, row: str = "row") -> str:
    """C++ for the element offset of row ``row`` of ``x`` (see ``row_strides``)."""
    terms = [f"({row} / {div}LL % {size}) * {stride}LL" if div > 1 else f"({row} % {size}) * {stride}LL"
             for div, size, stride in row_strides(out, x)]
    return " + ".join(terms) or "0"


# Note [a chunk fetched by the copy engine]
# ``tma`` (softmax and group norm clusters with a shared-memory chunk) fills the chunk with bulk asynchronous copies
# (cp.async.bulk, sm_90's copy engine) instead of every thread loading packs through its registers and storing them:
# a few threads issue copies of up to 16 KB each, an mbarrier counts the bytes that arrived, and every thread waits
# on it before reading the chunk. The chunk's layout is the one the pack loops use (pack k of the chunk at byte
# k * VEC * sizeof(T)), so the rest of the kernel is unchanged. Needs 16-byte packs (every copy's start and size a
# multiple of 16 bytes) and no prologue: the copy moves the input's bytes as they are.
# Measured (H200, eighth session, probe_tma_conv_vec.json and probe_conv_window_gn_keep.json; every variant
# verified): it loses or ties wherever it was tried. Softmax [64, 262144] fp32: best 47.0 us against the root's
# 44.9; bf16: 26.8 against 27.4; group norm [1,512,256,256] bf16: best 52.2 against 49.7 for the same kept layouts
# loaded through registers; [1,512,128,128] fp32: 25.2 against 24.7 (seventh session's kept-in-part best). It stays
# an action: the search can still try it on shapes not probed.
SMEM_ADDR = r"""
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
"""
TMA_HELPERS = SMEM_ADDR + r"""// Fill dst[0, bytes) from src with bulk copies of <= 16 KB issued by the first threads, counted on `bar`; every
// thread of the block returns once all bytes have arrived. bytes: a multiple of 16; dst, src: 16-byte aligned.
__device__ __forceinline__ void bulk_fill(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  constexpr unsigned PIECE = 16384;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
  }
  __syncthreads();
  for (unsigned off = threadIdx.x * PIECE; off < bytes; off += blockDim.x * PIECE) {
    const unsigned n = min(PIECE, bytes - off);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_addr(static_cast<char*>(dst) + off)), "l"(static_cast<const char*>(src) + off), "r"(n),
                    "r"(smem_addr(bar)) : "memory");
  }
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(smem_addr(bar)) : "memory");
}
"""


# The most packs per thread a fully unrolled chunk loop may have (the loops of a chunk kept in part): past it the
# cubin and its compile time grow with no more loads in flight to gain.
MAX_UNROLLED_PACKS = 64


def kept_ok(p: dict[str, Any], packs: int, isz: int, smem_budget: int) -> bool:
    """A cluster's ``keep`` (Note [a chunk kept in part] in softmax.py): a shared-memory chunk, at least one and
    fewer than its ``packs`` per thread kept, an unrollable loop, and the kept packs within ``smem_budget`` bytes."""
    keep = p.get("keep")
    return (p.get("cache") == "smem" and isinstance(keep, int) and 1 <= keep < packs <= MAX_UNROLLED_PACKS
            and keep * p["block"] * p["vec"] * isz <= smem_budget)


def tma_ok(p: dict[str, Any], isz: int) -> bool:
    """A cluster's ``tma`` (Note [a chunk fetched by the copy engine]): a shared-memory chunk of 16-byte packs."""
    return p.get("tma") is True and p.get("strategy") == "cluster" and p.get("cache") == "smem" and \
        p.get("vec", 0) * isz == 16


def chunk_of(n: int, parts: int, vec: int) -> int:
    """The length of each of ``parts`` chunks of ``n`` elements, in whole packs of ``vec`` (the last may be shorter)."""
    return cdiv(cdiv(n, parts), vec) * vec


def cluster_combine(part: str, stat: str, vtype: str, op: str, identity: str, size: str) -> str:
    """C++ (after a cluster barrier): the first warp reads ``part`` from each of the ``size`` blocks of the cluster
    through distributed shared memory, combines the values with ``op`` in rank order (``identity`` for the idle
    lanes) and puts the result in this block's ``stat``: every block of the cluster computes the same value."""
    return f"""
  if (threadIdx.x < 32) {{
    {vtype} v = {identity};
    if (threadIdx.x < {size})
      v = *reinterpret_cast<const {vtype}*>(__cluster_map_shared_rank((const void*)&{part}, threadIdx.x));
    v = group_all<32, 32>(v, {op}(), ({vtype}*)nullptr);
    if (threadIdx.x == 0) {stat} = v;
  }}"""


def walk_head(item: str, count: str, first: str, prefetch: str, owned: str, slot: str, regs: str = "P nx[NIT];",
              value: str = "nx[i]") -> str:
    """C++ that opens a pipelined walk (the ``pipe`` strategies, the row norms' ``walk``): this cluster's (or block's)
    items ``first``, ``first + ncl``... below ``count``. Before the loop the first item's packs are loaded into the
    registers ``regs`` (``nx``); each iteration moves pack i's ``value`` into this thread's own ``slot`` (where
    ``owned``) and has ``prefetch`` load item ``n<item>``, the next one, into them while the body works on ``slot``.
    The caller closes the loop."""
    return f"""
  {regs}
  long long n{item} = {first};
  if (n{item} < {count}) {prefetch}
  int it = 0;
  for (long long {item} = n{item}; {item} < {count}; {item} += ncl, ++it) {{
#pragma unroll
    for (int i = 0; i < NIT; ++i)
      if ({owned}) {slot} = {value};  // each thread keeps its own slots
    n{item} = {item} + ncl;
    if (n{item} < {count}) {prefetch}"""


def row_fill(src: str, load: str = "ldp", nit: str = "NIT") -> str:
    """Load this thread's first ``nit`` packs of [cbeg, cend) into the row cache ``c`` (read with ``load``)."""
    slot = "c[i]" if src == "reg" else "c[i * TPR + lane]"
    return f"""
#pragma unroll
  for (int i = 0; i < {nit}; ++i) {{
    const int col = cbeg + (i * TPR + lane) * VEC;
    if (ok && col < cend) {slot} = {load}<T, VEC>(xr + col);
  }}"""


def row_loop(src: str, body: str, load: str = "ldp", nit: str = "NIT") -> str:
    """Run ``body`` on each of this thread's packs ``p`` (at column ``col``) from the cache (its first ``nit`` packs)
    or from global (read with ``load``: ``ldp``, or ``ldp_cs`` for a last read)."""
    if src in ("reg", "smem"):
        slot = "c[i]" if src == "reg" else "c[i * TPR + lane]"
        return f"""
#pragma unroll
  for (int i = 0; i < {nit}; ++i) {{
    const int col = cbeg + (i * TPR + lane) * VEC;
    if (ok && col < cend) {{ const P p = {slot}; {body} }}
  }}"""
    return f"""
  if (ok) {{
#pragma unroll 4
    for (int col = cbeg + lane * VEC; col < cend; col += TPR * VEC) {{ const P p = {load}<T, VEC>(xr + col); {body} }}
  }}"""


# ---------------------------------------------------------------------------------------------------------------------
# card helpers of the norm families (norm.py, group_norm.py)


def param_ok(card: OperatorCard, name: str, numel: int) -> bool:
    """An optional per-channel/per-column parameter tensor is absent, or contiguous with ``numel`` floats."""
    s = input_spec(card, name)
    return s is None or (s.dtype in FLOAT_DTYPES and s.numel == numel and s.is_contiguous())


def card_tensors(card: OperatorCard) -> list:
    """The specs a vector width must suit: every input and the main output."""
    return [t.spec for t in card.inputs] + [t.spec for t in card.outputs if t.name == "out0"]


def main_itemsize(card: OperatorCard) -> int:
    return ITEMSIZE[main_input(card).dtype]


def plan_params(card: OperatorCard, items: list[tuple[str, str, str]]) -> tuple[str, list[str]]:
    """(plan arg, C parameter, presence key) -> the C parameter list and plan args of the tensors that exist."""
    have = {t.name for t in card.inputs} | {t.name for t in card.outputs}
    kept = [(a, c) for a, c, key in items if key in have or key == ""]
    return ", ".join(c for _, c in kept), [a for a, _ in kept]


def eps_arg(card: OperatorCard, default: float) -> str:
    """The plan argument of the op's eps: the card's float, its scalar, or ``default``."""
    if "eps" in card.floats:
        return "f32:eps"
    v = card.scalars.get("eps")
    return f"f32:{float(v) if v is not None else default!r}"


def dtype_or(card: OperatorCard, name: str, fallback: str) -> str:
    """The dtype of input ``name`` (or output ``out<i>``), ``fallback`` when the card has no such tensor."""
    s = input_spec(card, name) if not name.startswith("out") else output_spec(card, int(name[3:]))
    return s.dtype if s is not None else fallback


# ---------------------------------------------------------------------------------------------------------------------
# actions: one-knob changes, filtered by the family's validity check


def knob(p: dict[str, Any], name: str, value: Any) -> tuple[str, dict[str, Any]]:
    q = dict(p)
    q[name] = value
    return f"{name} {p.get(name)} -> {value}", q


def flag_knob(p: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    """Toggle an optional flag: absent means False, so turning it off drops the key (one params per setting)."""
    on = bool(p.get(name, False))
    q = {k: v for k, v in p.items() if k != name} | ({} if on else {name: True})
    return f"{name} {on} -> {not on}", q


def scale_knob(p: dict[str, Any], name: str, factors: tuple[float, ...] = (0.5, 2)) -> list[tuple[str, dict]]:
    if name not in p:
        return []
    return [knob(p, name, int(p[name] * f)) for f in factors if int(p[name] * f) >= 1]


def filter_actions(card: OperatorCard, p: dict[str, Any], acts: list[tuple[str, dict[str, Any]]],
                   valid: Callable[[OperatorCard, dict[str, Any]], bool]) -> list[tuple[str, dict[str, Any]]]:
    """Drop invalid and duplicate results, and any that equal ``p``."""
    seen, out = {freeze(p)}, []
    for label, q in acts:
        f = freeze(q)
        if f in seen or not valid(card, q):
            continue
        seen.add(f)
        out.append((label, q))
    return out


def freeze(p: dict[str, Any]) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in p.items()))


def stream_loop(mode: str, pack: str) -> str:
    """The loop over NV vector packs of a flat elementwise kernel: ``oneshot`` gives each thread UNROLL packs of a
    grid that covers the tensor once; otherwise a grid-stride loop. ``pack`` is the body for pack index ``i``."""
    if mode == "oneshot":
        return f"""
  const I base = (I)blockIdx.x * NT * UNROLL + threadIdx.x;
#pragma unroll
  for (int k = 0; k < UNROLL; ++k) {{
    const I i = base + (I)k * NT;
    if (i < NV) {{ {pack} }}
  }}"""
    return f"""
#pragma unroll 4
  for (I i = (I)blockIdx.x * NT + threadIdx.x; i < NV; i += (I)gridDim.x * NT) {{ {pack} }}"""
