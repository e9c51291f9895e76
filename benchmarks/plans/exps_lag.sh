#!/usr/bin/env bash
# Knob exps was reverted after these runs (trial commit 2739f3a): its params are no longer valid on later code.
# Knob exps (Note [exps kept in registers: measured, not kept] in softmax_relay.py) with the lag its ring allows at 64
# values a lane: 16 KB pieces at a lag of 3, 8 KB pieces at 4, 5 and 7; each root first and last. Run on the device
# after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/exps_lag.sh   -> $OUT/probe_exps_lag.json, .log
. benchmarks/plans/common.sh
R="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true"
X="strategy=relay,vec=8,nw=16,nc=1,exps=true,ramp=2"
probe softcap 200 --only "=softcap softmax [64,262144] bf16" --params "$R" --params "$X,pe=8192,k=10,lag=3" \
  --params "$X,pe=4096,k=16,lag=4" --params "$X,pe=4096,k=16,lag=5" --params "$X,pe=4096,k=16,lag=7" \
  --params "$X,pe=8192,k=10,lag=3" --params "$R"
probe sampling 100 --only "=sampling softmax [64,262144] bf16 -> fp32" --params "$R" --params "$X,pe=8192,k=10,lag=3" \
  --params "$X,pe=4096,k=16,lag=5" --params "$R"
B="strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=1"
Y="strategy=relay,vec=8,nw=16,nc=1,exps=true,ramp=1"
probe bf16 120 --only "=softmax [64,262144] bf16" --params "$B" --params "$Y,pe=8192,k=12,lag=3" \
  --params "$Y,pe=4096,k=16,lag=5" --params "$Y,pe=4096,k=16,lag=7" --params "$B"
collect exps_lag
