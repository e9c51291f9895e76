"""Stamp a relay kernel's pipeline (or a resident softmax's steps) with the GPU's global timer: where does its time go?

    python benchmarks/trace_relay.py --case "softmax [64,262144] bf16" [--params k=v,k=v] [--out DIR]

Note [a relay's timeline]
The relay (templates/relay.py) marks five steps of every piece with ``KF_TRACE(cond, event, piece)``: the loader
issued its bulk copy (``issued``), the first consumer warp saw it arrive (``arrived``), the publisher stored its
partial (``published``), a resolver handed its row's statistic to the consumers (``resolved``), and the first
consumer warp wrote its share (``written``). In the templates the macro is nothing (the SASS of the relay seeds is
the same with and without the marks). This tool defines it to store ``%globaltimer`` into a module global,
compiles that source without the screen (which refuses timer reads in any kernel that is timed or cached: this one
is neither), checks it with the verifier, times it beside the unmarked kernel, then launches it after an L2 flush
and reads the stamps back.

``timeline`` turns the stamps into what the Notes argue about: bytes arriving and written per time bin (the read and
write phases), each row's resolve latency (its first resolve after its last publish), how long a piece waits on
chip, and the head (before the first write) and the tail (after the last arrival). A resident softmax (Note [a tensor
held on chip whole] in templates/resident.py) marks its block's steps with the same macros, read by
``resident_summary``.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

EVENTS = ("issued", "arrived", "published", "resolved", "written")
MAX_PIECES = 256  # stamps kept per block; later pieces are not marked

TRACE_HEADER = r"""#define KF_TRACE_BLOCKS {blocks}
#define KF_TRACE_PIECES {pieces}
__device__ unsigned long long kf_trace[KF_TRACE_BLOCKS * KF_TRACE_PIECES * 5];
__device__ unsigned long long kf_block[KF_TRACE_BLOCKS * 2];  // a block's start, its consumers' last end
__device__ unsigned long long kf_clock[2];  // kf_stamp before and after the relay
__device__ __forceinline__ unsigned long long kf_now() {{
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}}
extern "C" __global__ void kf_stamp(int i) {{ kf_clock[i] = kf_now(); }}
#define KF_TRACE(cond, e, t)                                                                   \
  do {{                                                                                         \
    if ((cond) && (t) < KF_TRACE_PIECES && blockIdx.x < KF_TRACE_BLOCKS)                        \
      kf_trace[((unsigned long long)blockIdx.x * KF_TRACE_PIECES + (t)) * 5 + (e)] = kf_now();  \
  }} while (0)
#define KF_TRACE_BLOCK(cond, e)                                                                \
  do {{                                                                                         \
    if ((cond) && blockIdx.x < KF_TRACE_BLOCKS) {{                                               \
      if ((e) == 0) kf_block[blockIdx.x * 2] = kf_now();                                       \
      else atomicMax(kf_block + blockIdx.x * 2 + 1, kf_now());                                 \
    }}                                                                                          \
  }} while (0)
"""


def source_const(source: str, name: str) -> int:
    m = re.search(rf"constexpr (?:int|long long) {name} = (-?\d+);", source)
    if not m:
        raise ValueError(f"the relay source defines no constant {name}")
    return int(m.group(1))


def timeline(stamps: np.ndarray, blocks: int, rows: int, cols: int, pe: int, in_bytes: float, out_bytes: float,
             bin_us: float = 1.0) -> dict[str, Any]:
    """What the stamps ``[blocks, pieces, 5]`` (ns of the global timer, 0 where a step was not marked) say about one
    launch: piece ``g`` of the ``rows * ceil(cols / pe)`` ran in block ``g mod blocks`` as its ``g div blocks``-th;
    ``in_bytes``/``out_bytes`` per element read/written."""
    ppr = -(-cols // pe)
    nb, npieces = stamps.shape[0], stamps.shape[1]
    marked = stamps[stamps > 0]
    if marked.size == 0:
        raise ValueError("no step was marked: the source was compiled without KF_TRACE")
    t0 = int(marked.min())
    us = np.where(stamps > 0, (stamps.astype(np.float64) - t0) / 1e3, np.nan)
    pieces = []  # (row, block, t, elements)
    for b in range(min(nb, blocks)):
        for t in range(npieces):
            g = b + t * blocks
            if g >= rows * ppr:
                break
            row, c0 = divmod(g, ppr)
            pieces.append((row, b, t, min(pe, cols - c0 * pe)))
    if not pieces:
        raise ValueError("no piece of this geometry lies within the stamps")
    row_of = np.array([p[0] for p in pieces])
    idx_b, idx_t = np.array([p[1] for p in pieces]), np.array([p[2] for p in pieces])
    elems = np.array([p[3] for p in pieces], dtype=np.float64)
    ev = {name: us[idx_b, idx_t, i] for i, name in enumerate(EVENTS)}
    end = float(np.nanmax(us))
    nbins = int(np.ceil(end / bin_us)) + 1
    per_bin = 1e-3 / bin_us  # bytes per bin of bin_us microseconds -> GB/s
    read = np.zeros(nbins)
    write = np.zeros(nbins)
    ok_r, ok_w = ~np.isnan(ev["arrived"]), ~np.isnan(ev["written"])
    np.add.at(read, (ev["arrived"][ok_r] // bin_us).astype(int), elems[ok_r] * in_bytes)
    np.add.at(write, (ev["written"][ok_w] // bin_us).astype(int), elems[ok_w] * out_bytes)
    latency, spans = [], []
    for r in np.unique(row_of):
        sel = row_of == r
        pub, res = ev["published"][sel], ev["resolved"][sel]
        if np.isnan(pub).any() or np.isnan(res).all():
            continue  # a row with pieces past MAX_PIECES
        last_pub = float(np.max(pub))
        latency.append(float(np.nanmin(res)) - last_pub)
        spans.append(float(np.nanmax(ev["written"][sel]) - np.nanmin(ev["arrived"][sel])))
    wait = ev["resolved"] - ev["published"]  # a piece's publish to its own row's statistic, in its block
    hold = ev["written"] - ev["arrived"]  # a piece's time on chip (first consumer warp)
    lat = np.array(latency) if latency else np.array([np.nan])

    def q(a: np.ndarray) -> dict[str, float]:
        a = a[~np.isnan(a)]
        if a.size == 0:
            return {}
        return {k: round(float(v), 3) for k, v in zip(("p10", "p50", "p90", "max"),
                                                     np.percentile(a, [10, 50, 90, 100]))}

    return {
        "span_us": round(end, 3),
        "first_write_us": round(float(np.nanmin(ev["written"])), 3),
        "last_arrival_us": round(float(np.nanmax(ev["arrived"])), 3),
        "tail_us": round(end - float(np.nanmax(ev["arrived"])), 3),
        "pieces": len(pieces), "rows": int(len(latency)),
        "resolve_latency_us": q(lat),
        "publish_to_statistic_us": q(wait),
        "on_chip_us": q(hold),
        "arrival_to_publish_us": q(ev["published"] - ev["arrived"]),
        "bin_us": bin_us,
        "read_gbps": [round(float(v) * per_bin, 1) for v in read],
        "write_gbps": [round(float(v) * per_bin, 1) for v in write],
    }


def resident_summary(stamps: np.ndarray, block: np.ndarray, chunks: int) -> dict[str, Any]:
    """The resident kernel's steps (Note [a tensor held on chip whole] in templates/resident.py), thread 0 of each
    block: its copies issued (event 0), each copy seen arrived (event 1, piece = copy), its packs folded (event 2,
    piece 1), its partials published (event 2, piece 0), its rows' statistics (event 3), its shared packs written
    (event 4); with the block's start and its warps' last end, all in us from the first block's start, as quantiles
    over the blocks."""
    start = block[:, 0].astype(np.float64)
    if not (start > 0).all():
        raise ValueError("a block left no start mark: the source was compiled without KF_TRACE")
    t0 = start.min()
    us = lambda a: np.where(a > 0, (a.astype(np.float64) - t0) / 1e3, np.nan)  # noqa: E731
    arrivals = us(stamps[:, :chunks, 1])
    steps = {"start": us(block[:, 0]), "issued": us(stamps[:, 0, 0]), "first_arrival": arrivals[:, 0],
             "last_arrival": np.nanmax(arrivals, axis=1), "folded": us(stamps[:, 1, 2]),
             "published": us(stamps[:, 0, 2]), "resolved": us(stamps[:, 0, 3]), "smem_written": us(stamps[:, 0, 4]),
             "end": us(block[:, 1])}
    quantiles = lambda v: (round(float(x), 3) for x in np.nanpercentile(v, [10, 50, 90, 100]))  # noqa: E731
    return {k: dict(zip(("p10", "p50", "p90", "max"), quantiles(v))) for k, v in steps.items()}


def block_summary(block: np.ndarray, clock: np.ndarray, stamps: np.ndarray) -> dict[str, float]:
    """The launch around the pipeline: ``block`` [blocks, 2] (a block's start, its consumers' last end), ``clock``
    (kf_stamp's time before and after the relay, one-thread kernels on the same stream) and the piece stamps."""
    start, end = block[:, 0][block[:, 0] > 0], block[:, 1][block[:, 1] > 0]
    if start.size == 0 or end.size == 0 or not clock.all():
        raise ValueError("the block marks or the stamp kernels left no time")
    issue = stamps[:, :, 0][stamps[:, :, 0] > 0]
    us = lambda a, b: round((float(a) - float(b)) / 1e3, 3)  # noqa: E731
    return {"stamp_to_first_start_us": us(start.min(), clock[0]), "starts_spread_us": us(start.max(), start.min()),
            "first_start_to_first_issue_us": us(issue.min(), start.min()),
            "kernel_us": us(end.max(), start.min()), "last_end_to_stamp_us": us(clock[1], end.max()),
            "stamp_to_stamp_us": us(clock[1], clock[0])}


def render(name: str, summary: dict[str, Any], copy_gbps: float | None) -> str:
    lines = [f"== {name}: span {summary['span_us']} us, first write at {summary['first_write_us']} us, last arrival "
             f"at {summary['last_arrival_us']} us (tail {summary['tail_us']} us), {summary['pieces']} pieces",
             f"   resolve latency (row's last publish -> first statistic) {summary['resolve_latency_us']}",
             f"   publish -> own statistic {summary['publish_to_statistic_us']}",
             f"   arrival -> publish {summary['arrival_to_publish_us']}",
             f"   on chip (arrival -> written) {summary['on_chip_us']}",
             f"   launch {summary.get('launch', {})}",
             f"   per {summary['bin_us']} us: read GB/s | write GB/s" + (f" (copy bandwidth {copy_gbps:.0f})"
                                                                          if copy_gbps else "")]
    for i, (r, w) in enumerate(zip(summary["read_gbps"], summary["write_gbps"])):
        lines.append(f"   {i * summary['bin_us']:7.1f} {r:7.0f} {w:7.0f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", required=True,
                    help="the probe case whose name contains this (the first such; a leading = names it exactly; "
                         "repeat for several)")
    ap.add_argument("--params", default="", help="the variant (JSON or k=v,k=v; default: the template's root)")
    ap.add_argument("--launches", type=int, default=3, help="traced launches, each after an L2 flush")
    ap.add_argument("--bin-us", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=None, help="write trace.json here")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("trace_relay needs a CUDA GPU; none is visible here.")
        return
    import probe_variants
    from harness import name_matches
    from forge_backend.measure import Timer, measure_copy_bandwidth
    from forge_backend.runtime.launch import Launcher, _check, _driver
    from forge_backend.runtime.nvrtc import compile_candidate, compile_source
    from forge_backend.search.templates import family_for
    from forge_backend.search.templates.common import ITEMSIZE, SMS
    from forge_backend.verify import make_inputs, verify

    dev = torch.device("cuda", 0)
    timer = Timer(dev)
    bw = measure_copy_bandwidth(dev)
    drv = _driver()
    results = []
    for want in args.case:
        matches = [(n, c) for n, c, _ in probe_variants.cases() if name_matches(n, [want])]
        if not matches:
            sys.exit(f"no probe case contains {want!r}")
        name, card = matches[0]
        fam = family_for(card)
        params = probe_variants.parse_params(args.params) if args.params else fam.root_params(card)
        if params.get("strategy") not in ("relay", "resident") or not fam.valid(card, params):
            sys.exit(f"{params} is not a valid relay or resident variant of {name}")
        resident = params["strategy"] == "resident"
        cand = fam.generate(card, params)
        traced = replace(cand, source=TRACE_HEADER.format(blocks=SMS, pieces=MAX_PIECES) + cand.source)
        plain = Launcher(card, cand, compile_candidate(cand, card.arch).cubin, dev)
        marked = Launcher(card, traced, compile_source(traced.source, card.arch).cubin, dev)
        report = verify(card, marked.launch_into, marked.allocate_outputs, dev)
        if not report.ok:
            sys.exit(f"the marked kernel fails the verifier ({report.failed_check}: {report.message})")
        inputs = make_inputs(card, "normal", 7, dev)
        t_plain = timer.time(lambda: plain(inputs)).median_us
        t_marked = timer.time(lambda: marked(inputs)).median_us
        # the same kernel launched without the cooperative guarantee (every block fits at once on an idle GPU)
        plain.launches = tuple(replace(l, cooperative=False) for l in plain.launches)
        t_normal = timer.time(lambda: plain(inputs)).median_us
        mod = marked.module.module
        glob = {name: _check(drv.cuModuleGetGlobal(mod, name.encode()), "cuModuleGetGlobal")
                for name in ("kf_trace", "kf_block", "kf_clock")}
        stamp = _check(drv.cuModuleGetFunction(mod, b"kf_stamp"), "cuModuleGetFunction")
        cols = source_const(cand.source, "COLS")
        pe = 0 if resident else source_const(cand.source, "PE")
        x, y = card.inputs[0].spec, card.outputs[0].spec
        numel = int(np.prod(x.shape))
        summaries, raw = [], {}
        for _ in range(args.launches):
            torch.cuda.synchronize()
            for ptr, size in glob.values():
                _check(drv.cuMemsetD8(ptr, 0, size) + (None,), "cuMemsetD8")
            timer.flush_l2()
            stream = torch.cuda.current_stream().cuda_stream
            for i in (0, 1):
                arg = ctypes.c_int(i)
                argv = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
                _check(drv.cuLaunchKernel(stamp, 1, 1, 1, 1, 1, 1, 0, stream, ctypes.addressof(argv), 0)
                       + (None,), "cuLaunchKernel(kf_stamp)")
                if i == 0:
                    marked(inputs)
            torch.cuda.synchronize()
            for var, (ptr, size) in glob.items():
                raw[var] = np.zeros(int(size) // 8, dtype=np.uint64)
                _check(drv.cuMemcpyDtoH(raw[var].ctypes.data, ptr, size) + (None,), "cuMemcpyDtoH")
            stamps = raw["kf_trace"].reshape(SMS, MAX_PIECES, 5)
            if resident:
                summaries.append(resident_summary(stamps, raw["kf_block"].reshape(SMS, 2),
                                                  source_const(cand.source, "NCH")))
                continue
            summary = timeline(stamps, SMS, numel // cols, cols, pe, ITEMSIZE[x.dtype], ITEMSIZE[y.dtype],
                               args.bin_us)
            summary["launch"] = block_summary(raw["kf_block"].reshape(SMS, 2), raw["kf_clock"], stamps)
            summaries.append(summary)
        print(f"== {name}: {cand.description}: {t_plain:.1f} us, {t_normal:.1f} us launched without the cooperative "
              f"guarantee, {t_marked:.1f} us marked (medians, after an L2 flush)")
        for s in summaries:
            print("\n".join(f"   {k:13s} {v}" for k, v in s.items()) if resident else render(name, s, bw))
        results.append({"case": name, "params": params, "description": cand.description, "unmarked_us": t_plain,
                        "normal_launch_us": t_normal, "marked_us": t_marked, "copy_gbps": bw,
                        "launches": summaries})
        if args.out:  # the last launch's stamps, for a closer look
            args.out.mkdir(parents=True, exist_ok=True)
            slug = re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
            np.savez_compressed(args.out / f"stamps_{slug}.npz", **raw)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "trace.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
