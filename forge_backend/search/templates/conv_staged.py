"""The depthwise conv1d's ``staged`` strategy (Note [channels in lanes, rows staged for the copy engine]): a block
takes 64 channels of a channels-fast 16-bit input over one band of output vectors, its lanes along the channels, and
hands each output row's band to the copy engine from shared memory. templates/conv.py dispatches to it; this module
holds its knobs, validity, sizes and source.
"""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from .common import (ITEMSIZE, PREAMBLE, SM_SMEM, SMEM_LIMIT, align_of, cdiv, consts, flag_knob, input_spec, knob,
                     launch, make_candidate, output_spec, typedefs)
from .conv_shared import STORE16, channels_fast, contiguous_output, conv_params, dims

# Note [channels in lanes, rows staged for the copy engine]
# ``bands`` (conv_bands.py) transposes as it fills: each 16-byte load of VEC channels is scattered into VEC channel
# rows of shared memory by 2-byte stores, and its lanes then run along those rows. Here shared memory keeps the
# input's own layout and the lanes run along the channels instead:
# - the block's window, W = 8 (NV + 1) + K - 1 input positions of TC = 64 channels (one 128-byte line a position),
#   arrives by 16-byte cp.async copies (``cp.async.cg``, zero-filled where a position lies outside the input), no
#   register staging and no scatter;
# - lane l computes channels c0 + 2l and c0 + 2l + 1, reading each position as one 4-byte shared load (a warp reads
#   one whole 128-byte line: no bank conflict), in groups of 8 consecutive outputs (fp32 sums, k ascending, rounded
#   once, in pairs). A warp takes R of the band's NV = WARPS * R vectors, the K - 1 inputs a group shares with the
#   next one kept in registers;
# - the contiguous output is cut into aligned 16-byte vectors: row r's start lies ``a = -(r * L_out) mod 8`` elements
#   before one, a constant of the lane's channel. Vector k of the band is elements a ... a + 7 of the group before it
#   and its own (a funnel of seven byte permutes and ten selects), stored whole into the row's stage in shared memory;
# - once the band is staged, one thread per row hands the row's whole vectors to the copy engine as one bulk copy
#   (``cp.async.bulk.global.shared::cta``: 16-byte aligned at both ends, by construction), or with ``lanes`` the
#   block's warps store them, lanes along the row. The vectors a row shares with its neighbours (its first and last)
#   go out element by element from the lane that computed them.
# The CPU model of the index arithmetic is tests/test_conv_staged.py: every output written once, by a full vector or
# by its own row's lane.
STAGED_KEYS = frozenset({"strategy", "warps", "r", "vec", "lanes", "cfirst"})
TC = 64  # channels of a block: two a lane of a warp, one 128-byte line of a 16-bit input's position
REGS = 96  # registers a thread is budgeted (the launch bound): the window's 2 x (K + 7) floats, two groups' words


def nv(p: dict[str, Any]) -> int:
    """Output vectors of one row's band."""
    return p["warps"] * p["r"]


def bands(card: OperatorCard, p: dict[str, Any]) -> int:
    """Bands of a row: band b's vectors start at 8 (b NV + k - 1) + a (k < NV, the phase a >= 0), so the last one
    reaches L_out whatever the row's phase."""
    return cdiv(dims(card)[3] + 8, 8 * nv(p))


def window(card: OperatorCard, p: dict[str, Any]) -> int:
    """Input positions one band reads: the NV + 1 groups of 8 outputs it computes and the K - 1 of the halo."""
    return 8 * (nv(p) + 1) + dims(card)[4] - 1


def stage_stride(p: dict[str, Any]) -> int:
    """Elements of one staged row: its NV vectors and one more, so that rows start 16 bytes apart in the banks."""
    return 8 * (nv(p) + 1)


def smem_bytes(card: OperatorCard, p: dict[str, Any]) -> int:
    return (window(card, p) * TC + TC * stage_stride(p)) * 2


def min_blocks(card: OperatorCard, p: dict[str, Any]) -> int:
    threads = 32 * p["warps"]
    return max(1, min(SM_SMEM // (smem_bytes(card, p) + 1024), 65536 // (threads * REGS)))


def defaults(card: OperatorCard) -> dict[str, Any]:
    """Four warps of four vectors (bands of 128 outputs), bulk copies, bands first."""
    return {"strategy": "staged", "warps": 4, "r": 4, "vec": 8}


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    """A channels-fast 16-bit input whose positions start on 16-byte boundaries, whole tiles of 64 channels, a
    contiguous output, a halo of at most 8 (K <= 9), windows within shared memory."""
    n, c, _, l_out, k, _ = dims(card)
    x, y = input_spec(card, "input"), output_spec(card, 0)
    if set(p) - STAGED_KEYS or p.get("strategy") != "staged" or p.get("vec") != 8:
        return False
    if ITEMSIZE[x.dtype] != 2 or y.dtype != x.dtype or not channels_fast(card) or not contiguous_output(card):
        return False
    if c % TC or x.stride[0] % 8 or x.stride[2] % 8 or k > 9:
        return False
    if p.get("warps") not in (1, 2, 4, 8) or p.get("r") not in range(1, 17):
        return False
    if p.get("lanes") not in (None, True) or p.get("cfirst") not in (None, True):
        return False
    if p.get("lanes") and nv(p) > 32 * p["warps"]:
        return False
    return smem_bytes(card, p) <= SMEM_LIMIT and bands(card, p) <= 65535 and c // TC <= 65535 and n <= 65535


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Half or twice the warps or the vectors a warp; stores by lanes or bulk copies; channel tiles or bands first."""
    acts = [knob(p, "warps", w) for w in (p["warps"] // 2, p["warps"] * 2)]
    acts += [knob(p, "r", r) for r in (p["r"] - 1, p["r"] + 1, p["r"] * 2)]
    return acts + [flag_knob(p, "lanes"), flag_knob(p, "cfirst")]


KERNEL = r"""
constexpr int TC = 64;                    // channels of a block, two a lane
constexpr int NV = WARPS * R;             // output vectors of a row's band
constexpr int NT = WARPS * 32;
constexpr int NG = 8 + K - 1;             // inputs of a group of 8 outputs

__device__ __forceinline__ void cp_async16(void* dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(smem_addr(dst)), "l"(src), "r"(bytes)
               : "memory");
}
// The phase of output row r: its start lies this many elements before a 16-byte boundary of the output (mod 8).
__device__ __forceinline__ int phase_of(long long r) { return (int)((8 - (r * LOUT) % 8) % 8); }
__device__ __forceinline__ float lo_f(unsigned u, const __nv_bfloat16*) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float hi_f(unsigned u, const __nv_bfloat16*) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ float lo_f(unsigned u, const __half*) {
  return __half2float(__ushort_as_half((unsigned short)(u & 0xffffu)));
}
__device__ __forceinline__ float hi_f(unsigned u, const __half*) {
  return __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}
// Elements a ... a + 7 of the 16 in p[0..7] (element 2i in the low half of p[i]): the byte permutes shift by a % 2,
// the selects by a / 2 words.
__device__ __forceinline__ uint4 funnel(const unsigned (&p)[8], int a) {
  const unsigned sel = (a & 1) ? 0x5432u : 0x3210u;
  unsigned q[7], r[6];
#pragma unroll
  for (int i = 0; i < 7; ++i) q[i] = __byte_perm(p[i], p[i + 1], sel);
#pragma unroll
  for (int i = 0; i < 6; ++i) r[i] = (a & 2) ? q[i + 1] : q[i];
  return make_uint4((a & 4) ? r[2] : r[0], (a & 4) ? r[3] : r[1], (a & 4) ? r[4] : r[2], (a & 4) ? r[5] : r[3]);
}
__device__ __forceinline__ unsigned short half_of(const uint4& v, int e) {
  const unsigned w = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
  return (unsigned short)(e & 1 ? w >> 16 : w & 0xffffu);
}

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT, MINB) void dwconv1d_staged(PARAMS) {
  extern __shared__ __align__(128) unsigned char dsm[];
  T* const xin = reinterpret_cast<T*>(dsm);                  // [W][TC]: the window, as the input lays it out
  T* const stg = xin + W * TC;                               // [TC][SS]: each row's band of whole vectors
  const int bd = CFIRST ? blockIdx.y : blockIdx.x;           // the band
  const int c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  const int q0 = 8 * (bd * NV - 1) - PAD;                     // the window's first input position
  const T* const xb = x + n * XS0 + c0;
  for (int e = threadIdx.x; e < W * 8; e += NT) {            // 8 consecutive threads a position's line
    const int row = e >> 3, part = e & 7, pos = q0 + row;
    const bool in = pos >= 0 && pos < LIN;
    cp_async16(xin + row * TC + part * 8, in ? xb + (long long)pos * XS2 + part * 8 : x, in ? 16u : 0u);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long ra = n * C + c0 + 2 * lane, rb = ra + 1;   // this lane's two output rows
  float wa[K], wb[K], ba = 0.f, bb = 0.f;
#pragma unroll
  for (int q = 0; q < K; ++q) {
    wa[q] = to_f(w[(long long)(c0 + 2 * lane) * K + q]);
    wb[q] = to_f(w[(long long)(c0 + 2 * lane + 1) * K + q]);
  }
  if constexpr (HAS_BIAS) {
    ba = to_f(BIAS_PTR[c0 + 2 * lane]);
    bb = to_f(BIAS_PTR[c0 + 2 * lane + 1]);
  }
  const int aa = phase_of(ra), ab = phase_of(rb);
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  const unsigned* const xw = reinterpret_cast<const unsigned*>(xin) + lane;  // position i's pair: xw[i * TC / 2]
  const int k0 = warp * R;
  float va[NG], vb[NG];
  unsigned pa[8], pb[8];                                     // the group before (words 0-3) and this one (4-7)
#pragma unroll
  for (int g = 0; g <= R; ++g) {                             // group k0 - 1 + g: outputs of vector k0 + g - 1's end
    const int base = 8 * (k0 + g);                           // its first window position
#pragma unroll
    for (int i = 0; i < NG; ++i) {
      if (g == 0 || i >= K - 1) {
        const unsigned u = xw[(base + i) * (TC / 2)];
        va[i] = lo_f(u, (const T*)nullptr);
        vb[i] = hi_f(u, (const T*)nullptr);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      pa[j] = pa[j + 4];
      pb[j] = pb[j + 4];
      float oa[2], ob[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sa = ba, sb = bb;
#pragma unroll
        for (int q = 0; q < K; ++q) {
          sa = fmaf(wa[q], va[2 * j + h + q], sa);
          sb = fmaf(wb[q], vb[2 * j + h + q], sb);
        }
        oa[h] = sa;
        ob[h] = sb;
      }
      pa[j + 4] = pair_bits(oa[0], oa[1], (const T*)nullptr);
      pb[j + 4] = pair_bits(ob[0], ob[1], (const T*)nullptr);
    }
#pragma unroll
    for (int i = 0; i < K - 1; ++i) {                        // the next group's first inputs are this one's last
      va[i] = va[i + 8];
      vb[i] = vb[i + 8];
    }
    if (g == 0) continue;
    const int k = k0 + g - 1;                                // the band's vector: the group before and this one
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int a = s ? ab : aa, ch = 2 * lane + s;
      const long long r = s ? rb : ra;
      const uint4 v = funnel(s ? pb : pa, a);
      const int j0 = 8 * (bd * NV + k - 1) + a;               // the row's output of the vector's element 0
      if (j0 >= 0 && j0 + 8 <= LOUT) {
        *reinterpret_cast<uint4*>(stg + ch * SS + 8 * k) = v;
      } else {                                               // a row's first or last vector: its own elements
        unsigned short* const yp = reinterpret_cast<unsigned short*>(y) + r * LOUT;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (j0 + e >= 0 && j0 + e < LOUT) yp[j0 + e] = half_of(v, e);
      }
    }
  }
  if constexpr (!LANES) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if constexpr (LANES) {                                     // each warp a row at a time, lanes along the row
    for (int ch = warp; ch < TC; ch += WARPS) {
      const long long r = n * C + c0 + ch;
      const int a = phase_of(r), kf = bd == 0 ? 1 : 0, ke = min(NV, (LOUT - a) / 8 - bd * NV + 1);
      T* const yr = y + r * LOUT + 8 * (bd * NV - 1) + a;
      for (int k = kf + lane; k < ke; k += 32)
        *reinterpret_cast<uint4*>(yr + 8 * k) = *reinterpret_cast<const uint4*>(stg + ch * SS + 8 * k);
    }
  } else if (threadIdx.x < TC) {                             // one bulk copy a row
    const int ch = threadIdx.x;
    const long long r = n * C + c0 + ch;
    const int a = phase_of(r), kf = bd == 0 ? 1 : 0, ke = min(NV, (LOUT - a) / 8 - bd * NV + 1);
    if (ke > kf) {
      T* const dst = y + r * LOUT + 8 * (bd * NV + kf - 1) + a;
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                   :: "l"(dst), "r"(smem_addr(stg + ch * SS + 8 * kf)), "r"((unsigned)(16 * (ke - kf))) : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
  }
}
"""

SMEM_HELPER = r"""__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
"""


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    """Note [channels in lanes, rows staged for the copy engine]: a block per 64 channels, band and sample."""
    n, c, l_in, l_out, k, pad = dims(card)
    x, y = input_spec(card, "input"), output_spec(card, 0)
    params, args = conv_params(card)
    has_bias = input_spec(card, "bias") is not None
    head = f"""{PREAMBLE}
{typedefs(T=x.dtype, TO=y.dtype)}
{consts(C=c, LIN=l_in, LOUT=l_out, K=k, PAD=pad, WARPS=p["warps"], R=p["r"], W=window(card, p), SS=stage_stride(p),
        MINB=min_blocks(card, p), HAS_BIAS=int(has_bias), CFIRST=int(bool(p.get("cfirst"))),
        LANES=int(bool(p.get("lanes"))))}
constexpr long long XS0 = {x.stride[0]}LL, XS2 = {x.stride[2]}LL;
"""
    source = head + SMEM_HELPER + STORE16 + KERNEL.replace("PARAMS", params).replace(
        "BIAS_PTR", "b" if has_bias else "w")
    desc = f"depthwise conv1d k={k} staged warps={p['warps']} r={p['r']} (input channels-fast) vec=8" + \
        (" stores by lanes" if p.get("lanes") else " bulk stores") + (" channel tiles first" if p.get("cfirst") else "")
    nb = bands(card, p)
    grid = (c // TC, nb, n) if p.get("cfirst") else (nb, c // TC, n)
    return make_candidate(source, [launch("dwconv1d_staged", grid, 32 * p["warps"], args,
                                          smem=smem_bytes(card, p))], desc, p, align_of(8, [x]))
