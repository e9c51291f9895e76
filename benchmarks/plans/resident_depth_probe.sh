#!/usr/bin/env bash
# The resident softmax's copies in flight (Note [copies in flight] in templates/resident.py) at [64,262144] bf16, same
# run: the root (the relay) first and last, resident layouts with all copies at once, a few at a time issued by
# thread 0 or by a loader warp of its own; then the fold's rescale on a growing max against a rescale at every pack
# (--swap). Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/resident_depth_probe.sh   -> $OUT/probe_depth.log, $OUT/p2/probe.json, $OUT/p3/...
. benchmarks/plans/common.sh
R="strategy=resident,vec=8"
ps=(--params "$R,nt=1024,rpt=2,ch=1024" --params "$R,nt=512,rpt=4,ch=1024,depth=2")
for d in 2 4 6; do ps+=(--params "$R,nt=1024,rpt=2,ch=1024,depth=$d,loader=true"); done
ps+=(--params "$R,nt=512,rpt=3,ch=1024,depth=4,loader=true" --params "$R,nt=1024,rpt=2,ch=2048,depth=2,loader=true")
ps+=(--params "strategy=relay,vec=8,pe=16384,nc=1,nw=16,lag=3,k=6")
timeout 200 python3 benchmarks/probe_variants.py --out "$OUT/p2" --only "=softmax [64,262144] bf16" "${ps[@]}" \
  > "$OUT/probe_depth.log" 2>&1
timeout 120 python3 benchmarks/probe_variants.py --out "$OUT/p3" --only "=softmax [64,262144] bf16" \
  --params "$R,nt=1024,rpt=2,ch=1024,depth=4,loader=true" --params "$R,nt=512,rpt=4,ch=1024,depth=2" \
  --swap "if (pm > ms.x)=>if (true)" >> "$OUT/probe_depth.log" 2>&1
grep -aE "^==|us .*bw|FAILED|invalid" "$OUT/probe_depth.log" | cut -c1-160
