"""How many thread-block clusters of a kernel can be resident at once on this GPU (cuOccupancyMaxActiveClusters)?

    python benchmarks/probe_clusters.py [--out DIR]

A development tool for the relay's cluster exchange (Note [a row's statistic exchanged within its cluster] in
templates/relay_cluster.py): a cluster waits only for its own blocks, so a grid of more clusters than fit runs the
rest as a second wave. For each cluster size it builds the cluster relay of the probe rows and asks the driver how
many of its clusters fit, beside the SM count.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
import template_cards as tc  # noqa: E402

from forge_backend.search.templates import family_for  # noqa: E402

CASES = [
    ("group_norm [1,512,128,128] fp32", tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,)),
     {"strategy": "relay", "vec": 4, "pe": 8192, "nw": 4, "k": 7, "writers": True, "ring": 2}, (8, 16)),
    ("softmax [64,262144] bf16", tc.softmax((64, 262144), "bfloat16"),
     {"strategy": "relay", "vec": 8, "pe": 16384, "nw": 8, "k": 6, "writers": True, "ring": 2}, (4, 8, 16)),
    ("softmax [64,262144] bf16, 96 KB of slots", tc.softmax((64, 262144), "bfloat16"),
     {"strategy": "relay", "vec": 8, "pe": 8192, "nw": 8, "k": 6, "writers": True, "ring": 2}, (4, 8, 16)),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("probe_clusters needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.runtime.launch import Launcher, _check, _driver
    from forge_backend.runtime.nvrtc import compile_candidate

    drv, dev = _driver(), torch.device("cuda", 0)
    rows = []
    print(f"SMs: {torch.cuda.get_device_properties(0).multi_processor_count}")
    for name, card, base, sizes in CASES:
        for cs in sizes:
            p = {**base, "cs": cs, "ncl": 132 // cs}
            if not family_for(card).valid(card, p):
                print(f"{name} cs={cs}: not valid")
                continue
            cand = family_for(card).generate(card, p)
            run = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, dev)
            (ln,) = cand.launches
            cfg = drv.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = p["ncl"] * cs, 1, 1
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = ln.block[0], 1, 1
            cfg.sharedMemBytes = ln.smem
            fit = _check(drv.cuOccupancyMaxActiveClusters(run.module.functions[ln.kernel], cfg),
                         "cuOccupancyMaxActiveClusters")
            rows.append({"case": name, "cs": cs, "smem": ln.smem, "threads": ln.block[0], "max_active": int(fit)})
            print(f"{name} cs={cs} smem={ln.smem} threads={ln.block[0]}: {int(fit)} clusters resident at once "
                  f"({int(fit) * cs} blocks)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "probe_clusters.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
