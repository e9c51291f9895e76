#!/usr/bin/env bash
# exps_in_slot.sh again on the lean reduce (Note [a lean reduce] in templates/softmax_relay.py), which came after it:
# the reduce keeps exp(x - its warp's max) in the slot in place of x, and the write takes it back times
# exp(warp max - row max) / sum (a share with no finite value kept its -inf: max(e, 0) makes it 0, and NaN stays NaN
# through the sum). bf16: the exps rounded to bf16 in pairs; fp32: as they are. Each root twice beside its swap
# (`swap_roots`). Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/exps_in_slot_lean.sh   -> $OUT/{bf16,fp32}/probe_exps_in_slot_lean_*.json, .log
. benchmarks/plans/common.sh
RX='for (int j = 0; j < VEC; ++j) sum += __expf(xv(pk[i].v[j]) - m);'
R16="$RX=>for (int j = 0; j < VEC; j += 2) { const float e0 = __expf(xv(pk[i].v[j]) - m), e1 = __expf(xv(pk[i].v[j + 1]) - m); sum += e0; sum += e1; *reinterpret_cast<__nv_bfloat162*>(&pk[i].v[j]) = __floats2bfloat162_rn(e0, e1); } const_cast<P*>(sp)[i * 32 + lane] = pk[i];"
R32="$RX=>for (int j = 0; j < VEC; ++j) { const float e = __expf(xv(pk[i].v[j]) - m); sum += e; pk[i].v[j] = e; } const_cast<P*>(sp)[i * 32 + lane] = pk[i];"
INV='const float inv = 1.f / st.y;=>const float inv = __expf(wpart[sl * NW + warp].x - st.x) / st.y;'
WR='o.v[j] = from_f<TO>(__expf(xv(p.v[j]) - m) * inv);=>o.v[j] = from_f<TO>(fmaxf(xv(p.v[j]), 0.f) * inv);'
FENCE='__syncwarp();  // every lane has read the slot=>asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); __syncwarp();'
ALL=$OUT
mkdir -p "$ALL/bf16" "$ALL/fp32"  # a directory each: collect takes every probe_*.log it finds
OUT=$ALL/bf16 T=${T:-90} swap_roots exps_in_slot_lean_bf16 "$R16 && $INV && $WR && $FENCE" "softmax [64,262144] bf16"
OUT=$ALL/fp32 T=${T:-90} swap_roots exps_in_slot_lean_fp32 "$R32 && $INV && $WR && $FENCE" "softmax [64,262144] fp32"
