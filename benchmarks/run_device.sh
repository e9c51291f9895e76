#!/usr/bin/env bash
# The one script for the GPU machine (see /work/.library/device): install what the image lacks from the carried
# wheels (.whl: diskcache, openai and its dependencies, diffusers; benchmarks/device_wheels.sh fetches them here),
# then, by the first argument:
#   tests   the GPU tests (templates, runtime isolation, planted kernels, ResNet-50 cold/warm cache, LLM search);
#           the whole suite no longer fits one call (forty-sixth session, cold: 247 of 341 tests in 530 s; forty-
#           seventh, cold, with every test's duration: 348 s for every test but tests/test_templates_gpu.py, of
#           which the two ResNet-50 cold/warm tests 115 s, the worker fault test 44 s and the green contexts' own
#           process 34 s, and 137 s for test_templates_gpu.py in two halves), so run it as two calls:
#           `tests --ignore=tests/test_templates_gpu.py tests` (T=560) and `tests tests/test_templates_gpu.py`
#   ops     benchmarks/bench_ops.py    -> ops.json/.md, first_kernels.json/.md
#   models  benchmarks/bench_models.py -> models.json/.md
#   models-split  the same on a 2-GPU machine, half the models per GPU (A=, B= choose the halves), merged
#   models-quiet  2-GPU kind, one call: the GPU-bound models side by side (A= on GPU 0, B= on GPU 1), then the
#            host-bound ones (Q=) one after another on GPU 0 with the whole host to themselves (a host-bound model
#            times the host: a neighbour's compile moves it by several percent); TA=, TQ= bound the two phases
#   session  2-GPU kind, one call: GPU 0 runs the GPU tests (T_TESTS s) then half A of the models, GPU 1 half B;
#            everything is packed into $OUT/results.tgz beside the merged models.md (the tool returns few files)
#   pair    2-GPU kind, one call: G0="STAGE ARGS" on GPU 0 and G1="STAGE ARGS" on GPU 1 side by side (each with its
#           own CPU half, cache and $OUT/g0, $OUT/g1; quotes in ARGS are honoured; "STAGE ARGS + STAGE ARGS" runs
#           stages one after another on that GPU; T0=, T1= bound each stage of a side),
#           packed into $OUT/results.tgz. For stages that time device
#           work only (tests, ops, probe): host-bound model timings want the host to themselves (models-split).
#   overhead benchmarks/bench_overhead.py -> overhead.json/.md
#   probe   benchmarks/probe_variants.py  -> probe.json (template variants timed without a search)
#   trace   benchmarks/trace_relay.py --case CASE [--params k=v,...] -> trace.json, trace.log (a relay's timeline)
#   ncu     CASE [k=v,k=v]: Nsight Compute on one probe variant (benchmarks/profile_variant.py) -> ncu_<case>.txt
#           (sections), .sass.csv (stall samples per SASS instruction), .ncu-rep
#   ui      `kforge ui`'s JSON polled each second while a prewarm searches (benchmarks/ui_watch.py; extra arguments
#           replace the prewarm's, default: examples/quickstart.py --iterations 12 --seconds-per-op 20) -> ui/
# Extra arguments go to the benchmark; T=SECONDS bounds the stage (default 540) so stages can share one call. Results and logs are written under $OUT, which the device tool brings back;
# copy them into benchmarks/results/h200/ and commit them. Each stage fits one 10-minute call.
# On a 2-GPU machine two stages can share a call: run `setup` first, then each stage with its own
# CUDA_VISIBLE_DEVICES, OUT and CPU set (taskset), in the background, and `wait`.
set -uo pipefail
what=${1:-tests}; shift || true
OUT=${OUT:-/tmp/kforge-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KFORGE_CACHE_DIR=${KFORGE_CACHE_DIR:-/tmp/kforge-cache}
if [ ! -e /tmp/site/.kforge-installed ]; then  # once per machine: stages may then run side by side, one per GPU
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
  touch /tmp/site/.kforge-installed
fi
export PYTHONPATH=/tmp/site:$PWD
pack() {  # everything under $OUT into $OUT/results.tgz (the device tool brings back only a few files), plus $@
  local keep; keep=$(mktemp -d)
  tar czf "$keep/results.tgz" -C "$OUT" . && { [ $# -eq 0 ] || cp "$@" "$keep"/ 2>/dev/null; }
  rm -rf "${OUT:?}"/* && mv "$keep"/* "$OUT"/
}
case "$what" in
  setup)  ;;  # only the install above
  ui)     # the live page over real searches: polls, final views and ui_watch.md under $OUT/ui
    timeout ${T:-540} python3 benchmarks/ui_watch.py --out "$OUT/ui" -- python3 -m forge_backend prewarm \
      "${@:-examples/quickstart.py}" $( [ $# -eq 0 ] && echo --iterations 12 --seconds-per-op 20 ) \
      > "$OUT/ui_watch.log" 2>&1
    tail -c 2500 "$OUT/ui_watch.log" | tr -cd '\11\12\15\40-\176' ;;
  tests)  # extra arguments choose test files (default: every GPU-marked test)
    TEST_ARTIFACTS_DIR=$OUT timeout ${T:-540} python3 -m pytest -q -p no:cacheprovider -m gpu -W ignore -rfs --durations=12 "${@:-tests}" > "$OUT/gpu_tests.log" 2>&1
    tail -c 2500 "$OUT/gpu_tests.log" | tr -cd '\11\12\15\40-\176' ;;
  models-split)  # two GPUs, one call: the models in two halves side by side, one GPU and half the CPUs each
            half=$(( $(nproc) / 2 ))
            CUDA_VISIBLE_DEVICES=0 OUT=$OUT/g0 KFORGE_CACHE_DIR=/tmp/kc0 taskset -c 0-$((half - 1)) \
              bash "$0" models --models "${A:-sd35_vae::bf16_1024,qwen35_moe::eager_attn}" "$@" & p0=$!
            CUDA_VISIBLE_DEVICES=1 OUT=$OUT/g1 KFORGE_CACHE_DIR=/tmp/kc1 taskset -c $half-$((2 * half - 1)) \
              bash "$0" models --models "${B:-resnet50::fp16_b1,sd35_mmdit::bf16_txt333,gemma4::eager_attn}" "$@" & p1=$!
            wait $p0 $p1
            python3 benchmarks/bench_models.py --merge "$OUT/g0" "$OUT/g1" --out "$OUT" "$@" ;;
  models-quiet)
            half=$(( $(nproc) / 2 ))
            CUDA_VISIBLE_DEVICES=0 OUT=$OUT/g0 KFORGE_CACHE_DIR=/tmp/kc0 T=${TA:-300} taskset -c 0-$((half - 1)) \
              bash "$0" models --models "${A:-sd35_vae::bf16_1024,gemma4::eager_attn}" "$@" & p0=$!
            CUDA_VISIBLE_DEVICES=1 OUT=$OUT/g1 KFORGE_CACHE_DIR=/tmp/kc1 T=${TA:-300} \
              taskset -c $half-$((2 * half - 1)) bash "$0" models --models "${B:-sd35_mmdit::bf16_txt333}" "$@" & p1=$!
            wait $p0 $p1
            CUDA_VISIBLE_DEVICES=0 OUT=$OUT/g2 KFORGE_CACHE_DIR=/tmp/kc2 T=${TQ:-280} \
              bash "$0" models --models "${Q:-qwen35_moe::eager_attn,resnet50::fp16_b1}" "$@"
            python3 benchmarks/bench_models.py --merge "$OUT/g0" "$OUT/g1" "$OUT/g2" --out "$OUT" "$@" \
              --layout "GPU-bound models side by side on two GPUs (g0, g1), then host-bound ones alone on GPU 0 (g2)"
            pack "$OUT"/models*.md ;;
  session)  half=$(( $(nproc) / 2 ))
            ( export CUDA_VISIBLE_DEVICES=0 KFORGE_CACHE_DIR=/tmp/kc0
              OUT=$OUT/tests T=${T_TESTS:-240} taskset -c 0-$((half - 1)) bash "$0" tests | tail -3
              OUT=$OUT/g0 taskset -c 0-$((half - 1)) \
                bash "$0" models --models "${A:-sd35_vae::bf16_1024,qwen35_moe::eager_attn}" "$@" ) & p0=$!
            ( export CUDA_VISIBLE_DEVICES=1 KFORGE_CACHE_DIR=/tmp/kc1
              OUT=$OUT/g1 taskset -c $half-$((2 * half - 1)) \
                bash "$0" models --models "${B:-resnet50::fp16_b1,sd35_mmdit::bf16_txt333,gemma4::eager_attn}" "$@" ) & p1=$!
            wait $p0 $p1
            python3 benchmarks/bench_models.py --merge "$OUT/g0" "$OUT/g1" --out "$OUT" "$@"
            pack "$OUT"/models*.md; ls "$OUT" ;;
  pair)     half=$(( $(nproc) / 2 ))
            [ -n "${G0:-}" ] && [ -n "${G1:-}" ] || { echo 'pair needs G0="stage args" and G1="stage args"'; exit 2; }
            side() {  # side GPU CPUS SECONDS "STAGE ARGS + STAGE ARGS": the stages one after another on one GPU
              local gpu=$1 cpus=$2 t=$3 st
              while IFS= read -r st; do
                ( eval "set -- $st"; CUDA_VISIBLE_DEVICES=$gpu OUT=$OUT/g$gpu KFORGE_CACHE_DIR=/tmp/kp$gpu T=$t \
                    taskset -c "$cpus" bash "$0" "$@" )
              done <<< "${4// + /$'\n'}"
            }
            side 0 0-$((half - 1)) "${T0:-${T:-540}}" "$G0" > "$OUT/g0.txt" 2>&1 & p0=$!
            side 1 $half-$((2 * half - 1)) "${T1:-${T:-540}}" "$G1" > "$OUT/g1.txt" 2>&1 & p1=$!
            wait $p0 $p1
            tail -c 3000 "$OUT/g0.txt" | cut -c1-200; tail -c 5000 "$OUT/g1.txt" | cut -c1-200
            pack ;;
  ops)      timeout ${T:-560} python3 benchmarks/bench_ops.py --out "$OUT" "$@" > "$OUT/ops.log" 2>&1
            grep -aE "eager .* ind " "$OUT/ops.log" | cut -c1-320 ;;
  models)   timeout ${T:-560} python3 benchmarks/bench_models.py --out "$OUT" "$@" > "$OUT/models.log" 2>&1
            grep -aE "^[a-z0-9_]+(::[a-z0-9_]+)?: " "$OUT/models.log" | cut -c1-700 ;;
  probe)    timeout ${T:-300} python3 benchmarks/probe_variants.py --out "$OUT" "$@" > "$OUT/probe.log" 2>&1
            tail -c 6000 "$OUT/probe.log" ;;
  trace)    timeout ${T:-200} python3 benchmarks/trace_relay.py --out "$OUT" "$@" > "$OUT/trace.log" 2>&1
            tail -c 6000 "$OUT/trace.log" ;;
  ncu)      # ncu CASE [k=v,k=v]: Nsight Compute's full set of sections on one variant of a probe case (the root by
            # default) -> $OUT/ncu_<case>.txt; the clocks are left alone, as METHOD.md asks
            [ $# -ge 1 ] || { echo 'ncu needs a probe case (and optionally k=v,k=v parameters)'; exit 2; }
            prof=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
            slug=$(printf '%s_%s' "$1" "${2:-root}" | tr -c 'A-Za-z0-9' '_' | cut -c1-90)
            timeout ${T:-300} "$prof" --clock-control none --profile-from-start off --set full --import-source yes \
              --export "$OUT/ncu_$slug" --force-overwrite \
              python3 benchmarks/profile_variant.py --case "$1" ${2:+--params "$2"} > "$OUT/ncu_$slug.log" 2>&1
            "$prof" --import "$OUT/ncu_$slug.ncu-rep" --page details > "$OUT/ncu_$slug.txt" 2>&1
            cat "$OUT/ncu_$slug.log" >> "$OUT/ncu_$slug.txt"
            # per SASS instruction: executed count and the warp-stall samples, for where the time goes
            "$prof" --import "$OUT/ncu_$slug.ncu-rep" --page source --print-source sass --csv \
              > "$OUT/ncu_$slug.sass.csv" 2>&1
            grep -aE "profiled|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Achieved Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|No kernels|rror" \
              "$OUT/ncu_$slug.txt" | head -40 ;;
  overhead) timeout 120 python3 benchmarks/bench_overhead.py --out "$OUT/overhead" > "$OUT/overhead.log" 2>&1
            cat "$OUT/overhead.log" ;;
  *) echo "usage: bash benchmarks/run_device.sh" \
       "setup|tests|ops|models|models-split|models-quiet|session|pair|probe|trace|ncu|overhead [args]"
     exit 2 ;;
esac
