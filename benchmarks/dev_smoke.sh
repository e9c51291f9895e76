set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/install.log 2>&1 || echo install-failed
python3 -c "import torch, cuda.bindings; print(torch.__version__, cuda.bindings.__version__, torch.cuda.get_device_name())"
export KFORGE_CACHE_DIR=/tmp/kc PYTHONUNBUFFERED=1
timeout 300 python3 -m pytest -q tests/test_runtime_gpu.py -p no:cacheprovider 2>&1 | tee $OUT/t1.log | tail -40
timeout 120 python3 benchmarks/bench_overhead.py 2>&1 | tail -8
cp benchmarks/results/h200/overhead.* $OUT/ 2>/dev/null
