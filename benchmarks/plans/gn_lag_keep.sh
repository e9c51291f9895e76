#!/usr/bin/env bash
# The lag group norm at a lag of 2 with the first read kept in L2 (evict_last) and the re-read demoted, against the
# relay root in the same probe run. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/gn_lag_keep.sh   -> $OUT/probe_gn_lag_keep.json, $OUT/probe_gn_lag_keep.log
. benchmarks/plans/common.sh
R="strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,writers=true,ramp=2"
L="strategy=lag,vec=4,block=1024,bpb=1,lag=2,unroll=4"
probe f32 100 --only "=group_norm [1,128,1024,1024] fp32" --params "$L,keep=true" --params "$L,keep=true,again=first" \
  --params "$L,again=first" --params "$L" --params "$R"
B="strategy=lag,vec=8,block=512,bpb=2,lag=2,unroll=2"
probe b16 60 --only "=group_norm [1,128,1024,1024] bf16" --params "$B,keep=true" --params "$B,keep=true,again=first" \
  --params "${R/vec=4,pe=8192/vec=8,pe=16384}"
collect gn_lag_keep
