"""How fast can one kernel only read 32 MB on this GPU, by the access pattern? (Note [a tensor held on chip whole]
in forge_backend/search/templates/resident.py asks.)

    python benchmarks/read_bandwidth.py [--mib 32] [--out DIR]

Every variant reads the same buffer once, after an L2 flush, into nothing (a read-only kernel; one word per block is
kept so that no load is dropped), one block per SM:

* ``bulk``: one thread per block issues bulk copies (cp.async.bulk, as the relay's loader and the resident kernel do)
  of ``chunk`` bytes into ``depth`` shared-memory slots, a new copy as each lands; a block's chunks either
  ``contiguous`` (block b reads one run of the buffer, as the resident kernel) or ``interleaved`` (chunk k goes to
  block k mod SMs, as the relay deals its pieces);
* ``ldg``: every thread loads 16-byte vectors, four at a time, in a grid-stride loop (the way a copy kernel reads);
* ``copy``: CuPy's copy of the buffer into another, for scale (its GB/s count the bytes read plus written).

Timed with device events, median of 15 launches after 3 warm-ups, each after a read of 512 MiB that evicts the L2.
The start event is queued behind that read, with no synchronisation between them, so the host's work to launch the
kernel overlaps the read and is not timed. (The twenty-first session's results, read_bandwidth_session21_*.json, were
measured before this: the host synchronised after the read, so each time also holds CuPy's launch overhead, some
tens of microseconds; a 1 GiB read reads up to several percent slow there.)
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

SOURCE = r"""
extern "C" __global__ void read_bulk(const char* __restrict__ x, long long total, int chunk, int depth,
                                     int interleave, unsigned long long* sink) {
  extern __shared__ __align__(128) unsigned char slots[];
  __shared__ __align__(8) unsigned long long bars[16];
  const long long nb = gridDim.x, nk = total / chunk;
  const long long per = (nk + nb - 1) / nb;
  const long long first = interleave ? blockIdx.x : blockIdx.x * per;
  const long long step = interleave ? nb : 1;
  const long long last = interleave ? nk : min(nk, first + per);
  auto src = [&](long long i) { return x + (first + i * step) * chunk; };
  const long long n = interleave ? (nk - blockIdx.x + nb - 1) / nb : max(0LL, last - first);
  if (threadIdx.x == 0) {
    for (int j = 0; j < depth; ++j)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
                   :: "r"((unsigned)__cvta_generic_to_shared(bars + j)), "r"(1u) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    auto issue = [&](long long i) {
      const int s = (int)(i % depth);
      const unsigned bar = (unsigned)__cvta_generic_to_shared(bars + s);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(chunk) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"((unsigned)__cvta_generic_to_shared(slots + (long long)s * chunk)), "l"(src(i)), "r"(chunk),
                      "r"(bar) : "memory");
    };
    for (long long i = 0; i < depth && i < n; ++i) issue(i);
    for (long long i = 0; i < n; ++i) {
      const unsigned bar = (unsigned)__cvta_generic_to_shared(bars + i % depth);
      const unsigned parity = (unsigned)((i / depth) & 1);
      unsigned done = 0;
      while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
      if (i + depth < n) issue(i + depth);
    }
    sink[blockIdx.x] = *reinterpret_cast<const unsigned long long*>(slots);
  }
}

extern "C" __global__ void read_ldg(const uint4* __restrict__ x, long long nvec, unsigned long long* sink) {
  unsigned acc = 0;
  const long long stride = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < nvec; i += 4 * stride) {
    uint4 a = __ldcs(x + i), b = __ldcs(x + i + stride), c = __ldcs(x + i + 2 * stride), d = __ldcs(x + i + 3 * stride);
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < nvec; i += stride) acc ^= __ldcs(x + i).x;
  if (acc == 0x12345678u) sink[0] = acc;  // never true for these buffers; keeps the loads
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import cupy as cp

    from harness import environment, titled, write_results

    dev = cp.cuda.Device(0)
    sms = dev.attributes["MultiProcessorCount"]
    mod = cp.RawModule(code=SOURCE, options=("--gpu-architecture=sm_90", "-std=c++17"))
    bulk, ldg = mod.get_function("read_bulk"), mod.get_function("read_ldg")
    bulk.max_dynamic_shared_size_bytes = 200 * 1024
    total = args.mib * 2**20
    x = cp.random.randint(1, 2**31, size=total // 4, dtype=cp.int32)
    flush = cp.ones(512 * 2**20 // 4, dtype=cp.int32)
    sink = cp.zeros(4096, dtype=cp.uint64)

    def timed(launch) -> float:
        times = []
        for rep in range(18):
            flush.sum()  # a read of 512 MiB: the L2 holds none of x (queued; the launch below is prepared meanwhile)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            launch()
            end.record()
            end.synchronize()
            if rep >= 3:
                times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        return statistics.median(times)

    rows = []
    for layout in ("contiguous", "interleaved"):
        for chunk in (16384, 32768):
            for depth in (1, 2, 4, 6):
                if chunk * depth > 200 * 1024:
                    continue
                us = timed(lambda: bulk((sms,), (32,), (x, cp.int64(total), cp.int32(chunk), cp.int32(depth),
                                                        cp.int32(layout == "interleaved"), sink),
                                        shared_mem=chunk * depth))
                rows.append({"kernel": "bulk", "layout": layout, "chunk": chunk, "depth": depth, "threads": 32,
                             "us": us, "gbps": total / us / 1e3})
    for blocks_per_sm, threads in ((1, 1024), (2, 1024), (4, 512)):
        us = timed(lambda: ldg((sms * blocks_per_sm,), (threads,), (x, cp.int64(total // 16), sink)))
        rows.append({"kernel": "ldg", "layout": f"{blocks_per_sm} blocks/SM", "chunk": 16, "depth": 4,
                     "threads": threads, "us": us, "gbps": total / us / 1e3})
    y = cp.empty_like(x)
    us = timed(lambda: cp.copyto(y, x))
    rows.append({"kernel": "copy", "layout": "cupy copyto", "chunk": 0, "depth": 0, "threads": 0, "us": us,
                 "gbps": 2 * total / us / 1e3})  # read plus written
    for r in rows:
        print(f"{r['kernel']:5s} {r['layout']:12s} chunk {r['chunk']:6d} depth {r['depth']}: {r['us']:7.1f} us "
              f"{r['gbps']:7.0f} GB/s")
    if args.out:
        env = environment("python " + " ".join(sys.argv))
        columns = ["kernel", "layout", "chunk", "depth", "threads", "us", "gbps"]
        write_results(args.out / "read_bandwidth", env, rows, columns,
                      titled(f"Reading {args.mib} MiB once, by access pattern", env))


if __name__ == "__main__":
    main()
