#!/usr/bin/env bash
# The fifty-fifth session made a re-verification also time a record timed on another GPU model (Note [a record
# timed on another GPU model] in forge_backend/store/reverified.py): on an H100, each shipped (H200) kernel is timed in
# three fresh runs, kept with the H100's times, or not used where it does not beat eager there by the margin. One
# call on any sm_90 GPU, about 3 minutes after the setup; on an H100 it is the first run of that path, on an H200 it
# checks that nothing is re-timed there:
#   * the shipped kernels' GPU test (each passes the verifier; shipped_reverify.txt lists each one's time here, and
#     which a compile there would not use);
#   * `kforge cache verify --shipped --gpu` on an empty cache (the user's command), then `kforge cache ls`, whose
#     rows are now this GPU's times for the re-timed copies.
#   bash benchmarks/plans/shipped_on_this_gpu.sh   -> $OUT/r.tgz (t/, verify.log, ls.log)
set -u
OUT=${OUT:-/tmp/kforge-out}
export PYTHONPATH=/tmp/site:$PWD
bash benchmarks/run_device.sh setup
pack() { (cd "$OUT" && tar czf /tmp/r.tgz --exclude=r.tgz . && mv /tmp/r.tgz "$OUT/r.tgz"); }
(OUT=$OUT/t T=200 bash benchmarks/run_device.sh tests tests/test_shipped_kernels.py | tail -3); pack
export KFORGE_CACHE_DIR=/tmp/kforge-shipped-check
rm -rf "$KFORGE_CACHE_DIR"
(timeout 240 python3 -m forge_backend cache verify --shipped --gpu > "$OUT/verify.log" 2>&1; echo "rc=$?" >> "$OUT/verify.log"
 tail -6 "$OUT/verify.log"); pack
(COLUMNS=200 timeout 30 python3 -m forge_backend cache ls > "$OUT/ls.log" 2>&1); pack
nvidia-smi --query-gpu=name,driver_version --format=csv
cd "$OUT" && ls | grep -v '^r.tgz$' | xargs rm -rf
