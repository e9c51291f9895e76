#!/usr/bin/env bash
# The resident softmax (Note [a tensor held on chip whole] in templates/resident.py) against each case's root, same
# run per case: the root (first in every probe), resident layouts, and the root's layout again last (the spread of
# one layout timed twice); a plain copy of 64 MiB for scale. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/resident_probe.sh    -> $OUT/probe_resident.json, $OUT/probe_resident.log
. benchmarks/plans/common.sh
R="strategy=resident,vec=8"
J8="strategy=relay,vec=8,pe=16384,nc=1,nw=16,lag=3,k=6"  # the bf16 softmax's root until the ramp
C8="strategy=relay,vec=8,pe=8192,nc=1,nw=16,k=10,lag=4,once=true"  # the fused softmaxes' root until the ramp
probe sm16 "${TS:-120}" --only "=softmax [64,262144] bf16" --copy 64 \
  --params "$R,nt=1024,rpt=2,ch=1024" --params "$R,nt=1024,rpt=2,ch=2048" --params "$R,nt=1024,rpt=2,ch=512" \
  --params "$R,nt=512,rpt=4,ch=1024" --params "$R,nt=1024,rpt=3,ch=1024" --params "$R,nt=1024,rpt=2,ch=256" \
  --params "$J8"
probe sm248 "${TS:-80}" --only "=softmax [64,248320] bf16" \
  --params "$R,nt=1024,rpt=1,ch=1024" --params "$R,nt=1024,rpt=2,ch=1024" --params "$R,nt=1024,rpt=1,ch=2048"
probe cap "${TS:-100}" --only "softcap softmax" \
  --params "$R,nt=1024,rpt=2,ch=1024" --params "$R,nt=1024,rpt=2,ch=2048" --params "$R,nt=512,rpt=4,ch=1024" \
  --params "$R,nt=1024,rpt=3,ch=1024" --params "$C8"
probe samp "${TS:-80}" --only "sampling softmax" \
  --params "$R,nt=1024,rpt=2,ch=1024" --params "$R,nt=512,rpt=4,ch=1024" --params "$C8"
collect resident
