#!/usr/bin/env bash
# A resolver's reads of its row's words, more of them or fewer (Note [a row's words read more often, or less often:
# measured, not kept] in templates/relay.py): each trial's knob beside the root, each twice in one run (`twice`), on
# the rows of >= 64 MB nearest the bar, then the bf16 softmax's timeline with one setting. It needs a trial's code:
# at 24268ad (this text) knob backoff; at c63dc0b and ef9ce9d knob polls, with "$r,polls=2" "$r,polls=4" (and
# polls=8 at c63dc0b, with the fp32 softmax) as the variants and polls=4 in the timeline. Run on the device after
# `benchmarks/run_device.sh setup`:   OUT=$OUT bash benchmarks/plans/polls.sh   -> $OUT/probe_polls.*, $OUT/tr
. benchmarks/plans/common.sh
for c in "softmax [64,262144] bf16" "softcap softmax [64,262144] bf16" "group_norm [1,512,128,128] fp32"; do
  r=$(root_of "$c")
  T=${T:-100} twice "$c" "$r,backoff=16" "$r,backoff=64" "$r,backoff=256"
done
collect polls
timeline "softmax [64,262144] bf16" "$(root_of "softmax [64,262144] bf16"),backoff=64"
