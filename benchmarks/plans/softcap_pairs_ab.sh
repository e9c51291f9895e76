#!/usr/bin/env bash
# Note [a prologue two elements at a time] (templates/fused.py) in the relays' code: the soft cap's root, whose fx2
# takes its prologue two elements at a time, beside the same source with the element-wise prologue swapped back in
# (--swap), each twice in one run; the same for the sampling softmax (to_float32 of bf16 logits, whose fx2 does
# nothing). Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/softcap_pairs_ab.sh   -> $OUT/probe_softcap_pairs_ab.*
. benchmarks/plans/common.sh
OLD='reinterpret_cast<unsigned*>(pk[i].v)[j] = fx2(reinterpret_cast<const unsigned*>(pk[i].v)[j]);=>{ pk[i].v[2 * j] = narrow(xv(pk[i].v[2 * j])); pk[i].v[2 * j + 1] = narrow(xv(pk[i].v[2 * j + 1])); }'
C="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true"
probe softcap ${T:-120} --only "=softcap softmax [64,262144] bf16" --params "$C" --swap "$OLD"
probe sampling ${T:-120} --only "=sampling softmax [64,262144] bf16 -> fp32" --params "$C" --swap "$OLD"
collect softcap_pairs_ab
