#!/usr/bin/env bash
# Note [Inductor's code calls the kernel, not the op] (forge_backend/inductor_call.py) on a GPU machine's host. One
# call on any GPU, about 8 minutes after the setup (every comparison within one run on one machine):
#   1. benchmarks/bench_inductor_call.py: a graph of 16 kforge nodes compiled by Inductor, the op's call against the
#      direct one, and the launcher in a Python loop;
#   2. benchmarks/bench_overhead.py: one call through the launcher, the op, call_kernel, ATen's relu, a graph replay;
#   3. bench_models.py --op-calls (kforge+Inductor with the direct calls and with the op's, in the same interleaved
#      rounds) on SD3.5's MMDiT, whose residual adaLN norms the gate's 2 us host charge now replaces (21.8 < 21.9 us
#      by the H200's numbers), and Qwen 3.5 (3 nodes replaced inside Inductor: on an H100, 0.997x, fifty-eighth
#      session).
#   bash benchmarks/plans/direct_calls.sh   -> $OUT/r.tgz (inductor_call.*, overhead.*, m/models.*)
. benchmarks/plans/common.sh
bash benchmarks/run_device.sh setup
pack() { (cd "$OUT" && tar czf /tmp/r.tgz --exclude=r.tgz . && mv /tmp/r.tgz "$OUT/r.tgz"); }
(timeout 150 python3 benchmarks/bench_inductor_call.py --out "$OUT/inductor_call" > "$OUT/inductor_call.log" 2>&1
  tail -4 "$OUT/inductor_call.log"); pack
(OUT=$OUT bash benchmarks/run_device.sh overhead | tail -6); pack
(OUT=$OUT/m T=${TM:-420} bash benchmarks/run_device.sh models --models sd35_mmdit::bf16_txt333,qwen35_moe::eager_attn \
  --rounds 20 --op-calls \
  | cut -c1-600); pack
nvidia-smi --query-gpu=name,driver_version --format=csv
cd "$OUT" && ls | grep -v '^r.tgz$' | xargs rm -rf
