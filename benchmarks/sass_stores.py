"""Which global stores the template kernels compile to, on a machine without a GPU: each seed of anchor-shaped cards
is compiled for sm_90 with NVRTC (as the search does) and disassembled with nvdisasm, and its STG instructions are
counted by width. A 16-byte vector that NVRTC split shows as a run of 2- and 4-byte stores off one base register
where a STG.E.128 was meant (the twenty-third session's flat conv, the twenty-fourth's chunks: Note [output chunks
aligned per channel row] in templates/conv_kernels.py).

    python benchmarks/sass_stores.py [--nvdisasm PATH] [--seeds 6] [--only SUBSTRING]

nvdisasm is not in the CUDA toolkit of the CPU machine; Triton's wheel carries one
(`pip download --no-deps triton`, then unzip `triton/backends/nvidia/bin/nvdisasm`). Prints one line a kernel.
"""
from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

STG = re.compile(r"\bSTG\.E(?:\.(?:128|64|U16|S16|U8|S8))?\b")
# an unpredicated 2- or 4-byte store: base register and offset
NARROW = re.compile(r"^\s*/\*\w+\*/\s+STG\.E(?:\.U16)? desc\[\w+\]\[(R\d+)\.64(?:\+0x(\w+))?\]", re.M)


def cards() -> dict[str, object]:
    import template_cards as tc
    return {
        "softmax [64,262144] bf16": tc.softmax((64, 262144), "bfloat16"),
        "softmax [64,262144] fp32": tc.softmax((64, 262144), "float32"),
        "softmax [1,8,2048,2048] bf16": tc.softmax((1, 8, 2048, 2048), "bfloat16"),
        "softmax [4096,256] bf16": tc.softmax((4096, 256), "bfloat16"),
        "softmax [8192,1024] bf16": tc.softmax((8192, 1024), "bfloat16"),
        "group_norm [1,512,128,128] fp32": tc.group_norm(1, 512, 128, 128, dtype="float32"),
        "group_norm [1,512,256,256] bf16": tc.group_norm(1, 512, 256, 256, dtype="bfloat16"),
        "group_norm [2,1536,64,64] fp32": tc.group_norm(2, 1536, 64, 64, dtype="float32"),
        "group_norm [2,1536,64,64] bf16": tc.group_norm(2, 1536, 64, 64, dtype="bfloat16"),
        "layer_norm [4096,2048] bf16": tc.layer_norm((4096, 2048), (2048,), "bfloat16"),
        "rms_norm [4096,2048] bf16": tc.rms_norm((4096, 2048), (2048,), "bfloat16"),
        "adaptive_avg_pool2d [256,2048,7,7] fp16": tc.adaptive_pool((256, 2048, 7, 7), "float16"),
        "silu_mul [4096,2048] bf16": tc.fused("mul(silu(x0),x0)", [((4096, 2048), "bfloat16")]),
        "causal_conv1d [1,8192,2048] bf16": tc.causal_conv1d(c=8192, length=2048, k=4),
    }


def find_nvdisasm(given: str | None) -> str:
    if given:
        return given
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import triton
        path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    raise SystemExit("nvdisasm not found: pass --nvdisasm PATH (Triton's wheel carries one)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvdisasm", default=None, help="the nvdisasm binary (default: PATH, then Triton's)")
    ap.add_argument("--seeds", type=int, default=6, help="seeds of each card (the root first)")
    ap.add_argument("--only", default="", help="only cards whose name contains this")
    args = ap.parse_args()
    from forge_backend.runtime.nvrtc import compile_candidate
    from forge_backend.search.templates import family_for

    nvdisasm = find_nvdisasm(args.nvdisasm)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        for name, card in cards().items():
            if args.only not in name:
                continue
            fam = family_for(card)
            for i, p in enumerate(fam.seeds(card)[:args.seeds]):
                cand = fam.generate(card, p)
                cubin.write_bytes(compile_candidate(cand, "sm_90").cubin)
                sass = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
                widths = dict(collections.Counter(STG.findall(sass)))
                bases = collections.Counter(base for base, _ in NARROW.findall(sass))
                print(f"{name} #{i} {cand.description[:80]}: {widths}; unpredicated narrow stores by base "
                      f"{dict(bases.most_common(3))}", flush=True)


if __name__ == "__main__":
    main()
