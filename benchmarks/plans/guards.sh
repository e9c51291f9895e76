#!/usr/bin/env bash
# The relay's range tests left out where no piece runs past its row (COLS a multiple of PE: every row of these cases).
# The consumers test each 16-byte pack against the row's end (`c0 + wc + ... < COLS` in the reduce, `col < COLS` or
# `e < COLS` in the write). ptxas then keeps each pack in a branch of its own: the write reads one pack from the slot,
# takes its exps and stores it before it reads the next (four shared-memory round trips a piece where one would do),
# and the reduce's exps run pack by pack. Without the tests (SASS compiled here with NVRTC for sm_90, nvdisasm) the
# write issues its four LDS.128 at once and interleaves the 32 exps of a lane. Each root twice beside its swap
# (`swap_roots`, one probe run a case; the verifier checks every swap). Run on the device after
# `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/guards.sh   -> $OUT/{sm,gn}/probe_guards_*.json, .log
. benchmarks/plans/common.sh
R='if (c0 + wc + (i * 32 + lane) * VEC < COLS)=>if (true)'
ALL=$OUT
mkdir -p "$ALL/sm" "$ALL/gn"  # a directory each: collect takes every probe_*.log it finds
OUT=$ALL/sm T=${T:-100} swap_roots guards_softmax "$R && if (col < COLS) {=>{" "softmax [64,262144] bf16" \
  "softcap softmax [64,262144] bf16" "softmax [64,262144] fp32"
OUT=$ALL/gn T=${T:-100} swap_roots guards_gn "$R && if (e < COLS) {=>{" "group_norm [1,512,128,128] fp32"
