"""Check, on a GPU machine, that a template kernel still compiles after an LLM search in the same process.

    PYTHONPATH=$PWD python3 benchmarks/repro_llm_then_compile.py [--out DIR]

In one process: the GPU test ``test_llm_search_on_gpu`` (an LLM search over a loopback server: four served kernels,
one compile error repaired), then NVRTC on the sync group-norm kernel of [2,1536,64,64] bf16. In the thirteenth
session that compile failed on the H200 (Python 3.12) with ``explicit type is missing``: the source generated in that
process read ``typedef __nv_bfloat16T;``. The cause, found in the fourteenth (Note [NVRTC writes into the buffer it is
given] in forge_backend/runtime/nvrtc.py): NVRTC's empty log overwrote the process's shared ``b" "``, and Python 3.12
then compiled the lone spaces of f-strings in modules imported afterwards as nothing. (That session's logs,
``results/h200/gpu_tests/repro_llm_then_compile_session14_*.log``, come from a longer diagnostic version of this
script: ``git show 2715c64:benchmarks/repro_llm_then_compile.py``.)

Prints whether ``b" "`` still holds a space, whether the source generated here equals a fresh process's (both are
written under --out), and whether it compiles. Exits 1 when any of the three fails.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def sync_source() -> str:
    import template_cards as tc

    from forge_backend.search.templates import family_for

    card = tc.group_norm(2, 1536, 64, 64, dtype="bfloat16", used=(0,))
    fam = family_for(card)
    return fam.generate(card, fam.defaults(card, "sync")).source


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()))
    ap.add_argument("--source-only", action="store_true", help="print the kernel's source and exit (the fresh process)")
    args = ap.parse_args()
    if args.source_only:
        sys.stdout.write(sync_source())
        return 0
    import pytest

    from forge_backend.errors import CandidateFailure
    from forge_backend.runtime import nvrtc

    args.out.mkdir(parents=True, exist_ok=True)
    rc = pytest.main(["-q", "-p", "no:cacheprovider", "-m", "gpu", "-W", "ignore",
                      str(ROOT / "tests" / "test_llm_search_gpu.py"), "-k", "on_gpu"])
    print(f"test_llm_search_on_gpu: pytest exit code {rc}")
    space = (b" " * 1)[0] == 32
    print(f'b" " still holds a space: {space}')
    source = sync_source()
    path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    fresh = subprocess.run([sys.executable, __file__, "--source-only"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": path}).stdout
    (args.out / "sync_source.cu").write_text(source)
    (args.out / "sync_source_fresh_process.cu").write_text(fresh)
    print(f"source here equals a fresh process's: {source == fresh}")
    try:
        nvrtc.compile_source(source, "sm_90")
    except CandidateFailure as e:
        (args.out / "sync_group_norm.log").write_text(e.log)
        print(f"compile failed: {e.message}")
        return 1
    print("compiled")
    return 0 if space and source == fresh else 1


if __name__ == "__main__":
    sys.exit(main())
