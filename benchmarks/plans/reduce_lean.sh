#!/usr/bin/env bash
# A leaner reduce for the bf16 softmax's joint relay (probe_variants.py --swap, the same run; the reduce is the
# relay's critical path: probe_session38_poly_exp). Swaps: 0 the max over packed bf16 pairs (max.bf16x2, exact)
# instead of a conversion and an FMNMX an element; 1 the row-masked test (sexp) taken once a piece instead of an
# element; 2 both; 3 both with every eighth exp on the FMA pipe (pexp, as in poly_exp.sh); 4 both with every fourth.
# The joint root twice; then the fp32 root twice beside swap 1. Run on the device after
# `benchmarks/run_device.sh setup`:   OUT=$OUT bash benchmarks/plans/reduce_lean.sh   -> $OUT/probe_reduce_lean.*
# Ran on the source of a9bf3f6, before Note [a lean reduce] (softmax_relay.py). probe_variants.py skips a swap whose
# texts a source lacks, as later code lacks those of the reduce.
. benchmarks/plans/common.sh
PEXP='__device__ __forceinline__ float pexp(float d) { float t; asm("max.NaN.f32 %0, %1, %2;" : "=f"(t) : "f"(d * 1.4426950408889634f), "f"(-126.5f)); const float r = __fadd_rd(t, 12582912.f); const float f = t - (r - 12582912.f); const float p = fmaf(fmaf(fmaf(0.07706618f, f, 0.22764593f), f, 0.6951166f), f, 1.f); return p * __int_as_float((__float_as_int(r) << 23) + 0x3f800000); }'
DEF="__device__ __forceinline__ float sexp(float v, float m) {=>$PEXP
__device__ __forceinline__ float sexp(float v, float m) {"
MX='for (int j = 0; j < VEC; ++j) m = fmaxf(m, xv(pk[i].v[j]));=>for (int j = 0; j < 1; ++j) { const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(pk[i].v); const __nv_bfloat162 a = __hmax2(__hmax2(h[0], h[1]), __hmax2(h[2], h[3])); m = fmaxf(m, fmaxf(__low2float(a), __high2float(a))); }'
GUARD='float sum = 0.f;=>float sum = 0.f;
      if (m != -CUDART_INF_F)
 && sum += sexp(xv(pk[i].v[j]), m);=>sum += __expf(xv(pk[i].v[j]) - m);'
P8='sum += __expf(xv(pk[i].v[j]) - m);=>sum += j == 7 ? pexp(xv(pk[i].v[j]) - m) : __expf(xv(pk[i].v[j]) - m);'
P4='sum += __expf(xv(pk[i].v[j]) - m);=>sum += (j & 3) == 3 ? pexp(xv(pk[i].v[j]) - m) : __expf(xv(pk[i].v[j]) - m);'
J="strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=2"
probe bf16 ${T:-150} --only "=softmax [64,262144] bf16" --params "$J" --params "$J" \
  --swap "$MX" --swap "$GUARD" --swap "$MX && $GUARD" --swap "$DEF && $MX && $GUARD && $P8" \
  --swap "$DEF && $MX && $GUARD && $P4"
F="strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=3,ramp=2"
probe fp32 ${T:-100} --only "=softmax [64,262144] fp32" --params "$F" --params "$F" --swap "$GUARD"
collect reduce_lean
