# Sourced by the probe plans: the environment, `probe PART SECONDS ARGS...` (one probe_variants.py run into
# $OUT/probe_PART, its summary lines printed) and `collect NAME` (every part's rows into $OUT/probe_NAME.json and their
# logs into $OUT/probe_NAME.log: the device tool brings back only a few files).
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
