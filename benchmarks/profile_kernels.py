"""Which GPU kernels a compiled model runs, and how long each takes: the table that says where a fused kernel pays.

    python benchmarks/profile_kernels.py --models gemma4::eager_attn,sd35_mmdit::bf16_txt333 [--backend inductor]

For each model it compiles with the backend (``inductor`` or ``kforge``), warms up, profiles ``--iters`` forwards
with torch.profiler and lists the kernels by device time per forward (Inductor's kernel names say what it fused:
``triton_per_fused__softmax__to_copy_add_mul_3``). Writes ``kernels_<model>_<backend>.txt`` and one JSON for all.
A development tool: it says where the time is, not how fast anything is against anything else.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def per_kernel(events, iters: int) -> list[dict]:
    """Device events (kernels, memcpys, memsets) summed by name, per forward, longest first. ``events`` are the
    profiler's (``device_type``, ``name``, ``device_time_total``); host events are skipped."""
    from torch.autograd import DeviceType

    per: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for evt in events:
        if evt.device_type == DeviceType.CUDA:
            per[evt.name][0] += evt.device_time_total if hasattr(evt, "device_time_total") else evt.cuda_time_total
            per[evt.name][1] += 1
    rows = [{"kernel": k, "us_per_forward": t / iters, "calls_per_forward": n / iters} for k, (t, n) in per.items()]
    return sorted(rows, key=lambda r: -r["us_per_forward"])


def kernel_table(fn, inputs, iters: int) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn(*inputs)
        torch.cuda.synchronize()
    return per_kernel(prof.events(), iters)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="comma-separated example[::setting]")
    ap.add_argument("--backend", default="inductor", choices=["inductor", "kforge"])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("profile_kernels needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.modelspec import load

    args.out.mkdir(parents=True, exist_ok=True)
    everything = {}
    for spec in args.models.split(","):
        loaded = load(spec)
        torch._dynamo.reset()
        compiled = torch.compile(loaded.model, backend=args.backend)
        with torch.no_grad():
            rows = kernel_table(compiled, loaded.inputs, args.iters)
        total = sum(r["us_per_forward"] for r in rows)
        lines = [f"{spec} ({args.backend}): {total:.1f} us of kernels per forward, {len(rows)} distinct kernels",
                 f"{'us/fwd':>9} {'%':>5} {'calls':>6}  kernel"]
        lines += [f"{r['us_per_forward']:9.1f} {100 * r['us_per_forward'] / total:5.1f} {r['calls_per_forward']:6.1f}"
                  f"  {r['kernel'][:150]}" for r in rows[:args.top]]
        print("\n".join(lines), flush=True)
        stem = spec.replace("::", "_").replace("/", "_").replace(".py", "")
        (args.out / f"kernels_{stem}_{args.backend}.txt").write_text("\n".join(lines) + "\n")
        everything[spec] = {"backend": args.backend, "total_us": total, "kernels": rows}
        del compiled, loaded
        torch.cuda.empty_cache()
    (args.out / f"kernels_{args.backend}.json").write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
