#!/usr/bin/env bash
# The relay's start-up check of its progress rule for its own grid (Note [rows relayed through global memory] in
# templates/relay.py, Note [the GPU's SM count in a plan] in contract.py): the roots of the relay rows of >= 64 MB
# with the check beside the same source without it (a --swap that removes the line), each twice in one run. Run on
# the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/relay_grid.sh   -> $OUT/relay_grid_joint.json, $OUT/probe_relay_grid_writers.json
#   (and their .log; the first is moved out of the way of the second's `collect`)
. benchmarks/plans/common.sh
J='  if (!(LAG >= (PPR + NB - 1) / NB - 1)) return;=>'
W='  if (!(K >= (PPR + NB - 1) / NB + 1)) return;=>'
T=${T1:-150} swap_roots relay_grid_joint "$J" "softmax [64,262144] bf16" "softcap softmax [64,262144] bf16" \
  "softmax [64,262144] fp32"
for e in json log; do mv "$OUT/probe_relay_grid_joint.$e" "$OUT/relay_grid_joint.$e"; done
T=${T2:-120} swap_roots relay_grid_writers "$W" "group_norm [1,512,128,128] fp32"
