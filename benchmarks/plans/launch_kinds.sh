#!/usr/bin/env bash
# What the cooperative launch costs: empty kernels of each launch kind (benchmarks/launch_cost.py), then the relay
# roots of the rows under 80% of the copy bandwidth launched cooperatively and plainly (probe_variants.py
# --plain-launch), each root twice. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/launch_kinds.sh   -> $OUT/launch_cost.json, $OUT/probe_launch_kinds.json, .log
# (in the twenty-ninth session launch_cost.py failed here: its kernel then wrote shared memory it did not reserve;
# fixed, it ran in ops_64mib.sh. Results: probe_session29_launch_kinds.md)
. benchmarks/plans/common.sh
timeout 120 python3 benchmarks/launch_cost.py --out "$OUT" > "$OUT/launch_cost.log" 2>&1; cat "$OUT/launch_cost.log"
probe bf16 120 --plain-launch --copy 64 --copy 96 --only "=softmax [64,262144] bf16" \
  --params "strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=1"
probe softcap 120 --plain-launch --only "=softcap softmax [64,262144] bf16" \
  --params "strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true"
probe fp32 120 --plain-launch --only "=softmax [64,262144] fp32" \
  --params "strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=3,ramp=1"
probe gn128 120 --plain-launch --only "=group_norm [1,512,128,128] fp32" \
  --params "strategy=relay,vec=4,pe=8192,nw=4,nc=1,k=7,ramp=2,writers=true"
probe gn1536 120 --plain-launch --only "=group_norm [2,1536,64,64] fp32" \
  --params "strategy=relay,vec=4,pe=8192,nw=8,nc=1,k=7,ramp=2,writers=true"
collect launch_kinds
