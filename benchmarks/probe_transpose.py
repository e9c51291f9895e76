"""How fast can the causal conv1d's bytes be transposed on this GPU? (issue 4's last target: the conv row's bar)

    python benchmarks/probe_transpose.py [--out DIR] [--rounds 2]

Qwen 3.5's causal conv1d reads [2048, 8192] bf16 with the channels fast and writes [8192, 2051]: every output row
is a column of the input. Its bar (80% of the copy bandwidth by events) is 19.75 us; Inductor's transpose of the
same bytes ran 19.5-19.7 us in earlier sessions, and the templates' layouts with their arithmetic left out 20.7-21.0
(Note [channel rows over a band of positions] in templates/conv_bands.py). Those numbers bound the conv only if
nothing transposes faster, so this probe times hand-written transposes of [2048, 8192] bf16 into [8192, 2048] beside
a copy of the same bytes and Inductor's transposes, in one run, with the project's timer (forge_backend.measure:
events around one call after an L2 flush, and the profiler's kernel time):

* ``tile``: a block takes TP positions by TC channels. Its loads are 16-byte ``cp.async`` copies of whole runs of
  TC channels (TC * 2 bytes of each position's row) into a shared tile whose 16-byte chunks are swizzled by the
  position's group of 8; each thread then reads an 8 x 8 block (8 positions of 8 channels, eight 16-byte shared
  loads, conflict-free), transposes it in registers (32 byte permutes) and stores 8 vectors of 8 positions, one per
  channel, the lanes of a warp along the positions (32 x 16 contiguous bytes of one output row a store).
  ``order``: the grid walks the channel tiles first (neighbouring blocks read neighbouring runs of one row) or the
  position tiles first (neighbouring blocks write neighbouring runs of one output row).
* ``persist``: the same tiles, one block per SM walking them with ``stages`` tiles' copies in flight.

Every kernel's output is checked against ``x.t()`` before it is timed. The table prints last; the JSON keeps every
number. A development probe, not part of the product.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

L, C = 2048, 8192  # positions, channels: Qwen 3.5's conv input as it is in memory

COMMON = r"""
#define DEV __device__ __forceinline__
DEV void cp16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
               :: "r"((unsigned)__cvta_generic_to_shared(smem)), "l"(gmem) : "memory");
}
DEV void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> DEV void wait_groups() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

// TP positions x TC channels of x [L, C] (bf16 as 16-bit words) into the swizzled tile
DEV void load_tile(uint4* tile, const unsigned short* __restrict__ x, int c0, int p0) {
  constexpr int CPR = TC / 8;
  for (int i = threadIdx.x; i < TP * CPR; i += NT) {
    const int p = i / CPR, k = i % CPR;
    cp16(tile + p * CPR + (k ^ ((p >> 3) & 7)), x + (size_t)(p0 + p) * C_ + c0 + 8 * k);
  }
}

// the tile, transposed, into y [C, L]: an 8 x 8 block a work item, the lanes along the positions
DEV void store_tile(const uint4* tile, unsigned short* __restrict__ y, int c0, int p0) {
  constexpr int CPR = TC / 8, G = TP / 8;
  for (int it = threadIdx.x; it < CPR * G; it += NT) {
    const int g = it % G, k = it / G;
    unsigned r[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint4 v = tile[(8 * g + i) * CPR + (k ^ (g & 7))];
      r[i][0] = v.x; r[i][1] = v.y; r[i][2] = v.z; r[i][3] = v.w;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint4 lo, hi;
      lo.x = __byte_perm(r[0][q], r[1][q], 0x5410); hi.x = __byte_perm(r[0][q], r[1][q], 0x7632);
      lo.y = __byte_perm(r[2][q], r[3][q], 0x5410); hi.y = __byte_perm(r[2][q], r[3][q], 0x7632);
      lo.z = __byte_perm(r[4][q], r[5][q], 0x5410); hi.z = __byte_perm(r[4][q], r[5][q], 0x7632);
      lo.w = __byte_perm(r[6][q], r[7][q], 0x5410); hi.w = __byte_perm(r[6][q], r[7][q], 0x7632);
      const int c = c0 + 8 * k + 2 * q;
      *reinterpret_cast<uint4*>(y + (size_t)c * L_ + p0 + 8 * g) = lo;
      *reinterpret_cast<uint4*>(y + (size_t)(c + 1) * L_ + p0 + 8 * g) = hi;
    }
  }
}

extern "C" __global__ void __launch_bounds__(NT) tile_tr(const unsigned short* __restrict__ x,
                                                          unsigned short* __restrict__ y) {
  extern __shared__ __align__(128) uint4 tile[];
  constexpr int NCT = C_ / TC, NPT = L_ / TP;
  const int b = blockIdx.x;
  const int ct = CH_FIRST ? b % NCT : b / NPT, pt = CH_FIRST ? b / NCT : b % NPT;
  load_tile(tile, x, ct * TC, pt * TP);
  commit();
  wait_groups<0>();
  __syncthreads();
  store_tile(tile, y, ct * TC, pt * TP);
}

extern "C" __global__ void __launch_bounds__(NT) persist_tr(const unsigned short* __restrict__ x,
                                                             unsigned short* __restrict__ y) {
  extern __shared__ __align__(128) uint4 tile[];
  constexpr int NCT = C_ / TC, NPT = L_ / TP, TILE = TP * TC / 8;
  const int ntiles = NCT * NPT;
  auto coords = [&](int t, int& c0, int& p0) {
    const int ct = CH_FIRST ? t % NCT : t / NPT, pt = CH_FIRST ? t / NCT : t % NPT;
    c0 = ct * TC; p0 = pt * TP;
  };
  int c0, p0;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {  // the first tiles' copies, one group each (empty past the end)
    const int t = blockIdx.x + s * gridDim.x;
    if (t < ntiles) { coords(t, c0, p0); load_tile(tile + s * TILE, x, c0, p0); }
    commit();
  }
  for (int n = 0, t = blockIdx.x; t < ntiles; ++n, t += gridDim.x) {
    const int ahead = t + (STAGES - 1) * gridDim.x;
    if (ahead < ntiles) { coords(ahead, c0, p0); load_tile(tile + ((n + STAGES - 1) % STAGES) * TILE, x, c0, p0); }
    commit();
    wait_groups<STAGES - 1>();
    __syncthreads();
    coords(t, c0, p0);
    store_tile(tile + (n % STAGES) * TILE, y, c0, p0);
    __syncthreads();  // the slot is refilled next round
  }
}
// ---- the causal conv1d itself: y [C_, LO_] from x [L_, C_] and w [C_, 4] (bf16), LO_ = L_ + 3 -------------------
// Row c's band b covers positions b * TP - ph ... b * TP - ph + TP - 1, ph = (c * LO_) % 8: its vectors of 8 are
// 16-byte aligned in the flat output. A vector holding a neighbouring row's elements is stored element by element.
DEV void cp16z(void* smem, const void* gmem, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"((unsigned)__cvta_generic_to_shared(smem)), "l"(gmem), "r"(bytes) : "memory");
}
constexpr int WROWS = TP + 16;  // the window: positions b * TP - 16 ... b * TP + TP - 1
constexpr int STAGE = WROWS * (TC / 8) + TC / 2;  // 16-byte chunks a stage: the window, then TC x 4 weights

DEV void load_band(uint4* st, const unsigned short* __restrict__ x, const unsigned short* __restrict__ w,
                   int c0, int b) {
  constexpr int CPR = TC / 8;
  const int q0 = b * TP - 16;
  for (int i = threadIdx.x; i < WROWS * CPR; i += NT) {
    const int r = i / CPR, k = i % CPR, q = q0 + r;
    const bool in = q >= 0 && q < L_;
    cp16z(st + r * CPR + (k ^ ((r >> 3) & 7)), x + (size_t)(in ? q : 0) * C_ + c0 + 8 * k, in ? 16 : 0);
  }
  for (int i = threadIdx.x; i < TC / 2; i += NT) cp16(st + WROWS * CPR + i, w + (size_t)c0 * 4 + 8 * i);
}

DEV float lo16(unsigned v) { return __uint_as_float(v << 16); }
DEV float hi16(unsigned v) { return __uint_as_float(v & 0xffff0000u); }
DEV unsigned pack2(float a, float b) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
  return r;
}

DEV void conv_band(const uint4* st, unsigned short* __restrict__ y, int c0, int b) {
  constexpr int CPR = TC / 8, G = TP / 8;
  const uint2* wt = reinterpret_cast<const uint2*>(st + WROWS * CPR);
  for (int it = threadIdx.x; it < CPR * G; it += NT) {
    const int g = it % G, k = it / G;
    unsigned r[18][4];  // window rows 8g + 6 ... 8g + 23, the chunk's 8 channels
#pragma unroll
    for (int i = 0; i < 18; ++i) {
      const int row = 8 * g + 6 + i;
      const uint4 v = st[row * CPR + (k ^ ((row >> 3) & 7))];
      r[i][0] = v.x; r[i][1] = v.y; r[i][2] = v.z; r[i][3] = v.w;
    }
#pragma unroll
    for (int qq = 0; qq < 8; ++qq) {
      const int ph = (qq * (LO_ % 8)) % 8;
      const uint2 wv = wt[8 * k + qq];
      const float w0 = lo16(wv.x), w1 = hi16(wv.x), w2 = lo16(wv.y), w3 = hi16(wv.y);
      float in[11];
#pragma unroll
      for (int j = 0; j < 11; ++j) {  // output i at window row 16 - ph + 8g + i reads rows 13 - ph + 8g + i + 0..3
        const unsigned v = r[7 - ph + j][qq >> 1];
        in[j] = (qq & 1) ? hi16(v) : lo16(v);
      }
      float o[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] = fmaf(w3, in[i + 3], fmaf(w2, in[i + 2], fmaf(w1, in[i + 1], w0 * in[i])));
      const int c = c0 + 8 * k + qq;
      const int t0 = b * TP - ph + 8 * g;
      unsigned short* dst = y + (size_t)c * LO_ + t0;
      if (t0 >= 0 && t0 + 8 <= LO_) {
        *reinterpret_cast<uint4*>(dst) = make_uint4(pack2(o[0], o[1]), pack2(o[2], o[3]), pack2(o[4], o[5]),
                                                    pack2(o[6], o[7]));
      } else if (t0 < LO_) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (t0 + e >= 0 && t0 + e < LO_) dst[e] = (unsigned short)(pack2(o[e], 0.f) & 0xffffu);
      }
    }
  }
}

constexpr int NBANDS = (LO_ + 7 + TP - 1) / TP;

extern "C" __global__ void __launch_bounds__(NT) conv_tile(const unsigned short* __restrict__ x,
    const unsigned short* __restrict__ w, unsigned short* __restrict__ y) {
  extern __shared__ __align__(128) uint4 st[];
  constexpr int NCT = C_ / TC;
  const int t = blockIdx.x;
  const int ct = CH_FIRST ? t % NCT : t / NBANDS, b = CH_FIRST ? t / NCT : t % NBANDS;
  load_band(st, x, w, ct * TC, b);
  commit();
  wait_groups<0>();
  __syncthreads();
  conv_band(st, y, ct * TC, b);
}

extern "C" __global__ void __launch_bounds__(NT, MINB) conv_persist(const unsigned short* __restrict__ x,
    const unsigned short* __restrict__ w, unsigned short* __restrict__ y) {
  extern __shared__ __align__(128) uint4 st[];
  constexpr int NCT = C_ / TC;
  const int ntiles = NCT * NBANDS;
  auto coords = [&](int t, int& c0, int& b) {
    c0 = (CH_FIRST ? t % NCT : t / NBANDS) * TC;
    b = CH_FIRST ? t / NCT : t % NBANDS;
  };
  int c0, b;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    const int t = blockIdx.x + s * gridDim.x;
    if (t < ntiles) { coords(t, c0, b); load_band(st + s * STAGE, x, w, c0, b); }
    commit();
  }
  for (int n = 0, t = blockIdx.x; t < ntiles; ++n, t += gridDim.x) {
    const int ahead = t + (STAGES - 1) * gridDim.x;
    if (ahead < ntiles) { coords(ahead, c0, b); load_band(st + ((n + STAGES - 1) % STAGES) * STAGE, x, w, c0, b); }
    commit();
    wait_groups<STAGES - 1>();
    __syncthreads();
    coords(t, c0, b);
    conv_band(st + (n % STAGES) * STAGE, y, c0, b);
    __syncthreads();
  }
}
"""


def source(tp: int, tc: int, nt: int, ch_first: bool, stages: int = 1, minb: int = 1) -> str:
    return (f"#define MINB {minb}\n#define TP {tp}\n#define TC {tc}\n#define NT {nt}\n#define CH_FIRST {int(ch_first)}\n"
            f"#define STAGES {stages}\n#define L_ {L}\n#define C_ {C}\n#define LO_ {L + 3}\n" + COMMON)


def variants(conv_only: bool = False) -> list[dict]:
    if conv_only:  # around the first run's best conv (persistent, positions first)
        out = []
        for tp in (64, 128):
            for stages in (3, 4, 5, 6):
                for minb in (1, 3):
                    out.append({"kernel": "conv_persist", "tp": tp, "tc": 64, "nt": 256, "ch_first": False,
                                "stages": stages, "minb": minb})
        out += [{"kernel": "conv_persist", "tp": 128, "tc": 64, "nt": nt, "ch_first": False, "stages": 4, "minb": 1}
                for nt in (128, 512)]
        return out
    out = []
    for tp in (64, 128, 256):
        for tc in (64, 128):
            for ch_first in (True, False):
                out.append({"kernel": "tile", "tp": tp, "tc": tc, "nt": 256, "ch_first": ch_first})
    for tp, tc in ((64, 64), (128, 64), (64, 128)):
        for stages in (2, 3, 4):
            for ch_first in (True, False):
                out.append({"kernel": "persist", "tp": tp, "tc": tc, "nt": 256, "ch_first": ch_first,
                            "stages": stages})
    for tp in (128, 256):
        for ch_first in (True, False):
            out.append({"kernel": "conv_tile", "tp": tp, "tc": 64, "nt": 256, "ch_first": ch_first})
            for stages in (2, 3):
                out.append({"kernel": "conv_persist", "tp": tp, "tc": 64, "nt": 256, "ch_first": ch_first,
                            "stages": stages})
    return out


def name(v: dict) -> str:
    s = f"{v['kernel']} tp{v['tp']} tc{v['tc']} nt{v['nt']} {'ch' if v['ch_first'] else 'pos'}-first"
    s += f" stages{v['stages']}" if "persist" in v["kernel"] else ""
    return s + (f" minb{v['minb']}" if v.get("minb", 1) > 1 else "")


def smem_bytes(v: dict) -> int:
    stages = v.get("stages", 1)
    if v["kernel"].startswith("conv"):
        return ((v["tp"] + 16) * v["tc"] * 2 + v["tc"] * 8) * stages
    return v["tp"] * v["tc"] * 2 * stages


def grid_of(v: dict, smem: int, sms: int) -> int:
    if v["kernel"] == "tile":
        return (C // v["tc"]) * (L // v["tp"])
    if v["kernel"] == "conv_tile":
        return (C // v["tc"]) * -(-(L + 3 + 7) // v["tp"])
    regs = -(-max(v.get("regs", 32), 1) // 8) * 8  # the allocation granule
    per_sm = max(1, min(8, (227 * 1024) // smem, 2048 // v["nt"], 65536 // (regs * v["nt"])))
    v["blocks_per_sm"] = per_sm
    return sms * per_sm


def kforge_conv(dev, cp, torch) -> dict:
    """The conv template's root for Qwen's signature, compiled, verified and launched as kforge does."""
    import probe_variants

    from forge_backend.runtime.launch import Launcher
    from forge_backend.runtime.nvrtc import compile_candidate
    from forge_backend.search.templates import family_for
    from forge_backend.verify import make_inputs, verify

    out = {}
    for case, card, _ in probe_variants.cases():
        if case != "causal_conv1d [1,8192,2048] bf16":
            continue
        fam = family_for(card)
        params = fam.root_params(card)
        cand = fam.generate(card, params)
        launcher = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, dev)
        report = verify(card, launcher.launch_into, launcher.allocate_outputs, dev)
        print(f"kforge root of {case}: {params} verifier {'ok' if report.ok else report.message}")
        inputs = make_inputs(card, "normal", 7, dev)
        out[f"kforge conv root ({params.get('strategy')})"] = ({"kernel": "kforge root", "params": params,
                                                              "verified": report.ok}, lambda: launcher(inputs))
        break
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=2, help="times each contender is timed, alternating")
    ap.add_argument("--conv-only", action="store_true", help="only the conv variants around the first run's best")
    args = ap.parse_args()
    import cupy as cp
    import torch

    from forge_backend.measure import Timer, measure_copy_bandwidth
    from harness import environment

    dev = torch.device("cuda", 0)
    timer = Timer(dev)
    bw = measure_copy_bandwidth(dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    x = torch.randn(L, C, device=dev, dtype=torch.bfloat16)
    want = x.t().contiguous()
    moved = 2 * x.numel() * x.element_size()
    floor_us = moved / (bw * 1e3)

    w = torch.randn(C, 1, 4, device=dev, dtype=torch.float32).to(torch.bfloat16)
    conv = lambda t, w: torch.nn.functional.conv1d(t.t()[None], w, padding=3, groups=C)  # noqa: E731
    want_conv = conv(x, w)[0]
    contenders: dict[str, tuple[dict, object]] = {}
    ys: dict[str, torch.Tensor] = {}
    for v in variants(args.conv_only):
        smem = smem_bytes(v)
        if smem > 227 * 1024:
            continue
        is_conv = v["kernel"].startswith("conv")
        mod = cp.RawModule(code=source(v["tp"], v["tc"], v["nt"], v["ch_first"], v.get("stages", 1), v.get("minb", 1)),
                           options=("--gpu-architecture=sm_90", "-std=c++17"))
        fn = mod.get_function({"tile": "tile_tr", "persist": "persist_tr"}.get(v["kernel"], v["kernel"]))
        fn.max_dynamic_shared_size_bytes = smem
        v["regs"] = fn.num_regs
        y = torch.empty((C, L + 3) if is_conv else (C, L), device=dev, dtype=torch.bfloat16)
        grid = grid_of(v, smem, sms)
        ptrs = (cp.uint64(x.data_ptr()),) + ((cp.uint64(w.data_ptr()),) if is_conv else ()) + (cp.uint64(y.data_ptr()),)

        def run(fn=fn, grid=grid, smem=smem, ptrs=ptrs, nt=v["nt"]) -> None:
            with cp.cuda.ExternalStream(torch.cuda.current_stream(dev).cuda_stream):
                fn((grid,), (nt,), ptrs, shared_mem=smem)

        y.fill_(float("nan"))
        run()
        torch.cuda.synchronize(dev)
        if is_conv:
            diff = (y.float() - want_conv.float()).abs()
            v["max_abs_diff"] = float(diff.nan_to_num(float("inf")).max())
            v["ok"] = bool(torch.allclose(y.float(), want_conv.float(), rtol=1e-2, atol=1e-2))
        else:
            v["ok"] = bool(torch.equal(y, want))
        if not v["ok"]:
            print(f"WRONG: {name(v)} {v.get('max_abs_diff', '')}")
            continue
        contenders[name(v)] = (v, run)
        ys[name(v)] = y
    contenders.update(kforge_conv(dev, cp, torch))

    yc = torch.empty_like(x)
    contenders["copy (torch copy_)"] = ({"kernel": "copy"}, lambda: yc.copy_(x))
    tr = torch.compile(lambda t: t.t().contiguous())
    tr_pad = torch.compile(lambda t: torch.nn.functional.pad(t.t(), (0, 3)))  # rows of 2051, as the conv's output
    for f in (tr, tr_pad):
        f(x)
    contenders["inductor transpose"] = ({"kernel": "inductor"}, lambda: tr(x))
    contenders["inductor transpose into rows of 2051"] = ({"kernel": "inductor", "rows": 2051}, lambda: tr_pad(x))
    contenders["eager conv1d (cuDNN)"] = ({"kernel": "eager conv"}, lambda: conv(x, w))
    torch.cuda.synchronize(dev)

    times: dict[str, list[float]] = {k: [] for k in contenders}
    kernel: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(args.rounds):
        for k, (_, fn) in contenders.items():
            times[k].append(timer.time(fn, warmup=5, repeats=30).median_us)
        for k, (_, fn) in contenders.items():
            kernel[k].append(timer.kernel_time(fn, warmup=3, repeats=20).median_us)
    rows = []
    for k, (v, _) in contenders.items():
        us = statistics.median(times[k])
        rows.append({"name": k, **v, "events_us": times[k], "kernel_us": kernel[k],
                     "pct_bw": 100 * floor_us / us, "pct_bw_kernel": 100 * floor_us / statistics.median(kernel[k])})
    rows.sort(key=lambda r: statistics.median(r["events_us"]))
    env = environment("python " + " ".join(sys.argv))
    env.update({"copy_bandwidth_gbps": bw, "floor_us": floor_us, "bar_us": floor_us / 0.8, "moved_bytes": moved})
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "probe_transpose.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    print(f"copy bandwidth {bw:.0f} GB/s; [{L}, {C}] bf16 transposed moves {moved / 2**20:.0f} MiB: floor "
          f"{floor_us:.2f} us, the 80% bar {floor_us / 0.8:.2f} us")
    for r in rows:
        ev = ", ".join(f"{t:.2f}" for t in r["events_us"])
        kt = ", ".join(f"{t:.2f}" for t in r["kernel_us"])
        print(f"{r['name']:44s} events {ev:14s} ({r['pct_bw']:5.1f}%)  kernel {kt:14s} ({r['pct_bw_kernel']:5.1f}%)")


if __name__ == "__main__":
    main()
