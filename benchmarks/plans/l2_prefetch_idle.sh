#!/usr/bin/env bash
# Pieces ahead of the slots prefetched into the L2 only while every copy a block issued has landed and its next slot
# is not free (knob ``pf`` with ``pfw``: Note [pieces ahead of the slots prefetched into the L2:
# measured, not kept] in templates/relay.py): the relay roots of the rows of >= 64 MB under 80% of the copy bandwidth
# beside the same layouts with the knob, the root, the variants, the root, the variants in one run (`twice`); then the
# bf16 softmax's timeline with it. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/l2_prefetch_idle.sh   -> $OUT/probe_l2_prefetch_idle.json, .log, $OUT/tr
. benchmarks/plans/common.sh
C="softmax [64,262144] bf16"
R=$(root_of "$C")
T=${T1:-150} twice "$C" "$R,pf=1,pfw=true" "$R,pf=2,pfw=true" "${R/k=6,lag=3/k=7,lag=4},pf=1,pfw=true"
S="softcap softmax [64,262144] bf16"
Q=$(root_of "$S")
T=${T2:-150} twice "$S" "$Q,pf=2,pfw=true" "$Q,pf=4,pfw=true" "$Q,pf=4"
G="group_norm [1,512,128,128] fp32"
N=$(root_of "$G")
T=${T3:-120} twice "$G" "$N,pf=1,pfw=true" "$N,pf=2,pfw=true"
[ -n "${FP32:-1}" ] && T=${T4:-110} twice "softmax [64,262144] fp32" "$(root_of "softmax [64,262144] fp32"),pf=2,pfw=true"
collect l2_prefetch_idle
timeline "$C" "$R,pf=${TRACE_PF:-2},pfw=true"
