#!/usr/bin/env bash
# The relay roots' resolvers with several reads of each word in flight (knob polls: Note [a row's words polled
# several at a time] in templates/relay.py; needs the trial's code) beside the roots, each twice in one run
# (`twice`), on the rows of >= 64 MB nearest the bar, then the bf16 softmax's timeline with polls=4. Run on the device
# after `benchmarks/run_device.sh setup`:   OUT=$OUT bash benchmarks/plans/polls.sh   -> $OUT/probe_polls.*, $OUT/tr
. benchmarks/plans/common.sh
for c in "softmax [64,262144] bf16" "softcap softmax [64,262144] bf16" "group_norm [1,512,128,128] fp32"; do
  r=$(root_of "$c")
  T=${T:-100} twice "$c" "$r,backoff=16" "$r,backoff=64" "$r,backoff=256"
done
collect polls
timeline "softmax [64,262144] bf16" "$(root_of "softmax [64,262144] bf16"),backoff=64"
