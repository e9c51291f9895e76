"""Check, on a GPU machine, the compile failure found in the thirteenth session and explained in the fourteenth.

    PYTHONPATH=$PWD python3 benchmarks/repro_llm_then_compile.py [--out DIR]

In one process: the GPU test ``test_llm_search_on_gpu`` (an LLM search over a loopback server: four served kernels,
one compile error repaired), then NVRTC on the sync group-norm kernel of [2,1536,64,64] bf16. On the H200 (Python
3.12) that compile failed with ``candidate.cu(90): error: explicit type is missing ("int" assumed)``: the source
generated in that process read ``typedef __nv_bfloat16T;``. The cause (Note [NVRTC writes into the buffer it is given]
in forge_backend/runtime/nvrtc.py): NVRTC's empty log overwrote the process's shared ``b" "``, and Python 3.12 then
compiled the lone spaces of f-strings in modules imported afterwards as nothing.

It prints what it finds and writes, under --out, the source it compiled and NVRTC's whole log: whether the source
differs from one generated in a fresh process, which NVRTC libraries the process has loaded, the threads still
alive after the search, the environment variables the search changed, and whether a minimal bf16 program and the
same source with the include directory spelled out compile. Exits 1 when the compile fails.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

MINIMAL = "#include <cuda_bf16.h>\ntypedef __nv_bfloat16 T;\nextern \"C\" __global__ void k(T* p) { p[0] = T(1.f); }\n"

GENERATE = """
import sys; sys.path.insert(0, {tests!r})
import template_cards as tc
from forge_backend.search.templates import family_for
card = tc.group_norm(2, 1536, 64, 64, dtype="bfloat16", used=(0,))
fam = family_for(card)
sys.stdout.write(fam.generate(card, fam.defaults(card, "sync")).source)
"""


def _sync_source() -> str:
    import template_cards as tc

    from forge_backend.search.templates import family_for

    card = tc.group_norm(2, 1536, 64, 64, dtype="bfloat16", used=(0,))
    fam = family_for(card)
    return fam.generate(card, fam.defaults(card, "sync")).source


def _nvrtc_maps() -> list[str]:
    lines = Path("/proc/self/maps").read_text().splitlines()
    return sorted({ln.split()[-1] for ln in lines if "nvrtc" in ln})


def _try(label: str, source: str, out: Path, **kw) -> bool:
    from forge_backend.errors import CandidateFailure
    from forge_backend.runtime import nvrtc

    try:
        nvrtc.compile_source(source, "sm_90", None, **kw)
    except CandidateFailure as e:
        (out / f"{label}.log").write_text(e.log)
        print(f"{label}: FAILED {e.message} (log: {out / (label + '.log')})")
        print("\n".join(e.log.splitlines()[:30]))
        return False
    print(f"{label}: compiled")
    return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp()))
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    import pytest

    from forge_backend.runtime import nvrtc

    env0 = dict(os.environ)
    print("NVRTC libraries before:", _nvrtc_maps())
    rc = pytest.main(["-q", "-p", "no:cacheprovider", "-m", "gpu", "-W", "ignore",
                      str(ROOT / "tests" / "test_llm_search_gpu.py"), "-k", "on_gpu"])
    print(f"test_llm_search_on_gpu: pytest exit code {rc}")
    print("NVRTC libraries after:", _nvrtc_maps())
    print("threads alive:", [t.name for t in threading.enumerate()])
    changed = {k for k in set(env0) | set(os.environ) if env0.get(k) != os.environ.get(k)}
    print("environment variables changed:", sorted(changed))
    print(f"include directory: {nvrtc.include_dir()}, NVRTC {nvrtc.nvrtc_version()}")

    source = _sync_source()
    (out / "sync_source.cu").write_text(source)
    fresh = subprocess.run([sys.executable, "-c", GENERATE.format(tests=str(ROOT / "tests"))], capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    (out / "sync_source_fresh_process.cu").write_text(fresh)
    digest = lambda s: hashlib.sha256(s.encode()).hexdigest()[:16]  # noqa: E731
    print(f"source here {digest(source)}, from a fresh process {digest(fresh)}, same: {source == fresh}")

    ok = _try("sync_group_norm", source, out)
    _try("minimal_bf16", MINIMAL, out)
    _try("sync_group_norm_again", source, out)
    _try("sync_group_norm_no_fast_math", source, out, options=("-std=c++17", "-default-device"))
    _try("sync_group_norm_prefix", "#include <cuda_bf16.h>\n" + source, out)
    done = subprocess.run([sys.executable, "-c",
                           "import sys; from forge_backend.runtime import nvrtc; "
                           "nvrtc.compile_source(open(sys.argv[1]).read()); print('fresh process: compiled')",
                           str(out / "sync_source.cu")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    print((done.stdout + done.stderr).strip()[-2000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
