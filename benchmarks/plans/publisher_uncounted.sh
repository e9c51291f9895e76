#!/usr/bin/env bash
# Run in the thirty-sixth session (results/h200/probe_session36_uncounted.json, trace_session36_gn.*); its swap became
# the code after it (Note [the publisher left out of the epoch's count]), so on later code it finds nothing to
# replace. Written in the thirty-fifth session, which had no device time left for it: the relay roots as they
# are and, in the same run, with the publisher left out of the epoch's count ([swap 0]): only the resolvers count
# themselves in (NC users a block, not NC + 1), after the block's __syncthreads, which already orders the publisher's
# early read of the epoch before them (Note [the epoch read before the first copies] in templates/relay.py), so no
# fence or global atomic precedes a block's first word. The probe verifies the swapped kernel like any variant, over
# launches in a row on one kept scratch, which a wrong count would break. Each root twice: new, swapped, new,
# swapped. Then the group norm [1,512,128,128] fp32 root's timeline as the code is (are the late first publishes of
# results/h200/trace_session35/ gone?). Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/publisher_uncounted.sh  -> $OUT/probe_uncounted.json/.log, $OUT/tr/trace.log
. benchmarks/plans/common.sh
PUB=$'as soon as reduced\n    const unsigned mark = relay_mark(epoch, ctl, &fin, NC + 1);'
SWAP="$PUB=>${PUB%%const*}const unsigned mark = (__shfl_sync(0xffffffffu, epoch, 0) & 1u) ^ 1u;  // not counted"
SWAP+=" && relay_mark(epoch, ctl, &fin, NC + 1)=>relay_mark(epoch, ctl, &fin, NC)"
swap_roots uncounted "$SWAP" "group_norm [1,512,128,128] fp32" \
  "group_norm [2,1536,64,64] fp32" \
  "softmax [64,262144] bf16" \
  "softcap softmax [64,262144] bf16"
OUT=$OUT/tr T=60 bash benchmarks/run_device.sh trace --case "=group_norm [1,512,128,128] fp32" --launches 1 | head -30
