#!/usr/bin/env bash
# The joint relay's reduce keeps exp(x - its warp's max) in the slot in place of x, and the write takes it back times
# exp(warp max - row max) / sum: one exp an element instead of two, and the write one product (probe_variants.py
# --swap, the same run). bf16: the exps rounded to bf16 in pairs (cvt.rn.bf16x2); fp32: as they are. Each root twice
# beside its swap. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/exps_in_slot.sh   -> $OUT/probe_exps_in_slot.json, .log
# Ran on the source of a9bf3f6, before Note [a lean reduce] (softmax_relay.py). probe_variants.py skips a swap whose
# texts a source lacks, as later code lacks those of the reduce.
. benchmarks/plans/common.sh
RX='for (int j = 0; j < VEC; ++j) sum += sexp(xv(pk[i].v[j]), m);'
R16="$RX=>for (int j = 0; j < VEC; j += 2) { const float e0 = sexp(xv(pk[i].v[j]), m), e1 = sexp(xv(pk[i].v[j + 1]), m); sum += e0; sum += e1; *reinterpret_cast<__nv_bfloat162*>(&pk[i].v[j]) = __floats2bfloat162_rn(e0, e1); } const_cast<P*>(sp)[i * 32 + lane] = pk[i];"
R32="$RX=>for (int j = 0; j < VEC; ++j) { const float e = sexp(xv(pk[i].v[j]), m); sum += e; pk[i].v[j] = e; } const_cast<P*>(sp)[i * 32 + lane] = pk[i];"
INV='const float inv = 1.f / st.y;=>const float inv = __expf(wpart[sl * NW + warp].x - st.x) / st.y;'
WR='o.v[j] = from_f<TO>(__expf(xv(p.v[j]) - m) * inv);=>o.v[j] = from_f<TO>(xv(p.v[j]) * inv);'
FENCE='__syncwarp();  // every lane has read the slot=>asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); __syncwarp();'
J="strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=2"
probe bf16 ${T:-150} --only "=softmax [64,262144] bf16" --params "$J" --params "$J" \
  --swap "$R16 && $INV && $WR && $FENCE"
F="strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=3,ramp=2"
probe fp32 ${T:-150} --only "=softmax [64,262144] fp32" --params "$F" --params "$F" \
  --swap "$R32 && $INV && $WR && $FENCE"
collect exps_in_slot
