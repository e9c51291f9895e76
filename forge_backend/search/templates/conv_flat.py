"""CUDA source of the depthwise conv1d's ``flat`` strategy (templates/conv.py generates it): a block's channel rows
as one flat run in shared memory, stored as whole 16-byte vectors (Note [a block's channel rows as one flat run]), and
blocks that walk runs with the next run's loads in flight (Note [the next run's loads in flight]).

Text only (with conv_shared.py's 16-byte store), filled in by conv.py with the card's constants (C, LIN, LOUT, K, PAD,
NT, VEC, G, PER, NRUNS, ZS, WS_FLOATS, MINB, HAS_BIAS, XS0, XS2), its parameters (PARAMS) and its bias (BIAS_PTR).
"""
from __future__ import annotations

from .conv_shared import STORE16

# Note [a block's channel rows as one flat run]
# Qwen's conv writes [1, 8192, 2051] rows: odd lengths, so every tile of positions of the other strategies stores
# row pieces that start and end inside a 16-byte vector and a 32-byte sector, and a row's sectors are written by
# several stores of several blocks (Nsight Compute, seventeenth session: L2 75% busy with DRAM at 35%, 1.6 sectors
# sent to the L2 per output sector). But in a contiguous output, G consecutive rows of one sample are one run of
# G * L_out elements. ``flat`` gives a block such a run, the inputs of every output in shared memory laid out as the
# run itself: z[c * L_out + q] = x[c, q - PAD] (zero for q < PAD and for q >= PAD + L_in), then K - 1 zeros. Output
# f of the run is then sum_k w[c(f), k] * z[f + k], c(f) = f / L_out: a row's last outputs reach into the next row's
# first K - 1 entries, which are its leading zeros when K - 1 <= PAD (a causal conv's PAD is K - 1). So a thread
# takes one aligned 16-byte vector of the run (the run's phase in a vector is the block's), reads it and the next
# vector from shared memory, and stores one 16-byte vector: every sector is whole and written by one warp store,
# except the ones a run shares with its neighbour at each end (none when G * L_out is a multiple of the sector, as
# for G = 16 at Qwen's sizes). A vector that straddles two rows (L_out >= vec: at most one row end a vector) takes
# each element's weights from its row. The fill is the transpose: 16-byte loads of vec channels at one position
# (whole sectors when G * itemsize >= 32), each scattered as vec 2- or 4-byte stores into the channel rows. It needs
# every input of the G rows on chip at once: 66 KB at Qwen's G = 16. LD loads per thread are in flight together
# before they are stored. tests/test_conv_flat.py models the index arithmetic in numpy on the CPU.
# Measured on the H200 (twenty-third session; probe_session23_conv_flat*.json/.md, each line one run):
# - the first build ran 60-90 us against the root's 29.5: NVRTC had split each 16-byte store, written as a Pack of
#   bf16, into eight 2-byte stores (the PTX: st.global.u16), and a uint4 assignment into four 4-byte ones; the store
#   is now one st.global.v4.b32 in inline PTX (store16);
# - then 24.9 and 25.2 us at 16 rows and 512 threads, against the root's 29.2-29.5 in the same runs (the ops row, run V:
#   25.1 us, 63% of the copy bandwidth, 7.7x Inductor); 32 rows 26.4 us; 16 rows with 256 threads 36-38 us and 128
#   threads 44-47 us: 512 threads hold two blocks an SM (64 registers), 264 blocks for 512 runs, two full waves, where
#   256 threads hold three (396 blocks: a second wave of 116);
# - Nsight Compute at 16 rows and 512 threads (ncu/conv_flat_g16_b512_ld_8.*): 23.4 us, 1.05 M sectors sent to the L2
#   by the stores (the output's own count; the pairs root sent 1.6 times that), yet the L2 still 75% busy with DRAM
#   at 42%; stall samples on the scatter's first use of the loads (long scoreboard, 19%) and on its 2-byte shared
#   stores (MIO, 14%). The reads, one 32-byte sector of each position's 128-byte line per block, are what is left.

# Note [the next run's loads in flight]
# A ``flat`` block loads its run, waits at the barrier, then computes and stores it, so the blocks that start together
# read together and then write together. With ``pipe`` a block per SM slot walks runs r, r + grid, ... with two shared
# runs: it issues every load of the next run (PER a thread, into registers), computes and stores the current run from
# one shared run while they travel, then scatters them into the other and meets the block at one barrier per run. A
# run's weights and zeros go with it (its phase may differ from the last run's in the same space).
# Measured on the H200 (twenty-third session, probe_session23_conv_flat.json, one run): slower everywhere, 33.5-39.8 us
# against the plain layouts' 24.9-25.2 at best. Nsight Compute on 16 rows, 512 threads (ncu/conv_flat_g16_b512_pipe.*):
# one block an SM (two runs, 132 KB, 128 registers with 64 bytes spilled), DRAM 29% busy, and the stall samples on the
# scatter's first use of the next run's loads (long scoreboard, 34%) and at the barrier (22%): the loads had not
# arrived when the run before was stored, though they were in flight all that time. It stays an action, not a seed.

# The pieces every flat kernel shares: a run's place, its loads, their scatter, its weights and zeros, its stores.
FLAT_PIECES = r"""
constexpr int NVG = G / VEC;                        // channel vectors of one position
constexpr int REG = G * LOUT;                       // outputs of a run
constexpr int NLD = LIN * NVG;                      // 16-byte loads of a run's inputs
constexpr bool EXACT = NLD % (NT * PER) == 0;      // every thread has every load of every batch: no test
constexpr int ZP = LOUT - LIN;                      // zeros of a row: PAD before its inputs, ZP - PAD after them
constexpr int NRUN = C / G;                         // runs of one sample

// Run r: channels c0 ... c0 + G - 1 of sample r / NRUN, whose outputs start at element f0 of the whole output.
struct Run {
  const T* xb;
  long long f0;
  int c0, ph;  // ph: the phase of f0 in a vector
};
__device__ __forceinline__ Run run_of(const T* x, int r) {
  Run o;
  const long long n = r / NRUN;
  o.c0 = (r % NRUN) * G;
  o.f0 = (n * C + o.c0) * (long long)LOUT;
  o.ph = (int)(o.f0 % VEC);
  o.xb = x + n * XS0 + o.c0;
  return o;
}

// Batch b of a run's loads into registers: load e is position e / NVG, channel vector e % NVG.
__device__ __forceinline__ void issue(Pack<T, VEC> (&xv)[PER], const Run& ru, int b) {
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int e = threadIdx.x + (b * PER + t) * NT;
    if (EXACT || e < NLD) xv[t] = ldp<T, VEC>(ru.xb + (e % NVG) * VEC + (long long)(e / NVG) * XS2);
  }
}

// Batch b's loads scattered into the shared run zs: zs[ph + i * LOUT + q] holds input position q - PAD of channel
// c0 + i.
__device__ __forceinline__ void place(const Pack<T, VEC> (&xv)[PER], const Run& ru, int b, T* zs) {
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int e = threadIdx.x + (b * PER + t) * NT;
    if (EXACT || e < NLD) {
      T* d = zs + ru.ph + (e % NVG) * VEC * LOUT + PAD + e / NVG;
#pragma unroll
      for (int u = 0; u < VEC; ++u) d[u * LOUT] = xv[t].v[u];
    }
  }
}

// A run's weights and biases into ws, and every place of zs that no load fills: zeros.
__device__ __forceinline__ void prepare(const Run& ru, const T* w, const T* bias, T* zs, float* ws) {
  for (int e = threadIdx.x; e < G * (K + 1); e += NT) {
    const int i = e / (K + 1), q = e % (K + 1);
    float v = 0.f;
    if (q < K) v = to_f(w[(long long)(ru.c0 + i) * K + q]);
    else if constexpr (HAS_BIAS) v = to_f(bias[ru.c0 + i]);
    ws[e] = v;
  }
  for (int e = threadIdx.x; e < G * ZP; e += NT) {
    const int i = e / ZP, j = e % ZP;
    zs[ru.ph + i * LOUT + (j < PAD ? j : LIN + j)] = from_f<T>(0.f);
  }
  for (int e = threadIdx.x; e < ru.ph; e += NT) zs[e] = from_f<T>(0.f);
  for (int e = ru.ph + REG + threadIdx.x; e < ZS; e += NT) zs[e] = from_f<T>(0.f);
}

""" + STORE16 + r"""// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending, for
// every output of a run: vector t of the run covers outputs t * VEC - ph ... of it.
__device__ __forceinline__ void emit(const Run& ru, const T* zs, const float* ws, TO* y) {
  const int nvec = (ru.ph + REG + VEC - 1) / VEC;
  TO* yv = y + (ru.f0 - ru.ph);                     // vector t of the run: yv + t * VEC, 16-byte aligned
#pragma unroll 1
  for (int t = threadIdx.x; t < nvec; t += NT) {
    const Pack<T, VEC> lo = *reinterpret_cast<const Pack<T, VEC>*>(zs + t * VEC);
    const Pack<T, VEC> hi = *reinterpret_cast<const Pack<T, VEC>*>(zs + t * VEC + VEC);
    float v[2 * VEC];
#pragma unroll
    for (int u = 0; u < VEC; ++u) {
      v[u] = to_f(lo.v[u]);
      v[VEC + u] = to_f(hi.v[u]);
    }
    const int f = t * VEC - ru.ph;                  // the run's output of element 0 (negative: the run before's)
    const int ca = f >= 0 ? f / LOUT : -1;          // its row (-1: before the run)
    const int split = (ca + 1) * LOUT - f;          // elements before it are row ca's, the rest row ca + 1's
    const bool whole = f >= 0 && f + VEC <= REG;    // every element is this run's
    float wk[K + 1], o[VEC];
#pragma unroll
    for (int q = 0; q <= K; ++q) wk[q] = ws[(ca < 0 ? 0 : ca) * (K + 1) + q];
    if (whole && split >= VEC) {                    // one row
#pragma unroll
      for (int u = 0; u < VEC; ++u) {
        float a = wk[K];
#pragma unroll
        for (int q = 0; q < K; ++q) a = fmaf(wk[q], v[u + q], a);
        o[u] = a;
      }
    } else {                                        // a row's end inside the vector (LOUT >= VEC: one), or the run's
      float wn[K + 1];
#pragma unroll
      for (int q = 0; q <= K; ++q) wn[q] = ws[(ca + 1 < G ? ca + 1 : G - 1) * (K + 1) + q];
#pragma unroll
      for (int u = 0; u < VEC; ++u) {
        const bool mine = u < split;
        float a = mine ? wk[K] : wn[K];
#pragma unroll
        for (int q = 0; q < K; ++q) a = fmaf(mine ? wk[q] : wn[q], v[u + q], a);
        o[u] = a;
      }
    }
    if (whole) {
      store16(yv + t * VEC, o);
    } else {
#pragma unroll
      for (int u = 0; u < VEC; ++u)
        if (f + u >= 0 && f + u < REG) yv[t * VEC + u] = from_f<TO>(o[u]);
    }
  }
}
"""

# Note [a block's channel rows as one flat run]: a block per run; its loads in batches of PER, all in flight together.
FLAT_KERNEL = r"""
extern "C" __global__ __launch_bounds__(NT, MINB) void dwconv1d_flat(PARAMS) {
  extern __shared__ __align__(16) unsigned char dsm[];
  float* ws = reinterpret_cast<float*>(dsm);        // [G][K + 1]: the weights, then the bias
  T* zs = reinterpret_cast<T*>(ws + WS_FLOATS);     // the run's inputs, ZS elements from a 16-byte boundary
  const Run ru = run_of(x, blockIdx.x);
  constexpr int NBATCH = (NLD + NT * PER - 1) / (NT * PER);
  for (int bt = 0; bt < NBATCH; ++bt) {
    Pack<T, VEC> xv[PER];
    issue(xv, ru, bt);
    if (bt == 0) prepare(ru, w, BIAS_PTR, zs, ws);  // while the first loads travel (no loaded place is a zero)
    place(xv, ru, bt, zs);
  }
  __syncthreads();
  emit(ru, zs, ws, y);
}
"""

# Note [the next run's loads in flight]: blocks walk runs with two shared runs, the next one's loads in flight
# while the current one is computed and stored.
FLAT_PIPE_KERNEL = r"""
extern "C" __global__ __launch_bounds__(NT, MINB) void dwconv1d_flat_pipe(PARAMS) {
  extern __shared__ __align__(16) unsigned char dsm[];
  constexpr int SPACE = WS_FLOATS + ZS * (int)sizeof(T) / 4;  // one run's space in floats: weights, then inputs
  float* const ws0 = reinterpret_cast<float*>(dsm);
  Pack<T, VEC> xv[PER];                             // every load of a run (NBATCH == 1)
  int r = blockIdx.x;
  if (r < NRUNS) {
    const Run ru = run_of(x, r);
    issue(xv, ru, 0);
    prepare(ru, w, BIAS_PTR, reinterpret_cast<T*>(ws0 + WS_FLOATS), ws0);
    place(xv, ru, 0, reinterpret_cast<T*>(ws0 + WS_FLOATS));
  }
  __syncthreads();
  for (int i = 0; r < NRUNS; ++i, r += gridDim.x) {
    const int next = r + gridDim.x;
    float* const ws = ws0 + (i & 1) * SPACE;       // this run's space
    float* const wn = ws0 + ((i + 1) & 1) * SPACE;  // the other: last read before the last barrier
    if (next < NRUNS) issue(xv, run_of(x, next), 0);  // the next run's loads travel while this run is stored
    emit(run_of(x, r), reinterpret_cast<const T*>(ws + WS_FLOATS), ws, y);
    if (next < NRUNS) {
      const Run rn = run_of(x, next);
      prepare(rn, w, BIAS_PTR, reinterpret_cast<T*>(wn + WS_FLOATS), wn);
      place(xv, rn, 0, reinterpret_cast<T*>(wn + WS_FLOATS));
    }
    __syncthreads();
  }
}
"""
