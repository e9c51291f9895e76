"""Host time per call of what a folded conv + batch norm chain costs (Note [a batch norm folded into its convolution]).

    python benchmarks/probe_fold_host.py

The first fold (commit 4d2809d, a custom op folding per call) ran ResNet-50 at 1.07 ms of GPU time by graph replay
at fp16 batch 32 but 6.4 ms of wall time a forward, so the host cost about 100 us a call. This times, per call, with
the GPU kept idle enough not to matter (batch 1, one 1x1 convolution of ResNet's first stage): aten.convolution,
cudnn_convolution_relu and cudnn_convolution_add_relu called directly, one pointwise launch (what a fold saves), and
the Refresher's check of 53 unchanged chains (once a forward), each as the median of 5 runs of 200 calls between
synchronisations (bench_overhead.wall_us). results/h200/probe_session33_fold_host.log was made by this script's
first version at 4d2809d, which also timed that custom op (92-104 us a call) and its cache lookup (5 us), with a
copy of wall_us that warmed up 20 calls, not 200.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_overhead import wall_us  # noqa: E402


def main() -> None:
    from forge_backend import conv_fold

    cl, dt, dev = torch.channels_last, torch.float16, "cuda"
    x = torch.randn(1, 256, 56, 56, device=dev, dtype=dt).contiguous(memory_format=cl)
    w = torch.randn(64, 256, 1, 1, device=dev, dtype=dt).contiguous(memory_format=cl)
    z = torch.randn(1, 64, 56, 56, device=dev, dtype=dt).contiguous(memory_format=cl)
    b = torch.randn(64, device=dev, dtype=dt)
    g, bb, m, v = (torch.rand(64, device=dev, dtype=dt) + 0.5 for _ in range(4))
    a = ([1, 1], [0, 0], [1, 1], 1)
    aten = torch.ops.aten
    wf, bf = conv_fold.fold(w, None, g, bb, m, v, 1e-5, dt)
    now = [w, g, bb, m, v]  # the compiled graph's arguments the chains were folded from
    sources = (conv_fold._Source(0, None), None, *(conv_fold._Source(i, None) for i in range(1, 5)))
    seen = [w, None, g, bb, m, v]
    chains = [conv_fold._Constants(wf, bf, sources, 1e-5, list(seen), [-1 if t is None else t._version for t in seen])
              for _ in range(53)]
    refresher = conv_fold.Refresher(chains)
    rows = {
        "aten.convolution": lambda: aten.convolution(x, w, b, *a[:3], False, [0, 0], 1),
        "cudnn_convolution_relu": lambda: aten.cudnn_convolution_relu(x, w, b, *a),
        "cudnn_convolution_add_relu": lambda: aten.cudnn_convolution_add_relu(x, w, z, 1.0, b, *a),
        "torch.relu (a launch)": lambda: torch.relu(z),
        "Refresher, 53 unchanged chains": lambda: refresher(now),
    }
    for name, fn in rows.items():
        print(f"{name:32s} {wall_us(fn, calls=200, runs=5):8.1f} us a call", flush=True)
    assert refresher.refolds == 0
    torch.backends.cudnn.benchmark = True
    print("with torch.backends.cudnn.benchmark = True:")
    for name in ("cudnn_convolution_relu", "cudnn_convolution_add_relu"):
        print(f"{name:32s} {wall_us(rows[name], calls=200, runs=5):8.1f} us a call", flush=True)


if __name__ == "__main__":
    main()
