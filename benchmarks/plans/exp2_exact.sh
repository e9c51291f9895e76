#!/usr/bin/env bash
# The relay softmaxes' write with the division folded into the exponent after x - m (probe_variants.py --swap, the
# same run): ex2((x - m) * log2e - log2 sum), FADD, FFMA, MUFU instead of FADD, FMUL, MUFU, FMUL an element, as exact
# as the root (Note [the division folded into the exponent: measured, not kept] in templates/softmax_relay.py); each
# root twice, fp32 outputs included. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/exp2_exact.sh   -> $OUT/probe_exp2_exact.json, .log
. benchmarks/plans/common.sh
L=1.4426950408889634f
WX="__expf(xv(p.v[j]) - m) * inv=>exp2f(fmaf(xv(p.v[j]) - m, $L, -__log2f(st.y)))"
WT="__expf(to_f(p.v[j]) - m) * inv=>exp2f(fmaf(to_f(p.v[j]) - m, $L, -__log2f(st.y)))"
probe bf16 100 --only "=softmax [64,262144] bf16" --params "strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=1" \
  --swap "$WX"
probe softcap 100 --only "=softcap softmax [64,262144] bf16" \
  --params "strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true" --swap "$WT"
probe sampling 100 --only "=sampling softmax [64,262144] bf16 -> fp32" \
  --params "strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true" --swap "$WT"
probe fp32 100 --only "=softmax [64,262144] fp32" --params "strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=3,ramp=1" \
  --swap "$WX"
collect exp2_exact
