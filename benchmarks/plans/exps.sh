#!/usr/bin/env bash
# Knob exps was reverted after these runs (trial commit 2739f3a): its params are no longer valid on later code.
# Knob exps (Note [exps kept in registers: measured, not kept] in softmax_relay.py): the consumers keep exp(x - their
# max) in registers and free the slot after the reduce. The soft cap, the plain softmaxes of [64,262144] and the
# sampling softmax, each root first and last. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/exps.sh   -> $OUT/probe_exps.json, .log
. benchmarks/plans/common.sh
R="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true"
X="strategy=relay,vec=8,pe=8192,nw=16,nc=1,exps=true"
probe softcap 200 --only "=softcap softmax [64,262144] bf16" --params "$R" --params "$X,k=10,lag=2,ramp=2" \
  --params "$X,k=10,lag=1,ramp=2" --params "$X,k=6,lag=2,ramp=2" --params "$X,k=10,lag=2,ramp=1" \
  --params "$X,k=10,lag=2,ramp=2" --params "$R"
probe sampling 100 --only "=sampling softmax [64,262144] bf16 -> fp32" --params "$R" --params "$X,k=10,lag=2,ramp=2" \
  --params "$X,k=10,lag=1,ramp=2" --params "$R"
B="strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=1"
probe bf16 120 --only "=softmax [64,262144] bf16" --params "$B" --params "$X,k=12,lag=2,ramp=1" \
  --params "$X,k=12,lag=1,ramp=1" --params "$X,k=8,lag=2,ramp=1" --params "$B"
F="strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=3,ramp=1"
probe fp32 100 --only "=softmax [64,262144] fp32" --params "$F" --params "strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=2,ramp=1,exps=true" \
  --params "strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=1,ramp=1,exps=true" --params "$F"
collect exps
