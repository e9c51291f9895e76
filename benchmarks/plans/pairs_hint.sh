#!/usr/bin/env bash
# (Knob pairs was a trial, removed after this run: Note [stores of whole sectors] in softmax_relay.py says what it did
# and what it measured; its --params are invalid on the code that followed.)
# Knob pairs (a reduce two elements at a time, its Note gone with it) at the soft cap (with halves) and the bf16
# softmax, each layout timed twice, alternately; and every layout again with its mbarrier waits given a suspend-time
# hint (--swap: 2 us, then 1 ms), also at the fp32 softmax and the two fp32 group norms below 80% (their roots, twice).
# Run on the device after `benchmarks/run_device.sh setup`:
#   OUT=$OUT bash benchmarks/plans/pairs_hint.sh   -> $OUT/probe_pairs_hint.json, .log
. benchmarks/plans/common.sh
S0='mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;'
A=(--swap "$S0=>${S0%;}, 2000;" --swap "$S0=>${S0%;}, 1000000;")
H="strategy=relay,vec=8,pe=8192,nw=16,nc=1,k=10,lag=4,ramp=2,once=true,halves=true"
probe softcap 200 --only "=softcap softmax [64,262144] bf16" --params "$H" --params "$H,pairs=true" --params "$H" \
  --params "$H,pairs=true" "${A[@]}"
B="strategy=relay,vec=8,pe=16384,nw=16,nc=1,k=6,lag=3,ramp=1"
probe bf16 150 --only "=softmax [64,262144] bf16" --params "$B,pairs=true" --params "$B" --params "$B,pairs=true" "${A[@]}"
probe fp32 90 --only "=softmax [64,262144] fp32" --params "strategy=relay,vec=4,pe=8192,nw=16,nc=1,k=6,lag=3,ramp=1" \
  "${A[@]}"
G="strategy=relay,vec=4,pe=8192,nw=8,nc=1,k=7,writers=true,ramp=2"
probe gn_small 90 --only "=group_norm [1,512,128,128] fp32" --params "$G" "${A[@]}"
probe gn_two 90 --only "=group_norm [2,1536,64,64] fp32" --params "$G" "${A[@]}"
collect pairs_hint
