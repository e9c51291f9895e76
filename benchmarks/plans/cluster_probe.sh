#!/usr/bin/env bash
# The relay's cluster exchange (Note [a row's statistic exchanged within its cluster] in templates/relay_cluster.py)
# against the global one, same run per case: the root (first in every probe), cluster layouts, and the root's layout
# again last (the spread of one layout timed twice). Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/cluster_probe.sh    -> $OUT/probe_cluster.json, $OUT/probe_cluster.log
. benchmarks/plans/common.sh
C4="strategy=relay,vec=4,pe=8192,writers=true,ring=2,ramp=2"  # 4-byte elements: 32 KB pieces
C8="strategy=relay,vec=8,pe=16384,writers=true,ring=2,ramp=1"  # 2-byte elements: 32 KB pieces
probe gn32 "${T32:-200}" --only "=group_norm [1,512,128,128] fp32" --only "=group_norm [2,1536,64,64] fp32" \
  --params "$C4,nw=4,k=7,cs=8,ncl=16" --params "$C4,nw=8,k=7,cs=8,ncl=16" --params "$C4,nw=4,k=6,cs=8,ncl=16" \
  --params "$C4,nw=8,k=7,cs=4,ncl=33" --params "$C4,nw=4,k=7,cs=4,ncl=33" --params "$C4,nw=4,k=7,cs=16,ncl=8" \
  --params "${C4/pe=8192/pe=4096},nw=4,k=12,cs=8,ncl=16" --params "${C4/ramp=2/ramp=1},nw=4,k=7,cs=8,ncl=16" \
  --params "$C4,nw=4,k=7,cs=8,ncl=16,ring=4" \
  --params "strategy=relay,vec=4,pe=8192,nc=1,nw=4,k=7,ramp=2,writers=true" \
  --params "strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,ramp=2,writers=true"
probe sm16 "${TS:-90}" --only "=softmax [64,262144] bf16" \
  --params "$C8,nw=8,k=6,cs=8,ncl=16" --params "$C8,nw=8,k=6,cs=4,ncl=33" --params "$C8,nw=8,k=6,cs=16,ncl=8" \
  --params "$C8,nw=4,k=6,cs=8,ncl=16" --params "${C8/pe=16384/pe=8192},nw=8,k=12,cs=8,ncl=16" \
  --params "${C8/ramp=1/ramp=2},nw=8,k=6,cs=8,ncl=16" \
  --params "strategy=relay,vec=8,pe=16384,nc=1,nw=16,k=6,lag=3,ramp=1"
probe cap "${TC:-80}" --only "softcap softmax" \
  --params "strategy=relay,vec=8,pe=8192,writers=true,ring=2,ramp=2,once=true,halves=true,nw=8,k=10,cs=8,ncl=16" \
  --params "strategy=relay,vec=8,pe=8192,writers=true,ring=2,ramp=2,once=true,halves=true,nw=8,k=10,cs=4,ncl=33" \
  --params "strategy=relay,vec=8,pe=16384,writers=true,ring=2,ramp=2,once=true,halves=true,nw=8,k=6,cs=8,ncl=16" \
  --params "strategy=relay,vec=8,pe=8192,nc=1,nw=16,k=10,lag=4,ramp=2,once=true,halves=true"
collect cluster
