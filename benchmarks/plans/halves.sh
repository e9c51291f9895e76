#!/usr/bin/env bash
# Knob halves (Note [stores of whole sectors] in softmax_relay.py) at the widening softmaxes, the root first and last
# and between: the soft cap [64,262144] bf16 -> fp32 (its root, its root in 32 KB pieces, with writers of their own) and
# the plain sampling softmax. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/halves.sh   -> $OUT/probe_halves.json, .log
. benchmarks/plans/common.sh
R="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true"
B="strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=2,once=true"
W="strategy=relay,vec=8,pe=8192,nw=8,nc=1,k=10,ramp=2,once=true,writers=true"
probe softcap 150 --only "=softcap softmax [64,262144] bf16" --params "$R" --params "$R,halves=true" \
  --params "$R" --params "$R,halves=true" --params "$B,halves=true" --params "$B" --params "$W,halves=true" \
  --params "$R"
probe sampling 90 --only "=sampling softmax [64,262144] bf16 -> fp32" --params "$R" --params "$R,halves=true" \
  --params "$R" --params "$R,halves=true"
collect halves
