#!/usr/bin/env bash
# Note [row norms walked with the next rows' loads in flight] (templates/norm.py, strategy walk), first on a GPU. One
# call, about 4 minutes after the setup, on an H100 or an H200 (every comparison is within one run on one GPU):
#   1. the GPU verifier on the walks (test_row_norm_walk_passes_the_verifier) and on the row norms' sampled space at odd
#      sizes, whose seeds now include a walk;
#   2. MMDiT's adaLN norm [1,4096,1536] bf16 with and without the residual add before it (a prologue) and the plain
#      layer/rms norms [4096,2048] bf16: each case's root, then its walks (blocks a row of 64, 128 and the row's fit,
#      2-16 blocks an SM; rows of 32 threads in blocks of 128 and 256); the two adaLN cases twice;
#   3. the ops rows of the adaLN norms and of the norms [4096,2048] with 25-iteration searches (the walk is a seed).
#   4. kforge nodes in Inductor's code, the op's call against the direct one (benchmarks/bench_inductor_call.py).
# SHORT=1 (about 2.5 minutes, for a call on little device time): the verifier and each case once, no ops rows.
#   bash benchmarks/plans/norm_walk.sh   -> $OUT/r.tgz (t1/, probe_norm_walk.json/.log, ops/)
. benchmarks/plans/common.sh
n=0
bash benchmarks/run_device.sh setup
pack() { (cd "$OUT" && tar czf /tmp/r.tgz --exclude=r.tgz . && mv /tmp/r.tgz "$OUT/r.tgz"); }
(OUT=$OUT/t1 T=${TT:-90} bash benchmarks/run_device.sh tests tests/test_templates_gpu.py \
  -k "row_norm_walk or (odd_sizes and norm and not group_norm and not batch_norm)" | tail -4); pack
cases=("adaLN norm [1,4096,1536] bf16" "residual adaLN norm [1,4096,1536] bf16" "layer_norm [4096,2048] bf16"
  "rms_norm [4096,2048] bf16")
[ -n "${SHORT:-}" ] || cases+=("${cases[@]:0:2}")
for c in "${cases[@]}"; do
  probe "$((++n))$(echo "$c" | tr -c 'a-z0-9' '_')" "${TP:-45}" --only "=$c" --strategy walk
done
collect norm_walk; pack
[ -n "${SHORT:-}" ] || { (OUT=$OUT/ops T=${TO:-150} bash benchmarks/run_device.sh ops --quick-iterations 25 \
  --rows adaln --rows 'layer_norm [4096' --rows 'rms_norm [4096' | tail -8); pack; }
(timeout 150 python3 benchmarks/bench_inductor_call.py --out "$OUT/inductor_call" > "$OUT/inductor_call.log" 2>&1
  tail -4 "$OUT/inductor_call.log"); pack
nvidia-smi --query-gpu=name,driver_version --format=csv
cd "$OUT" && ls | grep -v '^r.tgz$' | xargs rm -rf
