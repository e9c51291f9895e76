#!/usr/bin/env bash
# The soft cap's relay with knob halves (Note [stores of whole sectors] in softmax_relay.py): its slots, lag, ramp and
# consumer warps one step either way, that layout first and last. Run on the device after
# `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/halves_more.sh   -> $OUT/probe_halves_more.json, .log
. benchmarks/plans/common.sh
H="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true"
probe softcap 150 --only "=softcap softmax [64,262144] bf16" --params "$H" --params "${H/k=10,lag=4/k=12,lag=5}" \
  --params "${H/k=10,lag=4/k=8,lag=3}" --params "${H/lag=4/lag=3}" --params "${H/lag=4/lag=5}" \
  --params "${H/ramp=2/ramp=1}" --params "${H/ramp=2/ramp=4}" --params "${H/nw=16/nw=8}" --params "${H/nc=1/nc=2}" \
  --params "$H"
collect halves_more
