#!/usr/bin/env bash
# The one script for the GPU machine (see /work/.library/device): install what the image lacks from the carried
# wheels (.whl: diskcache, openai and its dependencies, diffusers), then, by the first argument:
#   tests   the GPU tests (templates, runtime isolation, planted kernels, ResNet-50 cold/warm cache, LLM search)
#   ops     benchmarks/bench_ops.py    -> ops.json/.md, first_kernels.json/.md
#   models  benchmarks/bench_models.py -> models.json/.md
#   overhead benchmarks/bench_overhead.py -> overhead.json/.md
#   probe   benchmarks/probe_variants.py  -> probe.json (template variants timed without a search)
# Extra arguments go to the benchmark; T=SECONDS bounds the stage (default 540) so stages can share one call. Results and logs are written under $OUT, which the device tool brings back;
# copy them into benchmarks/results/h200/ and commit them. Each stage fits one 10-minute call.
set -uo pipefail
what=${1:-tests}; shift || true
OUT=${OUT:-/tmp/kforge-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KFORGE_CACHE_DIR=${KFORGE_CACHE_DIR:-/tmp/kforge-cache}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
case "$what" in
  tests)  # extra arguments choose test files (default: every GPU-marked test)
    TEST_ARTIFACTS_DIR=$OUT timeout ${T:-540} python3 -m pytest -q -p no:cacheprovider -m gpu -W ignore -rf --durations=12 "${@:-tests}" > "$OUT/gpu_tests.log" 2>&1
    tail -c 2500 "$OUT/gpu_tests.log" | tr -cd '\11\12\15\40-\176' ;;
  ops)      timeout ${T:-560} python3 benchmarks/bench_ops.py --out "$OUT" "$@" > "$OUT/ops.log" 2>&1
            grep -aE "eager .* ind " "$OUT/ops.log" | cut -c1-200 ;;
  models)   timeout ${T:-560} python3 benchmarks/bench_models.py --out "$OUT" "$@" > "$OUT/models.log" 2>&1
            grep -aE "^[a-z0-9_]+(::[a-z0-9_]+)?: " "$OUT/models.log" | cut -c1-700 ;;
  probe)    timeout ${T:-300} python3 benchmarks/probe_variants.py --out "$OUT" "$@" > "$OUT/probe.log" 2>&1
            tail -c 6000 "$OUT/probe.log" ;;
  overhead) timeout 120 python3 benchmarks/bench_overhead.py > "$OUT/overhead.log" 2>&1; cat "$OUT/overhead.log"
            cp benchmarks/results/h200/overhead.* "$OUT"/ ;;
  *) echo "usage: bash benchmarks/run_device.sh tests|ops|models|probe|overhead [args]"; exit 2 ;;
esac
