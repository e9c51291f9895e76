"""Every bf16 input of the soft cap (Gemma's tanh(x / 30) * 30, each step rounded to bf16), through the chain the
kernels compile today and through forms that take two elements an instruction: where do their bits differ?

    python benchmarks/softcap_pairs_exhaustive.py [--out DIR]   (a CUDA GPU and CuPy)

Both chains compile as the templates do (--use_fast_math, so tanhf is tanh.approx.f32). ``scalar``: one element at
a time, x * fp32(1/30), rounded (cvt.rn.bf16x2.f32 of the value twice, one half kept), tanh.approx.f32, rounded,
* 30, rounded. ``pairs``: two elements, x * fp32(1/30) in fp32 for each and one cvt.rn.bf16x2.f32 for both, then
tanh.approx.bf16x2 and mul.rn.bf16x2 by 30 (exact in bf16, and the product of two bf16 values is exact in fp32, so
one rounding either way), so only the tanh can differ. ``tanh_pairs``: tanh.approx.bf16x2 alone against
tanh.approx.f32 rounded, over every bf16 input. Also the SASS of each tanh (cuobjdump, where the device has it).
Found (thirty-ninth session, results/h200/softcap_pairs_exhaustive_session39.json): tanh.approx.bf16x2 rounds 2,086
inputs one bf16 ulp off (the chain 2,030, up to two ulps), and it is two MUFU.TANH.BF16 a pair, so the templates'
fx2 keeps an fp32 tanh for each element (Note [a prologue two elements at a time] in templates/fused.py).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = r"""
__device__ __forceinline__ unsigned pair_of(float hi, float lo) {
  unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
__device__ __forceinline__ float round_bf16(float x) { return __uint_as_float(pair_of(x, x) << 16); }
__device__ __forceinline__ float tanh_f32(float t) {
  float r; asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(t)); return r;
}
__device__ __forceinline__ unsigned tanh_pair(unsigned t) {
  unsigned r; asm("tanh.approx.bf16x2 %0, %1;" : "=r"(r) : "r"(t)); return r;
}
__device__ __forceinline__ unsigned mul_pair(unsigned a, unsigned b) {
  unsigned r; asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r;
}
__device__ __forceinline__ float scalar_cap(float x) {
  const float t0 = round_bf16(x * ((float)0x1.1111111111111p-5));
  const float t1 = round_bf16(tanhf(t0));
  return round_bf16(t1 * 30.f);
}
__device__ __forceinline__ unsigned pair_cap(unsigned w) {  // two bf16 inputs, low half first
  const float lo = __uint_as_float(w << 16) * ((float)0x1.1111111111111p-5);
  const float hi = __uint_as_float(w & 0xffff0000u) * ((float)0x1.1111111111111p-5);
  return mul_pair(tanh_pair(pair_of(hi, lo)), 0x41f041f0u);  // 30.0 in both halves
}
// out[0..3][65536] (bf16 bits): the scalar chain, the pair chain, tanh.approx.f32 rounded, tanh.approx.bf16x2
extern "C" __global__ void chains(unsigned short* out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;  // input i and, in the pair's other half, 65535 - i
  if (i >= 65536u) return;
  const unsigned j = 65535u - i, w = (j << 16) | i;
  const float x = __uint_as_float(i << 16);
  out[i] = (unsigned short)(__float_as_uint(scalar_cap(x)) >> 16);
  out[65536 + i] = (unsigned short)(pair_cap(w) & 0xffffu);
  out[2 * 65536 + i] = (unsigned short)(__float_as_uint(round_bf16(tanh_f32(x))) >> 16);
  out[3 * 65536 + i] = (unsigned short)(tanh_pair(w) & 0xffffu);
}
"""


def _sass(source: str) -> list[str]:
    """The MUFU and HMUL2 lines of the kernel's SASS (cuobjdump), or a line saying why there are none."""
    tool = shutil.which("cuobjdump")
    if tool is None:
        return ["no cuobjdump on this machine"]
    from forge_backend.runtime.nvrtc import BASE_OPTIONS, compile_source

    cubin = compile_source(source, "sm_90", options=BASE_OPTIONS).cubin
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
    return [line.strip() for line in text.splitlines() if "MUFU" in line or "HMUL2" in line or "HFMA2" in line]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    try:
        import cupy as cp
    except ImportError:
        print("softcap_pairs_exhaustive needs CuPy and a CUDA GPU.")
        sys.exit(0)
    import numpy as np

    out = cp.empty(4 * 65536, dtype=cp.uint16)
    cp.RawKernel(SOURCE, "chains", options=("--use_fast_math", "-std=c++17"))((256,), (256,), (out,))
    scalar, pairs, tanh32, tanh2 = cp.asnumpy(out).reshape(4, 65536)
    inputs = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    normal = np.isfinite(inputs) & ((inputs == 0) | (np.abs(inputs) >= np.finfo(np.float32).tiny))
    as_f = lambda b: (b.astype(np.uint32) << 16).view(np.float32)  # noqa: E731

    def same(a, b):
        return (a == b) | (np.isnan(as_f(a)) & np.isnan(as_f(b)))

    result: dict = {}
    for name, a, b in (("chain: pairs vs scalar", pairs, scalar),
                       ("tanh: bf16x2 vs f32 rounded", tanh2, tanh32)):
        bad = ~same(a, b)
        ulp = np.abs(a.astype(np.int64) - b.astype(np.int64))[bad & np.isfinite(as_f(a)) & np.isfinite(as_f(b))]
        result[name] = {"mismatches": int(bad.sum()), "mismatches_normal": int((bad & normal).sum()),
                        "max_bf16_ulps": int(ulp.max()) if ulp.size else 0,
                        "first": [[float(inputs[i]), float(as_f(b[i : i + 1])[0]), float(as_f(a[i : i + 1])[0])]
                                  for i in np.flatnonzero(bad & normal)[:8]]}
        print(f"{name}: {result[name]['mismatches']} of 65536 inputs differ ({result[name]['mismatches_normal']} "
              f"normal), at most {result[name]['max_bf16_ulps']} bf16 ulps; first {result[name]['first'][:4]}")
    result["sass"] = _sass(SOURCE)
    print("SASS:", *result["sass"][:12], sep="\n  ")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "softcap_pairs_exhaustive.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
