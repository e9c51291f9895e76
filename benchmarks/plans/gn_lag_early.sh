#!/usr/bin/env bash
# The lag group norm with its statistic published before the wait (knob early, Note [a statistic published before the
# wait] in gn_lag.py) against the relay root in the same probe run. Run on the device after
# `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/gn_lag_early.sh   -> $OUT/probe_gn_lag_early.json, $OUT/probe_gn_lag_early.log
. benchmarks/plans/common.sh
R="strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,writers=true,ramp=2"
L="strategy=lag,vec=4,block=1024,bpb=1,lag=1,unroll=4,early=true"
probe f32 70 --only "=group_norm [1,128,1024,1024] fp32" --params "$L" --params "${L/block=1024,bpb=1/block=512,bpb=2}" \
  --params "${L/lag=1/lag=2}" --params "$R"
B="strategy=lag,vec=8,block=512,bpb=2,lag=1,unroll=2,early=true"
probe b16 45 --only "=group_norm [1,128,1024,1024] bf16" --params "$B" --params "${B/lag=1/lag=2}"
collect gn_lag_early
