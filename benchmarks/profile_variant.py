"""Launch one template variant of a probe case for a profiler: what holds a kernel below the copy bandwidth?

    ncu --clock-control none --profile-from-start off \\
        python benchmarks/profile_variant.py --case "causal_conv1d [1,8192" [--params '{"strategy": "tile", ...}']

The case is one of ``probe_variants.cases()`` (the first whose name contains ``--case``); the variant is the
template's root unless ``--params`` names another. The kernel is compiled and passes the verifier first
(a profile of a kernel that computes the wrong thing would mislead), launched ``--warmup`` times, then ``--launches``
times between ``cudaProfilerStart`` and ``cudaProfilerStop``, so a profiler that starts there sees only this variant's
kernels, not the input generator's or the verifier's. ``run_device.sh ncu`` runs it under Nsight Compute.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import probe_variants  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, help="a probe case whose name contains this")
    ap.add_argument("--params", default="", help="the variant's parameters, as JSON or as k=v,k=v (default: the "
                                                "template's root)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--launches", type=int, default=1)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("profile_variant needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.runtime.launch import Launcher
    from forge_backend.runtime.nvrtc import compile_candidate
    from forge_backend.search.templates import family_for
    from forge_backend.verify import make_inputs, verify

    matches = [(name, card) for name, card, _ in probe_variants.cases() if args.case in name]
    if not matches:
        sys.exit(f"no probe case contains {args.case!r}; cases: {[n for n, _, _ in probe_variants.cases()]}")
    name, card = matches[0]
    fam = family_for(card)
    params = probe_variants.parse_params(args.params) if args.params else fam.root_params(card)
    if not fam.valid(card, params):
        sys.exit(f"{params} is not a valid variant of {name}")
    cand = fam.generate(card, params)
    dev = torch.device("cuda", 0)
    launcher = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, dev)
    report = verify(card, launcher.launch_into, launcher.allocate_outputs, dev)
    if not report.ok:  # a profile of a kernel that computes the wrong thing would mislead
        sys.exit(f"the variant fails the verifier ({report.failed_check}: {report.message}): not profiling it")
    inputs = make_inputs(card, "normal", 7, dev)
    for _ in range(args.warmup):
        launcher(inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()  # cudaProfilerStart: a profiler run with --profile-from-start off begins here
    for _ in range(args.launches):
        launcher(inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    kernels = sorted({l.kernel for l in launcher.launches})
    print(f"{name}: profiled {args.launches} launch(es) of {kernels}: {cand.description}")


if __name__ == "__main__":
    main()
