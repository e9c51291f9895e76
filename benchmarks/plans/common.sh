# Sourced by the probe plans: the environment, `probe PART SECONDS ARGS...` (one probe_variants.py run into
# $OUT/probe_PART, its summary lines printed) and `collect NAME` (every part's rows into $OUT/probe_NAME.json and their
# logs into $OUT/probe_NAME.log: the device tool brings back only a few files), `root_of CASE` (a probe case's root
# as k=v,k=v), `swap_roots NAME SWAP CASE...` (each case's root timed beside a --swap of its source, twice) and
# `twice CASE VARIANT...` (a case's root beside variants given as k=v,k=v, twice) and `timeline CASE [PARAMS]` (one
# launch's relay timeline into $OUT/tr, its summary lines printed).
set -uo pipefail
OUT=${OUT:-/tmp/kforge-out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
probe() {
  local part=$1 secs=$2; shift 2
  timeout "$secs" python3 benchmarks/probe_variants.py --out "$OUT/probe_$part" "$@" > "$OUT/probe_$part.log" 2>&1
  grep -aE "^==|us .*bw|FAILED|invalid|copy" "$OUT/probe_$part.log" | cut -c1-150
}
collect() {
  python3 - "$OUT" "$1" <<'PY'
import json, sys
from pathlib import Path
out, name = Path(sys.argv[1]), sys.argv[2]
rows = [r for p in sorted(out.glob("probe_*/probe.json")) for r in json.loads(p.read_text())]
(out / f"probe_{name}.json").write_text(json.dumps(rows, indent=1))
PY
  cat "$OUT"/probe_*.log > "$OUT/probe_$1.joined"
  rm -rf "$OUT"/probe_*/ "$OUT"/probe_*.log
  mv "$OUT/probe_$1.joined" "$OUT/probe_$1.log"
}
root_of() {  # a probe case's root as k=v,k=v (for --params)
  python3 - "$1" <<'PY'
import sys
sys.path.insert(0, "benchmarks")
import probe_variants as pv
from forge_backend.search.templates import family_for
card = {n: c for n, c, _ in pv.cases()}[sys.argv[1]]
root = family_for(card).root_params(card)
print(",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in root.items()))
PY
}
swap_roots() {  # swap_roots NAME SWAP CASE...: each case's root twice, each time beside SWAP applied to its source
  # (new, swapped, new, swapped in one run), every case's rows into $OUT/probe_NAME.json/.log
  local name=$1 swap=$2 c; shift 2
  for c in "$@"; do
    probe "$(echo "$c" | tr -c 'a-z0-9' '_')" "${T:-60}" --only "=$c" --params "$(root_of "$c")" --swap "$swap"
  done
  collect "$name"
}
twice() {  # twice CASE VARIANT...: the root, the variants, the root, the variants, in one probe_variants.py run
  local c=$1 root args=() p; shift
  root=$(root_of "$c")
  for p in "$@" "$root" "$@"; do args+=(--params "$p"); done
  probe "$(echo "$c" | tr -c 'a-z0-9' '_')" "${T:-100}" --only "=$c" "${args[@]}"
}
timeline() {  # timeline CASE [PARAMS]: benchmarks/trace_relay.py on one launch of CASE (its root, or PARAMS as
  # k=v,k=v), into $OUT/tr/trace.log, the summary's lines printed
  local params=()
  [ -n "${2:-}" ] && params=(--params "$2")
  OUT=$OUT/tr T=${T_TRACE:-90} bash benchmarks/run_device.sh trace --case "=$1" "${params[@]}" --launches 1 > /dev/null
  grep -aE "^==|resolve|publish|arrival|on chip|launch|^ +[0-9]+\.0 " "$OUT/tr/trace.log" | cut -c1-200
}
