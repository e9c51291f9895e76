"""Is memory that PyTorch's allocator takes while a green context is current slower to copy afterwards?

    PYTHONPATH=$PWD:$PWD/tests python benchmarks/green_memory_probe.py

The forty-fifth session's GPU suite: after tests/test_green_context_gpu.py, test_measure_graph.py's graph replay of
eight 64 MiB copies ran 19.3-19.4 us a copy (17.7-17.9 without those tests before it), one copy on its own as before.
This copies 32 MiB buffers allocated in the primary context and buffers allocated while a green context of 72 SMs was
current (both then copied on the primary context's stream), by events around one flushed call, medians of 30.
"""
import torch

from forge_backend.measure import Timer

MiB = 2**20
dev = torch.device("cuda", 0)
timer = Timer(dev)


def pairs(n):
    return [(torch.full((8 * MiB,), float(i), device=dev), torch.zeros(8 * MiB, device=dev)) for i in range(n)]


def times(ps):
    return [round(timer.time(lambda s=s, d=d: d.copy_(s)).median_us, 2) for s, d in ps]


primary = pairs(8)
print("primary, before", times(primary), flush=True)
ctx = torch.cuda.green_contexts.GreenContext.create(num_sms=72, device_id=0)
ctx.set_context()
stream = ctx.Stream()
with torch.cuda.stream(stream):
    green = pairs(8)
    print("green, in its context", times(green), flush=True)
stream.synchronize()
ctx.pop_context()
print("green-allocated, on the primary stream", times(green), flush=True)
print("primary, after", times(primary), flush=True)
fresh = pairs(8)
print("allocated after", times(fresh), flush=True)
