#!/usr/bin/env bash
# The 4-byte group norms' relay root (writers of their own, seven 32 KB slots, a ramp of 2) against its neighbours at
# the fp32 rows of >= 64 MiB still under 80% of the copy bandwidth, same run per case: the root (probe_variants.py
# times it first), the variants, the root again last. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/gn_fp32_probe.sh    -> $OUT/probe_gn_fp32.json, $OUT/probe_gn_fp32.log
. benchmarks/plans/common.sh
R="strategy=relay,vec=4,pe=8192,nc=1,nw=8,k=7,writers=true,ramp=2"  # group_norm.own_writers for 4-byte groups
for case in "=group_norm [2,1536,64,64] fp32" "=group_norm [1,512,128,128] fp32"; do
  probe "$(echo "$case" | tr -cd '0-9')" "${TS:-120}" --only "$case" \
    --params "${R/ramp=2/ramp=1}" --params "${R/ramp=2/ramp=3}" \
    --params "${R/nw=8,k=7/nw=4,k=6}" --params "${R/nw=8,k=7/nw=4,k=7}" --params "${R/k=7/k=6}" \
    --params "${R/pe=8192,nc=1,nw=8,k=7/pe=4096,nc=1,nw=8,k=14}" --params "${R/pe=8192,nc=1,nw=8,k=7/pe=4096,nc=1,nw=4,k=14}" \
    --params "$R,hold=true" --params "$R"
done
probe big "${TB:-90}" --only "=group_norm [1,128,1024,1024] fp32" --params "${R/nw=8,k=7/nw=4,k=7}" \
  --params "${R/pe=8192,nc=1,nw=8,k=7/pe=4096,nc=1,nw=8,k=14}" --params "$R"
collect gn_fp32
