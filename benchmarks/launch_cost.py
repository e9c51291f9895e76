"""What a launch costs on the GPU, by kind: a plain or a cooperative launch, with or without a large dynamic shared
memory, timed as the search times a candidate (device events around one launch, after the L2 flush read).

    python benchmarks/launch_cost.py [--out DIR]

The relay kernels (templates/relay.py) and the resident softmax launch cooperatively, one block per SM with up to
227 KB of shared memory; the copy a row's bytes are compared with (``copy_us``) is a plain launch of a kernel with
none. This times a kernel that writes one word a block (so that the script can check every block ran) in grids of 1
and of one block per SM, at 0, 100 and 227 KB of shared memory, launched plainly and cooperatively, once and twice
between the events (the second launch queued behind the first, no flush between them). Last, that kernel and plain
copies of 64 and 96 MiB moved are timed both ways: by the events and by ``Timer.kernel_time`` (the profiler's
durations of the device work, which leave the launch out; Note [kernel time beside event time] in
forge_backend/measure.py).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
from pathlib import Path

SOURCE = r"""
extern "C" __global__ void touch(int* out) {
  if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x;  // the dynamic shared memory is reserved, not touched
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None, help="write launch_cost.json here")
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("launch_cost needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.measure import Timer, copy_call
    from forge_backend.runtime.launch import _check, _driver, _ensure_context
    from forge_backend.runtime.nvrtc import compile_source

    dev = torch.device("cuda", 0)
    _ensure_context(dev)
    drv = _driver()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    cubin = compile_source(SOURCE).cubin
    module = _check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
    fn = _check(drv.cuModuleGetFunction(module, b"touch"), "cuModuleGetFunction")
    smem_max = 227 * 1024
    _check(drv.cuFuncSetAttribute(fn, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  smem_max), "cuFuncSetAttribute")
    out = torch.zeros(sms, dtype=torch.int32, device=dev)
    slot = ctypes.c_void_p(out.data_ptr())
    params = (ctypes.c_void_p * 1)(ctypes.addressof(slot))
    timer = Timer(dev)

    def launcher(grid: int, block: int, smem: int, cooperative: bool, times: int = 1):
        def run() -> None:
            stream = torch.cuda.current_stream(dev).cuda_stream
            for _ in range(times):
                if cooperative:
                    err = drv.cuLaunchCooperativeKernel(fn, grid, 1, 1, block, 1, 1, smem, stream,
                                                        ctypes.addressof(params))[0]
                else:
                    err = drv.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, smem, stream, ctypes.addressof(params),
                                             0)[0]
                if int(err) != 0:
                    raise RuntimeError(f"launch failed: {err}")
        return run

    rows = []
    for grid, block in ((1, 128), (sms, 608), (sms, 1024)):
        for smem in (0, 100 * 1024, smem_max):
            for cooperative in (False, True):
                for times in (1, 2):
                    fn_run = launcher(grid, block, smem, cooperative, times)
                    out.zero_()
                    fn_run()
                    torch.cuda.synchronize(dev)
                    if int((out[:grid] == torch.arange(grid, device=dev, dtype=torch.int32)).sum()) != grid:
                        raise RuntimeError("a block did not run")
                    samples = [timer.time(fn_run, repeats=args.repeats).median_us for _ in range(3)]
                    row = {"grid": grid, "block": block, "smem": smem, "cooperative": cooperative,
                           "launches": times, "median_us": statistics.median(samples), "runs_us": samples}
                    rows.append(row)
                    print(f"grid {grid:4d} x {block:4d} smem {smem // 1024:3d} KB "
                          f"{'cooperative' if cooperative else 'plain      '} x{times}: "
                          f"{row['median_us']:6.2f} us  (runs {', '.join(f'{s:.2f}' for s in samples)})", flush=True)
    durations = []
    for label, run in [(f"copy {mb} MiB moved", copy_call(dev, mb * 2**20)) for mb in (64, 96)] + [
            (f"touch {sms} x 608, 227 KB, {'cooperative' if c else 'plain'}", launcher(sms, 608, smem_max, c))
            for c in (False, True)]:
        events_us = timer.time(run, repeats=args.repeats).median_us
        kernel_us = timer.kernel_time(run, repeats=args.repeats).median_us
        durations.append({"what": label, "events_us": events_us, "kernel_us": kernel_us})
        print(f"{label}: {events_us:6.2f} us by events, {kernel_us:6.2f} us of kernel (profiler)", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "launch_cost.json").write_text(json.dumps(
            {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "timer": "device events around "
             "the launches after a 512 MiB L2 flush read, median of the repeats; three runs", "rows": rows,
             "events_and_kernel": durations},
            indent=1))


if __name__ == "__main__":
    main()
