#!/usr/bin/env bash
# The relay's first copies a few at a time (Note [the first copies a few at a time] in templates/relay_pipeline.py)
# against each case's root, same run per case: the root first, ramps of 1-4 copies, the root again last (the spread of
# one layout timed twice). Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/ramp_probe.sh    -> $OUT/probe_ramp.json, $OUT/probe_ramp.log
. benchmarks/plans/common.sh
J8="strategy=relay,vec=8,pe=16384,nc=1,nw=16,lag=3,k=6"  # the bf16 softmax's root until the ramp
J4="strategy=relay,vec=4,pe=8192,nc=1,nw=16,lag=3,k=6"  # the fp32 softmax's root until the ramp
C8="strategy=relay,vec=8,pe=8192,nc=1,nw=16,k=10,lag=4,once=true"  # the soft cap's root until the ramp
W8="strategy=relay,vec=8,pe=16384,nc=1,nw=8,k=7,writers=true"  # the 2-byte group norms' root until the ramp
W4="strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,writers=true"  # the 4-byte group norms' root until the ramp
probe sm16 "${TS:-90}" --only "=softmax [64,262144] bf16" \
  --params "$J8,ramp=1" --params "$J8,ramp=2" --params "$J8,ramp=3" --params "$J8,ramp=4" \
  --params "${J8/lag=3,k=6/lag=4,k=7},ramp=2" --params "$J8"
probe cap "${TS:-80}" --only "softcap softmax" --params "$C8,ramp=1" --params "$C8,ramp=2" --params "$C8,ramp=4" \
  --params "$C8"
probe sm32 "${TS:-60}" --only "=softmax [64,262144] fp32" --params "$J4,ramp=1" --params "$J4,ramp=2" --params "$J4"
probe gn16 "${TS:-60}" --only "=group_norm [1,512,256,256] bf16" --params "$W8,ramp=2" --params "$W8,ramp=3" \
  --params "$W8"
probe gn32 "${TG:-90}" --only "=group_norm [1,128,1024,1024] fp32" --only "=group_norm [1,512,128,128] fp32" \
  --params "$W4,ramp=2" --params "$W4"
collect ramp
