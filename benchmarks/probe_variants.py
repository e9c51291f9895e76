"""Time hand-picked template variants of one signature, without a search: where does each strategy land?

    python benchmarks/probe_variants.py [--only softmax] [--out DIR]

A development tool for the template library. Every variant is compiled, verified and timed in the search worker
(the same verifier and device-event timer as a search), so a faulting or hanging variant only costs its worker.
The grids below name the knobs worth comparing at the anchor rows the templates miss; the printout is one line per
variant with its time, % of the measured copy bandwidth and speedup over eager.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
import template_cards as tc  # noqa: E402
from harness import name_matches  # noqa: E402

from forge_backend.cards import OperatorCard  # noqa: E402
from forge_backend.contract import Candidate  # noqa: E402
from forge_backend.errors import CandidateFailure  # noqa: E402
from forge_backend.search.templates import family_for  # noqa: E402
from forge_backend.search.templates.norm import fit_block  # noqa: E402


def grid(**axes: Any) -> Iterator[dict[str, Any]]:
    keys = list(axes)
    for values in itertools.product(*(v if isinstance(v, (list, tuple)) else [v] for v in axes.values())):
        yield dict(zip(keys, values))


def softmax_variants(vec: int) -> list[dict[str, Any]]:
    out = list(grid(strategy="cluster", vec=vec, block=[256, 512], cs=[8, 16], cache="reg", stream=[False, True]))
    out += list(grid(strategy="cluster", vec=vec, block=[256, 512, 1024], cs=[8, 16], cache=["none", "smem"],
                     stream=[False, True]))
    out += list(grid(strategy="split", vec=vec, block=[256, 512], splits=[8, 16, 32], reverse=True,
                     stream=[False, True]))
    out += list(grid(strategy="pipe", vec=vec, block=[256, 512, 1024], cs=[8, 16], clusters=[4, 8, 16],
                     stream=[False, True]))
    out += list(grid(strategy="cluster", vec=vec, block=[256, 512, 1024], cs=[4, 8, 16], cache="smem",
                     keep=[2, 4, 6, 8, 12], stream=[False, True]))  # Note [a chunk kept in part]
    # Note [a chunk fetched by the copy engine]: whole chunks and kept parts (`--strategy tma`)
    out += list(grid(strategy="cluster", vec=vec, block=[256, 512, 1024], cs=[8, 16], cache="smem", stream=False,
                     tma=True))
    out += list(grid(strategy="cluster", vec=vec, block=[256, 512], cs=[16], cache="smem", keep=[4, 6],
                     stream=[False, True], tma=True))
    return out + relay_variants(16 // vec)


def relay_variants(isz: int) -> list[dict[str, Any]]:
    """Note [rows relayed through global memory] (`--strategy relay`): pieces of 8-32 KB, 16 consumer warps, 1-4
    control warps, slots and lags that keep at least one piece loading ahead, in 96-200 KB of shared memory."""
    from forge_backend.search.templates.relay import relay_smem

    out = []
    lags = (1, 2, 3, 4, 6, 8, 10)
    for pe_bytes, nc, k, lag in itertools.product((8192, 16384, 32768), (1, 2, 4), range(3, 17), lags):
        p = {"strategy": "relay", "vec": 16 // isz, "pe": pe_bytes // isz, "nw": 16, "nc": nc, "k": k, "lag": lag}
        if 3 <= k - lag <= 5 and 96 * 1024 <= relay_smem(p, isz) <= 200 * 1024:  # valid() checks the rest
            out.append(p)
    return out


def relay_once_variants() -> list[dict[str, Any]]:
    """Note [a prologue evaluated once, into its slot] (softmax_relay.py): relays over bf16 logits with the prologue
    evaluated three times an element and once (`--strategy relay`)."""
    base = {"strategy": "relay", "vec": 8, "pe": 16384, "nw": 16, "nc": 1, "k": 6, "lag": 3}
    return [base, {**base, "once": True}, {**base, "once": True, "nc": 2}, {**base, "once": True, "lag": 2},
            {**base, "once": True, "pe": 8192, "k": 12, "lag": 4},
            {**base, "once": True, "pe": 24576, "nw": 24, "k": 4, "lag": 2}]


def narrow_variants(vecs: list[int]) -> list[dict[str, Any]]:
    """Shared-memory clusters with narrower loads than 16 bytes: in the eighth session's ops search the softmax
    [64, 262144] fp32 ran 42.5 us at 8-byte loads against 44.4 us at 16 (`--only narrow`)."""
    out = list(grid(strategy="cluster", vec=vecs, block=[256, 512, 1024], cs=[8, 16], cache="smem",
                    stream=[False, True]))
    out += list(grid(strategy="cluster", vec=vecs, block=[512, 1024], cs=16, cache="smem", keep=[4, 8, 12, 16],
                     stream=False))
    return out + list(grid(strategy="cluster", vec=vecs, block=[512, 1024], cs=16, cache=["none", "reg"],
                           stream=False))


def group_norm_variants(vec: int) -> list[dict[str, Any]]:
    out = list(grid(strategy="sync", vec=vec, block=[256, 512], bpt=[32, 64, 128, 256], cache="reg", stream=False))
    out += list(grid(strategy="sync", vec=vec, block=[256, 512, 1024], bpt=[64, 128, 256], cache="none",
                     stream=[False, True]))
    out += list(grid(strategy="sync", vec=vec, block=[256, 512], bpt=[128, 256, 512, 1024], cache="smem",
                     stream=[False, True]))
    out += list(grid(strategy="split", vec=vec, block=[256, 512], k=[8, 16, 32], reverse=True, stream=[False, True]))
    out += list(grid(strategy="cluster", vec=vec, block=[512, 1024], cs=[4, 8, 16], cache=["reg", "smem"],
                     stream=[False, True]))
    out += list(grid(strategy="pipe", vec=vec, block=[512, 1024], cs=[4, 8, 16], clusters=[4, 8, 16, 33],
                     stream=[False, True]))
    out += list(grid(strategy="cluster", vec=vec, block=[256, 512, 1024], cs=[8, 16], cache="smem",
                     keep=[2, 4, 6, 7, 8], stream=[False, True]))
    out += list(grid(strategy="cluster", vec=vec, block=[256, 512, 1024], cs=[8, 16], cache="smem",
                     keep=[4, 6, 7, 8], stream=True, tma=True))
    return out + relay_variants(16 // vec)  # Note [rows relayed through global memory]: groups as rows


def row_norm_variants(vec: int, cols: int) -> list[dict[str, Any]]:
    """The row norm's layouts for a long-ish row (a norm group with its residual add at MMDiT's width: Note [a norm
    takes the residual add before it]; `--only residual`): one row per block, or 1-32 threads per row. The blocks
    include the ones that fit the row in one pass (Note [a block that fits the row]; `--strategy fit`), and the walked
    layouts (`--strategy walk`)."""
    out = list(grid(strategy="block", vec=[vec, vec // 2], block=[64, 128, 256], cache=["reg", "none"]))
    out += [{"strategy": "block", "vec": v, "block": fit_block(cols, v), "cache": c, "fit": True}
            for v in (vec, vec // 2) for c in ("reg", "none")]
    out += list(grid(strategy="group", vec=[vec, vec // 2], tpr=[8, 16, 32], block=[64, 128, 256, 512],
                     cache=["reg", "none"]))
    # Note [row norms walked with the next rows' loads in flight] (`--strategy walk`; a prologue's inputs count
    # against the registers too, so some are invalid there)
    out += [{"strategy": "walk", "vec": vec, "tpr": b, "block": b, "bps": n, "cache": "reg"}
            for b in (64, 128, fit_block(cols, vec)) for n in (2, 4, 8, 16) if b * n <= 2048]
    return out + list(grid(strategy="walk", vec=vec, tpr=32, block=[128, 256], bps=[2, 4, 8], cache="reg"))


def conv_variants() -> list[dict[str, Any]]:
    """The depthwise conv1d's tiles, with and without vector channel loads (Note [vector loads of a channels-fast
    input] in templates/conv_kernels.py)."""
    out = list(grid(strategy="tile", tl=[32, 64, 128], tc=[32, 64], block=[128, 256, 512], vec=[2, 4, 8]))
    out += list(grid(strategy="tile", tl=[32, 64, 128], tc=[32, 64], block=[128, 256, 512]))
    # Note [a window of positions in registers] (`--strategy window`)
    out += list(grid(strategy="window", tl=[32, 64, 128], tc=[32, 64, 128], vec=[4, 8], r=[2, 4, 8, 16]))
    # Note [channel tiles first] (`--strategy cfirst`)
    out += list(grid(strategy="tile", tl=[64, 128], tc=[32, 64], block=[128, 256], vec=8, cfirst=True)) + \
        list(grid(strategy="window", tl=[64, 128], tc=[32, 64], vec=[4, 8], r=[4, 8], cfirst=True))
    # Note [a warp per output row] (`--strategy rows`)
    out += list(grid(strategy="rows", tl=[64, 128, 256], tc=[32, 64, 128], block=[128, 256, 512], vec=[8, 4]))
    # Note [the next tile's loads in flight] (`--strategy rows`)
    out += list(grid(strategy="rows", tl=[64, 128, 256], tc=[32, 64], block=[128, 256, 512], vec=8, steps=[2, 4, 8]))
    # Note [two positions per lane] (`--strategy lp`)
    out += list(grid(strategy="rows", tl=[64, 128, 256], tc=[16, 32, 64], block=[128, 256, 512], vec=[8, 4], lp=2))
    out += list(grid(strategy="rows", tl=[128, 256, 512], tc=[8, 16, 32], block=64, vec=8, lp=2)) + \
        list(grid(strategy="rows", tl=512, tc=[8, 16, 32], block=[128, 256], vec=8, lp=2))
    # Note [output chunks aligned per channel row] (`--strategy chunks`)
    chunks = list(grid(strategy="chunks", tl=[128, 256, 512], tc=[16, 32, 64, 128], block=[128, 256, 512], vec=8))
    # Note [a warp's stores along one row] (`--strategy chunks`)
    rowfast = list(grid(strategy="chunks", tl=[64, 128, 256], tc=[64, 128], block=[128, 256], vec=8, rowfast=True))
    # Note [a block's channel rows as one flat run] (`--strategy flat`)
    flat = list(grid(strategy="flat", g=[8, 16, 32], block=[256, 512], ld=[4, 8], vec=8))
    # Note [the next run's loads in flight] (`--strategy flat`)
    flat += list(grid(strategy="flat", g=[8, 16, 32], block=[256, 512], pipe=True, vec=8))
    # Note [channel rows over a band of positions] (`--strategy bands`)
    bands = list(grid(strategy="bands", g=[32, 64, 128], lt=[64, 128, 256], block=[128, 256], ld=[8, 16], vec=8))
    bands += list(grid(strategy="bands", g=[64, 128], lt=512, block=256, ld=8, vec=8)) + \
        list(grid(strategy="bands", g=64, lt=[128, 256], block=512, ld=[4, 8], vec=8))
    bands += list(grid(strategy="bands", g=[32, 64], lt=[128, 256], block=[128, 256], ld=8, vec=8, bfirst=True))
    # Note [whole lines, 8 x 8 blocks turned in registers] (`--strategy lines`): 8 or 4 outputs a work item
    lines = list(grid(strategy="lines", tp=[128, 256], tc=64, block=[128, 256], stages=[2, 3, 4], vo=[8, 4]))
    lines += list(grid(strategy="lines", tp=128, tc=[64, 128], block=256, stages=3, vo=[8, 4], cfirst=True))
    # bands balanced over the grid (conv_lines.balanced_tp: Qwen's 208) and the widths between
    lines += list(grid(strategy="lines", tp=[136, 152, 176, 208], tc=64, block=256, stages=[3, 4], vo=8))
    return out + chunks + [{**p, "direct": True} for p in chunks] + rowfast + flat + bands + lines


def two_wave_variants() -> list[dict[str, Any]]:
    """[64, 262144] fp32 clusters of 16 blocks of 256 threads keeping 5/8 to 15/16 of their 64 KB chunk: four blocks
    per SM fit (the whole chunk allows three, and 21 clusters in flight: 64 rows take three waves and one row, per
    Nsight Compute in the ninth session), so 32 clusters, two waves of rows, may be in flight
    (`--only "two waves"`)."""
    return list(grid(strategy="cluster", vec=2, block=256, cs=16, cache="smem", keep=[20, 24, 28, 30],
                     stream=[False, True])) + \
        list(grid(strategy="cluster", vec=4, block=256, cs=16, cache="smem", keep=[10, 12, 14, 15],
                  stream=[False, True]))


def ordered_variants() -> list[dict[str, Any]]:
    """Gemma's masked attention softmax: row kernels in row order and with the heads that share a mask row launched
    together (Note [rows that share a broadcast row run together]; `--only attn`)."""
    out = []
    for order in (None, "bcast"):
        more = {"order": order} if order else {}
        out += [{**p, **more} for p in grid(strategy="block", vec=8, block=[64, 128, 256], cache="reg")]
        out += [{**p, **more} for p in grid(strategy="group", vec=8, tpr=[16, 32], block=[128, 256], cache="reg")]
    return out


def cases() -> list[tuple[str, OperatorCard, list[dict[str, Any]]]]:
    return [
        ("softmax [64,262144] fp32", tc.softmax((64, 262144), "float32"), softmax_variants(4)),
        ("softmax [64,262144] bf16", tc.softmax((64, 262144), "bfloat16"), softmax_variants(8)),
        ("softmax [64,248320] bf16", tc.softmax((64, 248320), "bfloat16"), softmax_variants(8)),
        ("softmax [64,262144] fp32 narrow", tc.softmax((64, 262144), "float32"), narrow_variants([1, 2])),
        ("softmax [64,262144] fp32 two waves", tc.softmax((64, 262144), "float32"), two_wave_variants()),
        ("attn softmax [1,8,2048,2048] bf16", tc.softmax_fused(
            "to_float32(add(mul(x0,1.0),x1))", [((1, 8, 2048, 2048), "bfloat16"), ((1, 1, 2048, 2048), "bfloat16")],
            "bfloat16"), ordered_variants()),
        ("softcap softmax [64,262144] bf16", tc.softmax_fused("to_float32(mul(tanh(div(x0,30.0)),30.0))",
                                                              [((64, 262144), "bfloat16")]),
         list(grid(strategy="cluster", vec=[4, 8], block=[256, 512], cs=16, cache="smem", stream=[False, True]))
         + relay_once_variants()),
        ("sampling softmax [64,262144] bf16 -> fp32", tc.softmax_fused("to_float32(x0)", [((64, 262144), "bfloat16")]),
         relay_once_variants()),
        ("softmax [64,262144] bf16 narrow", tc.softmax((64, 262144), "bfloat16"), narrow_variants([2, 4])),
        ("group_norm [1,512,256,256] bf16", tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,)),
         group_norm_variants(8)),
        ("group_norm [1,512,256,256] bf16 narrow", tc.group_norm(1, 512, 256, 256, dtype="bfloat16", used=(0,)),
         list(grid(strategy="cluster", vec=4, block=[512, 1024], cs=16, cache="smem", keep=[8, 12, 16],
                   stream=True)) + list(grid(strategy="cluster", vec=4, block=[512, 1024], cs=16, cache="smem",
                                             stream=True))),
        ("group_norm [1,512,256,256] fp32", tc.group_norm(1, 512, 256, 256, dtype="float32", used=(0,)),
         group_norm_variants(4)),
        ("group_norm [2,1536,64,64] bf16", tc.group_norm(2, 1536, 64, 64, dtype="bfloat16", used=(0,)),
         group_norm_variants(8)),
        ("group_norm [2,1536,64,64] fp32", tc.group_norm(2, 1536, 64, 64, dtype="float32", used=(0,)),
         group_norm_variants(4)),
        ("group_norm [1,512,128,128] fp32", tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,)),
         group_norm_variants(4)),
        ("group_norm [1,128,1024,1024] fp32", tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,)),
         relay_variants(4)),
        ("group_norm [1,128,1024,1024] bf16", tc.group_norm(1, 128, 1024, 1024, dtype="bfloat16", used=(0,)),
         relay_variants(2)),
        ("group_norm [1,256,512,512] bf16", tc.group_norm(1, 256, 512, 512, dtype="bfloat16", used=(0,)),
         relay_variants(2)),
        ("group_norm [1,256,512,512] fp32", tc.group_norm(1, 256, 512, 512, dtype="float32", used=(0,)),
         relay_variants(4)),
        ("group_norm [1,512,128,128] bf16", tc.group_norm(1, 512, 128, 128, dtype="bfloat16", used=(0,)),
         group_norm_variants(8)),
        ("group_norm [1,512,256,256] fp16", tc.group_norm(1, 512, 256, 256, dtype="float16", used=(0,)),
         relay_variants(2)),
        ("causal_conv1d [1,8192,2048] bf16", tc.causal_conv1d(8192, 2048), conv_variants()),
        # the same bytes with output rows that start on 16-byte boundaries (k=5, padding 2: 2048 outputs per row, where
        # Qwen's 2051 start at odd 2-byte offsets): is that what holds the conv at 40% of the copy bandwidth?
        ("causal_conv1d aligned rows [1,8192,2048] k=5 bf16", tc.causal_conv1d(8192, 2048, k=5, padding=2),
         list(grid(strategy="tile", tl=[64, 128], tc=[32, 64], block=[128, 256], vec=8))),
        ("residual adaLN norm [1,4096,1536] bf16", tc.norm_residual(
            "add(x0,mul(x1,x2))", [((1, 4096, 1536), "bfloat16"), ((1, 1, 1536), "bfloat16"),
                                   ((1, 4096, 1536), "bfloat16")],
            "add(mul(x0,x1),x2)", [((1, 1, 1536), "bfloat16"), ((1, 1, 1536), "bfloat16")], (1, 4096, 1536)),
         row_norm_variants(8, 1536)),
        ("layer_norm [4096,2048] bf16", tc.layer_norm((4096, 2048), (2048,), "bfloat16", used=(0,)),
         row_norm_variants(8, 2048)),
        ("rms_norm [4096,2048] bf16", tc.rms_norm((4096, 2048), (2048,), "bfloat16", used=(0,)),
         row_norm_variants(8, 2048)),
        ("adaLN norm [1,4096,1536] bf16", tc.norm_fused(
            "add(mul(x0,x1),x2)", (1, 4096, 1536), [((1, 1, 1536), "bfloat16"), ((1, 1, 1536), "bfloat16")]),
         row_norm_variants(8, 1536)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                    help="only cases whose name contains this (repeat for several; case names hold commas, so a "
                         "value is never split: --only \"softmax [64,262144] fp32\"; a leading = names one case exactly: "
                         "--only \"=softmax [64,262144] bf16\")")
    ap.add_argument("--strategy", default="", help="only variants of these strategies (comma separated; `keep`: "
                                                    "the chunks kept in part, `tma`: filled by the copy engine, "
                                                    "`fit`: row norm blocks that fit the row, `lp`: conv rows with two "
                                                    "positions per lane)")
    ap.add_argument("--params", action="append", default=[], metavar="K=V,K=V",
                    help="time these variants (and the root) instead of the case's grid (repeat for several)")
    ap.add_argument("--out", type=Path, default=None, help="write probe.json here")
    ap.add_argument("--fresh-scratch", action="store_true",
                    help="also time each variant whose scratch is kept between launches with that scratch zeroed "
                         "before every launch instead (Note [scratch kept between launches] in contract.py)")
    ap.add_argument("--swap", action="append", default=[], metavar="OLD=>NEW",
                    help="also time each variant with OLD replaced by NEW in its source, in the same run (repeat for "
                         "several): an A/B of a code-generation change. One value may hold several replacements "
                         "joined by ' && ', applied together")
    ap.add_argument("--unverified", action="store_true",
                    help="time each --swap variant without the verifier (the worker's remeasure: fresh inputs, no "
                         "checks), for a diagnostic swap that breaks the result on purpose, such as an exp left out "
                         "to see what it costs; such rows carry `unverified` and are never a candidate")
    ap.add_argument("--plain-launch", action="store_true",
                    help="also time each variant whose launches are cooperative with plain launches instead, in the "
                         "same run: what the cooperative launch costs (on an idle GPU a grid of one block per SM is "
                         "resident at once either way; a grid that is not would hang, and the worker's time bound "
                         "ends it)")
    ap.add_argument("--copy", action="append", type=int, default=[], metavar="MIB",
                    help="also time a plain copy (Tensor.copy_) that moves MIB mebibytes, read plus written, with the "
                         "same timer: the ceiling of a row that moves as much (repeat for several)")
    ap.add_argument("--transpose", action="append", default=[], metavar="ROWSxCOLS:DTYPE",
                    help="also time a transposing copy of a [ROWS, COLS] tensor (eager .t().contiguous() and "
                         "Inductor's compiled one) with the same timer: the ceiling of a kernel that turns its input "
                         "around, as the causal conv1d does (repeat for several)")
    ap.add_argument("--flush-only", action="store_true",
                    help="only time eager with a read and a write L2 flush (Note [why flush before each repeat])")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("probe_variants needs a CUDA GPU; none is visible here.")
        return
    from forge_backend.measure import Timer
    from forge_backend.reference import call_aten
    from forge_backend.runtime.nvrtc import compile_candidate
    from forge_backend.runtime.worker import WorkerClient
    from forge_backend.verify import make_inputs

    dev = torch.device("cuda", 0)
    timers = {f: Timer(dev, flush=f) for f in ("read", "write")}

    if args.copy or args.transpose:
        from forge_backend.measure import measure_copy_bandwidth
        bw = measure_copy_bandwidth(dev)
    results = [time_copy(timers["read"], mb, bw) for mb in args.copy]
    results += [row for spec in args.transpose for row in time_transpose(timers["read"], spec, bw)]
    client = WorkerClient(None, 0, timeout_s=20)
    try:
        for name, card, variants in cases():
            if not name_matches(name, args.only):
                continue
            fam = family_for(card)
            inputs, sig = make_inputs(card, "normal", 99, dev), card.signature_obj()
            flushed = {f: t.time(lambda: call_aten(sig, inputs)).median_us for f, t in timers.items()}
            inputs = None  # free the memory before the worker allocates its own
            results.append({"case": name, "eager_us_read_flush": flushed["read"],
                            "eager_us_write_flush": flushed["write"]})
            print(f"== {name}: eager {flushed['read']:.1f} us after a read flush, {flushed['write']:.1f} us after a "
                  f"write flush", flush=True)
            if args.flush_only:
                continue
            base = client.call({"cmd": "baseline", "card": card.to_json()})
            print(f"   worker: eager {base['eager_us']:.1f} us, floor {base['floor_us']:.1f} us", flush=True)
            keep = set(filter(None, args.strategy.split(",")))
            # the template's own root first, so every filtered probe has the search's starting point to compare with
            chosen = [v for v in variants if not keep or v["strategy"] in keep
                      or any(flag in keep and flag in v for flag in ("keep", "tma", "cfirst", "fit", "lp"))]
            if args.params:
                chosen = [parse_params(text) for text in args.params]
            for p in [fam.root_params(card)] + chosen:
                if not fam.valid(card, p):
                    print(f"   invalid {p}")
                    continue
                cand = fam.generate(card, p)
                fresh = fresh_scratch(cand) if args.fresh_scratch else cand
                extra = [plain(cand)] if args.plain_launch and any(l.cooperative for l in cand.launches) else []
                swaps = swapped(cand, args.swap)
                for c in [cand] + ([fresh] if fresh is not cand else []) + swaps + extra:
                    row: dict[str, Any] = {"case": name, "params": p, "description": c.description}
                    try:
                        cubin = compile_candidate(c, card.arch).cubin
                        if args.unverified and any(c is s for s in swaps):
                            row.update(unverified=True, **time_unverified(client, card, c, cubin, base))
                        else:
                            r = client.call({"cmd": "evaluate", "card": card.to_json(), "candidate": c.to_json(),
                                             "cubin": cubin})
                            if r["ok"]:
                                row.update(time_us=r["time_us"], pct_bw=r["pct_bw"], speedup=r["speedup"])
                            else:
                                row["failed"] = (f"{r['verify_report']['failed_check']}: "
                                                 f"{r['verify_report']['message']}")
                    except CandidateFailure as e:
                        row["failed"] = f"{e.stage}: {e.message[:200]}"
                    results.append(row)
                    save(args.out, results)  # a stage killed at its time bound keeps every row timed so far
                    if "time_us" in row:
                        print(f"   {row['time_us']:8.1f} us {row['pct_bw']:5.1f}% bw {row['speedup']:5.2f}x  "
                              f"{c.description}" + (" [unverified]" if row.get("unverified") else ""), flush=True)
                    else:
                        print(f"   FAILED {row['failed'][:150]}  {c.description}", flush=True)
    finally:
        client.close()
        save(args.out, results)


def time_copy(timer: Any, mb: int, bw: float) -> dict[str, Any]:
    """A plain copy moving ``mb`` MiB (half read, half written), timed like the variants, against ``bw``, the measured
    copy bandwidth of a 2 GiB copy: how close a kernel of that size can get to its floor."""
    from forge_backend.measure import time_copy as copy_us

    us, floor = copy_us(timer, mb * 2**20), mb * 2**20 / (bw * 1e3)
    print(f"== copy of {mb} MiB moved: {us:.1f} us, floor {floor:.1f} us at {bw:.0f} GB/s: {100 * floor / us:.1f}%",
          flush=True)
    return {"case": f"copy {mb} MiB", "time_us": us, "floor_us": floor, "pct_bw": 100 * floor / us,
            "copy_bandwidth_gbps": bw}


def time_transpose(timer: Any, spec: str, bw: float) -> list[dict[str, Any]]:
    """A plain copy and a transposing copy of a [ROWS, COLS] tensor (``spec`` ROWSxCOLS:DTYPE), eager and through
    Inductor, timed like the variants: how close a kernel that turns its input around can get to its floor."""
    import torch

    shape, _, dtype = spec.partition(":")
    try:
        rows, cols = (int(v) for v in shape.split("x"))
        dt = getattr(torch, dtype or "bfloat16")
    except (ValueError, AttributeError):
        raise SystemExit(f"--transpose: {spec!r} is not ROWSxCOLS:DTYPE") from None
    x = torch.randn(rows, cols, device=timer.device).to(dt)
    moved = 2 * x.numel() * x.element_size()
    floor = moved / (bw * 1e3)
    compiled = torch.compile(lambda t: t.t().contiguous())
    want = x.t().contiguous()
    if not torch.equal(compiled(x), want):
        raise SystemExit("--transpose: Inductor's transpose differs from eager's")
    out = []
    for label, fn in (("copy", lambda: x.clone()), ("eager transpose", lambda: x.t().contiguous()),
                      ("Inductor transpose", lambda: compiled(x))):
        us = timer.time(fn).median_us
        print(f"== {label} [{rows},{cols}] {dtype}: {us:.1f} us, floor {floor:.1f} us: {100 * floor / us:.1f}%",
              flush=True)
        out.append({"case": f"{label} [{rows},{cols}] {dtype}", "time_us": us, "floor_us": floor,
                    "pct_bw": 100 * floor / us, "copy_bandwidth_gbps": bw})
    return out


def swapped(cand: Candidate, swaps: list[str]) -> list[Candidate]:
    """``cand`` with each swap applied to its source (labelled ``[swap i]``), where every OLD of it occurs there. A swap
    is ``OLD=>NEW``, or several joined by `` && `` and applied in order."""
    out = []
    for i, text in enumerate(swaps):
        source = cand.source
        for pair in text.split(" && "):
            old, sep, new = pair.partition("=>")
            if not sep or not old:
                raise SystemExit(f"--swap: {pair!r} is not OLD=>NEW")
            if old not in source:
                break
            source = source.replace(old, new)
        else:
            out.append(replace(cand, source=source, description=cand.description + f" [swap {i}]"))
    return out


def time_unverified(client: Any, card: OperatorCard, cand: Candidate, cubin: bytes, base: dict[str, Any]
                    ) -> dict[str, Any]:
    """``--unverified``: the worker's remeasure of ``cand`` (fresh inputs, the search's timer, no verifier), as
    ``time_us``, ``pct_bw`` and ``speedup`` beside the case's eager time and floor from ``base``."""
    r = client.call({"cmd": "remeasure", "card": card.to_json(), "candidate": cand.to_json(), "cubin": cubin,
                     "runs": 1})
    t = r["times_us"][0]
    return {"time_us": t, "pct_bw": 100.0 * base["floor_us"] / t, "speedup": r["eager_us"] / t}


def plain(cand: Candidate) -> Candidate:
    """The same kernel with its cooperative launches made plain (``--plain-launch``)."""
    return replace(cand, launches=tuple(replace(l, cooperative=False) for l in cand.launches),
                   description=cand.description + " [plain launch]")


def fresh_scratch(cand: Candidate) -> Candidate:
    """The same kernel with every kept scratch zeroed before each launch (the fill a kept one saves)."""
    if not any(s.persist for _, s in cand.scratch):
        return cand
    return replace(cand, scratch=tuple((k, replace(s, persist=False)) for k, s in cand.scratch),
                   description=cand.description + " [scratch zeroed before every launch]")


def parse_params(text: str) -> dict[str, Any]:
    """``{"vec": 4, ...}`` or ``strategy=block,vec=4,cache=reg`` (integers and true/false read as such)."""
    if text.lstrip().startswith("{"):
        return json.loads(text)
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--params: {item!r} is not key=value")
        out[key.strip()] = json.loads(value) if value in ("true", "false") or value.lstrip("-").isdigit() else value
    return out


def save(out: Path | None, results: list[dict[str, Any]]) -> None:
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
