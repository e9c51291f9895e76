#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with the wheels run_device.sh installs on the GPU machine, whose image lacks them
# (/work/.library/device/KINDS.md lists what it has): diskcache, openai with the dependencies the image lacks, and
# diffusers for the SD3.5 examples. Run it here, in the repository root, on a machine with pip and a package index;
# then name ".whl" in the device call's carry. Versions are pinned to those this project was tested with; the
# device's Python is 3.12, so binary wheels are fetched for cp312 manylinux.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
WHEELS=(
  diskcache==5.6.3
  openai==3.57.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 jiter==0.19.0 sniffio==1.3.1
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0
  idna==3.20
  diffusers==0.42.1 importlib_metadata==10.2.0 lazy-importer==0.1.0
)
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d .whl "${WHEELS[@]}"
ls .whl
