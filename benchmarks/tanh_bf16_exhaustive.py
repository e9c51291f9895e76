"""Every bf16 input of a tanh, through CUDA's tanhf and through cheaper forms, each result rounded to bf16: where do
they differ? The soft cap (Gemma's tanh(x / 30) * 30 in bf16) rounds tanh's input and output to bf16, so a form
whose rounded results equal tanhf's on all 65,536 inputs gives the same bits with fewer instructions. (The kernels
compile with --use_fast_math, where tanhf already is ``approx``: the Note in templates/softmax.py has what this found.)

    python benchmarks/tanh_bf16_exhaustive.py [--out DIR]   (a CUDA GPU and CuPy)

Forms: ``approx`` (tanh.approx.f32, one MUFU op); ``exp5`` (1 - 2 / (exp(2|t|) + 1) with __expf and a full division,
the sign copied, and t - t^3/3 + 2t^5/15 below |t| < 2^-4, where the subtraction would cancel); ``exp9`` (the same
with the series to t^9 below |t| < 1/4). ``closest_to_a_midpoint`` (float64 on the CPU): the exact tanh of no bf16
input lies within 102 fp32 ulps of a bf16 rounding midpoint, so a form within that of tanhf rounds to the same bf16.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SOURCE = r"""
__device__ __forceinline__ float bf16_round(float v) {  // round to nearest even, as __float2bfloat16
  unsigned u = __float_as_uint(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return v;  // inf, nan
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ float tanh_approx(float t) {
  float r;
  asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(t));
  return r;
}
__device__ __forceinline__ float tanh_exp5(float t) {
  const float a = fabsf(t);
  if (a < 0.0625f) {
    const float s = t * t;
    return t * (1.f + s * (-1.f / 3.f + s * (2.f / 15.f)));
  }
  return copysignf(1.f - 2.f / (__expf(2.f * a) + 1.f), t);
}
__device__ __forceinline__ float tanh_exp9(float t) {
  const float a = fabsf(t);
  if (a < 0.25f) {
    const float s = t * t;
    return t * (1.f + s * (-1.f / 3.f + s * (2.f / 15.f + s * (-17.f / 315.f + s * (62.f / 2835.f)))));
  }
  return copysignf(1.f - 2.f / (__expf(2.f * a) + 1.f), t);
}
extern "C" __global__ void forms(float* out) {  // out[8][65536]: tanhf, approx, exp5, exp9 in fp32, then rounded
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536u) return;
  const float t = __uint_as_float(i << 16);
  const float v[4] = {tanhf(t), tanh_approx(t), tanh_exp5(t), tanh_exp9(t)};
  for (int f = 0; f < 4; ++f) {
    out[f * 65536 + i] = v[f];
    out[(4 + f) * 65536 + i] = bf16_round(v[f]);
  }
}
"""


def closest_to_a_midpoint() -> int:
    """Over every finite bf16 input whose tanh is not +-1 in fp32, how close (in fp32 ulps) the exact tanh (float64,
    rounded to fp32) comes to a bf16 rounding midpoint: a form within fewer ulps of tanhf rounds as tanhf does
    wherever tanhf is within that of the exact value."""
    import numpy as np

    t = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    y = np.tanh(t[np.isfinite(t)].astype(np.float64)).astype(np.float32)
    y = y[np.abs(y) != 1.0]
    return int(np.abs((y.view(np.uint32) & 0xFFFF).astype(np.int64) - 0x8000).min())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    near = closest_to_a_midpoint()
    print(f"exact tanh of a bf16 input comes no closer than {near} fp32 ulps to a bf16 rounding midpoint")
    try:
        import cupy as cp
    except ImportError:
        print("tanh_bf16_exhaustive needs CuPy and a CUDA GPU.")
        sys.exit(0)
    import numpy as np

    out = cp.empty(8 * 65536, dtype=cp.float32)
    cp.RawKernel(SOURCE, "forms")((256,), (256,), (out,))
    raw = cp.asnumpy(out).reshape(8, 65536)
    ref, approx, exp5, exp9 = raw[4:]
    inputs = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    finite = np.isfinite(inputs)
    result = {"closest_to_a_midpoint_fp32_ulps": near}
    ulps = lambda a, b: np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))  # noqa: E731
    for f, (name, got) in enumerate((("approx", approx), ("exp5", exp5), ("exp9", exp9)), start=1):
        bad = finite & ~((got == ref) | (np.isnan(got) & np.isnan(ref)))
        far = int(ulps(raw[f], raw[0])[finite & (np.sign(raw[f]) == np.sign(raw[0]))].max())
        result[name] = {"mismatches": int(bad.sum()), "max_fp32_ulps_from_tanhf": far,
                        "first": [[float(inputs[i]), float(ref[i]), float(got[i])] for i in np.flatnonzero(bad)[:12]]}
        print(f"{name}: {int(bad.sum())} of {int(finite.sum())} finite bf16 inputs round differently from tanhf; "
              f"at most {far} fp32 ulps from it; first {result[name]['first'][:6]}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tanh_bf16_exhaustive.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
