#!/usr/bin/env bash
# The soft cap's tanh (the Note after Note [a prologue evaluated once, into its slot] in softmax_relay.py): every bf16
# input through tanhf and cheaper forms (benchmarks/tanh_bf16_exhaustive.py), then the soft-capped softmax's root,
# whose tanh was the cheap form in the code it ran on (commit 7756f54, reverted after), against the same kernel with
# tanhf swapped back in, alternately in one probe run. On today's code the swap finds nothing to replace. Run on the
# device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/softcap_tanh.sh   -> $OUT/tanh_bf16_exhaustive.json, $OUT/probe_softcap_tanh.*
. benchmarks/plans/common.sh
python3 benchmarks/tanh_bf16_exhaustive.py --out "$OUT"
R="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true"
probe softcap 90 --only "=softcap softmax [64,262144] bf16" --params "$R" --params "$R" --swap "f_tanh_bf16(t0)=>tanhf(t0)"
collect softcap_tanh
