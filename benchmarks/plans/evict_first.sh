#!/usr/bin/env bash
# The knob `evict` was measured, not kept: it exists only on trial commit 866a1af, where this plan runs.
# The relay's bulk copies with an evict-first L2 policy on the input (thirty-seventh session; Note [the input's lines
# first out of the L2: measured, not kept] in templates/relay.py; results/h200/probe_session37_evict*). In one run, each
# relay root (knob `evict` on, as the code has it) beside the same layout without the knob, twice over (root, plain,
# root, plain), next to a plain copy of 64 MiB. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/evict_first.sh  -> $OUT/probe_evict_first.json/.log
. benchmarks/plans/common.sh
for c in "group_norm [1,512,128,128] fp32" "softmax [64,262144] bf16" "softcap softmax [64,262144] bf16" \
         "group_norm [2,1536,64,64] fp32" "softmax [64,262144] fp32"; do
  root=$(root_of "$c")
  plain=$(echo "$root" | sed 's/,evict=true//; s/evict=true,//')
  probe "$(echo "$c" | tr -c 'a-z0-9' '_')" "${T:-75}" --only "=$c" --params "$plain" --params "$root" \
    --params "$plain" $([ "$c" = "group_norm [1,512,128,128] fp32" ] && echo --copy 64)
done
collect evict_first
