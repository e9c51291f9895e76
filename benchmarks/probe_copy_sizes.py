"""Why did a copy of a group-norm row's bytes run slower than a copy of a softmax row's same bytes?

    python benchmarks/probe_copy_sizes.py [--out DIR]

In ops runs AC and AD (thirty-first and thirty-second sessions) the copy that moves a group-norm row's bytes ran
18.8-18.9 us by kernel time at [1,512,128,128] fp32 (64 MiB and 4 KB moved), where the copy of softmax [64,262144]
bf16's bytes (64 MiB exactly) ran 15.4 us in the same runs, and by graph replay every group-norm row's copy ran
1.4-1.6x its events. A group norm moves its weight and bias too, so its byte count is a power of two plus a few KB;
the softmax rows that copied as fast as expected moved a power of two. This probe times ``measure.copy_call`` (the
copy bench_ops times) at power-of-two sizes and at the same sizes plus a group norm's weight and bias, alternating,
three rounds, by events, by kernel time and by graph replay, with the same Timer as every benchmark. It also logs the
distance between each copy's source and destination, which the caching allocator decides.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from harness import environment  # noqa: E402

MIB = 2**20
# (name, bytes moved): a power of two, and the same plus the weight and bias of the group-norm row it stands for
SIZES = [
    ("64 MiB", 64 * MIB), ("64 MiB + gn [1,512,128,128] fp32 w,b", 64 * MIB + 2 * 512 * 4),
    ("96 MiB", 96 * MIB), ("96 MiB + gn [2,1536,64,64] fp32 w,b", 96 * MIB + 2 * 1536 * 4),
    ("256 MiB", 256 * MIB), ("256 MiB + gn [1,512,256,256] fp32 w,b", 256 * MIB + 2 * 512 * 4),
]


def one(timer, device, nbytes: int) -> dict:
    from forge_backend.measure import copy_call, graph_calls

    call = copy_call(device, nbytes)
    cells = dict(zip(call.__code__.co_freevars, (c.cell_contents for c in call.__closure__)))
    src, dst = cells["src"], cells["dst"]
    gap = dst.data_ptr() - src.data_ptr()
    out = {"events_us": timer.time(call).median_us, "kernel_us": timer.kernel_time(call).median_us,
           "dst_minus_src_bytes": gap, "src_bytes": src.numel() * 4}
    del call, src, dst
    n = graph_calls(nbytes)
    calls = [copy_call(device, nbytes) for _ in range(n)]
    out["graph_us"] = timer.graph_time(calls).median_us
    out["graph_calls"] = n
    del calls
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("probe_copy_sizes needs a GPU")
        return 0
    from forge_backend.measure import Timer

    device = torch.device("cuda")
    timer = Timer(device)
    rows = []
    for r in range(args.rounds):
        for name, nbytes in SIZES:
            got = one(timer, device, nbytes)
            got.update(round=r, size=name, bytes=nbytes)
            rows.append(got)
            print(f"round {r} {name:40s} events {got['events_us']:7.1f} kernel {got['kernel_us']:7.1f} "
                  f"graph {got['graph_us']:7.1f} (x{got['graph_calls']}) "
                  f"dst-src {got['dst_minus_src_bytes'] / MIB:.2f} MiB", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    env = environment(" ".join(sys.argv))
    (args.out / "probe_copy_sizes.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
