#!/usr/bin/env bash
# Two machines for real (the Next of several sessions): the team store, the markers (Note [a search a teammate is
# running]) and `kforge prewarm --shard` have run only as CPU tests and as one GPU test that plays two machines on one
# GPU. On the 2-GPU kind, "machines" are processes with their own cache directory, GPU and half of the CPUs, sharing
# one team directory; the shipped records are hidden, so every signature is searched. About 6 minutes after the setup:
#   A  machines 0 and 1 prewarm the quickstart at once, --shard 0/2 and 1/2 (each searches its share, publishes);
#   B  machine 2, a fresh cache on GPU 0, prewarms it whole: it should search nothing and take every kernel from the
#      team, re-verified (status "shipped", the team's records' status in a prewarm);
#   C  machines 3 and 4, fresh caches and a fresh team, prewarm it whole at once with no shard: the markers should
#      split the signatures, each searched by one of them, the other taking its kernel at the end.
# benchmarks/two_machines_summary.py reads the prewarms' --json files and writes two_machines.md (the table per phase,
# and what each phase should show, checked).
#   bash benchmarks/plans/two_machines.sh   (kind nvidia-h100-x2 or nvidia-h200-x2)   -> $OUT/r.tgz
set -u
OUT=${OUT:-/tmp/kforge-out}
export PYTHONPATH=/tmp/site:$PWD KFORGE_SHIPPED_DIR=/tmp/no-shipped
bash benchmarks/run_device.sh setup
mkdir -p "$KFORGE_SHIPPED_DIR" "$OUT/json"
pack() { (cd "$OUT" && tar czf /tmp/r.tgz --exclude=r.tgz . && mv /tmp/r.tgz "$OUT/r.tgz"); }
half=$(( $(nproc) / 2 ))
machine() {  # machine N GPU TEAM [prewarm flags...]
  local n=$1 gpu=$2 team=$3; shift 3
  local cpus; [ "$gpu" = 0 ] && cpus=0-$((half - 1)) || cpus=$half-$(( $(nproc) - 1 ))
  CUDA_VISIBLE_DEVICES=$gpu KFORGE_CACHE_DIR=/tmp/machine$n KFORGE_TEAM_STORE=$team taskset -c "$cpus" \
    timeout 150 python3 -m forge_backend prewarm examples/quickstart.py --iterations 8 --seconds-per-op 30 \
    --json "$OUT/json/machine$n.json" "$@" > "$OUT/machine$n.log" 2>&1
  echo "machine $n rc=$?" >> "$OUT/machine$n.log"
}
rm -rf /tmp/machine* /tmp/team-a /tmp/team-c && mkdir -p /tmp/team-a /tmp/team-c
machine 0 0 /tmp/team-a --shard 0/2 & machine 1 1 /tmp/team-a --shard 1/2 & wait; pack
machine 2 0 /tmp/team-a; pack
machine 3 0 /tmp/team-c & machine 4 1 /tmp/team-c & wait; pack
ls -R /tmp/team-a /tmp/team-c > "$OUT/teams.txt"
python3 benchmarks/two_machines_summary.py "$OUT/json" --out "$OUT/two_machines.md"; pack
tail -n 30 "$OUT/two_machines.md"
nvidia-smi --query-gpu=name,driver_version --format=csv
cd "$OUT" && ls | grep -v '^r.tgz$' | xargs rm -rf
