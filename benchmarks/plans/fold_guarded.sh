#!/usr/bin/env bash
# The relay softmaxes' exps folded into one FFMA and one ex2 where the max is small, exact elsewhere (probe_variants.py
# --swap, the same run). The twenty-ninth session's folds (exp2_fold.sh) failed the fp32 verifier on large logits:
# x * log2e - m * log2e loses |m| * 2^-24 to the rounding of m * log2e. Guarded by |m| <= 32 (a branch a warp takes
# as one), that loss is at most 2.8e-6 of an exp, and larger maxima take the exact code. Swap 0 the write
# (ex2(x * log2e - (m * log2e + log2 sum))), swap 1 the reduce (ex2(x * log2e - m * log2e)), swap 2 both; each root
# and its swaps in two rounds of one run (the root twice a round: as the case's root and as --params). Run on the
# device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/fold_guarded.sh   -> $OUT/probe_fold_guarded.json, .log
. benchmarks/plans/common.sh
S=benchmarks/plans/fold_guarded_swaps.py
for round in 1 2; do
  for c in "softmax [64,262144] bf16:bf16" "softcap softmax [64,262144] bf16:cap" "softmax [64,262144] fp32:bf16"; do
    case_=${c%:*} kind=${c##*:}
    mapfile -t sw < <(python3 $S "$kind")
    probe "$(echo "$case_" | tr -c 'a-z0-9' '_')$round" "${T:-90}" --only "=$case_" --params "$(root_of "$case_")" \
      --swap "${sw[0]}" --swap "${sw[1]}" --swap "${sw[2]}"
  done
done
collect fold_guarded
