#!/usr/bin/env bash
# A short lag at the head (knob ``lag0``, trial commit 689cadd, reverted in the commit after it: Note [a short
# lag at the head: measured, not kept] in templates/relay.py; needs the trial's code to run): the joint relay
# roots of the softmaxes of >= 64 MB beside the same layout with first lags of 0, 1 and 2 (and 7 slots with a lag of
# 4 from a first lag of 1), the root, the variants, the root, the variants in one run (`twice`); then the bf16
# softmax's timeline with a first lag of 1. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/head_lag.sh   -> $OUT/probe_head_lag.json, .log, $OUT/tr
. benchmarks/plans/common.sh
C="softmax [64,262144] bf16"
R=$(root_of "$C")
T=${T1:-150} twice "$C" "$R,lag0=0" "$R,lag0=1" "$R,lag0=2" "${R/k=6,lag=3/k=7,lag=4},lag0=1"
S="softcap softmax [64,262144] bf16"
Q=$(root_of "$S")
T=${T2:-130} twice "$S" "$Q,lag0=0" "$Q,lag0=1" "$Q,lag0=2"
[ -n "${FP32:-1}" ] && T=${T3:-110} twice "softmax [64,262144] fp32" "$(root_of "softmax [64,262144] fp32"),lag0=1"
collect head_lag
timeline "$C" "$R,lag0=${TRACE_LAG0:-1}"
