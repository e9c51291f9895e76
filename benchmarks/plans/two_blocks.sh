#!/usr/bin/env bash
# Two relay blocks an SM (knob ``bps``, trial commit 5b24073, reverted in the commit after it: Note [two relay blocks
# an SM: measured, not kept] in templates/relay.py): each relay root beside layouts of half the warps and half the
# slots in two co-resident blocks of every SM, every variant verified, the root and the variants twice in one run.
# Needs the trial's code to run. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/two_blocks.sh   -> $OUT/probe_two_blocks.json, .log
. benchmarks/plans/common.sh
S=strategy=relay,nc=1,ramp=2,bps=2
T=${T1:-170} twice "softmax [64,262144] bf16" "$S,vec=8,pe=16384,nw=8,k=3,lag=1" "$S,vec=8,pe=8192,nw=8,k=6,lag=3" \
  "$S,vec=8,pe=8192,nw=8,k=6,lag=2" "$S,vec=8,pe=16384,nw=4,k=3,writers=true"
T=${T2:-150} twice "group_norm [1,512,128,128] fp32" "$S,vec=4,pe=8192,nw=4,k=3,writers=true" \
  "$S,vec=4,pe=4096,nw=4,k=6,writers=true" "$S,vec=4,pe=4096,nw=4,k=5,writers=true"
T=${T3:-170} twice "softcap softmax [64,262144] bf16" "$S,vec=8,pe=8192,nw=8,k=6,lag=3,once=true,halves=true" \
  "$S,vec=8,pe=8192,nw=8,k=6,lag=4,once=true,halves=true" "$S,vec=8,pe=4096,nw=8,k=12,lag=4,once=true,halves=true"
collect two_blocks
