#!/usr/bin/env bash
# The L2-lag group norm: the CuPy prototype (benchmarks/gn_lag_proto.py) at four group norms, then the template
# (strategy lag, gn_lag.py) against the relay root of each row in the same probe run, the root timed first and last.
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/gn_lag_proto.sh   -> $OUT/gn_lag_proto.json/.log, $OUT/probe_gn_lag.json/.log
. benchmarks/plans/common.sh
timeout "${TP:-150}" python3 benchmarks/gn_lag_proto.py --out "$OUT/gn_lag_proto.json" > "$OUT/gn_lag_proto.log" 2>&1
echo "proto rc $?"; cut -c1-230 "$OUT/gn_lag_proto.log" | tail -34
R="strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,writers=true,ramp=2"
L="strategy=lag,vec=4,block=512,bpb=2,lag=1,unroll=4"
probe f32 120 --only "=group_norm [1,128,1024,1024] fp32" --params "$L" --params "${L/block=512,bpb=2/block=1024,bpb=1}" \
  --params "${L/block=512,bpb=2/block=256,bpb=4}" --params "${L/lag=1/lag=2}" --params "$L,keep=true" \
  --params "$L,again=first" --params "$L,again=ld" --params "${L/unroll=4/unroll=2}" --params "$R"
B="strategy=lag,vec=8,block=512,bpb=2,lag=1,unroll=2"
probe b16 90 --only "=group_norm [1,128,1024,1024] bf16" --params "$B" --params "${B/lag=1/lag=2}" \
  --params "$B,keep=true" --params "${B/bpb=2,lag=1,unroll=2/bpb=1,lag=1,unroll=4}" \
  --params "${R/vec=4,pe=8192/vec=8,pe=16384}"
probe small 90 --only "=group_norm [2,1536,64,64] fp32" --params "$L" --params "${L/lag=1/lag=2}" \
  --params "${L/lag=1/lag=3}" --params "$R"
collect gn_lag
