#!/usr/bin/env bash
# More consumer warps in the relay (24 where the roots have 16; 12 reducers and 12 writers where they have 8): the
# soft cap with halves (Note [stores of whole sectors]), the bf16 softmax and the two fp32 group norms below 80%, each
# root first and last. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/warps.sh   -> $OUT/probe_warps.json, .log
. benchmarks/plans/common.sh
H="strategy=relay,vec=8,nc=1,ramp=2,once=true,halves=true"
R="$H,pe=8192,nw=16,k=10,lag=4"
probe softcap 200 --only "=softcap softmax [64,262144] bf16" --params "$R" --params "$H,pe=12288,nw=24,k=6,lag=3" \
  --params "$H,pe=12288,nw=24,k=7,lag=3" --params "$H,pe=6144,nw=24,k=12,lag=5" --params "$H,pe=6144,nw=24,k=10,lag=4" \
  --params "$H,pe=12288,nw=12,k=7,writers=true" --params "$H,pe=6144,nw=12,k=12,writers=true" --params "$R"
B="strategy=relay,vec=8,nc=1,ramp=1"
probe bf16 120 --only "=softmax [64,262144] bf16" --params "$B,pe=12288,nw=24,k=8,lag=3" \
  --params "$B,pe=24576,nw=24,k=4,lag=2" --params "$B,pe=12288,nw=24,k=7,lag=3" --params "$B,pe=16384,nw=16,k=6,lag=3"
G="strategy=relay,vec=4,nc=1,writers=true,ramp=2"
for shape in "1,512,128,128" "2,1536,64,64"; do
  probe "gn_${shape//,/_}" 90 --only "=group_norm [$shape] fp32" --params "$G,pe=6144,nw=12,k=7" \
    --params "$G,pe=12288,nw=12,k=4" --params "$G,pe=6144,nw=12,k=8" --params "$G,pe=8192,nw=8,k=7"
done
collect warps
