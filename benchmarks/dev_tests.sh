#!/usr/bin/env bash
# Device call A: install, then the GPU tests (templates first, then runtime, then the ResNet end-to-end).
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/install.log 2>&1 || echo install-failed
export KFORGE_CACHE_DIR=/tmp/kc PYTHONUNBUFFERED=1
timeout ${T1:-330} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_templates_gpu.py tests/test_runtime_gpu.py} -rf 2>&1 | tee $OUT/gpu_tests.log | grep -vE "^\s*$" | tail -45
timeout ${T2:-220} python3 -m pytest -q -p no:cacheprovider tests/test_backend_gpu.py -s -rf 2>&1 | tee $OUT/gpu_backend.log | tail -15
