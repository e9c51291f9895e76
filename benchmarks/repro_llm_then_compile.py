"""Reproduce, on a GPU machine, the compile failure found in the thirteenth session (docs/STATUS.md, Next 1).

    PYTHONPATH=$PWD python3 benchmarks/repro_llm_then_compile.py

In one process: the GPU test ``test_llm_search_on_gpu`` (an LLM search over a loopback server: four served kernels,
one compile error repaired), then NVRTC on the sync group-norm kernel of [2,1536,64,64] bf16. On the H200 that compile
failed with ``candidate.cu(90): error: explicit type is missing ("int" assumed)`` at ``typedef __nv_bfloat16 T;``,
before and after clearing the include-directory cache, while the same source compiles in a fresh process. Prints
what it finds; exits 1 when the compile fails.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    import pytest

    rc = pytest.main(["-q", "-p", "no:cacheprovider", "-m", "gpu", "-W", "ignore",
                      str(ROOT / "tests" / "test_llm_search_gpu.py"), "-k", "on_gpu"])
    print(f"test_llm_search_on_gpu: pytest exit code {rc}")
    import template_cards as tc

    from forge_backend.errors import CandidateFailure
    from forge_backend.runtime import nvrtc
    from forge_backend.search.templates import family_for

    card = tc.group_norm(2, 1536, 64, 64, dtype="bfloat16", used=(0,))
    fam = family_for(card)
    cand = fam.generate(card, fam.defaults(card, "sync"))
    print(f"include directory: {nvrtc.include_dir()}, NVRTC {nvrtc.nvrtc_version()}")
    try:
        nvrtc.compile_candidate(cand, "sm_90", Path(tempfile.mkdtemp()))
    except CandidateFailure as e:
        print(f"compile failed: {e.message}\n{e.log[:4000]}")
        return 1
    print("compiled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
