#!/usr/bin/env bash
# The soft cap's tanh: every bf16 input through tanhf and cheaper forms (benchmarks/tanh_bf16_exhaustive.py), then
# the soft-capped softmax's root with its tanhf swapped for the exp form, alternately in one probe run, then Nsight
# Compute on the root. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/softcap_tanh.sh   -> $OUT/tanh_bf16_exhaustive.json, $OUT/probe_softcap_tanh.*
. benchmarks/plans/common.sh
python3 benchmarks/tanh_bf16_exhaustive.py --out "$OUT"
R="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true"
E='const float a = fabsf(v); if (a < 0.25f) { const float s = v * v; return v * (1.f + s * (-1.f / 3.f + s * (2.f / 15.f + s * (-17.f / 315.f + s * (62.f / 2835.f))))); } return copysignf(1.f - 2.f / (__expf(2.f * a) + 1.f), v);'
probe softcap 90 --only "=softcap softmax [64,262144] bf16" --params "$R" --params "$R" --swap "return tanhf(v);=>$E"
collect softcap_tanh
