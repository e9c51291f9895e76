"""The depthwise conv1d's device code for its strategies ``tile``, ``window``, ``chunks`` and ``rows`` (conv.py
describes each; ``flat`` and ``bands`` have modules of their own): each function returns the C++ of one kernel, with
``PARAMS`` where conv.py puts the kernel's parameters, and the Notes on how each layout reads and writes."""
from __future__ import annotations

from .conv_shared import STORE16


def tile_kernel(vec: int, has_bias: bool) -> str:
    return f"""
// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d(PARAMS) {{
  __shared__ float s[HALO][TC + 1];  // the input tile with its halo; +1: no bank conflicts along either dim
  __shared__ float ws[TC][K];
  // Note [channel tiles first]
  const int l0 = (CFIRST ? blockIdx.y : blockIdx.x) * TL, c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  for (int e = threadIdx.x; e < TC * K; e += NT) {{
    const int i = e / K, c = c0 + i;
    ws[i][e % K] = c < C ? to_f(w[(long long)c * K + e % K]) : 0.f;
  }}
{_tile_load(vec)}
  __syncthreads();
  for (int e = threadIdx.x; e < TL * TC; e += NT) {{
    const int j = YL_FAST ? e % TL : e / TC, i = YL_FAST ? e / TL : e % TC;  // along the output's fast dim
    const int c = c0 + i, l = l0 + j;
    if (c < C && l < LOUT) {{
      float acc = {"to_f(b[c])" if has_bias else "0.f"};
#pragma unroll
      for (int q = 0; q < K; ++q) acc = fmaf(ws[i][q], s[j + q][i], acc);
      y[n * YS0 + c * YS1 + l * YS2] = from_f<TO>(acc);
    }}
  }}
}}
"""


# Note [a window of positions in registers]
# The tile strategy reads every input element K times from shared memory (and each weight as often): at Qwen's
# [1, 8192, 2048] bf16 that is ~8 shared-memory accesses per output, more time than the bytes take. In a window a
# thread owns ``vec`` channels (one 16-byte load at bf16 vec=8) of R consecutive positions: it loads the R + K - 1
# input vectors it needs straight from global memory (the K - 1 halo vectors are its neighbour's too, so they
# come from L1), keeps its ``vec`` x K weights in registers, and computes its R x vec outputs there. The outputs go
# through shared memory only to turn them around: [TL][TC + 1] floats, written per position and read back along
# the output's unit-stride dim for coalesced stores. Within each vector's ``vec`` columns, channel u of vector v sits
# in column (u + v) % vec, so that the lanes of a warp, writing the same u of different vectors, hit different banks
# (the register indices stay compile-time constants).
# Measured (H200, eighth session, probe_conv_window_gn_keep.json): the best window (64 positions x 64 channels, 4
# channels x 8 positions per thread) ran Qwen's conv in 40.3 us, the best vector tile 39.0 us in an earlier call.
# The window cut the shared-memory accesses per output from about 8 to 2 and the time did not move; it stays a seed.


def window_kernel(vec: int, r: int, has_bias: bool) -> str:
    return f"""
constexpr int VEC = {vec}, R = {r}, NVEC = TC / VEC, W = R + K - 1;

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d_window(PARAMS) {{
  __shared__ float so[TL][TC + 1];  // the block's outputs, turned around for stores along the output's fast dim
  // Note [channel tiles first]
  const int l0 = (CFIRST ? blockIdx.y : blockIdx.x) * TL, c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  const int iv = threadIdx.x % NVEC, g = threadIdx.x / NVEC, cb = c0 + iv * VEC;
  const bool on = cb < C;  // C % VEC == 0: a vector is all in or all out
  float wr[VEC][K], br[VEC];
#pragma unroll
  for (int u = 0; u < VEC; ++u) {{
    br[u] = {"on ? to_f(b[cb + u]) : 0.f" if has_bias else "0.f"};
#pragma unroll
    for (int q = 0; q < K; ++q) wr[u][q] = on ? to_f(w[(long long)(cb + u) * K + q]) : 0.f;
  }}
  Pack<T, VEC> xw[W];
#pragma unroll
  for (int t = 0; t < W; ++t) {{
    const long long l = (long long)l0 + g * R + t - PAD;
    if (on && l >= 0 && l < LIN) {{
      xw[t] = ldp<T, VEC>(x + n * XS0 + cb + l * XS2);
    }} else {{
#pragma unroll
      for (int u = 0; u < VEC; ++u) xw[t].v[u] = from_f<T>(0.f);
    }}
  }}
#pragma unroll
  for (int o = 0; o < R; ++o) {{
#pragma unroll
    for (int u = 0; u < VEC; ++u) {{
      float acc = br[u];
#pragma unroll
      for (int q = 0; q < K; ++q) acc = fmaf(wr[u][q], to_f(xw[o + q].v[u]), acc);
      so[g * R + o][iv * VEC + (u + iv) % VEC] = acc;  // rotated within the vector: lanes hit different banks
    }}
  }}
  __syncthreads();
  for (int e = threadIdx.x; e < TL * TC; e += NT) {{
    const int j = YL_FAST ? e % TL : e / TC, i = YL_FAST ? e / TL : e % TC;  // along the output's fast dim
    const int c = c0 + i, l = l0 + j;
    if (c < C && l < LOUT) y[n * YS0 + c * YS1 + l * YS2] = from_f<TO>(so[j][i - i % VEC + (i + i / VEC) % VEC]);
  }}
}}
"""


def chunks_kernel(vec: int, direct: bool, rowfast: bool, has_bias: bool) -> str:
    """Note [output chunks aligned per channel row]; ``rowfast``: Note [a warp's stores along one row]."""
    window = ("const long long l = lx + j * VEC + w;\n"
              "      if (l >= 0 && l < LIN) {\n"
              "        win[w] = ldp<T, VEC>(xb + v * VEC + l * XS2);\n"
              "      } else {\n"
              "#pragma unroll\n"
              "        for (int u = 0; u < VEC; ++u) win[w].v[u] = from_f<T>(0.f);\n"
              "      }") if direct else \
        "win[w] = s[j * VEC + w][SWZ(j * VEC + w, v)];"
    staging = "" if direct else """
  __shared__ Pack<T, VEC> s[TLI][NV];  // the tile's input positions (rows) of its channel vectors, as in memory
  Pack<T, VEC> xv[PER];  // every load of the tile in flight before any is stored
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int e = threadIdx.x + t * NT, i = e / NV, v = e % NV;
    const long long l = lx + i;
    if (e < TLI * NV && c0 + v * VEC < C && l >= 0 && l < LIN) {
      xv[t] = ldp<T, VEC>(xb + v * VEC + l * XS2);
    } else {
#pragma unroll
      for (int u = 0; u < VEC; ++u) xv[t].v[u] = from_f<T>(0.f);
    }
  }"""
    store = "" if direct else """
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int e = threadIdx.x + t * NT, i = e / NV;
    if (e < TLI * NV) s[i][SWZ(i, e % NV)] = xv[t];
  }"""
    # the thread's tasks: a vector of channels v and a chunk j each
    tasks = """  for (int e = threadIdx.x; e < NV * NJ; e += NT) {
    const int j = e % NJ, v = e / NJ, cb = c0 + v * VEC;  // a warp's lanes on consecutive chunks of a row
    if (cb >= C) break;  // C % VEC == 0: a vector is all in or all out; later tasks have larger v
    const int lb = l0 + j * VEC;  // the chunk's first position before its row's shift
    if (lb - (VEC - 1) >= LOUT) continue;  // no row has an output here""" if rowfast else """\
  const int v = threadIdx.x % NV, cb = c0 + v * VEC;  // this thread's channels: the same in each of its chunks
  if (cb >= C) return;  // C % VEC == 0: a vector is all in or all out
  for (int j = threadIdx.x / NV; j < NJ; j += NT / NV) {
    const int lb = l0 + j * VEC;  // the chunk's first position before its row's shift
    if (lb - (VEC - 1) >= LOUT) break;  // no row has an output here, nor further on"""
    swizzle = ("// Note [a warp's stores along one row]: vector v of input row i sits in column v ^ ((i / VEC) % NV),\n"
               "// so the eight lanes of a phase, on rows VEC apart, read eight columns\n"
               "#define SWZ(i, v) ((v) ^ (((i) / VEC) & (NV - 1)))") if rowfast else "#define SWZ(i, v) (v)"
    return STORE16 + f"""
constexpr int VEC = {vec}, NV = TC / VEC, NJ = TL / VEC, W = 2 * VEC + K - 2, TLI = TL + VEC + K - 2;
constexpr int PER = (TLI * NV + NT - 1) / NT;
{swizzle}

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d_chunks(PARAMS) {{
  __shared__ float ws[TC][K + 1];  // the block's weights (and bias), read once from global memory
  // Note [channel tiles first]
  const int l0 = (CFIRST ? blockIdx.y : blockIdx.x) * TL, c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  const T* xb = x + n * XS0 + c0;
  const long long lx = (long long)l0 - (VEC - 1) - PAD;  // the input position of the tile's first row{staging}
{_block_weights(has_bias)}{store}
  __syncthreads();
{tasks}
    Pack<T, VEC> win[W];  // input positions lb - (VEC - 1) - PAD ...: every shift's window
#pragma unroll
    for (int w = 0; w < W; ++w) {{
      {window}
    }}
    TO* yb = y + n * YS0 + (long long)cb * YS1 + lb;
#pragma unroll
    for (int u = 0; u < VEC; ++u) {{
      // row cb + u starts at this phase of a vector (the same in every sample and vector of channels: the Note);
      // its chunk, shifted back by it, is one aligned vector of outputs
      const int sh = (int)((YS1 * u) % VEC), l = lb - sh;
      float a[VEC];
#pragma unroll
      for (int o = 0; o < VEC; ++o) {{
        a[o] = ws[v * VEC + u][K];
#pragma unroll
        for (int q = 0; q < K; ++q) a[o] = fmaf(ws[v * VEC + u][q], to_f(win[VEC - 1 - sh + o + q].v[u]), a[o]);
      }}
      TO* yr = yb + u * YS1 - sh;
      if (l >= 0 && l + VEC <= LOUT) {{
        store16(yr, a);  // one 16-byte store (assigned as a Pack, NVRTC split the first channel's into seven)
      }} else {{
#pragma unroll
        for (int o = 0; o < VEC; ++o)
          if (l + o >= 0 && l + o < LOUT) yr[o] = from_f<TO>(a[o]);
      }}
    }}
  }}
}}
"""


def rows_pairs_kernel(vec: int, rs: int, has_bias: bool) -> str:
    """Note [two positions per lane]: the warp rows with each lane on two adjacent outputs, read from shared memory
    as float2 and stored as one pair."""
    return f"""
constexpr int VEC = {vec}, RS = {rs}, NW = NT / 32, RP = TL / 64, NV = TC / VEC, NQ = (K + 2) / 2;
constexpr int HALO2 = TL + K + 1;  // input positions l0 - 2 - PAD ... : the tile for either parity of a row
{_load_layout("HALO2")}
constexpr bool ODD = ((YS0 | YS1) & 1) != 0;  // may a row start at an odd element (then its tiles shift by one)

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d_rows2(PARAMS) {{
  __shared__ __align__(16) float s[TC][RS];  // channel rows; RS even (float2 reads), 2 mod 4 (see the Note)
{_block_origin("l0", "TL")}
{_tile_loads("HALO2", " - 2", "  ")}
{_block_weights(has_bias)}
#pragma unroll
  for (int t = 0; t < PER; ++t) {{
    const int e = threadIdx.x + t * NT, ln = e & 31, ch = e >> 5;
    const int v = (ch % VCH) * VL + ln / PL, j = (ch / VCH) * PL + ln % PL;
    if (ch < PCH * VCH && j < HALO2) {{
#pragma unroll
      for (int u = 0; u < VEC; ++u) {{
        const int i = v * VEC + u;
        const int at = j - (ODD ? (int)((n * YS0 + (long long)(c0 + i) * YS1) & 1) : 0);  // the row's shift
        if (at >= 0) s[i][at] = to_f(xv[t].v[u]);
      }}
    }}
  }}
  __syncthreads();
  const bool whole = l0 >= 1 && l0 + TL < LOUT;  // block-uniform: every pair of this tile is in the output
  for (int i = warp; i < TC && c0 + i < C; i += NW) {{  // warp-uniform
    const int c = c0 + i;
    float wr[K];
#pragma unroll
    for (int q = 0; q < K; ++q) wr[q] = ws[i][q];
    const float bias = ws[i][K];
    const long long row = n * YS0 + (long long)c * YS1;
    const int shift = ODD ? (int)(row & 1) : 0;  // this row's tile starts at l0 - shift: its pairs are aligned
    const float* sr = s[i] + 2 - 2 * shift + 2 * lane;
    const int p0 = l0 - shift + 2 * lane;  // the lane's first pair: outputs p0 and p0 + 1, then 64 further on
    TO* yr = y + row + p0;
#pragma unroll
    for (int r = 0; r < RP; ++r) {{
      float xs[2 * NQ];
#pragma unroll
      for (int h = 0; h < NQ; ++h) {{
        const float2 f = *reinterpret_cast<const float2*>(sr + r * 64 + 2 * h);
        xs[2 * h] = f.x;
        xs[2 * h + 1] = f.y;
      }}
      float a0 = bias, a1 = bias;
#pragma unroll
      for (int q = 0; q < K; ++q) {{
        a0 = fmaf(wr[q], xs[q], a0);
        a1 = fmaf(wr[q], xs[q + 1], a1);
      }}
      const int p = p0 + r * 64;
      if (whole || (p >= 0 && p + 1 < LOUT)) {{
        Pack<TO, 2> o;
        o.v[0] = from_f<TO>(a0);
        o.v[1] = from_f<TO>(a1);
        if constexpr (sizeof(TO) == 2) *reinterpret_cast<unsigned*>(yr + r * 64) = *reinterpret_cast<unsigned*>(&o);
        else *reinterpret_cast<uint2*>(yr + r * 64) = *reinterpret_cast<uint2*>(&o);  // one store for the pair
      }} else {{
        if (p >= 0 && p < LOUT) yr[r * 64] = from_f<TO>(a0);
        if (p + 1 >= 0 && p + 1 < LOUT) yr[r * 64 + 1] = from_f<TO>(a1);
      }}
    }}
  }}
}}
"""


# Note [output chunks aligned per channel row]
# The warp rows (Notes [a warp per output row], [two positions per lane]) turn Qwen's channels-fast input around in
# shared memory as fp32 channel rows: every input element costs a conversion and a scalar store there, and every
# output pair a 4-byte store, about 13 instructions an output in all. In ``chunks`` a thread owns ``vec`` channels
# (one 16-byte vector of the input as it lies in memory) and one chunk of ``vec`` output positions, and stores each of
# its channels' chunk as one 16-byte vector: the turn-around happens in registers, where a conversion to fp32 is one
# instruction and the pack back is the paired conversion (F2FP). A stored vector must start on a multiple of ``vec``
# elements, and Qwen's output rows are 2051 long, so row c starts at phase (c * 2051) % vec of a vector. Each row's
# chunks are shifted back by that phase: chunk j of row c covers outputs j * vec - phase ... , one aligned vector.
# The phase of channel u of a vector is (u * YS1) % vec (the vector's first channel is a multiple of vec, and the
# sample stride is a multiple of vec or there is one sample: ``_chunks_ok``), a constant after unrolling, so the
# thread holds the input positions that any phase needs, 2 * vec + K - 2 vectors (18 for bf16 and K = 4), and each
# channel picks its K + vec - 1 of them by constant indices. The grid covers L_out + vec - 1 positions; a chunk that
# lies partly outside its row stores element by element. The tile's input goes through shared memory as it lies in
# memory (16-byte loads and stores, rows of TC channels: the eight lanes of a phase of a 16-byte shared load read
# one row, conflict-free), or with ``direct`` each thread reads its window from global memory (neighbours' windows
# overlap, so most of it comes from L1). About 7 instructions an output (256 FMAs, 88 unpacks, 32 packs, 18 shared
# loads and 8 stores per 64 outputs in the SASS), 80 registers with shared memory, 112 direct.
# Measured on the H200 (seventeenth session, Qwen's [1, 8192, 2048] bf16, probe_session17_conv_chunks.json, one run,
# the root 29.4 us): with a warp's lanes on 4-8 vectors of channels it lost everywhere, 30.9 us at best (direct, 512
# positions x 32 channels), 32.7 us through shared memory, 44-54 us at 128 channels. Nsight Compute
# (ncu/conv_chunks_direct.txt, ncu/conv_chunks_smem.txt): DRAM 32-35% busy, L2 72-75%, 20-37% of the warps resident.
# Lanes along a row (Note [a warp's stores along one row]) made it a tie with the root. For the ceiling: Inductor
# transposes the same [2048, 8192] bf16 in 19.5 us, 80.7% of the copy bandwidth, against a plain copy's 18.4 us
# (probe_session17_transpose.json), so the layout itself allows about 20 us and the conv is not there yet.

# Note [a warp's stores along one row]
# With ``rowfast`` the tasks of a block run chunk-fastest: the lanes of a warp take consecutive chunks of one vector of
# channels, so each 16-byte store of a warp covers 256-512 contiguous bytes of one output row, where the channel-fast
# order covered 64-128 bytes of 4-8 rows. Its window comes from the shared tile, where eight lanes of a phase now read
# rows VEC apart in one column: a tile of rows of 128 bytes (tc 64 at bf16) would put all eight in one bank group, so
# vector v of row i sits in column v ^ ((i / VEC) % NV) (needs NV >= 8 vectors a row, and 8 chunks a row for the
# phase). Measured on the H200 (seventeenth session, probe_session17_conv_rowfast.json and
# probe_session17_conv_rowfast_more.json, each line one run): 256 positions x 64 channels 30.4 us against 36.7 us
# channel-fast, 128 x 64 with 128 threads 29.3 and 29.7 us against 35.3 us, the root in the same runs 29.4 and 29.2 us;
# 64 x 64 30.6 us, 128 x 128 32.1-33.2 us, channel tiles first 30.1 us. Nsight Compute on 128 x 64
# (ncu/conv_chunks_rowfast.txt): 27.6 us, DRAM 35% busy, L2 75%, issue slots 41% busy, 0.9 eligible warps per
# scheduler. It is the chunks' seed; the root stays the rows in pairs.
# Those stores were not all whole: a SASS scan in the twenty-fourth session (benchmarks/sass_stores.py) found the
# first channel's 16-byte Pack store of each chunk split by NVRTC into six 2-byte stores and one 4-byte store (the
# other seven channels' were one STG.E.128). Stored through store16 (one st.global.v4, conv_shared.py) the chunks ran
# 25.7 and 25.6 us at 128 x 64 with 128 threads (probe_session24_conv_bands_first.json and _grid.json, each one run;
# the flat runs 24.9 and 25.1 us in the same runs), against 29.3 us in the seventeenth session's run (not the same).

# Note [two positions per lane]
# The warp rows (Note [a warp per output row]) spend about 13 instructions per output: K shared loads, K FMAs, a
# conversion, a 2-byte store and the branch around them (SASS of the Qwen root, sm_90). With ``lp`` 2 each lane takes
# two adjacent outputs: it reads the K + 1 inputs they share as (K + 2) / 2 float2 loads, and stores both as one
# 4-byte pair. A pair must start on an even element, and Qwen's output rows are 2051 long, so every other row starts
# at an odd one: a row whose start is odd runs its tiles one position early (outputs l0 - 1 ... l0 + TL - 2), which
# still covers each output once (the grid covers L_out + 1 positions; for a contiguous output, where only an odd L_out
# makes odd rows, that is no extra tile). The block loads input positions
# l0 - 2 - PAD ... l0 + TL + K - 2 - PAD (TL + K + 1 of them) and puts each row at an offset of its shift, so every
# lane's float2 reads are 8-byte aligned. The shared row stride RS is even for those reads and 2 modulo 4, so the fill
# (8 positions x 4 vectors of 8 per warp) has lanes two to a bank, not four (with 2 vectors of 8, at 16 channels per
# block, none share one); the reads of consecutive pairs by consecutive lanes are conflict-free. A tile whose pairs
# all lie in the output stores them without a test (block-uniform); the others test each pair, and store the half of
# one that lies in it.
# Measured on the H200 (tenth session, Qwen's [1, 8192, 2048] bf16, each line from one run):
# - 29.9-30.4 us at 256 positions x 16 channels, 128 threads, against 33.9-34.1 us for the lane-per-position root
#   (probe_session10_conv_pairs.json, probe_session10_conv_pairs_final.json); Nsight Compute at 128 x 32: 16.4 M
#   instructions issued (ncu/conv_pairs_first.txt) against the lane-per-position rows' 18.3 M;
# - a fill with conflict-free stores (16 / VEC vectors per position) together with per-vector flags instead of zero
#   vectors: slower at most layouts (31.7 against 29.9 us at the root's; probe_session10_conv_pairs_fill.json), with
#   56 registers and 52% of the warps resident in Nsight Compute;
# - skipping the rounds of the last, mostly empty tile (Qwen's ninth tile of 256 holds 3 outputs): 30.2 us both
#   ways; bounding the registers for 48 or 64 resident warps: 67.8 and 101.8 us, the spills dominate
#   (probe_session10_conv_skip_warps.json). Neither was kept;
# - four positions per lane (float4 reads, 8-byte stores, tiles shifted by up to 3) in a kernel generalised over the
#   positions per lane, its rows placed at offsets that make the fill conflict-free for any RS: timed against this
#   kernel alternately in one call (probe_session10_conv_lanes_ab.log), 30.4-30.6 us at four per lane and 31.1-31.2
#   us at two, against this kernel's 30.1-30.4 us. Its first build, with 64-bit remainders per stored element, ran
#   42 us (probe_session10_conv_lanes_ab_first.log). Not kept.

# Note [a warp per output row]
# Profiled on the H200 (ninth session, Nsight Compute, benchmarks/results/h200/ncu_session9.md), the best tile ran
# Qwen's conv issuing instructions in 70% of its cycles at 3.0 per cycle, with DRAM 27% busy: it was bound by
# instructions, about 50 per output (the tile's compute loop re-derives each output's channel and position with
# divisions, forms a 64-bit address per store, and reads each weight from shared memory per output). In ``rows``
# the block stores its tile as channel rows, s[TC][RS] floats, and its channels' weights and bias, and each warp
# takes whole channels: it reads the channel's K weights into registers once, then a lane per position computes
# RL = TL / 32 outputs at positions lane, lane + 32, ... from K consecutive row entries, and stores them through one
# row pointer with constant offsets. (Read from global memory at each channel instead, the weights' latency stalled
# every warp: Nsight Compute's largest share of stall samples.) Consecutive lanes read consecutive floats (no bank
# conflicts) and store consecutive positions (coalesced). Every thread issues all its loads of the tile (PER of
# them) before it stores any into shared memory, so they are in flight together rather than one load's latency at
# a time. The load puts a warp on 4 vectors of ``vec`` channels at each of 8 positions (whole 32-byte sectors of the
# channels-fast input); its lanes write rows (v * VEC + u) at column j, banks ((v * VEC + u) * RS + j) % 32, and with
# RS odd the four vectors' rows start 8 * RS apart, on distinct multiples of 8 banks, so the 8 positions x 4 vectors
# hit 32 banks. Needs the output's positions to be its unit-stride dim (Qwen's [1, 8192, 2051]) and vector loads.


# Note [the next tile's loads in flight]
# Nsight Compute on the H200 (ninth session) found the warp rows waiting on their global loads (long scoreboard
# stalls on the loaded registers: the largest share of the stall samples) with the DRAM 28-32% busy: a block loads
# its tile, waits at the barrier, then computes and stores with no load of its own in flight, and the few blocks per
# SM that shared memory allows do not cover that. With ``steps`` a block walks that many consecutive position tiles
# of its channels: it issues the next tile's loads (into registers) right after it has put the current tile into
# shared memory, so they travel while the warps compute and store the current one. The grid has ``steps`` times
# fewer position tiles; the registers hold one more tile's vectors. Measured (ninth session, probe_conv_rows.json, one
# run): it lost, 38.7 us at best against the plain rows' 33.6 (62 registers against 48, fewer warps resident); it
# stays an action, not a seed.


# Note [vector loads of a channels-fast input]
# Qwen's input is a transposed view: channels are the unit-stride dim. With ``vec`` a thread loads ``vec``
# consecutive channels of one position in one access (16 bytes of bf16 at vec=8) instead of one element, so a
# warp moves the tile's rows with an eighth of the load instructions and more bytes in flight per thread. It needs
# the channel tile, C and the other input strides to be multiples of ``vec`` (every vector starts on a multiple of
# ``vec`` elements) and the input pointer aligned to the vector (the launcher's alignment check). The output keeps
# scalar stores: Qwen's [1, 8192, 2051] output rows start at odd element offsets.


# Note [channel tiles first]
# The grid's x dim (which the hardware schedules first) runs over position tiles by default: the blocks in flight
# at one time cover a few channel tiles at every position, and each reads 2 x TC bytes of a channels-fast row per
# position. With ``cfirst`` it runs over channel tiles: the blocks in flight read whole channels-fast rows at a few
# positions, and write TL-position pieces of every output row instead. On the H200 neither order won: Qwen's conv ran
# 38.8 us with channel tiles first, 39.1 us without (same tile, same run, probe_conv_cfirst.json).


def _tile_load(vec: int) -> str:
    """C++: the input tile with its halo into ``s`` (zero outside the input), along the input's fast dim."""
    if vec == 1:
        return """  for (int e = threadIdx.x; e < HALO * TC; e += NT) {
    const int i = XC_FAST ? e % TC : e / HALO, j = XC_FAST ? e / TC : e % HALO;  // along the input's fast dim
    const int c = c0 + i;
    const long long l = (long long)l0 - PAD + j;
    s[j][i] = c < C && l >= 0 && l < LIN ? to_f(x[n * XS0 + c * XS1 + l * XS2]) : 0.f;
  }"""
    return f"""  for (int e = threadIdx.x; e < HALO * (TC / {vec}); e += NT) {{  // {vec} channels per load
    const int i = (e % (TC / {vec})) * {vec}, j = e / (TC / {vec});
    const int c = c0 + i;
    const long long l = (long long)l0 - PAD + j;
    if (c < C && l >= 0 && l < LIN) {{
      const Pack<T, {vec}> v = ldp<T, {vec}>(x + n * XS0 + c + l * XS2);
#pragma unroll
      for (int u = 0; u < {vec}; ++u) s[j][i + u] = to_f(v.v[u]);
    }} else {{
#pragma unroll
      for (int u = 0; u < {vec}; ++u) s[j][i + u] = 0.f;
    }}
  }}"""


def _load_layout(span: str) -> str:
    """C++: how the warp rows' threads split the loads of ``span`` positions of a channels-fast tile (Note [a warp
    per output row])."""
    return f"""constexpr int VL = NV < 4 ? NV : 4, PL = 32 / VL, VCH = NV / VL, PCH = ({span} + PL - 1) / PL;
constexpr int PER = (PCH * VCH * 32 + NT - 1) / NT;  // loads per thread, all in flight before the first store"""


def _tile_loads(span: str, before: str, indent: str) -> str:
    """C++: every load of the tile's ``span`` positions into ``xv``, from input position l0 ``before`` - PAD on
    (zero outside the input), all issued before any is used."""
    return "\n".join(indent + line for line in f"""#pragma unroll
for (int t = 0; t < PER; ++t) {{
  const int e = threadIdx.x + t * NT, ln = e & 31, ch = e >> 5;
  const int v = (ch % VCH) * VL + ln / PL, j = (ch / VCH) * PL + ln % PL;
  const int c = c0 + v * VEC;
  const long long l = (long long)l0{before} - PAD + j;
  if (ch < PCH * VCH && j < {span} && c < C && l >= 0 && l < LIN) {{
    xv[t] = ldp<T, VEC>(x + n * XS0 + c + l * XS2);
  }} else {{
#pragma unroll
    for (int u = 0; u < VEC; ++u) xv[t].v[u] = from_f<T>(0.f);
  }}
}}""".split("\n")).replace(indent + "#pragma", "#pragma")


def _block_origin(first: str, per_block: str) -> str:
    """C++ after the tile's ``s``: the weights' ``ws``, the block's first position unit ``first`` (``per_block`` of
    them per block) and channel ``c0`` (Note [channel tiles first]), ``n``, lane and warp, and the loads' ``xv``."""
    return f"""  __shared__ float ws[TC][K + 1];  // the block's weights (and bias), read once from global memory
  // Note [channel tiles first]
  const int {first} = (CFIRST ? blockIdx.y : blockIdx.x) * {per_block}, c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  Pack<T, VEC> xv[PER];  // a warp's load: VL vectors at each of PL positions"""


def _block_weights(has_bias: bool) -> str:
    """C++: the block's channels' weights and bias into ``ws``, read once from global memory."""
    return f"""  for (int e = threadIdx.x; e < TC * (K + 1); e += NT) {{
    const int i = e / (K + 1), q = e % (K + 1), c = c0 + i;
    ws[i][q] = c >= C ? 0.f : q < K ? to_f(w[(long long)c * K + q]) : {"to_f(b[c])" if has_bias else "0.f"};
  }}"""


def rows_kernel(vec: int, rs: int, steps: int, has_bias: bool) -> str:
    """Note [a warp per output row]; ``steps`` position tiles per block, each tile's loads in flight while the one
    before it computes (Note [the next tile's loads in flight])."""
    return f"""
constexpr int VEC = {vec}, RS = {rs}, NW = NT / 32, RL = TL / 32, NV = TC / VEC, STEPS = {steps};
{_load_layout("HALO")}

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d_rows(PARAMS) {{
  __shared__ float s[TC][RS];  // channel rows of the input tile with its halo; RS odd (see the Note)
{_block_origin("lt0", "STEPS")}
  auto load = [&](int l0) {{
{_tile_loads("HALO", "", "    ")}
  }};
  load(lt0 * TL);  // the tile's loads first: the weights' below wait for their data before storing it
{_block_weights(has_bias)}
  for (int step = 0; step < STEPS; ++step) {{
    const int l0 = (lt0 + step) * TL;
    if (l0 >= LOUT) break;  // block-uniform
    if (step > 0) __syncthreads();  // every warp is done with the previous tile's rows
#pragma unroll
    for (int t = 0; t < PER; ++t) {{
      const int e = threadIdx.x + t * NT, ln = e & 31, ch = e >> 5;
      const int v = (ch % VCH) * VL + ln / PL, j = (ch / VCH) * PL + ln % PL;
      if (ch < PCH * VCH && j < HALO) {{
#pragma unroll
        for (int u = 0; u < VEC; ++u) s[v * VEC + u][j] = to_f(xv[t].v[u]);
      }}
    }}
    __syncthreads();
    if (step + 1 < STEPS && l0 + TL < LOUT) load(l0 + TL);  // in flight while this tile computes
    for (int i = warp; i < TC && c0 + i < C; i += NW) {{  // warp-uniform
      const int c = c0 + i;
      float wr[K];
#pragma unroll
      for (int q = 0; q < K; ++q) wr[q] = ws[i][q];
      const float bias = ws[i][K];
      const float* sr = s[i] + lane;
      TO* yr = y + n * YS0 + (long long)c * YS1 + l0 + lane;
      const int left = LOUT - l0 - lane;  // output r of this lane is below LOUT when r * 32 < left
#pragma unroll
      for (int r = 0; r < RL; ++r) {{
        if (r * 32 < left) {{
          float acc = bias;
#pragma unroll
          for (int q = 0; q < K; ++q) acc = fmaf(wr[q], sr[r * 32 + q], acc);
          yr[r * 32] = from_f<TO>(acc);
        }}
      }}
    }}
  }}
}}
"""
