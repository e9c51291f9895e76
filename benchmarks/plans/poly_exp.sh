#!/usr/bin/env bash
# Some of the bf16 softmax relay's exps on the FMA pipe instead of MUFU.EX2 (probe_variants.py --swap, the same
# run): pexp(d) = 2^(d log2 e) as p(f) * 2^floor, p a cubic with p(0) = 1 (relative error 8.6e-5 on [0, 1)),
# d clamped at -126.5 log 2 (so 2^floor is 0 there) with NaN kept. Swaps: 0 the write's odd elements, 1 all of the
# write's, 2 the reduce's odd elements, 3 both odd, 4 every fourth of the write's, 5 all of both. The joint root (the
# ops winner) and writers of their own, each twice. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/poly_exp.sh   -> $OUT/probe_poly_exp.json, .log
# Ran on the source of a9bf3f6, before Note [a lean reduce] (softmax_relay.py). probe_variants.py skips a swap whose
# texts a source lacks, as later code lacks those of the reduce.
. benchmarks/plans/common.sh
PEXP='__device__ __forceinline__ float pexp(float d) { float t; asm("max.NaN.f32 %0, %1, %2;" : "=f"(t) : "f"(d * 1.4426950408889634f), "f"(-126.5f)); const float r = __fadd_rd(t, 12582912.f); const float f = t - (r - 12582912.f); const float p = fmaf(fmaf(fmaf(0.07706618f, f, 0.22764593f), f, 0.6951166f), f, 1.f); return p * __int_as_float((__float_as_int(r) << 23) + 0x3f800000); }'
DEF="__device__ __forceinline__ float sexp(float v, float m) {=>$PEXP
__device__ __forceinline__ float sexp(float v, float m) {"
WX='__expf(xv(p.v[j]) - m) * inv'
W_ALL="$WX=>pexp(xv(p.v[j]) - m) * inv"
W_HALF="$WX=>((j & 1) ? pexp(xv(p.v[j]) - m) : __expf(xv(p.v[j]) - m)) * inv"
W_QUART="$WX=>((j & 3) == 3 ? pexp(xv(p.v[j]) - m) : __expf(xv(p.v[j]) - m)) * inv"
RX='sum += sexp(xv(pk[i].v[j]), m);'
R_HALF="$RX=>sum += (j & 1) ? (m == -CUDART_INF_F ? 0.f : pexp(xv(pk[i].v[j]) - m)) : sexp(xv(pk[i].v[j]), m);"
R_ALL="$RX=>sum += m == -CUDART_INF_F ? 0.f : pexp(xv(pk[i].v[j]) - m);"
J="strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=2"
W="strategy=relay,vec=8,pe=16384,nw=8,nc=1,k=6,ramp=2,writers=true"
probe bf16 ${T:-330} --only "=softmax [64,262144] bf16" --params "$J" --params "$W" --params "$J" --params "$W" \
  --swap "$DEF && $W_HALF" --swap "$DEF && $W_ALL" --swap "$DEF && $R_HALF" --swap "$DEF && $W_HALF && $R_HALF" \
  --swap "$DEF && $W_QUART" --swap "$DEF && $W_ALL && $R_ALL"
collect poly_exp
