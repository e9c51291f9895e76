"""The depthwise conv1d's ``bands`` strategy (Note [channel rows over a band of positions]): a block takes G channel
rows over one band of positions, reads whole 128-byte lines of a channels-fast input, and stores each row's band as
aligned 16-byte vectors. templates/conv.py dispatches to it; this module holds its knobs, validity, sizes and source.
"""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from .common import (ITEMSIZE, PREAMBLE, align_of, cdiv, consts, flag_knob, input_spec, launch,
                     make_candidate, output_spec, scale_knob, typedefs)
from .conv_shared import STORE16, blocks_per_sm, channels_fast, contiguous_output, conv_params, dims, weights_bytes
from .target import smem_limit

# Note [channel rows over a band of positions]
# ``flat`` (Note [a block's channel rows as one flat run]) reads one 32-byte sector of each input position's 128-byte
# line per block, and with every input of its 16 rows on chip it cannot take more channels: Nsight Compute showed the
# L2 75% busy with DRAM at 42%. Inductor transposes the same [2048, 8192] bf16 in 19.5 us (80.7% of the copy
# bandwidth, seventeenth session), reading whole lines. ``bands`` gives a block G channels (G * itemsize bytes of a
# position: two or four whole sectors at 64 or 128) over a band of LT output positions, so its input is a window of
# LT + VEC + K - 2 positions and its shared memory holds G short rows, not G whole ones.
# Row c's band t covers outputs t * LT - ph ... t * LT - ph + LT - 1, where ph = (c * L_out) % VEC is the phase of
# the row's start in a vector of the contiguous output: every band of every row is then LT / VEC aligned vectors, each
# stored whole by one 16-byte store, except the vectors that hold a row's start or end (their other elements are the
# neighbouring row's: element by element). ph depends only on c % VEC (C and G are multiples of VEC), so it is a
# constant of the unrolled channel of a load. In shared memory row i holds z[q] = x[c, q - PAD] (zero outside the
# input) for q = t * LT - ph + s, s = 0 ... RS - 1, so output vector j of the band reads elements j * VEC ... j * VEC +
# 2 VEC - 1 (K <= VEC + 1) as two 16-byte shared loads, lanes along a row. The fill takes the window's 16-byte loads
# (VEC channels of one position) and scatters each into its VEC rows; row i starts at i * RS + VEC * (i / VEC), so
# the lanes of one scatter, on rows VEC apart, fall in different banks (conflict-free at 128 bytes a position;
# without the shift, 8-way). The shift grows with the group, so no row overlaps the next: a shift taken modulo
# 8 groups (the banks' period) made row 63 reach into row 64 at 128 channels, and the verifier refused all four
# such layouts (twenty-fourth session).
# tests/test_conv_bands.py models the index arithmetic in numpy on the CPU.
# Measured on the H200 (twenty-fourth session, Qwen's [1, 8192, 2048] bf16; probe_session24_conv_bands.md, each line
# one run):
# - the root (64 bytes of channels over bands of 256, 256 threads, bands first) 21.7 us against the flat runs' 24.9 us
#   (_final.json), 21.8-22.0 in the last run; ops run W, after a 25-iteration search: 21.6 us, 73% of the copy
#   bandwidth, 8.9x Inductor, 13.9x eager (63% and 25.1 us before);
# - with the channel tiles first 22.7-23.2 us at the best layouts (64 or 128 bytes over bands of 128 or 256);
#   512 threads, 128 channels (256 bytes) or bands of 512 ran 23.9-37 us; 4 loads a thread instead of 8 ran ~2 us
#   slower; the register bound of 5 or 6 blocks an SM (46, 39 registers) tied (_regs.json);
# - Nsight Compute on the root (ncu/conv_bands_g32_lt256_b256_bfirst.txt; 19.8 us without the L2 flush): the L2 79%
#   busy, DRAM 50%, 2.4 TB/s, 4.4 waves, 44% of the warps resident, the stall samples on the fill's first use of its
#   loads (long scoreboard, 29%). Inductor transposes the same bytes in 19.6-19.7 us.

# Note [a row's first vector whole]
# A row's band stores whole 16-byte vectors but at the row's two ends, where the vector is shared with the row before
# or after; those went out as up to 7 + 7 2-byte stores a row, each a request of its own to the L2 (Nsight Compute on
# the root: 29.5 of 32 bytes a stored sector used). With ``join`` the block of a row's first band also computes the
# previous row's last outputs of that vector (from the row before's last TW = 2 VEC inputs and its weights, loaded
# into shared memory by the band-0 blocks only) and stores the vector whole; the row before skips it. Only the output's
# last row ends in a partial vector. Needs rows of at least VEC outputs (a row's first vector must not hold its end).
# Measured on the H200 (twenty-fourth session, Qwen's conv, each line one run, alternating with the root): slower.
# - The rows before's inputs loaded after the window's (probe_session24_conv_bands_join.json): 23.7-23.9 us against
#   the root's 21.7-21.8; Nsight Compute (ncu/conv_bands_g32_lt256_b256_bfirst_join.txt): 21.9 us without the flush
#   (the root 19.8), L2 72% busy, DRAM 45%, the band-0 blocks waiting on those loads at their shared stores.
# - Those loads issued with the window's (the code here, _join2.json): 23.6-23.9 us against 21.9.
# A 16-byte vector is half a 32-byte sector, so the sector that holds a row's start is still written by two blocks
# (its other vector is the row before's, stored by that row's last band): joining removes the 2-byte stores, not the
# shared sectors. It stays an action.
# Thirty-eighth session, measured and not kept: those two vectors stored as aligned 8-, 4- and 2-byte pieces (at most
# three a vector where there were up to seven 2-byte stores; a --swap of the root's source, results/h200/
# probe_session38_conv_gn_edges.json, plan benchmarks/plans/conv_gn_edges.sh): 22.7, 22.5 and 22.6 us against the
# root's 22.0 three times in the same run.

# Note [bands first]
# The grid runs the channel tiles fastest: the blocks in flight read all C channels of a few bands' positions (whole
# 16 KB rows of Qwen's input at once) and write LT-output pieces of every output row. With ``bfirst`` the bands run
# fastest: the blocks in flight take every band of a few channel tiles, so they write whole output rows (a few MB of
# contiguous output) and read G * itemsize bytes of every position.
# Measured on the H200 (twenty-fourth session, probe_session24_conv_bands_order.json, one run): bands first 22.0 us
# at 64 bytes over bands of 256 and 22.4 at 128 bytes over bands of 128, against 22.8-23.0 us with the channel tiles
# first. The root runs bands first.

# Note [bands walked by resident blocks: measured, not kept]
# The root's grid is one block a tile, 2,304 tiles at Qwen's conv with 528 resident at once (four an SM): 4.4 waves.
# Knob ``persist`` (trial commit b6a9b86, reverted in the commit after it) launched P blocks an SM that walked the
# tiles in the grid's order, a barrier between tiles, and knob ``ahead`` issued each next tile's window loads into
# registers before this tile's compute and stores. Both passed the GPU verifier (seven cases). Measured (twenty-eighth
# session, results/h200/probe_session28_conv_persist.md, one run, the root first and last): every walk lost, four
# blocks an SM 24.4 us twice against the root's 21.9-22.0, with the loads ahead 23.2-23.3, three or two blocks
# 24.4-26.3, 64 channels over bands of 128 with the loads ahead 22.1. The hardware's block scheduler, which starts a
# block wherever one ends, balances the waves better than a fixed walk.

# Note [a fill of packed runs: measured, not kept]
# The root's fill scatters each 16-byte load (VEC channels of one position) into VEC rows as VEC 2-byte shared
# stores: Nsight Compute on the root (ncu/conv_bands_g32_lt256_b256_bfirst.txt) counted 33% of its shared-store
# wavefronts and 15% of its shared loads as bank conflicts, and the L1 68% busy. Knob ``pack`` (trial commit 3b6ee43,
# reverted in the commit after it) made a thread's batch a run of VEC consecutive window lines of one channel vector
# (ld == vec), so that each channel's VEC elements were consecutive in its row and went out as the aligned chunks
# that tile them (VEC, VEC / 2, ... elements from the run's phase), packed into 32-bit words: 30 shared stores for
# 64 elements where the root takes 64 (the window rounded up to whole runs, the extra lines in the rows' slack; the
# trial's numpy model of the runs and their chunks passed, and 8 GPU verifier cases). Measured on the H200
# (twenty-ninth session, results/h200/probe_session29_conv_pack.md, one run, the root first and last): slower, 23.7
# us twice against the root's 21.7-22.0; 128 bytes of channels over bands of 128 22.6 against 22.2 unpacked; 128
# threads 24.8. Only 34 of a block's 64 line offsets had a run, so 136 of 256 threads filled, each waiting on all
# eight of its loads before its first store.

# Note [channels in lanes, rows staged for the copy engine: measured, not kept]
# Forty-first session (trial commit 2b618f3, reverted in the commit after it): strategy ``staged`` kept the window in
# the input's own layout instead of scattering it into channel rows. A block took 64 channels (one 128-byte line of a
# position) over a band of NV = WARPS x R output vectors; the window came by 16-byte cp.async copies (zero-filled
# outside the input), lane l computed channels 2l and 2l + 1 from 4-byte shared loads of whole lines (no bank
# conflict) in groups of 8 outputs, and a funnel of byte permutes and selects cut each row's group before and its own
# at the row's phase into aligned 16-byte vectors, staged in shared memory and stored by one bulk copy a row
# (cp.async.bulk.global.shared::cta) or, with ``lanes``, by the warps along the rows. A numpy model of its indices and
# 7 GPU verifier cases passed (results/h200/gpu_tests_session41_staged.log). Measured on the H200 (one run, plan
# benchmarks/plans/conv_staged.sh, results/h200/probe_session41_conv_staged.json; a copy of the bytes 18.5 us,
# Inductor's transpose of [2048, 8192] bf16 19.7): Qwen's conv 25.2-28.7 us over ten layouts against this root's
# 21.6-21.7 (bulk copies 25.6, stores by lanes 26.8); rows aligned to 16 bytes (L_out 2048, K 5) 25.9 with bulk
# copies and 22.0 by lanes against the root's 21.6. Nsight Compute (results/h200/ncu/conv_staged_*.txt, no flush):
# where every row's phase is 0 the compiler folds the funnel and the stores' phase arithmetic away (19.9 us against
# this root's 20.4); at Qwen's rows (L_out 2051) they stay, 25.3 us at 55% of the issue slots with a third of the
# warps resident, and of the 1.1 M L2 sectors it moved beyond the 2.3 M the bytes need about 1 M are its weight
# loads (every warp loads its block's 64 channels' again, 16 sectors for 64 bytes; counted from the loads). So even
# with those costs gone the layout only ties this root, which stays.

BANDS_KEYS = frozenset({"strategy", "g", "lt", "block", "ld", "vec", "bfirst", "join"})


def bands(card: OperatorCard, p: dict[str, Any]) -> int:
    """Bands of a row: every phase's last band must reach L_out (the band's start moves back by up to VEC - 1)."""
    return cdiv(dims(card)[3] + p["vec"] - 1, p["lt"])


def row_stride(p: dict[str, Any]) -> int:
    """Elements of one shared row: a vector before the band (the window's first VEC - 1 lines land there for the
    latest phase), the band, and two vectors after it (its last output vector reads the next one; the window's
    last lines land there), so that no line of the window falls outside any row: the fill needs no test."""
    return p["lt"] + 3 * p["vec"]


def _ws_bytes(p: dict[str, Any], k: int) -> int:
    """Bytes of the block's weights and biases, with ``join`` also the rows before's."""
    return weights_bytes(p["g"], k, 2 if p.get("join") else 1)


def smem_bytes(card: OperatorCard, p: dict[str, Any]) -> int:
    rows = p["g"] * (row_stride(p) + 1)  # G rows and the shifts of their groups (a vector a group)
    if p.get("join"):  # Note [a row's first vector whole]: the rows before's last inputs
        rows += p["g"] * 2 * p["vec"]
    return _ws_bytes(p, dims(card)[4]) + rows * ITEMSIZE[input_spec(card, "input").dtype]


def window(card: OperatorCard, p: dict[str, Any]) -> int:
    """Input positions one band reads: its LT outputs, the VEC - 1 of the earliest phase, the K - 1 of the halo."""
    return p["lt"] + p["vec"] + dims(card)[4] - 2


def min_blocks(card: OperatorCard, p: dict[str, Any]) -> int:
    return blocks_per_sm(smem_bytes(card, p), p["block"])


def defaults(card: OperatorCard) -> dict[str, Any]:
    """64 bytes of channels, bands of 256 outputs run first (Note [bands first]), 256 threads, every load of a band in
    flight. Measured on the H200 at Qwen's [1, 8192, 2048] bf16 (twenty-fourth session, probe_session24_conv_bands*,
    each line one run): 21.7-22.0 us, against 22.4 us for 128 bytes of channels over bands of 128 run first, 22.7-23.2
    us with the channel tiles first, 23.9-37 us at 128 channels (256 bytes), 512 threads or bands of 512, and the
    flat runs' 24.9-25.1 us."""
    isz = ITEMSIZE[input_spec(card, "input").dtype]
    return {"strategy": "bands", "g": 64 // isz, "lt": 256, "block": 256, "ld": 8, "vec": 16 // isz, "bfirst": True}


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    """16-byte channel loads of a channels-fast input, a contiguous output, an output vector's inputs within two
    vectors (K <= vec + 1), whole groups of G channels, bands of whole vectors, rows that fit in shared memory and
    loads that fit in registers."""
    n, c, _, _, k, _ = dims(card)
    x = input_spec(card, "input")
    vec, g, lt = p.get("vec", 0), p.get("g", 0), p.get("lt", 0)
    if set(p) - BANDS_KEYS or vec * ITEMSIZE[x.dtype] != 16 or not channels_fast(card) or not contiguous_output(card):
        return False
    if c % vec or x.stride[0] % vec or x.stride[2] % vec or k > vec + 1:
        return False
    if g not in (16, 32, 64, 128) or g % vec or c % g or p.get("block") not in (128, 256, 512):
        return False
    if lt not in (64, 128, 256, 512, 1024) or p.get("ld") not in (2, 4, 8, 16) or p.get("bfirst") not in (None, True):
        return False
    if p.get("join") not in (None, True) or (p.get("join") and dims(card)[3] < vec):
        return False  # Note [a row's first vector whole]: a row's first vector must not reach its end
    return smem_bytes(card, p) <= smem_limit(card) and c // g < 2**31 and \
        (bands(card, p) if not p.get("bfirst") else c // g) <= 65535 and n <= 65535


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return scale_knob(p, "g") + scale_knob(p, "lt") + scale_knob(p, "block") + scale_knob(p, "ld") + \
        [flag_knob(p, "bfirst"), flag_knob(p, "join")]


KERNEL = r"""
constexpr int NVG = G / VEC;                        // channel vectors of one position
constexpr int NVR = LT / VEC;                       // output vectors of one row's band
constexpr int WSTEP = NT / NVG;                     // window lines of one round of loads (NT % NVG == 0)
constexpr int NROUND = (NW + WSTEP - 1) / WSTEP;    // rounds of loads, in batches of PER
constexpr int NBATCH = (NROUND + PER - 1) / PER;
constexpr bool EXACT = NW % (WSTEP * PER) == 0;    // every round of every batch is in the window: no test
constexpr int TW = 2 * VEC;                         // JOIN: inputs of a row's last VEC outputs (K - 1 <= VEC)
constexpr int TPT = JOIN ? (G * TW + NT - 1) / NT : 1;  // JOIN: those inputs a thread loads

// Note [channel rows over a band of positions]: the phase of channel i's row start in a vector of the output (c0 and
// C are multiples of VEC, so it is channel i % VEC's), and where row i starts in shared memory
__device__ __forceinline__ constexpr int phase(int i) { return (int)(((long long)(i % VEC) * LOUT) % VEC); }
__device__ __forceinline__ constexpr int row_base(int i) { return i * RS + (i / VEC) * VEC; }
// A line's VEC elements are held as raw bits (four 32-bit registers, zero where the line lies outside the input):
// held as a Pack of 16-bit elements, the zero fill made NVRTC keep each element in a register of its own, and spill.
__device__ __forceinline__ Bits elem_bits(const uint4& r, int v) {
  const unsigned wd = (sizeof(T) == 2 ? v / 2 : v) == 0 ? r.x : (sizeof(T) == 2 ? v / 2 : v) == 1 ? r.y :
                      (sizeof(T) == 2 ? v / 2 : v) == 2 ? r.z : r.w;
  return (Bits)(sizeof(T) == 2 ? wd >> (16 * (v % 2)) : wd);
}

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT, MINB) void dwconv1d_bands(PARAMS) {
  extern __shared__ __align__(16) unsigned char dsm[];
  float* ws = reinterpret_cast<float*>(dsm);        // [G][K + 1]: the weights, then the bias
  T* zs = reinterpret_cast<T*>(ws + WS_FLOATS);     // G rows of RS elements, from a 16-byte boundary
  float* const wb = ws + G * (K + 1);               // JOIN: [G][K + 1], the weights of the rows before
  T* const tz = zs + G * (RS + 1);                  // JOIN: [G][TW], the last inputs of the rows before
  const int c0 = (BFIRST ? blockIdx.y : blockIdx.x) * G, t = BFIRST ? blockIdx.x : blockIdx.y;  // Note [bands first]
  const long long n = blockIdx.z;
  // this thread's loads: channel vector vv of window lines w0, w0 + WSTEP, ...; line w is input position p0 + w and
  // element w + VEC + phase of its row (row element s holds z index t * LT - phase - VEC + s: the Note)
  const int vv = threadIdx.x % NVG, w0 = threadIdx.x / NVG, p0 = t * LT - (VEC - 1) - PAD + w0;
  const T* const xt = x + n * XS0 + c0 + vv * VEC + (long long)p0 * XS2;
  // JOIN: the rows before's last inputs, issued before the window's loads so that they travel together (Note [a row's
  // first vector whole]); lanes on consecutive channels of one position
  T tv[TPT];
#pragma unroll
  for (int k = 0; k < TPT; ++k) {
    const int e = threadIdx.x + k * NT, wp = e / G, i = e % G, pos = LOUT - VEC - PAD + wp;
    const long long r = n * C + c0 + i - 1;       // the row before, in the whole output
    tv[k] = from_f<T>(0.f);
    if (JOIN && t == 0 && e < G * TW && r >= 0 && pos >= 0 && pos < LIN)
      tv[k] = x[(r / C) * XS0 + r % C + (long long)pos * XS2];
  }
  Bits* const zt = reinterpret_cast<Bits*>(zs) + row_base(vv * VEC) + w0 + 1;
  for (int bt = 0; bt < NBATCH; ++bt) {
    uint4 xv[PER];
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int r = bt * PER + u, pos = p0 + r * WSTEP;
      xv[u] = make_uint4(0u, 0u, 0u, 0u);
      if ((EXACT || w0 + r * WSTEP < NW) && pos >= 0 && pos < LIN)
        xv[u] = *reinterpret_cast<const uint4*>(xt + (long long)r * WSTEP * XS2);
    }
    if (bt == 0) {                                  // while the first loads travel
      for (int e = threadIdx.x; e < G * (K + 1); e += NT) {
        const int i = e / (K + 1), q = e % (K + 1);
        float v = 0.f;
        if (q < K) v = to_f(w[(long long)(c0 + i) * K + q]);
        else if constexpr (HAS_BIAS) v = to_f(BIAS_PTR[c0 + i]);
        ws[e] = v;
      }
      if (JOIN && t == 0) {                         // Note [a row's first vector whole]
        for (int e = threadIdx.x; e < G * (K + 1); e += NT) {
          const int i = e / (K + 1), q = e % (K + 1);
          const long long r = n * C + c0 + i - 1;   // the row before, in the whole output
          const int cb = (int)((r + C) % C);        // its channel (row -1 has none: its weights are never used)
          float v = 0.f;
          if (q < K) v = to_f(w[(long long)cb * K + q]);
          else if constexpr (HAS_BIAS) v = to_f(BIAS_PTR[cb]);
          wb[e] = v;
        }
#pragma unroll
        for (int k = 0; k < TPT; ++k) {
          const int e = threadIdx.x + k * NT;
          if (e < G * TW) tz[(e % G) * TW + e / G] = tv[k];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int r = bt * PER + u;
      if (EXACT || w0 + r * WSTEP < NW) {
#pragma unroll
        for (int v = 0; v < VEC; ++v) zt[v * RS + phase(v) + r * WSTEP] = elem_bits(xv[u], v);
      }
    }
  }
  __syncthreads();
  TO* const yb = y + (n * C + c0) * (long long)LOUT;
#pragma unroll 1
  for (int e = threadIdx.x; e < G * NVR; e += NT) {  // lanes along a row
    const int i = e / NVR, j = e % NVR;
    const int l = t * LT - phase(i) + j * VEC;      // the row's output of the vector's element 0
    if (l >= LOUT) continue;
    // Note [a row's first vector whole]: the vector that holds this row's end and the next row's start is the next
    // row's to store (but for the output's last row)
    if (JOIN && l + VEC > LOUT && n * C + c0 + i < NROWS - 1) continue;
    const T* zr = zs + row_base(i) + (j + 1) * VEC;
    const Pack<T, VEC> lo = *reinterpret_cast<const Pack<T, VEC>*>(zr);
    const Pack<T, VEC> hi = *reinterpret_cast<const Pack<T, VEC>*>(zr + VEC);
    float v[2 * VEC], wk[K + 1], o[VEC];
#pragma unroll
    for (int u = 0; u < VEC; ++u) {
      v[u] = to_f(lo.v[u]);
      v[VEC + u] = to_f(hi.v[u]);
    }
#pragma unroll
    for (int q = 0; q <= K; ++q) wk[q] = ws[i * (K + 1) + q];
#pragma unroll
    for (int u = 0; u < VEC; ++u) {
      float a = wk[K];
#pragma unroll
      for (int q = 0; q < K; ++q) a = fmaf(wk[q], v[u + q], a);
      o[u] = a;
    }
    if (JOIN && l < 0) {                            // elements u < -l: the row before's last outputs
#pragma unroll
      for (int q = 0; q <= K; ++q) wk[q] = wb[i * (K + 1) + q];
#pragma unroll
      for (int u = 0; u < VEC; ++u) {
        if (u < -l) {
          float a = wk[K];
#pragma unroll
          for (int q = 0; q < K; ++q) a = fmaf(wk[q], to_f(tz[i * TW + VEC + l + u + q]), a);
          o[u] = a;
        }
      }
    }
    TO* const yp = yb + (long long)i * LOUT + l;    // 16-byte aligned: the Note
    if ((JOIN || l >= 0) && l + VEC <= LOUT) {
      store16(yp, o);
    } else {                                        // the row's start or end: the rest is a neighbour row's
#pragma unroll
      for (int u = 0; u < VEC; ++u)
        if (l + u >= 0 && l + u < LOUT) yp[u] = from_f<TO>(o[u]);
    }
  }
}
"""


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    """Note [channel rows over a band of positions]: a block per G channels, band and sample."""
    n, c, l_in, l_out, k, pad = dims(card)
    x, y = input_spec(card, "input"), output_spec(card, 0)
    params, args = conv_params(card)
    g, lt, block, vec = p["g"], p["lt"], p["block"], p["vec"]
    has_bias = input_spec(card, "bias") is not None
    head = f"""{PREAMBLE}
{typedefs(T=x.dtype, TO=y.dtype)}
{consts(C=c, LIN=l_in, LOUT=l_out, K=k, PAD=pad, NT=block, VEC=vec, G=g, LT=lt, RS=row_stride(p),
        NW=window(card, p), PER=p["ld"], WS_FLOATS=_ws_bytes(p, k) // 4, MINB=min_blocks(card, p),
        HAS_BIAS=int(has_bias), BFIRST=int(bool(p.get("bfirst"))), JOIN=int(bool(p.get("join"))), NROWS=n * c)}
constexpr long long XS0 = {x.stride[0]}LL, XS2 = {x.stride[2]}LL;
typedef {"unsigned short" if ITEMSIZE[x.dtype] == 2 else "unsigned"} Bits;  // an input element's bits
"""
    source = head + STORE16 + KERNEL.replace("PARAMS", params).replace("BIAS_PTR", "b" if has_bias else "w")
    desc = f"depthwise conv1d k={k} bands g={g} lt={lt} block={block} ld={p['ld']} (input channels-fast) vec={vec}" + \
        (" bands first" if p.get("bfirst") else "") + (" rows joined" if p.get("join") else "")
    grid = (bands(card, p), c // g, n) if p.get("bfirst") else (c // g, bands(card, p), n)
    return make_candidate(source, [launch("dwconv1d_bands", grid, block, args, smem=smem_bytes(card, p))],
                          desc, p, align_of(vec, [x]))
