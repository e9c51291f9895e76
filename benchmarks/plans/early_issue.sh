#!/usr/bin/env bash
# The relay roots' start (thirty-sixth session; results/h200/probe_session36_early_issue.json and
# trace_session36_softmax.*; swap 0 became the code after it, so on later code swaps 0 and 2 find nothing to
# replace). The group norm [1,512,128,128] fp32 root's timelines put 0.77 us between a block's start and its first
# bulk copy: the copy waits for thread 0's barrier inits, the block's __syncthreads and the loader warp's branch
# (code the L2 flush before each timed call may have evicted). In one run, each root beside three swaps of its
# source, twice over: [swap 0] the publisher left out of the epoch's count (publisher_uncounted.sh), [swap 1] thread
# 0 issues the block's first RAMP copies itself, right after it initialises the barriers and before the block's
# barrier (the loader starts at copy RAMP), [swap 2] both. Then the softmax [64,262144] bf16 root's timeline as the
# code is. Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/early_issue.sh  -> $OUT/probe_early_issue.json/.log, $OUT/tr/trace.log
. benchmarks/plans/common.sh
PUB=$'as soon as reduced\n    const unsigned mark = relay_mark(epoch, ctl, &fin, NC + 1);'
UNCOUNTED="$PUB=>${PUB%%const*}const unsigned mark = (__shfl_sync(0xffffffffu, epoch, 0) & 1u) ^ 1u;  // not counted"
UNCOUNTED+=" && relay_mark(epoch, ctl, &fin, NC + 1)=>relay_mark(epoch, ctl, &fin, NC)"
INIT='"fence.mbarrier_init.release.cluster;" ::: "memory");'
EARLY="$INIT=>$INIT for (long long t = 0; t < (n < RAMP ? n : RAMP); ++t) { const long long g = blockIdx.x + t * NB,"
EARLY+=" row = g / PPR; const int c0 = (int)(g - row * PPR) * PE; slot_load(slots + t * PE, x + row * COLS + c0,"
EARLY+=" (unsigned)(min(PE, COLS - c0) * sizeof(T)), full + t); }"
EARLY+=" && for (long long t = 0; t < K=>for (long long t = RAMP; t < K"
for c in "group_norm [1,512,128,128] fp32" "group_norm [2,1536,64,64] fp32" "softmax [64,262144] bf16" \
         "softcap softmax [64,262144] bf16"; do
  probe "$(echo "$c" | tr -c 'a-z0-9' '_')" "${T:-90}" --only "=$c" --params "$(root_of "$c")" \
    --swap "$UNCOUNTED" --swap "$EARLY" --swap "$UNCOUNTED && $EARLY"
done
collect early_issue
OUT=$OUT/tr T=60 bash benchmarks/run_device.sh trace --case "=softmax [64,262144] bf16" --launches 1 | head -30
