#!/usr/bin/env bash
# Device call C: end-to-end GPU tests (ResNet-50 cold/warm cache, LLM search), the prewarm CLI and two examples.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1 || echo install-failed
export PYTHONUNBUFFERED=1 TEST_ARTIFACTS_DIR=$OUT
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_backend_gpu.py tests/test_llm_search_gpu.py -s -rf 2>&1 | grep -vE "Warning|warn\(" | tee $OUT/e2e_tests.log | tail -12
export KFORGE_CACHE_DIR=/tmp/kc-pre
timeout 120 kforge prewarm examples/quickstart.py --iterations 12 2>&1 | tee $OUT/prewarm.log | tail -22
timeout 20 kforge cache ls 2>&1 | tail -8
timeout 150 python3 examples/resnet50.py 2>&1 | grep -vE "Warning|warn\(" | tee $OUT/resnet50_example.log | tail -25
timeout 100 python3 examples/sd35_vae.py --setting bf16_512 2>&1 | grep -vE "Warning|warn\(" | tee $OUT/vae_example.log | tail -25
