#!/usr/bin/env bash
# The causal conv1d's ``staged`` strategy (trial commit 2b618f3, reverted in the commit after it: Note [channels in
# lanes, rows staged for the copy engine: measured, not kept] in templates/conv_bands.py) beside the root
# (``bands``), every variant verified and timed in one run, the root and the staged defaults twice; with a copy of
# the row's bytes and Inductor's transpose of the same [2048, 8192] bf16. Needs the trial's code to run.
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/conv_staged.sh   -> $OUT/probe_conv_staged.json, .log
. benchmarks/plans/common.sh
CASE="causal_conv1d [1,8192,2048] bf16"
S="strategy=staged,vec=8"
probe conv "${T:-240}" --only "=$CASE" --params "$(root_of "$CASE")" \
  --params "$S,warps=4,r=4" --params "$S,warps=4,r=4,lanes=true" --params "$S,warps=4,r=4,cfirst=true" \
  --params "$S,warps=4,r=2" --params "$S,warps=4,r=8" --params "$S,warps=8,r=2" --params "$S,warps=2,r=8" \
  --params "$S,warps=4,r=7" --params "$S,warps=8,r=4" --params "$S,warps=2,r=4" \
  --params "$(root_of "$CASE")" --params "$S,warps=4,r=4" --transpose 2048x8192:bfloat16
probe aligned "${T2:-60}" --only "causal_conv1d aligned rows" --params "$S,warps=4,r=4" \
  --params "$S,warps=4,r=4,lanes=true"
collect conv_staged
