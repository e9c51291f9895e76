"""Prototype, outside the template library: a group norm whose second read of each group comes from the L2.

Question (docs/STATUS.md, Next 4 of the nineteenth session): the relay holds every piece of a 16 MB group on chip
until the group's statistic is known, and at [1,128,1024,1024] fp32 its steady state runs at 76% of the copy
bandwidth. Can a kernel that keeps nothing on chip, reads group g for its statistic while it re-reads group g - L
(read L steps before, so still in the 50 MB L2) and writes it, stream at the copy rate?

Every warp takes a fixed run of every group; it publishes its run's (count, mean, M2) into shared memory, the last
warp of a block publishes the block's, the last block of a group combines all of them in a fixed order (so the
statistic is the same whoever combines) and raises the group's counter. Warps never wait for each other except for
the statistic of group g - L, L steps after they read it. Every block must be resident (one wave).

Run on the GPU machine: python benchmarks/gn_lag_proto.py  (needs CuPy and torch; prints one line per variant)

Measured (twenty-fifth session, results/h200/gn_lag_proto_session25.json, one run): right to 3e-6 in fp32 but slow,
692-839 us at [1,128,1024,1024] fp32 against a copy of its bytes in 257 us. Every warp here reads the statistic from
global memory; the template that followed (templates/gn_lag.py, Note [a group re-read from the L2, a few groups
later]) shares it through shared memory and has the rest of the measurements.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

SOURCE = r"""
#include <cuda_bf16.h>
typedef TYPE T;
constexpr int VEC = 16 / sizeof(T), W = NT / 32, R = 4, UNR = UNROLL;
struct __align__(16) P { T v[VEC]; };
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void from_f(float v, float& o) { o = v; }
__device__ __forceinline__ void from_f(float v, __nv_bfloat16& o) { o = __float2bfloat16(v); }

__device__ __forceinline__ float4 chan(float4 a, float4 b) {
  if (b.x == 0.f) return a;
  if (a.x == 0.f) return b;
  const float n = a.x + b.x, d = b.y - a.y, f = b.x / n;
  return make_float4(n, a.y + d * f, a.z + b.z + d * d * a.x * f, 0.f);
}
__device__ __forceinline__ float4 shfl4(float4 v, int off) {
  return make_float4(__shfl_down_sync(~0u, v.x, off), __shfl_down_sync(~0u, v.y, off),
                     __shfl_down_sync(~0u, v.z, off), 0.f);
}
__device__ __forceinline__ float4 warp_chan(float4 v) {  // lane 0 gets lanes 0..31 combined in a fixed order
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) { const float4 o = shfl4(v, off); v = chan(v, o); }
  return v;
}
__device__ __forceinline__ int ld_acquire(const int* p) {
  int v; asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v;
}
__device__ __forceinline__ P ld_first(const T* p, unsigned long long pol) {
  int4 r;
#if FIRST == 1
  asm volatile("ld.global.nc.L2::cache_hint.v4.s32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
#else
  r = __ldg(reinterpret_cast<const int4*>(p));
#endif
  return *reinterpret_cast<P*>(&r);
}
__device__ __forceinline__ P ld_again(const T* p, unsigned long long pol) {
  int4 r;
#if AGAIN == 0
  r = __ldcs(reinterpret_cast<const int4*>(p));
#elif AGAIN == 1
  r = __ldg(reinterpret_cast<const int4*>(p));
#else
  asm volatile("ld.global.nc.L2::cache_hint.v4.s32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
#endif
  return *reinterpret_cast<P*>(&r);
}

extern "C" __global__ void __launch_bounds__(NT, BPB)
gn_lag(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b, T* __restrict__ y,
       float4* __restrict__ part, float2* __restrict__ stat, int* __restrict__ cnt, float eps) {
  __shared__ float4 wpart[R][W];
  __shared__ int wcnt[R];
  if (threadIdx.x < R) wcnt[threadIdx.x] = 0;
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nb = gridDim.x, gwarp = blockIdx.x * W + warp;
  constexpr long long GV = GS / VEC;
  const long long sv = (GV + (long long)nb * W - 1) / ((long long)nb * W);
  const long long vb = min(gwarp * sv, GV), ve = min(vb + sv, GV);
  unsigned long long pol_last = 0, pol_first = 0;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol_last));
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol_first));
  for (int s = 0; s < NG + L; ++s) {
    const int gr = s, gw = s - L;
    float ca = 0.f, cb = 0.f;
    if (gw >= 0) {
      if (lane == 0) while (ld_acquire(cnt + gw) < nb + 1) { }
      __syncwarp();
      const float2 st = __ldcg(stat + gw);
      ca = st.y; cb = -st.x * st.y;  // y = x * rstd - mean * rstd (then the affine per channel)
    }
    const T* xr = x + (long long)gr * GS;
    const T* xw = x + (long long)gw * GS;
    T* yw = y + (long long)gw * GS;
    const int gg = gw % G;
    const float shift = (gr < NG && vb < ve) ? to_f(xr[vb * VEC]) : 0.f;
    float sx = 0.f, sxx = 0.f;
    // Each pass issues UNR loads of each stream before it uses any (the re-read is a volatile asm load, which
    // the compiler will not move above the stores of the iteration before).
    const bool rd = gr < NG, wr = gw >= 0;
    for (long long v0 = vb + lane; v0 < ve; v0 += 32 * UNR) {
      P p[UNR], q[UNR];
#pragma unroll
      for (int u = 0; u < UNR; ++u) {
        const long long v = v0 + 32 * u;
        if (v < ve) {
          if (rd) p[u] = ld_first(xr + v * VEC, pol_last);
          if (wr) q[u] = ld_again(xw + v * VEC, pol_first);
        }
      }
#pragma unroll
      for (int u = 0; u < UNR; ++u) {
        const long long v = v0 + 32 * u;
        if (v >= ve) break;
        if (rd) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) { const float d = to_f(p[u].v[j]) - shift; sx += d; sxx += d * d; }
        }
        if (wr) {
          const int c = gg * D + (int)(v * VEC / HW);
          const float a = ca * to_f(w[c]), bb = to_f(b[c]) + cb * to_f(w[c]);
          P o;
#pragma unroll
          for (int j = 0; j < VEC; ++j) from_f(to_f(q[u].v[j]) * a + bb, o.v[j]);
          __stcs(reinterpret_cast<int4*>(yw + v * VEC), *reinterpret_cast<int4*>(&o));
        }
      }
    }
    if (gr >= NG) continue;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      sx += __shfl_xor_sync(~0u, sx, off); sxx += __shfl_xor_sync(~0u, sxx, off);
    }
    const float n = (float)((ve - vb) * VEC);
    const int r = gr % R;
    int last = 0;
    if (lane == 0) {
      wpart[r][warp] = n > 0.f ? make_float4(n, shift + sx / n, fmaxf(sxx - sx * sx / n, 0.f), 0.f)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
      __threadfence_block();
      last = atomicAdd(&wcnt[r], 1) == W - 1;
    }
    if (!__shfl_sync(~0u, last, 0)) continue;
    __threadfence_block();
    float4 v = lane < W ? wpart[r][lane] : make_float4(0.f, 0.f, 0.f, 0.f);
    v = warp_chan(v);
    last = 0;
    if (lane == 0) {
      wcnt[r] = 0;
      part[(long long)gr * nb + blockIdx.x] = v;
      __threadfence();
      last = atomicAdd(cnt + gr, 1) == nb - 1;
    }
    if (!__shfl_sync(~0u, last, 0)) continue;
    __threadfence();
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = lane; i < nb; i += 32) acc = chan(acc, __ldcg(part + (long long)gr * nb + i));
    acc = warp_chan(acc);
    if (lane == 0) {
      const float rstd = rsqrtf(fmaxf(acc.z / acc.x, 0.f) + eps);
      stat[gr] = make_float2(acc.y, rstd);
      __threadfence();
      atomicAdd(cnt + gr, 1);
    }
  }
}
"""


def main() -> int:
    import cupy as cp
    import numpy as np
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device=dev)

    def timed(fn) -> float:
        for _ in range(3):
            fn()
        ts = []
        for _ in range(args.reps):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fn(); e.record(); torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) * 1000.0)
        return statistics.median(ts)

    cases = [((1, 128, 1024, 1024), torch.float32), ((1, 256, 512, 512), torch.float32),
             ((1, 128, 1024, 1024), torch.bfloat16), ((2, 1536, 64, 64), torch.float32)]
    variants = [dict(NT=nt, BPB=1024 // nt, L=l, UNROLL=u, FIRST=f, AGAIN=a)
                for nt, l, u, f, a in [(1024, 1, 4, 0, 0), (512, 1, 4, 0, 0), (256, 1, 4, 0, 0), (512, 2, 4, 0, 0),
                                       (512, 1, 2, 0, 0), (512, 1, 4, 1, 0), (512, 1, 4, 1, 2), (512, 1, 4, 0, 1)]]
    rows = []
    for shape, dt in cases:
        n, c, h, wd = shape
        g = 32
        x = torch.randn(shape, device=dev, dtype=dt) * 2 + 0.5
        wt = torch.randn(c, device=dev, dtype=dt)
        bs = torch.randn(c, device=dev, dtype=dt)
        ref = torch.nn.functional.group_norm(x.float(), g, wt.float(), bs.float(), 1e-5)
        copy_us = timed(lambda: torch.empty_like(x).copy_(x))
        yy = torch.empty_like(x)
        copy_us = timed(lambda: yy.copy_(x))
        eager_us = timed(lambda: torch.nn.functional.group_norm(x, g, wt, bs, 1e-5))
        ng, gs = n * g, c // g * h * wd
        for var in variants:
            nb = sms * var["BPB"]
            defs = dict(var, TYPE="float" if dt == torch.float32 else "__nv_bfloat16", NG=ng, GS=f"{gs}LL",
                        HW=h * wd, D=c // g, G=g)
            src = "".join(f"#define {k} {v}\n" for k, v in defs.items()) + SOURCE
            kern = cp.RawKernel(src, "gn_lag", options=("-std=c++17",))
            y = torch.empty_like(x)
            part = torch.empty(ng * nb * 4, device=dev, dtype=torch.float32)
            stat = torch.empty(ng * 2, device=dev, dtype=torch.float32)
            cnt = torch.zeros(ng, device=dev, dtype=torch.int32)
            ptrs = [np.uint64(t.data_ptr()) for t in (x, wt, bs, y, part, stat, cnt)]

            def run():
                cnt.zero_()
                kern((nb,), (var["NT"],), (*ptrs, np.float32(1e-5)))
            run(); torch.cuda.synchronize()
            err = (y.float() - ref).abs().max().item()
            y.fill_(float("nan")); run(); torch.cuda.synchronize()
            err2 = (y.float() - ref).abs().max().item()
            us = timed(run)
            row = dict(shape=list(shape), dtype=str(dt).split(".")[-1], **var, us=round(us, 1),
                       copy_us=round(copy_us, 1), eager_us=round(eager_us, 1), vs_copy=round(copy_us / us, 3),
                       max_abs_err=max(err, err2))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
