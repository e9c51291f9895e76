"""The depthwise conv1d's ``lines`` strategy (Note [whole lines, 8 x 8 blocks turned in registers]): resident blocks
walk tiles of TC channels over a band of TP outputs, copy each tile's window of whole input lines into shared memory
ahead of it, and turn 8 x 8 blocks of it in registers into aligned 16-byte vectors of the contiguous output.
templates/conv.py dispatches to it; this module holds its knobs, validity, sizes and source.
"""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from ...contract import NUM_SMS, Candidate
from .common import ITEMSIZE, PREAMBLE, SMS, align_of, cdiv, consts, flag_knob, input_spec, launch, make_candidate, \
    output_spec, scale_knob, typedefs
from .conv_shared import STORE16, blocks_per_sm, channels_fast, contiguous_output, conv_params, dims
from .target import smem_limit

# Note [whole lines, 8 x 8 blocks turned in registers]
# ``bands`` (Note [channel rows over a band of positions] in conv_bands.py) scatters each 16-byte load of VEC
# channels into VEC channel rows of shared memory, one 2-byte store an element, and reads a row's vector back at the
# row's phase, a run-time shift. Here the window stays in the input's own layout: a tile's TP + K + 6 input
# positions of TC channels (TC * 2 bytes, whole 128-byte lines at TC = 64) come by 16-byte ``cp.async`` copies
# (zero-filled outside the input), their chunks swizzled by the position's group of 8 so that eight lanes on eight
# consecutive groups read eight different chunks. A work item is 8 channels (one chunk) by 8 outputs of each: its
# thread loads the 14 + K window lines the 8 phases need (one 16-byte shared load each), and channel q of the chunk,
# whose row starts at phase ph = q * L_out % 8 of a vector (C is a multiple of 8, so the phase is q's, a constant of
# the unrolled loop), takes the 7 + K inputs from line 7 - ph on: every index is a compile-time constant, so the turn
# costs no instruction beyond the inputs' widening. Its 8 outputs, positions b * TP - ph + 8 g ... + 7, are one
# aligned 16-byte vector of the flat output, stored whole, the lanes of a warp on consecutive g (512 contiguous bytes
# of one row a store); only a vector that holds a neighbouring row's elements (a row's first or last) goes out element
# by element. Blocks are resident (a grid of ``num_sms`` times the blocks an SM holds) and walk the tiles with the
# next STAGES - 1 tiles' copies in flight; the bands run fastest (``cfirst``: the channel tiles).
# tests/test_conv_lines.py models the index arithmetic in numpy on the CPU.
# Measured on the H200 (fifty-first session, benchmarks/probe_transpose.py, Qwen's [1, 8192, 2048] bf16 into rows
# of 2051; results/h200/probe_session51_transpose*.json, each contender timed in turn in one run):
# - a plain transpose of the same bytes in this layout (no arithmetic, rows of 2048) ran 18.0 us by events (87% of
#   the copy bandwidth), faster than a copy of the bytes (18.4 us) and than Inductor's transpose (19.6 us); Inductor's
#   transpose into rows of 2051 27.0-28.0 us;
# - the conv, TP 128, 256 threads, 3 stages: 19.8 and 20.1 us (79.3% and 78.4%) in two runs, against the bands
#   root's 21.8 (72%) in the same runs; 4-6 stages 20.3-20.7, 2 stages 20.4; TP 256 21.0; TP 64 30.9; the channel
#   tiles first 20.8-21.9; 3 blocks an SM forced by the register bound (spilling) 21.1-25.5; 128 threads 20.5, 512
#   23.8. The tile's 18 lines take 72 registers: two blocks an SM.
# Four outputs a work item (``vo`` 4; the description above is ``vo`` 8): the phases are taken mod 4, the window
# starts PAD + 3 positions before the band and holds TP + K + 2 lines, the chunks are swizzled by the position's
# group of 4 (eight lanes on consecutive g still read eight different chunks), a work item holds 2 VO + K - 2 = 6 + K
# lines, and its outputs go out as one aligned 8-byte store (a warp's lanes on 256 contiguous bytes of a row). What
# it buys, on paper: at Qwen's K 4 its 10 lines take 40 registers (ptxas: 80 a thread, no spills, where ``vo`` 8 takes
# 110), so three blocks of 256 threads fit an SM where ``vo`` 8 fits two; and a tile of TP 128 by TC 64 has 256 work
# items, one for each thread of such a block, where ``vo`` 8 has 128 and leaves half the threads idle between the
# copies. It costs twice the store instructions and 11% more shared loads an output (10 lines for 4 outputs against
# 18 for 8). Measured on an H100 only (fifty-fourth session, results/h100/probe_session54_lines.*, one run): slower
# than its ``vo`` 8 twin in each of the 14 layouts, by 1.0-7.3 us (the root's twin 25.2 us against 23.5); the search
# still weighs it, one action from the root.
# The weights (fifty-second session): a channel's K taps were K 2-byte shared loads, 32 a work item
# at K 4, more than its line loads. They are now read as the 32-bit words of the chunk's 8 x K weights, every index
# a constant of the unrolled loops, and NVVM joins a channel's words into one 8-byte load at K 4 (PTX: 8
# ``ld.shared.v2`` a work item where there were 32 ``ld.shared.u16``; the same registers).
# Bands balanced over the grid (fifty-fourth session): the blocks walk the tiles in turns of the grid, so the
# busiest block takes ceil(tiles / grid) of them. Qwen's rows of 2051 outputs need 17 bands of 128 (the last holds at
# most 10 of a row's outputs) and 128 channel tiles: 2176 tiles over the 264 blocks of two an SM is 8.24 a block, and
# 64 blocks take a ninth. A band may be any multiple of 8 from 64 to 256 outputs (every index above needs only TP a
# multiple of VO): ``balanced_tp`` picks the one whose busiest block moves the fewest window and output lines
# (``tile_load``), 208 at Qwen's conv (10 bands, 1280 tiles, 4.85 a block, five at most; ptxas: 110 registers and no
# spills, as at 128). An action, not the root: not yet timed on any GPU (on the H100, this session, results/h100/,
# the root ran at 94% of the copy bandwidth); the H200 decides (benchmarks/plans/conv_bands_balanced.sh).

LINES_KEYS = frozenset({"strategy", "tp", "tc", "block", "stages", "cfirst", "vo"})
MAX_K = 8  # lines a work item holds: 2 VO + K - 2, four registers each
TP_RANGE = range(64, 257, 8)  # outputs of a band: a multiple of 8 (of VO, which keeps the stores aligned)


def halo(card: OperatorCard, p: dict[str, Any]) -> int:
    """Input positions a tile's window starts before its band: the padding and the latest phase's VO - 1."""
    return dims(card)[5] + p["vo"] - 1


def window_rows(card: OperatorCard, p: dict[str, Any]) -> int:
    """Input positions of one tile's window: its TP outputs, the VO - 1 of the earliest phase, the K - 1 of the
    halo."""
    return p["tp"] + dims(card)[4] + p["vo"] - 2


def item_lines(card: OperatorCard, p: dict[str, Any]) -> int:
    """Window lines one work item holds: its VO outputs, each of VO phases' K - 1 more and VO - 1 earlier."""
    return 2 * p["vo"] + dims(card)[4] - 2


def bands(card: OperatorCard, p: dict[str, Any]) -> int:
    """Bands of a row: every phase's last band must reach L_out (a band starts up to VO - 1 outputs early)."""
    return cdiv(dims(card)[3] + p["vo"] - 1, p["tp"])


def stage_chunks(card: OperatorCard, p: dict[str, Any]) -> int:
    """16-byte chunks of one stage: the window, then the TC channels' K weights, then their biases if any."""
    k = dims(card)[4]
    has_bias = input_spec(card, "bias") is not None
    return window_rows(card, p) * (p["tc"] // 8) + p["tc"] * k * 2 // 16 + (p["tc"] * 2 // 16 if has_bias else 0)


def smem_bytes(card: OperatorCard, p: dict[str, Any]) -> int:
    return p["stages"] * stage_chunks(card, p) * 16


def regs(card: OperatorCard, p: dict[str, Any]) -> int:
    """A thread's registers, about: the work item's lines (four each) and 32 more."""
    return 4 * item_lines(card, p) + 32


def resident(card: OperatorCard, p: dict[str, Any]) -> int:
    """Blocks an SM holds at once, by shared memory and registers: the grid is ``num_sms`` times this."""
    return blocks_per_sm(smem_bytes(card, p), p["block"], regs(card, p))


def tiles(card: OperatorCard, p: dict[str, Any]) -> int:
    n, c = dims(card)[:2]
    return n * (c // p["tc"]) * bands(card, p)


def defaults(card: OperatorCard) -> dict[str, Any]:
    """128-byte lines (64 channels) over bands of 128 outputs, 256 threads, three stages (two tiles' copies ahead):
    the fastest of the fifty-first session's probe (Note [whole lines, 8 x 8 blocks turned in registers]), 8
    outputs a work item."""
    return {"strategy": "lines", "tp": 128, "tc": 64, "block": 256, "stages": 3, "vo": 8}


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    """A 16-bit channels-fast input whose lines are 16-byte aligned, a contiguous output of the same type, whole
    chunks of 8 channels in whole tiles, at most MAX_K taps, weights (and biases) that move as 16-byte chunks, and
    stages that fit in shared memory."""
    if set(p) - LINES_KEYS or p.get("strategy") != "lines":
        return False
    n, c, _, _, k, _ = dims(card)
    x, w, b, y = (input_spec(card, "input"), input_spec(card, "weight"), input_spec(card, "bias"),
                  output_spec(card, 0))
    if ITEMSIZE[x.dtype] != 2 or y.dtype != x.dtype or not channels_fast(card) or not contiguous_output(card):
        return False
    if x.stride[0] % 8 or x.stride[2] % 8 or k > MAX_K:
        return False
    tc, tp = p.get("tc"), p.get("tp")
    if tc not in (64, 128) or c % tc or tp not in TP_RANGE or p.get("block") not in (128, 256):
        return False
    if p.get("stages") not in (2, 3, 4, 5, 6) or p.get("cfirst") not in (None, True) or p.get("vo") not in (4, 8):
        return False
    if w.offset_align % 16 or (b is not None and b.offset_align % 16):
        return False
    return smem_bytes(card, p) <= smem_limit(card) and tiles(card, p) < 2**31 and n * c < 2**31


def tile_load(card: OperatorCard, p: dict[str, Any]) -> int:
    """Lines the busiest block moves (Note [whole lines, 8 x 8 blocks turned in registers], bands balanced): its
    ceil(tiles / grid) tiles, each a window of TP + K + VO - 2 input lines and TP output lines, the grid ``SMS``
    times the resident blocks."""
    return cdiv(tiles(card, p), SMS * resident(card, p)) * (window_rows(card, p) + p["tp"])


def balanced_tp(card: OperatorCard, p: dict[str, Any]) -> int:
    """The band (in TP_RANGE) of the least ``tile_load`` among the valid ones, ties to the wider band; ``p``'s own
    if none is valid."""
    fits = [t for t in TP_RANGE if valid(card, {**p, "tp": t})]
    return min(fits, key=lambda t: (tile_load(card, {**p, "tp": t}), -t)) if fits else p["tp"]


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    stages = [(f"stages {p['stages']} -> {s}", {**p, "stages": s}) for s in (p["stages"] - 1, p["stages"] + 1)]
    tp = balanced_tp(card, p)
    balanced = [(f"tp {p['tp']} -> {tp} (bands balanced over the grid)", {**p, "tp": tp})]
    return (scale_knob(p, "vo") + scale_knob(p, "tp") + balanced + scale_knob(p, "tc") + scale_knob(p, "block")
            + stages + [flag_knob(p, "cfirst")])


KERNEL = r"""
// NR: window lines of one work item, WROWS: of one tile, which starts HB positions before its band; NB: bands a row
constexpr int CPR = TC / 8;                          // 16-byte chunks of a window line
constexpr int G = TP / VO;                           // output vectors of one row's band
constexpr int WCH = TC * K * 2 / 16, BCH = HAS_BIAS ? TC * 2 / 16 : 0;
constexpr int STAGE = WROWS * CPR + WCH + BCH;       // 16-byte chunks of one stage
constexpr int NCT = C / TC;
constexpr long long NTILES = (long long)NS * NCT * NB;

__device__ __forceinline__ void cp16(void* smem, const void* gmem, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"((unsigned)__cvta_generic_to_shared(smem)), "l"(gmem), "r"(bytes) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// element h (0 or 1) of a 32-bit word of two 16-bit elements, widened
__device__ __forceinline__ float half_of(unsigned v, int h) {
  if constexpr (IS_BF16) return __uint_as_float(h ? (v & 0xffff0000u) : (v << 16));
  else return __half2float(__ushort_as_half((unsigned short)(h ? v >> 16 : v & 0xffffu)));
}

__device__ __forceinline__ void coords(long long t, long long& n, int& c0, int& b) {
  long long rest;
  if (CFIRST) { c0 = (int)(t % NCT) * TC; rest = t / NCT; b = (int)(rest % NB); n = rest / NB; }
  else { b = (int)(t % NB); rest = t / NB; c0 = (int)(rest % NCT) * TC; n = rest / NCT; }
}

// the tile's window (lines b * TP - HB ...), its weights and biases, as one group of copies
__device__ __forceinline__ void load_tile(uint4* st, const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ bias, long long n, int c0, int b) {
  const int q0 = b * TP - HB;
  for (int i = threadIdx.x; i < WROWS * CPR; i += NT) {
    const int r = i / CPR, k = i % CPR, q = q0 + r;
    const bool in = q >= 0 && q < LIN;
    cp16(st + r * CPR + (k ^ (((unsigned)r / VO) & 7)), x + n * XS0 + (long long)(in ? q : 0) * XS2 + c0 + 8 * k,
         in ? 16 : 0);
  }
  for (int i = threadIdx.x; i < WCH + BCH; i += NT) {
    if (i < WCH) cp16(st + WROWS * CPR + i, w + (long long)c0 * K + 8 * i, 16);
    else cp16(st + WROWS * CPR + i, bias + c0 + 8 * (i - WCH), 16);
  }
}

// VO outputs of a 16-bit type as one aligned vector store (16 or 8 bytes)
template <typename U> __device__ __forceinline__ void store_vo(U* p, const float* a) {
  if constexpr (VO == 8) store16(p, a);
  else asm volatile("st.global.v2.b32 [%0], {%1, %2};"
                    :: "l"(p), "r"(pair_bits(a[0], a[1], p)), "r"(pair_bits(a[2], a[3], p)) : "memory");
}

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending
__device__ __forceinline__ void conv_tile(const uint4* st, TO* __restrict__ y, long long n, int c0, int b) {
  const T* ws = reinterpret_cast<const T*>(st + WROWS * CPR);
  for (int it = threadIdx.x; it < CPR * G; it += NT) {
    const int g = it % G, k = it / G;
    const unsigned* const wc = reinterpret_cast<const unsigned*>(ws) + 4 * K * k;  // chunk k's 8 x K weights
    unsigned r[NR][4];                               // window lines VO g ... VO g + NR - 1 of chunk k
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int row = VO * g + i;
      const uint4 v = st[row * CPR + (k ^ (((unsigned)row / VO) & 7))];
      r[i][0] = v.x; r[i][1] = v.y; r[i][2] = v.z; r[i][3] = v.w;
    }
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int ph = (int)(((long long)q * LOUT) % VO);  // the row's phase: c0 + 8 k is a multiple of 8
      const int ci = 8 * k + q;
      float wk[K], in[VO - 1 + K], o[VO];
#pragma unroll
      for (int j = 0; j < K; ++j) wk[j] = half_of(wc[(q * K + j) >> 1], (q * K + j) & 1);
      float b0 = 0.f;
      if constexpr (HAS_BIAS)                        // the tile's biases follow its weights
        b0 = half_of(reinterpret_cast<const unsigned*>(ws + TC * K)[4 * k + (q >> 1)], q & 1);
#pragma unroll
      for (int j = 0; j < VO - 1 + K; ++j) in[j] = half_of(r[VO - 1 - ph + j][q >> 1], q & 1);
#pragma unroll
      for (int i = 0; i < VO; ++i) {
        float a = b0;
#pragma unroll
        for (int j = 0; j < K; ++j) a = fmaf(wk[j], in[i + j], a);
        o[i] = a;
      }
      const int t0 = b * TP - ph + VO * g;           // the row's output of o[0]
      TO* const yp = y + (n * C + c0 + ci) * (long long)LOUT + t0;  // 2 VO-byte aligned: the Note
      if (t0 >= 0 && t0 + VO <= LOUT) {
        store_vo(yp, o);
      } else if (t0 < LOUT) {                        // the row's first or last vector: the rest is a neighbour's
#pragma unroll
        for (int i = 0; i < VO; ++i)
          if (t0 + i >= 0 && t0 + i < LOUT) yp[i] = from_f<TO>(o[i]);
      }
    }
  }
}

extern "C" __global__ __launch_bounds__(NT, MINB) void dwconv1d_lines(PARAMS) {
  extern __shared__ __align__(128) uint4 st[];
  long long n;
  int c0, bd;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {             // the first tiles' copies, a group each (empty past the end)
    const long long t = blockIdx.x + (long long)s * gridDim.x;
    if (t < NTILES) { coords(t, n, c0, bd); load_tile(st + s * STAGE, x, w, BIAS_PTR, n, c0, bd); }
    commit();
  }
  int slot = 0;
  for (long long t = blockIdx.x; t < NTILES; t += gridDim.x) {
    const long long ahead = t + (long long)(STAGES - 1) * gridDim.x;
    const int fill = slot == 0 ? STAGES - 1 : slot - 1;  // the slot the previous tile used
    if (ahead < NTILES) { coords(ahead, n, c0, bd); load_tile(st + fill * STAGE, x, w, BIAS_PTR, n, c0, bd); }
    commit();
    asm volatile("cp.async.wait_group %0;" :: "n"(STAGES - 1) : "memory");
    __syncthreads();
    coords(t, n, c0, bd);
    conv_tile(st + slot * STAGE, y, n, c0, bd);
    __syncthreads();                                 // the slot is refilled next round
    slot = slot == STAGES - 1 ? 0 : slot + 1;
  }
}
"""


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    """Note [whole lines, 8 x 8 blocks turned in registers]: ``num_sms`` times the resident blocks, walking the
    tiles."""
    n, c, l_in, l_out, k, pad = dims(card)
    x, w, y = input_spec(card, "input"), input_spec(card, "weight"), output_spec(card, 0)
    b = input_spec(card, "bias")
    params, args = conv_params(card)
    head = f"""{PREAMBLE}
{typedefs(T=x.dtype, TO=y.dtype)}
{consts(C=c, LIN=l_in, LOUT=l_out, K=k, PAD=pad, NS=n, NT=p["block"], TC=p["tc"], TP=p["tp"], STAGES=p["stages"],
        VO=p["vo"], NR=item_lines(card, p), WROWS=window_rows(card, p), HB=halo(card, p), NB=bands(card, p),
        MINB=resident(card, p), HAS_BIAS=int(b is not None), CFIRST=int(bool(p.get("cfirst"))),
        IS_BF16=int(x.dtype == "bfloat16"))}
constexpr long long XS0 = {x.stride[0]}LL, XS2 = {x.stride[2]}LL;
"""
    source = head + STORE16 + KERNEL.replace("PARAMS", params).replace("BIAS_PTR", "b" if b is not None else "w")
    desc = f"depthwise conv1d k={k} lines tc={p['tc']} tp={p['tp']} block={p['block']} stages={p['stages']} " \
        f"(input channels-fast, 8x{p['vo']} blocks turned in registers)" + \
        (" channel tiles first" if p.get("cfirst") else "")
    grid = f"{NUM_SMS} * {resident(card, p)}"
    specs = [x, w, y] + ([b] if b is not None else [])
    return make_candidate(source, [launch("dwconv1d_lines", grid, p["block"], args, smem=smem_bytes(card, p))],
                          desc, p, align_of(8, specs))
