#!/usr/bin/env bash
# Writers of their own against the joint relay (Note [writers of their own] in templates/relay_pipeline.py), same run
# per case: the root (first in every probe), the layouts around it, and the root's rival again last (the spread of one
# layout timed twice). Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/writers_probe.sh    -> $OUT/probe_<part>/probe.json, $OUT/probe_<part>.log
. benchmarks/plans/common.sh
W8="strategy=relay,vec=8,pe=16384,nc=1,nw=8,writers=true"  # 2-byte elements: 32 KB pieces
J8="strategy=relay,vec=8,pe=16384,nc=1,nw=16,lag=3"
W4="strategy=relay,vec=4,pe=8192,nc=1,nw=8,writers=true"  # 4-byte elements: 32 KB pieces
J4="strategy=relay,vec=4,pe=8192,nc=1,nw=16,lag=3"
probe gn16 "${T16:-200}" --only "=group_norm [1,512,256,256] bf16" --only "group_norm [2,1536,64,64] bf16" \
  --only "group_norm [1,512,128,128] bf16" --only "group_norm [1,128,1024,1024] bf16" \
  --params "$J8,k=6" --params "$W8,k=7" --params "$W8,k=5" --params "${W8/nw=8/nw=4},k=6" \
  --params "${W8/pe=16384/pe=8192},k=10" --params "$J8,k=6,hold=true" --params "$W8,k=6"
probe gn32 "${T32:-170}" --only "=group_norm [1,512,256,256] fp32" --only "group_norm [2,1536,64,64] fp32" \
  --only "group_norm [1,512,128,128] fp32" --only "group_norm [1,128,1024,1024] fp32" \
  --params "$J4,k=6" --params "$W4,k=7" --params "${W4/nw=8/nw=4},k=6" --params "${W4/pe=8192/pe=4096},k=10" \
  --params "$J4,k=6,hold=true" --params "$W4,k=6"
probe sm16 "${TS:-60}" --only "=softmax [64,262144] bf16" \
  --params "$W8,k=6" --params "$W8,k=7" --params "${W8/pe=16384/pe=8192},k=10" --params "$J8,k=6,hold=true" \
  --params "$J8,k=6"
probe sm32 "${TS:-60}" --only "=softmax [64,262144] fp32" \
  --params "$W4,k=6" --params "$W4,k=7" --params "${W4/pe=8192/pe=4096},k=10" --params "$J4,k=6,hold=true" \
  --params "$J4,k=6"
probe cap "${TS:-60}" --only "softcap softmax" \
  --params "${W8/pe=16384/pe=8192},k=10,once=true" --params "${W8/pe=16384/pe=8192},k=8,once=true" \
  --params "$W8,k=6,once=true" --params "strategy=relay,vec=8,pe=8192,nc=1,nw=16,k=10,lag=4,once=true"
collect writers
