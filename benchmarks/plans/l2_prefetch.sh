#!/usr/bin/env bash
# Pieces ahead of the slots prefetched into the L2 (knob ``pf``, with ``pfe`` issued before the first copies: Note
# [pieces ahead of the slots prefetched into the L2: measured, not kept] in templates/relay.py): the relay roots of
# the rows of >= 64 MB under 80% of the copy bandwidth beside the same layouts with the knob, the root, the variants,
# the root, the variants in one run (`twice`); then the bf16 softmax's timeline with two pieces ahead. Run on the device
# after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/l2_prefetch.sh   -> $OUT/probe_l2_prefetch.json, .log, $OUT/tr
. benchmarks/plans/common.sh
C="softmax [64,262144] bf16"
R=$(root_of "$C")
T=${T1:-150} twice "$C" "$R,pf=1" "$R,pf=2" "$R,pf=2,pfe=true" "${R/k=6,lag=3/k=7,lag=4},pf=1"
S="softcap softmax [64,262144] bf16"
Q=$(root_of "$S")
T=${T2:-150} twice "$S" "$Q,pf=2" "$Q,pf=4" "$Q,pf=4,pfe=true"
G="group_norm [1,512,128,128] fp32"
N=$(root_of "$G")
T=${T3:-120} twice "$G" "$N,pf=2" "$N,pf=4" "$N,pf=2,pfe=true"
[ -n "${FP32:-1}" ] && T=${T4:-110} twice "softmax [64,262144] fp32" "$(root_of "softmax [64,262144] fp32"),pf=2"
collect l2_prefetch
timeline "$C" "$R,pf=${TRACE_PF:-2}"
