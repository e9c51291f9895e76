"""Does a green context used by the GPU tests change later timings in the same process?

    PYTHONPATH=$PWD:$PWD/tests python benchmarks/green_leak_probe.py

The forty-fifth session's full GPU suite failed test_measure_graph.py's check that a graph replay of a 64 MiB copy
runs faster per call than one call (19.39 against 18.38 us), in the run where tests/test_green_context_gpu.py ran
before it for the first time. This times that test's copies (one call, a graph replay per call, one call on a new
stream) twice, runs one green-context test (72 SMs), and times them three times more, printing each.
"""
import sys
import torch
sys.path.insert(0, "tests")
from forge_backend.measure import Timer, graph_calls
MiB = 2**20
dev = torch.device("cuda", 0)
timer = Timer(dev)


def measure(tag):
    n = graph_calls(64 * MiB)
    srcs = [torch.full((8 * MiB,), float(i), device=dev) for i in range(n)]
    dsts = [torch.zeros_like(s) for s in srcs]
    calls = [lambda s=s, d=d: d.copy_(s) for s, d in zip(srcs, dsts)]
    one = timer.time(calls[0]).median_us
    replayed = timer.graph_time(calls).median_us
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        on_new = timer.time(calls[0]).median_us
    print(f"{tag}: one {one:.2f} replayed {replayed:.2f} on a new stream {on_new:.2f}", flush=True)


for r in range(2):
    measure(f"before {r}")
import test_green_context_gpu as g  # noqa: E402
g.test_relay_root_in_a_green_context_takes_its_sms_and_passes_the_verifier(g.GREEN_RELAY[1])
print("green 72 used", flush=True)
for r in range(3):
    measure(f"after {r}")
