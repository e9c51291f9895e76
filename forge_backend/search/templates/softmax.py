"""Softmax / log_softmax over the last dim of a contiguous tensor, as ``rows x cols``.

Strategies (``params["strategy"]``):

* ``group``   TPR <= 32 threads per row, several rows per block (short rows: cols <= ~2K).
* ``block``   one block per row; the row cached in registers, in shared memory, or re-read from global (L2).
* ``cluster`` one sm_90 thread-block cluster per row (CS <= 8 blocks, or 16 with the non-portable size the
              launcher allows): each block takes a chunk, the blocks exchange (max, sum) through distributed shared
              memory and write their chunk. ``cache=reg`` holds the chunk in registers, so the row is read from DRAM
              once (Gemma logits [64, 262144]: 128 MB moved, floor 31.6 us, where a two-pass split reads 192 MB);
              ``cache=none`` keeps no chunk, so many more blocks are resident, and re-reads it (from L2 while the
              working set fits there). ``cache=smem`` holds the chunk in shared memory: still one DRAM read, but a
              64 KB chunk leaves room for three blocks per SM where registers fit one or two, so one block's loads
              can run while another's barrier and stores do ([64, 262144] fp32: 44.4 us against 47.0 us in
              registers, benchmarks/results/h200/probe_smem_softmax.json).
* ``split``   two launches for rows too long for a cluster: per-chunk (max, sum) partials to scratch, then every
              chunk combines its row's partials and writes. ``reverse`` walks pass 2 backwards so it first
              re-reads the chunks pass 1 read last, which are still in L2.

* ``pipe``    for long rows ([64, 262144]): a fixed number of clusters (``clusters``, one block per SM by default)
              walk the rows, each block holding its chunk of the current row in shared memory while the loads of
              its chunk of the next row are already in flight into registers, so one row's reduction, barrier
              and stores overlap the next row's loads. It was meant to answer the 2.6 waves of row-sized clusters
              of the one-pass ``cluster``, and lost to it on the H200 (seventh session, probe_pipe.json, same run:
              [64, 262144] fp32 51.6 us against 44.8 us, bf16 37.4 against 27.1 us); it stays in the space.
* ``relay``   rows of >= 64 KB streamed through the whole GPU in pieces, one cooperative block per SM, each piece's
              (max, sum) relayed through a scratch kept between launches (Note [rows relayed through global
              memory], relay.py).
* ``resident`` a tensor that fits on chip (about 60 MB of shared memory and registers over 132 SMs) read whole, one
              cooperative block per SM, before anything is written (Note [a tensor held on chip whole],
              resident.py). It lost to the relay everywhere it was probed: an action of the search, not a seed.

Note [a chunk kept in part]
``cluster`` with ``cache=smem`` and ``keep`` (fewer packs per thread than its chunk has) keeps only its first ``keep``
packs in shared memory and re-reads the rest. The chunk is read in that order, so the rest are the lines a block read
last, and the write re-reads them first, while they are the freshest in L2. Shared memory per block shrinks with
``keep``, so more blocks are resident: at [64, 262144] fp32 a 64 KB chunk cached whole allows three blocks per SM and
2.6 waves of blocks; with a quarter kept, every block of the grid is resident at once and the DRAM sees one read of
the kept part plus what of the rest the L2 no longer holds. The two pure forms bracket it: ``smem`` (no re-read, 2.6
waves) ran 44.4 us and ``none`` (everything re-read, one wave) 45.8 us, same run (probe_smem_softmax.json). Measured
(seventh session, probe_kept_in_part.json, same run as each root): the softmax gains little ([64, 262144] bf16 26.7
against 27.5 us; fp32 46.3 against the whole chunk's 45.2 us), the group norm a lot (group_norm.py); ``keep`` is an
action of every smem cluster, and a kept-in-part cluster is the second seed of long rows (``kept_seed``) and of big
group norms (``group_norm.kept_seed``). ``tma`` (Note [a chunk fetched by the copy engine] in common.py) is another
action of a shared-memory cluster: the copy engine fills the chunk.

``stream`` (cluster, split and pipe) makes the last read of the input and the write of the output streaming accesses
(ld/st.global.cs), so the output does not evict input that is still to be re-read from L2.

Statistics are fp32 and reduced in a fixed order (bit-identical repeats). See Note [safe exp] in common.py for -inf.

The same kernels serve ``kforge.softmax`` (softmax_fusion.py: a softmax with its pointwise prologue and output cast):
the input pointer becomes the inputs x0..xk, each at its own row offset (an input may broadcast over the leading
dims), and every read of a pack evaluates the prologue's expression (fused.py's code, same rounding) into a pack of
T, the dtype the softmax itself sees. Rows, caches and strategies are unchanged, except that the relay's slots hold
the single input as it is and its consumers evaluate the prologue (Note [a prologue run from the relay's slots]), once
where its values fit the slots (Note [a prologue evaluated once, into its slot]).
"""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from ...expression import SOFTMAX_OP, Const, parse, result_dtype
from .common import (FLOAT_DTYPES, ITEMSIZE, PREAMBLE, REG_CACHE_BLOCK, REG_CACHE_THREAD, ROW_SETUP, SMS,
                     TMA_HELPERS, align_of, best_vec, cdiv, chunk_of, clamp, cluster_combine, consts, filter_actions,
                     flag_knob, kept_ok, knob, launch, main_input, make_candidate, output_spec, pow2_ceil, row_fill,
                     row_loop, row_of_source, row_order, rows_aligned, scale_knob, tma_ok, typedefs, vec_ok, walk_head)
from .fused import pair_prologue, row_loader, row_prologue_dtype
from .relay import (RELAY_HELPERS, pack_test, relay_actions, relay_consts, relay_defaults, relay_kernel,
                    relay_launch, relay_scratch, relay_valid, relay_writers)
from .resident import (resident_actions, resident_consts, resident_defaults, resident_kernel, resident_launch,
                       resident_scratch, resident_valid)
from .target import layout_ok, smem_limit

OPS = ("aten._softmax.default", "aten._log_softmax.default")
STRATEGIES = ("group", "block", "cluster", "split", "pipe", "relay", "resident")


def _fused_matches(card: OperatorCard) -> bool:
    """A ``kforge.softmax`` card the kernels can index: inputs x0..xk whose last dim is the output's at stride 1,
    broadcasting over the leading dims; a contiguous float output."""
    y = output_spec(card, 0)
    if y is None or y.dtype not in FLOAT_DTYPES or not y.is_contiguous() or y.numel == 0 or not y.shape:
        return False
    return row_prologue_dtype(str(card.scalars.get("expr", "")), card.inputs, "x", y) in FLOAT_DTYPES


def _fused(card: OperatorCard) -> bool:
    return card.op == SOFTMAX_OP


def _in_dtype(card: OperatorCard) -> str:
    """The dtype the softmax reads: its input's, or the prologue expression's result."""
    if _fused(card):
        return result_dtype(parse(str(card.scalars["expr"])), [t.spec.dtype for t in card.inputs])
    return main_input(card).dtype


def matches(card: OperatorCard) -> bool:
    if _fused(card):
        return bool(card.inputs) and _fused_matches(card)
    if card.op not in OPS or not card.inputs:
        return False
    x, y = main_input(card), output_spec(card, 0)
    if y is None or x.dtype not in FLOAT_DTYPES or y.dtype != x.dtype or len(x.shape) < 1:
        return False
    dim = int(card.scalars.get("dim", -1))
    if dim not in (-1, len(x.shape) - 1) or card.scalars.get("half_to_float"):
        return False
    return x.is_contiguous() and y.is_contiguous() and x.numel > 0


def _dims(card: OperatorCard) -> tuple[int, int, int]:
    return card.sizes["rows"], card.sizes["cols"], ITEMSIZE[_in_dtype(card)]


def _specs(card: OperatorCard) -> list:
    if _fused(card):
        return [t.spec for t in card.inputs] + [output_spec(card, 0)]
    return [main_input(card), output_spec(card, 0)]


def _vec_ok(card: OperatorCard, vec: int) -> bool:
    """``vec_ok``, and for a fused card every input's row offset a multiple of ``vec``."""
    if not vec_ok(vec, card.sizes["cols"], _specs(card)):
        return False
    return not _fused(card) or rows_aligned(vec, output_spec(card, 0), [t.spec for t in card.inputs])


def _best_vec(card: OperatorCard) -> int:
    vec = best_vec(card.sizes["cols"], _specs(card))
    while vec > 1 and not _vec_ok(card, vec):
        vec //= 2
    return vec


def _order(card: OperatorCard) -> list[int] | None:
    """The launch order of the rows where a fused input broadcasts over some of them (Note [rows that share a
    broadcast row run together] in common.py), else None."""
    return row_order(output_spec(card, 0), [t.spec for t in card.inputs]) if _fused(card) else None


def _bcast(card: OperatorCard) -> dict[str, str]:
    """The row kernels' default launch order: rows that share a broadcast input row together where there are such
    rows. Thirteenth session's probe (probe_session13_attn_copy.json, same run) at Gemma's masked softmax
    [1,8,2048,2048] bf16: 40.7 us against 41.8 at the root's 64 threads, 40.3 against 41.0 at 128, 43.1 against 45.6
    for a warp per row in blocks of 128 threads; a tie at 256 threads (44.4 against 44.2)."""
    return {"order": "bcast"} if _order(card) is not None else {}


def _reg_fits(nit: int, vec: int, isz: int, block: int) -> bool:
    per_thread = nit * vec * isz
    return per_thread <= REG_CACHE_THREAD and per_thread * block <= REG_CACHE_BLOCK


def defaults(card: OperatorCard, strategy: str) -> dict[str, Any]:
    """A sensible starting point for one strategy (may be invalid for the card; callers filter)."""
    rows, cols, isz = _dims(card)
    vec = _best_vec(card)
    if strategy == "group":
        tpr = clamp(pow2_ceil(cdiv(cols, vec * 4)), 1, 32)
        p = {"strategy": "group", "vec": vec, "tpr": tpr, "block": 128, "cache": "reg", **_bcast(card)}
        if not _reg_fits(cdiv(cols, tpr * vec), vec, isz, 128):
            p.update(cache="none", online=True)
        return p
    if strategy == "block":
        block = clamp(pow2_ceil(cdiv(cols, vec * 4)), 64, 1024)
        p = {"strategy": "block", "vec": vec, "block": block, "cache": "reg", **_bcast(card)}
        if not _reg_fits(cdiv(cols, block * vec), vec, isz, block):
            p["cache"] = "smem" if cols * isz <= 48 * 1024 else "none"
        if p["cache"] == "none":
            p["online"] = True
        return p
    if strategy == "cluster":
        # chunks of <= 32 KB: the H200 probe (benchmarks/results/h200/probe_write_flush.json) had [64, 262144]
        # fastest with 16 blocks per row in both dtypes (bf16 28.8 us at cs=16 vs 38.1 us at cs=8)
        cs = next((c for c in (2, 4, 8, 16) if chunk_of(cols, c, vec) * isz <= 32 * 1024 and rows * c >= 2 * SMS), 16)
        chunk = chunk_of(cols, cs, vec)
        block = clamp(pow2_ceil(cdiv(chunk, vec * 8)), 128, 1024)
        # a 32-64 KB chunk goes to shared memory: [64, 262144] fp32 (64 KB chunks) ran 44.4 us with cache=smem
        # against 47.0 us in registers, same run (benchmarks/results/h200/probe_smem_softmax.json); bf16's 32 KB
        # chunks tie (27.1 vs 27.3 us) and stay in registers
        cache = "smem" if 32 * 1024 < chunk * isz <= 64 * 1024 else "reg"
        if cache == "smem" and isz == 4 and vec * ITEMSIZE[main_input(card).dtype] == 16:
            # 8-byte loads into shared memory: [64, 262144] fp32 ran 43.2 us at vec=2 against 44.7 at vec=4 (probe,
            # eighth session, probe_narrow.json; its ops search found the same, 42.5 against 44.4); vec=1 lost.
            # The loads' width is the input's: a fused prologue over bf16 logits (fp32 after it) already loads 8
            # bytes at vec=4, and halving it to 4-byte loads cost the soft-capped softmax 63.7 against 54.3 us
            # (eleventh session's run G against the eighth's A0, ops_trees_session*.txt)
            vec = 2
        return {"strategy": "cluster", "vec": vec, "block": block, "cs": cs, "cache": cache, "stream": False}
    if strategy == "relay":  # Note [the first copies a few at a time] (relay.py): two at a time
        p = {**relay_defaults(_relay_isz(card)), "ramp": 2}
        if _once_ok(card):  # Note [a prologue evaluated once, into its slot]: pieces of 16 KB, 10 slots, a lag of 4;
            # 16-bit packs, whose prologue goes two at a time: 8 slots, a lag of 3 (Note [eight slots for a paired
            # prologue])
            paired = _relay_pair(card, True) is not None
            p.update(pe=16384 // _relay_isz(card), k=8 if paired else 10, lag=3 if paired else 4, once=True)
        if _wide_out(card, p["vec"]):  # Note [stores of whole sectors]
            p["halves"] = True
        return p
    if strategy == "resident":
        return resident_defaults(rows, cols, _relay_isz(card))
    if strategy == "pipe":  # 64 KB chunks: 64 KB of prefetch registers and 64 KB of shared memory per block
        cs = next((c for c in (2, 4, 8, 16) if chunk_of(cols, c, vec) * isz <= 64 * 1024), 16)
        block = clamp(pow2_ceil(cdiv(chunk_of(cols, cs, vec), vec * 8)), 128, 1024)
        return {"strategy": "pipe", "vec": vec, "block": block, "cs": cs, "clusters": max(1, min(rows, SMS // cs)),
                "stream": False}
    splits = clamp(cdiv(8 * SMS, rows), 2, max(2, cols // 8192))  # ~8 blocks per SM, chunks of >= 8K elements
    return {"strategy": "split", "vec": vec, "block": 512, "splits": splits, "reverse": True, "stream": False}


def root_params(card: OperatorCard) -> dict[str, Any]:
    rows, cols, isz = _dims(card)
    row_bytes = cols * isz
    order = ("group",) if row_bytes <= 4096 else ("block",) if row_bytes <= 64 * 1024 else ()
    if row_bytes >= 256 * 1024 and rows * row_bytes >= 16 * 2**20 and (not _fused(card) or _once_ok(card)):
        # Note [rows relayed through global memory]: [64, 262144] fp32 ran 38.8 us against the cluster's 43.6, bf16
        # 26.8 against 27.5 (eleventh session, probe_relay.json, same run); the cluster stays the second seed. A fused
        # prologue whose values fit the slots: Note [a prologue evaluated once, into its slot]
        order = ("relay",)
    for s in order + ("cluster", "split", "block"):
        p = defaults(card, s)
        # Note [writers of their own for whole pieces]: where every row is whole pieces, those first
        whole = s == "relay" and not _fused(card) and cols % p["pe"] == 0
        for q in ([{**relay_writers(p)[1], "k": 7}] if whole else []) + [p]:
            if valid(card, q):
                return q
    raise AssertionError(f"no valid softmax strategy for rows={rows} cols={cols}")  # "block"+"none" always fits


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    root = root_params(card)
    kept = kept_seed(card)
    return [root] + ([kept] if kept is not None and kept != root else []) + \
        [p for s in STRATEGIES if s != root["strategy"] and s != "resident" and valid(card, p := defaults(card, s))
         and not (s == "relay" and _fused(card) and "once" not in p)]  # Note [a prologue run from the relay's slots];
    # the resident kernel lost everywhere it was timed (Note [a tensor held on chip whole]): an action only


def kept_seed(card: OperatorCard) -> dict[str, Any] | None:
    """For rows of >= 256 KB, the cluster's default keeping half of each thread's packs in shared memory (Note [a
    chunk kept in part]), tried right after the root. Seventh session: [64, 248320] bf16's best (26.0 us against the
    root's 27.1) was the register cluster's layout with 4 of 8 packs kept, found at iteration 37 of 50, three
    actions from the root; the probe at [64, 262144] bf16 agreed (26.7 against 27.5 us). In fp32 it lost (46.3
    against 45.2 us): a seed costs one iteration."""
    rows, cols, isz = _dims(card)
    p = defaults(card, "cluster")
    if cols * isz < 256 * 1024 or not valid(card, p):
        return None
    q = {**p, "cache": "smem", "keep": _packs(card, p) // 2}
    return q if valid(card, q) else None


def _packs(card: OperatorCard, p: dict[str, Any]) -> int:
    """Packs per thread of a cluster block's chunk (NIT)."""
    return cdiv(chunk_of(_dims(card)[1], p["cs"], p["vec"]), p["block"] * p["vec"])


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    rows, cols, isz = _dims(card)
    s, vec, block = p.get("strategy"), p.get("vec", 0), p.get("block", 0)
    if not layout_ok(card, p):
        return False  # Note [templates for the card's architecture] in target.py
    if "once" in p and not (p["once"] is True and s == "relay" and _once_ok(card)):
        return False  # Note [a prologue evaluated once, into its slot]
    if "halves" in p and not (p["halves"] is True and s == "relay" and "regs" not in p and _wide_out(card, vec)):
        return False  # Note [stores of whole sectors]
    if s == "resident":  # Note [a tensor held on chip whole]: the relay's layout, a fused prologue evaluated once
        return _relay_layout_ok(card, vec) and (not _fused(card) or _once_ok(card)) and \
            resident_valid(p, rows, cols, _relay_isz(card), smem_limit(card))
    if s == "relay":  # Note [rows relayed through global memory]: rows of >= 64 KB of the input as it is in memory
        risz = _relay_isz(card)
        return cols * risz >= 64 * 1024 and _relay_layout_ok(card, vec) and \
            relay_valid(_relay_knobs(p), rows, cols, risz, smem=smem_limit(card))
    if s not in STRATEGIES or not _vec_ok(card, vec) or block % 32 or not 32 <= block <= 1024:
        return False
    if "order" in p and not (p["order"] == "bcast" and s in ("group", "block") and _order(card) is not None):
        return False  # Note [rows that share a broadcast row run together]: the row kernels of a broadcasting prologue
    if "tma" in p and not (tma_ok(p, isz) and not _fused(card)):
        return False  # Note [a chunk fetched by the copy engine]: a cluster's chunk, 16-byte packs of the input as is
    if s == "group":
        tpr = p.get("tpr", 0)
        if tpr not in (1, 2, 4, 8, 16, 32) or p.get("cache") not in ("reg", "none"):
            return False
        return p["cache"] == "none" or _reg_fits(cdiv(cols, tpr * vec), vec, isz, block)
    if s == "block":
        nit = cdiv(cols, block * vec)
        if block > max(64, pow2_ceil(cdiv(cols, vec))):
            return False  # most threads would hold nothing
        return {"reg": _reg_fits(nit, vec, isz, block),
                "smem": _smem_cache_bytes(cols, block, vec, isz) <= smem_limit(card),
                "none": True}.get(p.get("cache"), False)
    if s in ("cluster", "split", "pipe") and not isinstance(p.get("stream", False), bool):
        return False
    if s == "pipe":
        cs, clusters = p.get("cs"), p.get("clusters", 0)
        if cs not in (2, 4, 8, 16) or not 1 <= clusters <= rows or clusters * cs > 2**31 - 1:
            return False
        if cols * isz < 64 * 1024:
            return False  # short rows: the other strategies cover them
        chunk = chunk_of(cols, cs, vec)
        if (cs - 1) * chunk >= cols or block > max(128, pow2_ceil(cdiv(chunk, vec))):
            return False  # every block holds part of the row, most threads some of it
        nit = cdiv(chunk, block * vec)
        return _reg_fits(nit, vec, isz, block) and \
            _smem_cache_bytes(chunk, block, vec, isz) <= smem_limit(card) - _CLUSTER_STATIC_SMEM
    if s == "cluster":
        cs, cache = p.get("cs"), p.get("cache", "reg")
        if cs not in (2, 4, 8, 16) or rows * cs > 2**31 - 1 or cols < cs * vec or cache not in ("reg", "smem", "none"):
            return False
        chunk = chunk_of(cols, cs, vec)
        if block > max(128, pow2_ceil(cdiv(chunk, vec))):
            return False
        if "keep" in p:  # Note [a chunk kept in part]
            return kept_ok(p, _packs(card, p), isz, smem_limit(card) - _CLUSTER_STATIC_SMEM)
        if cache == "smem":
            return _smem_cache_bytes(chunk, block, vec, isz) <= smem_limit(card) - _CLUSTER_STATIC_SMEM
        return cache == "none" or _reg_fits(cdiv(chunk, block * vec), vec, isz, block)
    splits = p.get("splits", 0)
    return 2 <= splits <= cols // max(vec, 1) and rows * splits <= 2**31 - 1 and isinstance(p.get("reverse"), bool)


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    acts = [(f"strategy {p['strategy']} -> {s}", defaults(card, s)) for s in STRATEGIES if s != p["strategy"]]
    acts += scale_knob(p, "vec") + scale_knob(p, "block") + scale_knob(p, "tpr") + scale_knob(p, "cs")
    acts += scale_knob(p, "splits") + scale_knob(p, "clusters")
    if p["strategy"] == "cluster":
        whole = {k: v for k, v in p.items() if k not in ("keep", "tma")}  # keep and tma are shared-memory knobs
        acts += [knob(whole, "cache", c) for c in ("reg", "smem", "none") if c != p.get("cache", "reg")]
        if "keep" in p:
            acts.append((f"keep {p['keep']} -> all", {k: v for k, v in p.items() if k != "keep"}))
        if p.get("cache") == "smem":  # the copy engine; Note [a chunk kept in part]: half, twice, one more
            acts.append(flag_knob(p, "tma"))
            acts += scale_knob(p, "keep") + ([knob(p, "keep", p["keep"] + 1)] if "keep" in p else
                                             [knob(p, "keep", max(1, _packs(card, p) // 2))])
    elif "cache" in p:
        for c in ("reg", "smem", "none"):
            if c != p["cache"]:
                q = {k: v for k, v in p.items() if k != "online"}
                q["cache"] = c
                if c == "none":
                    q["online"] = True
                acts.append((f"cache {p['cache']} -> {c}", q))
    if "online" in p:
        acts.append(knob(p, "online", not p["online"]))
    if p["strategy"] in ("group", "block") and _order(card) is not None:
        acts.append(("order bcast -> rows", {k: v for k, v in p.items() if k != "order"}) if "order" in p
                    else ("order rows -> bcast", {**p, "order": "bcast"}))
    if "reverse" in p:
        acts.append(knob(p, "reverse", not p["reverse"]))
    if p["strategy"] in ("cluster", "split", "pipe"):
        acts.append(knob(p, "stream", not p.get("stream", False)))
    if p["strategy"] == "relay":
        own = {k: True for k in _RELAY_OWN if p.get(k)}  # the softmax's own knobs ride along
        acts += [(label, {**q, **own}) for label, q in relay_actions(_relay_knobs(p))]
        acts += [flag_knob(p, k) for k in _RELAY_OWN]
    if p["strategy"] == "resident":
        acts += resident_actions(p)
    return filter_actions(card, p, acts, valid)


_RELAY_OWN = ("once", "halves")  # the softmax's own knobs of the relay (Notes [a prologue evaluated once, into its
# slot], [stores of whole sectors])


def _relay_knobs(p: dict[str, Any]) -> dict[str, Any]:
    """``p`` without the softmax's own relay knobs (``_RELAY_OWN``): what relay.py's validity and actions read."""
    return {k: v for k, v in p.items() if k not in _RELAY_OWN}


def _wide_out(card: OperatorCard, vec: int) -> bool:
    """An output pack of VEC elements is 32 bytes (fp32 after 2-byte logits): two 16-byte stores a lane (Note [stores
    of whole sectors])."""
    return vec * ITEMSIZE[output_spec(card, 0).dtype] == 32


def _once_ok(card: OperatorCard) -> bool:
    """A fused card whose prologue's every value is a value of the relay's element type T, the input's (Note [a
    prologue evaluated once, into its slot]): the prologue's dtype is T's or fp32 over an fp32 input, or its root
    widens a value of T's dtype to fp32 (the soft cap: ``to_float32`` of a bf16 product)."""
    if not _fused(card) or len(card.inputs) != 1:
        return False
    t, tf = card.inputs[0].spec.dtype, _in_dtype(card)
    if tf == t:
        return True
    root = parse(str(card.scalars["expr"]))
    if tf != "float32" or root.op != "to_float32":
        return False
    return not isinstance(root.args[0], Const) and result_dtype(root.args[0], [t]) == t


# ---------------------------------------------------------------------------------------------------------------------
# code generation


_MAX = "\n#pragma unroll\n for (int j = 0; j < VEC; ++j) m = fmaxf(m, to_f(p.v[j]));"
_SUM = "\n#pragma unroll\n for (int j = 0; j < VEC; ++j) s += sexp(to_f(p.v[j]), m);"
_ONLINE = """float pm = -CUDART_INF_F;
#pragma unroll
 for (int j = 0; j < VEC; ++j) pm = fmaxf(pm, to_f(p.v[j]));
 const float mn = fmaxf(ms.x, pm); float t = ms.y * sexp(ms.x, mn);
#pragma unroll
 for (int j = 0; j < VEC; ++j) t += sexp(to_f(p.v[j]), mn);
 ms = make_float2(mn, t);"""


def _stats(src: str, online: bool, ld: str = "ldp") -> str:
    """Statistics of this group's values: float m (max), s (sum of exp(x - m))."""
    if online:
        return f"""
  float2 ms = make_float2(-CUDART_INF_F, 0.f);{row_loop(src, _ONLINE, ld)}
  ms = group_all<NT, TPR>(ms, MaxSum(), red2);
  const float m = ms.x, s = ms.y;"""
    return f"""
  float m = -CUDART_INF_F;{row_loop(src, _MAX, ld)}
  m = group_all<NT, TPR>(m, Max(), red);
  float s = 0.f;{row_loop(src, _SUM, ld)}
  s = group_all<NT, TPR>(s, Sum(), red);"""


def _write(src: str, log: bool, stream: bool = False, ld: str = "ldp") -> str:
    """Normalise and store this thread's packs from ``src`` (``reg``, ``smem``, ``global`` or ``mixed``: the packs
    past the kept ones re-read from global first, while they are the freshest lines in L2, then the kept ones)."""
    val = "to_f(p.v[j]) - m - lse" if log else "__expf(to_f(p.v[j]) - m) * inv"
    pre = "const float lse = __logf(s);" if log else "const float inv = 1.f / s;"
    st = "stp_cs" if stream else "stp"
    body = f"PO o;\n#pragma unroll\n for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>({val});\n {st}<TO, VEC>(yr + col, o);"
    last = ld + "_cs" if stream else ld
    if src == "mixed":
        return f"\n  {pre}{_rest_loop(body, last)}{row_loop('smem', body, ld, nit='KEEP')}"
    return f"\n  {pre}{row_loop(src, body, last)}"


def _rest_loop(body: str, load: str) -> str:
    """``body`` on this thread's packs past the kept ones (KEEP..NIT-1), read from global with ``load``; unrolled,
    so that all of a thread's loads are in flight at once."""
    return f"""
#pragma unroll
  for (int i = KEEP; i < NIT; ++i) {{
    const int col = cbeg + (i * NT + lane) * VEC;
    if (col < cend) {{ const P p = {load}<T, VEC>(xr + col); {body} }}
  }}"""


def _mixed_stats(ld: str) -> str:
    """Online (max, sum) of this block's chunk for ``cache=smem`` with ``keep``: the kept packs (already in shared
    memory), then the rest streamed from global, so that the rest are the lines this block read last."""
    return f"""
  float2 ms = make_float2(-CUDART_INF_F, 0.f);{row_loop("smem", _ONLINE, ld, nit="KEEP")}{_rest_loop(_ONLINE, ld)}
  ms = group_all<NT, NT>(ms, MaxSum(), red2);
  const float m = ms.x, s = ms.y;"""


def _ld(card: OperatorCard) -> str:
    """The pack load of the softmax's input: ``ldp`` from memory, or ``ldx`` evaluating a fused prologue."""
    return "ldx" if _fused(card) else "ldp"


def _x_params(card: OperatorCard) -> str:
    if not _fused(card):
        return "const T* __restrict__ x"
    return ", ".join(f"const T{i}* __restrict__ x{i}" for i in range(len(card.inputs)))


def _x_row(card: OperatorCard, row: str) -> str:
    """The declaration of ``xr``, row ``row``'s input (a pointer, or the fused inputs' row pointers)."""
    if not _fused(card):
        return f"const T* xr = x + {row} * (long long)COLS;"
    return f"const XRow xr = x_row({', '.join(f'x{i}' for i in range(len(card.inputs)))}, {row});"


def _in_args(card: OperatorCard) -> list[str]:
    return [f"in:{t.name}" for t in card.inputs] if _fused(card) else ["in:self"]


def _fused_loader(card: OperatorCard) -> str:
    """Types and functions of a fused prologue (fused.row_loader): XRow, x_row, fx and ldx / ldx_cs."""
    return row_loader(str(card.scalars["expr"]), [t.spec for t in card.inputs], output_spec(card, 0))


def _header(card: OperatorCard, p: dict[str, Any], **sizes: int) -> str:
    return f"""{PREAMBLE}
{typedefs(T=_in_dtype(card), TO=output_spec(card, 0).dtype)}
{consts(COLS=card.sizes["cols"], VEC=p["vec"], **sizes)}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
{_fused_loader(card) if _fused(card) else ""}"""


# The row cache ``c`` of this thread's row (TPR threads per row, NIT packs each): registers, or this row's slice of
# the block's dynamic shared memory (``_smem_cache_bytes`` of it per row).
_CACHE_DECL = {"reg": "P c[NIT];", "none": "",
               "smem": "extern __shared__ __align__(16) unsigned char dsm[];\n"
                       "  P* c = reinterpret_cast<P*>(dsm) + (threadIdx.x / TPR) * (NIT * TPR);"}


def _smem_cache_bytes(cols: int, threads: int, vec: int, isz: int) -> int:
    """Shared memory that caches ``cols`` columns spread over ``threads`` threads, in whole packs per thread."""
    return cdiv(cols, threads * vec) * threads * vec * isz


def _rows_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    block, vec, cache = p["block"], p["vec"], p["cache"]
    tpr = p["tpr"] if p["strategy"] == "group" else block
    nit = cdiv(card.sizes["cols"], tpr * vec)
    decl = _CACHE_DECL[cache]
    ld = _ld(card)
    fill = row_fill(cache, ld) if cache != "none" else ""
    src = cache if cache != "none" else "global"
    setup = ROW_SETUP.replace("const T* xr = x + (ok ? row : 0) * (long long)COLS;", _x_row(card, "(ok ? row : 0)"))
    assert "XRow" in setup or not _fused(card), "ROW_SETUP no longer declares xr as the softmax expects"
    order, row_of = _order(card), ""
    if p.get("order") == "bcast" and order is not None:  # Note [rows that share a broadcast row run together]
        launch_row = ("  const long long row = (long long)blockIdx.x * RPB + threadIdx.x / TPR;\n"
                      "  const bool ok = row < rows;")
        assert launch_row in setup, "ROW_SETUP no longer computes the row as the launch order expects"
        setup = setup.replace(launch_row, "  const long long lr = (long long)blockIdx.x * RPB + threadIdx.x / TPR;\n"
                                          "  const bool ok = lr < rows;\n  const long long row = ok ? row_of(lr) : lr;")
        row_of = row_of_source(output_spec(card, 0), order) + "\n"
    return _header(card, p, TPR=tpr, NT=block, RPB=block // tpr, NIT=nit) + row_of + f"""
extern "C" __global__ __launch_bounds__(NT) void softmax_rows({_x_params(card)}, TO* __restrict__ y, long long rows) {{
  __shared__ float red[32];
  __shared__ float2 red2[32];{setup}
  {decl}{fill}{_stats(src, p.get("online", False), ld)}{_write(src, log, ld=ld)}
}}
"""


_CLUSTER_STATIC_SMEM = 1024  # the cluster kernel's own __shared__ (reduction scratch, part, stat), rounded up


def _cluster_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    cols, block, vec, cs = card.sizes["cols"], p["block"], p["vec"], p["cs"]
    cache, stream = p.get("cache", "reg"), p.get("stream", False)
    src = cache if cache != "none" else "global"
    chunk = chunk_of(cols, cs, vec)
    ld = _ld(card)
    kept = p.get("keep")  # valid() allows it only below the chunk's packs (Note [a chunk kept in part])
    fill = _CACHE_DECL[cache] + (row_fill(cache, ld) if cache != "none" else "")  # TPR = NT: one row per block
    stats = _stats(src, cache == "none", ld)
    sizes: dict[str, int] = {}
    if kept is not None:  # Note [a chunk kept in part]
        src, sizes = "mixed", {"KEEP": kept}
        fill = _CACHE_DECL["smem"] + row_fill("smem", ld, nit="KEEP")
        stats = _mixed_stats(ld)
    if p.get("tma"):  # Note [a chunk fetched by the copy engine] in common.py
        n = "min(KEEP * NT * VEC, cend - cbeg)" if kept is not None else "(cend - cbeg)"
        fill = _CACHE_DECL["smem"] + f"""
  __shared__ __align__(8) unsigned long long bar;
  bulk_fill(dsm, xr + cbeg, (unsigned)({n} * sizeof(T)), &bar);"""
    head = _header(card, p, TPR=block, NT=block, CS=cs, CHUNK=chunk, NIT=cdiv(chunk, block * vec), **sizes)
    return head + (TMA_HELPERS if p.get("tma") else "") + f"""
// One cluster of CS blocks per row; block `rank` takes columns [rank * CHUNK, (rank + 1) * CHUNK){" in registers" if cache == "reg" else ""}.
// The cluster shape sits on a declaration: the contract's kernel pattern wants `void NAME(` on the definition.
extern "C" __global__ __cluster_dims__(CS, 1, 1) void softmax_cluster({_x_params(card)}, TO* __restrict__ y);
extern "C" __global__ __launch_bounds__(NT) void softmax_cluster({_x_params(card)}, TO* __restrict__ y) {{
  __shared__ float red[32];
  __shared__ float2 red2[32];
  __shared__ float2 part, stat;
  const int lane = threadIdx.x;
  const long long row = blockIdx.x / CS;
  const int rank = blockIdx.x % CS;
  const bool ok = true;
  {_x_row(card, "row")}
  TO* yr = y + row * (long long)COLS;
  const int cbeg = rank * CHUNK, cend = min(cbeg + CHUNK, COLS);
  {fill}{stats}
  if (threadIdx.x == 0) part = make_float2(m, s);
  __cluster_barrier_arrive();
  __cluster_barrier_wait();
{cluster_combine("part", "stat", "float2", "MaxSum", "make_float2(-CUDART_INF_F, 0.f)", "CS")}
  __cluster_barrier_arrive();  // done reading the other blocks' shared memory
  __syncthreads();
  {{
    const float m = stat.x, s = stat.y;{_write(src, log, stream, ld)}
  }}
  __cluster_barrier_wait();  // no block leaves while another may still read its `part`
}}
"""


def _pipe_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    cols, block, vec, cs = card.sizes["cols"], p["block"], p["vec"], p["cs"]
    stream, ld = p.get("stream", False), _ld(card)
    chunk = chunk_of(cols, cs, vec)
    load = ld + "_cs" if stream else ld
    next_row = _x_row(card, "nrow").replace(" xr = ", " xn = ")
    prefetch = f"""{{
      {next_row}
#pragma unroll
      for (int i = 0; i < NIT; ++i) {{
        const int col = cbeg + (i * NT + lane) * VEC;
        if (col < cend) nx[i] = {load}<T, VEC>(xn + col);
      }}
    }}"""
    return _header(card, p, TPR=block, NT=block, CS=cs, CHUNK=chunk, NIT=cdiv(chunk, block * vec)) + f"""
// A fixed number of clusters of CS blocks walk the rows; block `rank` takes columns [rank * CHUNK, (rank + 1) * CHUNK)
// of every row its cluster visits. The chunk of the current row sits in shared memory while the loads of the next
// row's chunk fly into registers (nx), so this row's statistics, barrier and stores overlap the next row's loads.
// The cluster shape sits on a declaration: the contract's kernel pattern wants `void NAME(` on the definition.
extern "C" __global__ __cluster_dims__(CS, 1, 1) void softmax_pipe({_x_params(card)}, TO* __restrict__ y, long long rows);
extern "C" __global__ __launch_bounds__(NT) void softmax_pipe({_x_params(card)}, TO* __restrict__ y, long long rows) {{
  __shared__ float red[32];
  __shared__ float2 red2[32];
  __shared__ float2 part[2], stat;  // part by row parity: a block may write the next row's before others read this
  extern __shared__ __align__(16) unsigned char dsm[];
  P* c = reinterpret_cast<P*>(dsm);
  const int lane = threadIdx.x;
  const int rank = blockIdx.x % CS;
  const long long ncl = gridDim.x / CS;
  const bool ok = true;
  const int cbeg = rank * CHUNK, cend = min(cbeg + CHUNK, COLS);
{walk_head("row", "rows", "blockIdx.x / CS", prefetch, "cbeg + (i * NT + lane) * VEC < cend", "c[i * NT + lane]")}
{_stats("smem", False)}
    if (threadIdx.x == 0) part[it & 1] = make_float2(m, s);
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
{cluster_combine("part[it & 1]", "stat", "float2", "MaxSum", "make_float2(-CUDART_INF_F, 0.f)", "CS")}
    __syncthreads();
    {{
      const float m = stat.x, s = stat.y;
      TO* yr = y + row * (long long)COLS;{_write("smem", log, stream, ld)}
    }}
    __syncthreads();  // every thread has read `stat` before the next row's is written
  }}
  __cluster_barrier_arrive();  // no block leaves while another may still read its `part`
  __cluster_barrier_wait();
}}
"""


def _split_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    rows, cols = card.sizes["rows"], card.sizes["cols"]
    block, vec, splits = p["block"], p["vec"], p["splits"]
    chunk = chunk_of(cols, splits, vec)
    head = _header(card, p, TPR=block, NT=block, S=splits, CHUNK=chunk, TOTAL=rows * splits, REV=int(p["reverse"]))
    return head + f"""
// Pass 1: block b = row * S + k writes the (max, sum) of chunk k of its row.
extern "C" __global__ __launch_bounds__(NT) void softmax_part({_x_params(card)}, float2* __restrict__ part) {{
  __shared__ float2 red2[32];
  const int lane = threadIdx.x;
  const long long row = blockIdx.x / S;
  const int k = blockIdx.x % S;
  const bool ok = true;
  {_x_row(card, "row")}
  const int cbeg = k * CHUNK, cend = min(cbeg + CHUNK, COLS);{_stats("global", True, _ld(card))}
  if (threadIdx.x == 0) part[blockIdx.x] = make_float2(m, s);
}}

// Pass 2: every chunk combines its row's S partials (same order in every block) and writes its outputs.
extern "C" __global__ __launch_bounds__(NT) void softmax_fin({_x_params(card)}, const float2* __restrict__ part, TO* __restrict__ y) {{
  __shared__ float2 red2[32];
  const long long b = REV ? (TOTAL - 1 - (long long)blockIdx.x) : (long long)blockIdx.x;
  const int lane = threadIdx.x;
  const long long row = b / S;
  const int k = (int)(b % S);
  const bool ok = true;
  {_x_row(card, "row")}
  TO* yr = y + row * (long long)COLS;
  const int cbeg = k * CHUNK, cend = min(cbeg + CHUNK, COLS);
  float2 ms = make_float2(-CUDART_INF_F, 0.f);
  for (int i = threadIdx.x; i < S; i += NT) ms = MaxSum()(ms, part[row * S + i]);
  ms = group_all<NT, NT>(ms, MaxSum(), red2);
  const float m = ms.x, s = ms.y;{_write("global", log, p.get("stream", False), _ld(card))}
}}
"""


def _relay_reduce(once: bool, pair: str | None, test: str) -> str:
    """The relay's reduce of a warp's share of a piece: max, then sum of exp. ``once`` (Note [a prologue evaluated
    once, into its slot]): the prologue's values replace the raw packs, in registers and in the slot, two at a time
    (``fx2``) where ``pair`` is set. The sum tests for a share with no finite value once, and ``pair`` (a 16-bit pair
    type, where the packs hold the values the max is over) takes the max over packed pairs (Note [a lean reduce]).
    ``test`` opens each pack's block: its range test, or nothing (``pack_test``)."""
    x = "to_f" if once else "xv"
    # Note [a prologue two elements at a time] in fused.py: fx2 where the packs hold 16-bit values
    fx = """
          for (int j = 0; j < VEC / 2; ++j)
            reinterpret_cast<unsigned*>(pk[i].v)[j] = fx2(reinterpret_cast<const unsigned*>(pk[i].v)[j]);""" \
        if pair else """
          for (int j = 0; j < VEC; ++j) pk[i].v[j] = narrow(xv(pk[i].v[j]));"""
    put = f"""
#pragma unroll{fx}
          const_cast<P*>(sp)[i * 32 + lane] = pk[i];""" if once else ""
    # Note [a lean reduce]: one max.{bf16,f16}x2 a pair, then the pairs' halves widened once a pack
    peak = f"""
          static_assert(VEC == 8, "a 16-byte pack of 16-bit values");
          const {pair}* h = reinterpret_cast<const {pair}*>(pk[i].v);
          const {pair} a = __hmax2(__hmax2(h[0], h[1]), __hmax2(h[2], h[3]));
          m = fmaxf(m, fmaxf(__low2float(a), __high2float(a)));""" if pair else f"""
#pragma unroll
          for (int j = 0; j < VEC; ++j) m = fmaxf(m, {x}(pk[i].v[j]));"""
    return f"""
      P pk[NPL];
      float m = -CUDART_INF_F;
#pragma unroll
      for (int i = 0; i < NPL; ++i)
        {test}{{
          pk[i] = sp[i * 32 + lane];{put}{peak}
        }}
      m = group_all<32, 32>(m, Max(), (float*)nullptr);
      float sum = 0.f;
      if (m != -CUDART_INF_F) {{  // sexp's test (Note [safe exp]), once for the warp's share
#pragma unroll
        for (int i = 0; i < NPL; ++i)
          {test}{{
#pragma unroll
            for (int j = 0; j < VEC; ++j) sum += __expf({x}(pk[i].v[j]) - m);
          }}
      }}
      sum = group_all<32, 32>(sum, Sum(), (float*)nullptr);
      const V v = make_float2(m, sum);"""


# The packed pair of each 16-bit element type: the relay's max over pairs (Note [a lean reduce]).
_PAIRS = {"bfloat16": "__nv_bfloat162", "float16": "__half2"}


def _relay_dtype(card: OperatorCard) -> str:
    """The element the relay moves: its input's as it is in memory (a fused prologue's runs on chip)."""
    return card.inputs[0].spec.dtype if _fused(card) else main_input(card).dtype


def _relay_isz(card: OperatorCard) -> int:
    """Bytes of one element the relay moves (``_relay_dtype``)."""
    return ITEMSIZE[_relay_dtype(card)]


def _relay_pair(card: OperatorCard, once: bool) -> str | None:
    """The pair type the relay's reduce takes its max over (Note [a lean reduce]): where the packs hold 16-bit values
    that are the softmax's own (no prologue, or one evaluated once into them), else None."""
    return _PAIRS.get(_relay_dtype(card)) if once or not _fused(card) else None


def _relay_layout_ok(card: OperatorCard, vec: int) -> bool:
    """The relay's bulk copies take whole rows of one input laid out as the output (a fused prologue of one input,
    Note [a prologue run from the relay's slots]); its packs are 16 bytes of that input. The output's packs of VEC
    elements may be wider (32 bytes of fp32 after bf16 logits): two stores, on offsets aligned to them."""
    if not _fused(card):
        return _vec_ok(card, vec)
    y = output_spec(card, 0)
    if len(card.inputs) != 1:
        return False
    x = card.inputs[0].spec
    # offsets are recorded up to 16 bytes; the launcher checks the 32-byte alignment of a wider pack at call time
    return (x.shape == y.shape and x.is_contiguous() and card.sizes["cols"] % vec == 0
            and all(s.offset_align % min(16, vec * ITEMSIZE[s.dtype]) == 0 for s in (x, y)))


# Note [a prologue run from the relay's slots]
# The relay (relay.py) moves its input's bytes into shared memory with bulk copies, so a fused prologue cannot run
# as the pieces load. It runs as the consumers read a slot instead, twice: once to reduce the piece, once to
# normalise it LAG pieces later (``xv``: to_f(from_f<TF>(fx(to_f(raw)))), the rounding of fused.py's ldx). The slots
# hold the raw input (bf16 logits: half the bytes of the fp32 values the cluster kernels keep), and the prologue's
# arithmetic is the consumers' (the soft cap: a division, a tanh and a product per element, both times).
# Measured (twelfth session, probe_session12_softcap_relay.json, same run): the soft-capped softmax [64, 262144]
# bf16 -> fp32 ran 69.7-77.4 us over six relay layouts against the cluster's 53.2 us. So where the prologue's values
# do not fit the slots (below), the relay is neither the root nor a seed of a fused card; the search reaches it as the
# action "strategy -> relay".

# Note [a prologue evaluated once, into its slot]
# The relay above evaluates a fused prologue three times an element: for the piece's max, for its sum of exp, and to
# normalise it. Where every value the prologue gives is a value of the input's own type T (``_once_ok``: the soft cap
# widens a bf16 product to fp32 only at its root), the knob ``once`` has each consumer lane evaluate it once, as it
# reduces: the rounded values replace the raw packs in registers and in the lane's own share of the slot, and the
# max, the sum and the write LAG pieces later only widen them. No other warp reads that share, and the same lane
# writes and later reads each pack, so no barrier is added; before the slot is freed each lane fences its stores
# against the copy engine's next fill (``wrote_slot`` in relay.py). Into 16-bit packs the prologue goes two elements
# at a time (``fx2``: Note [a prologue two elements at a time] in fused.py).
# Measured on the soft-capped softmax [64, 262144] bf16 -> fp32 (sixteenth session, same runs; results/h200/
# probe_session16_softcap_lut_once.json, probe_session16_relay_once.json, probe_session16_paired_rounding.json):
# - with the roundings as F2F (before Note [roundings off the MIO pipe]): the relay's 32 KB pieces 70.3 us three
#   times, 48.8-49.0 once, against the cluster root's 53.3-53.4; once in 16 KB pieces over 12 slots with a lag of 4,
#   45.5; in 48 KB pieces over 24 consumer warps, 52.5;
# - with the paired roundings, once: 38.4 us in 32 KB pieces, 35.8 in 16 KB pieces over 10 slots with a lag of 4 (the
#   defaults here until Note [eight slots for a paired prologue]), 36.0 over 12, 37.2-39.1 in 8 KB pieces; the
#   cluster 49.0;
# - the plain sampling softmax ``to_float32(x0)``: 33.9 us in 16 KB pieces once, 35.9 three times, 40.3 in 32 KB
#   pieces once, against the cluster's 47.0. Without a prologue (softmax [64, 262144] bf16) 16 KB pieces lose (27.9
#   against 24.3 us), so only the fused defaults take them.
# So a fused card whose prologue fits its slots takes this relay as its root (root_params). A tanh read from a table
# of its 896 bf16 results in shared memory (exact: the same bits as tanhf for all 65536 inputs, GPU-tested) was slower
# everywhere it was timed: the cluster 62.4 against 53.4 us, the relay once 59.2 against 48.8 (its loads queue on
# the MIO pipe with the F2F roundings), so it was not kept.
# Nor was an arithmetic tanh (twenty-sixth session, commit 7756f54, reverted): the kernels compile with
# --use_fast_math, so tanhf is already tanh.approx.f32, one MUFU op. Over every bf16 input (benchmarks/
# tanh_bf16_exhaustive.py, results/h200/tanh_bf16_exhaustive_session26.json) tanh.approx rounds to precise tanhf's
# bf16 on all 65,026 normal finite inputs (it differs on the 254 subnormals, which that precise build flushed); an
# exp form with a series near 0 also rounds as tanhf does (within 5 fp32 ulps of it) but ran the soft cap's root in
# 42.0 us three times against 34.7-35.0 with tanhf (probe_session26_softcap_tanh.json).

# Note [eight slots for a paired prologue]
# Once the soft cap's prologue went two elements at a time (Note [a prologue two elements at a time] in fused.py), its
# relay ran faster in 16 KB pieces over 8 slots with a lag of 3 than in the 10 slots with a lag of 4 it had taken
# since the sixteenth session (Note [a prologue evaluated once, into its slot]). Measured on the H200 (thirty-ninth
# session, two runs, each layout twice a run; results/h200/probe_session39_softcap_lag.json, _lag2.json): the
# soft-capped softmax [64, 262144] bf16 -> fp32 29.9, 30.0 and 29.8, 30.2 us against 30.6, 30.7 and 31.0, 31.2; 10
# slots with a lag of 3 30.4, 30.5; 9 slots with a lag of 3 30.9 twice; 8 slots with a lag of 2 31.7, 32.2. The
# sampling softmax (to_float32 of bf16 logits) tied: 27.9, 28.0 against 27.8, 27.7 (10 slots, a lag of 3: 28.0,
# 28.5). So every relay that evaluates a prologue once into 16-bit packs takes 8 slots and a lag of 3; 4-byte packs,
# which no run compared, keep 10 and 4.

# Note [stores of whole sectors]
# Where the output is wider than the input (fp32 after bf16 or fp16 logits: the soft cap, the sampling softmax), an
# output pack of VEC elements is 32 bytes: a lane stores it as two 16-byte stores, and each store instruction of a
# warp covers half of each of 32 sectors. Nsight Compute on the soft cap's relay counted 16 of every 32 bytes used per
# stored sector (sixteenth session, results/h200/ncu/softcap_relay_once_f2f.txt: 49% excessive sectors). With knob
# ``halves`` a lane's write takes half packs instead (VEC / 2 elements, an 8-byte shared load), so each store
# is 16 bytes and a warp's store covers 512 contiguous bytes (ncu/softcap_relay_halves.txt: 32 of 32 bytes a sector).
# With ``once`` a lane then reads values other lanes of its warp put back into the slot, so the write starts with a
# __syncwarp. It is the relay's default wherever its output packs are 32 bytes (``_wide_out``).
# Measured on the H200 (twenty-seventh session, each table one run, the root first and last; results/h200/
# probe_session27_halves.json, _halves_more, _pairs_hint, _warps):
# - the soft cap [64, 262144] bf16 -> fp32, the root (16 KB pieces, 10 slots, a lag of 4): 32.7 and 33.0 us with
#   halves against 34.2-34.9 without; in 32 KB pieces 33.3 against 38.9; with writers of their own 32.9; the sampling
#   softmax ``to_float32(x0)`` 30.6 and 30.8 against 31.9-32.9;
# - the relay is then bound by its consumer warps, not by its stores or slots: its timeline (trace_session27_softcap.md)
#   has a block's consumers take 1.1 us a 16 KB piece while they only reduce and 1.6-1.8 us once they also write,
#   Nsight Compute 60% of the issue slots busy at 37 instructions an element (11 of them the soft cap and its three
#   roundings). Measured there and not kept: the soft cap's intermediates rounded two at a time (one paired
#   conversion for two elements, and the values kept for the max and the sum: 32.4-32.9 us against 32.7-33.1, and no
#   gain at the plain bf16 softmax); a suspend-time hint on the mbarrier waits (2 us or 1 ms: 32.6-33.1 against
#   32.7-33.0; the group norms and softmaxes within their noise); 24 consumer warps (33.8-39.2), or 12 reducers and
#   12 writers (32.7, 35.8), against 32.8-32.9; the same at the bf16 softmax (24.8-26.7 against 23.2-23.5) and the
#   fp32 group norms ([1,512,128,128] 22.8-26.4 against 20.2-20.6).


# Note [exps kept in registers: measured, not kept]
# The soft cap's relay takes 1.1 us a 16 KB piece while its consumers only reduce and 1.6-1.8 us once they also write
# (Note [stores of whole sectors]), and the write reads each value back from the slot and takes its exp a second
# time. Knob ``exps`` (trial commit 2739f3a, reverted in the commit after it) had each consumer lane keep exp(x - its
# warp's max), the values the reduce's sum adds, in a register ring of LAG + 1 pieces (the loop unrolled LAG + 1
# times, so every index is a constant), free the slot right after the reduce, and write exp(x - warp max) * exp(warp
# max - row max) / sum: one product an element, no shared-memory read, 16 bytes of output a store. The CPU model of
# the warps ran every setting the progress rule allows with the slot freed early, and eight GPU verifier cases
# passed. Measured (twenty-eighth session, results/h200/probe_session28_exps.md, each table one run, the roots first
# and last): no card gained. The ring's registers cap the lag (64 values a lane: a lag of 3 at 16 KB pieces, 7 at 8
# KB), and the lag is what the pipeline needs: the soft cap 32.5 and 34.3 us at a lag of 2 (the same layout twice),
# 33.7-33.8 at 3, 36.0-36.4 in 8 KB pieces, 40.0 at 1, against the root's 32.7-33.0; the sampling softmax 31.0-31.8
# against 29.4-31.0; the bf16 softmax 25.0-25.9 against 23.1-23.9; fp32 37.2 against 35.8-36.0. So a block's
# consumers are not bound by the write's arithmetic or its shared-memory reads; the unrolled ring also made the
# kernel 1.6-2x the SASS (2,560-3,160 instructions against the root's 1,584).


# Note [the division folded into the exponent: measured, not kept]
# The relay's write takes exp(x - m) * (1 / sum): FADD, FMUL (by log2 e), MUFU.EX2, FMUL an element, and its reduce
# exp(x - m): FADD, FMUL, MUFU.EX2. Folded, the write is ex2(x * log2 e - (m * log2 e + log2 sum)) and the reduce
# ex2(x * log2 e - m * log2 e): one FFMA and the ex2 (the constant hoisted), 112 fewer SASS instructions in the bf16
# softmax's root (1,560 against 1,672). Timed as source swaps of the roots (twenty-ninth session, one run, each root
# twice; results/h200/probe_session29_exp2_fold.json, plan benchmarks/plans/exp2_fold.sh): the softmax [64, 262144]
# bf16 22.8 and 22.8 us with the write folded against the root's 23.3 and 23.4, 23.5 with the reduce folded, 23.8-24.0
# with both; the soft cap 32.6-32.9 (write) and 32.4-32.6 (both) against 33.0 and 33.0. It is not exact enough to
# keep as it is: x * log2 e rounds relative to |x|, not to |x - m|, so the error grows with the logits' magnitude, and
# every fp32 output failed the verifier on its large-valued inputs (the softmax fp32 2e-3 relative off, the sampling
# softmax 2e-5 where 1e-5 is allowed); the soft cap passed only because tanh bounds its values by the cap. The form
# that keeps x - m first, ex2((x - m) * log2 e - log2 sum) (FADD, FFMA, ex2: one instruction an element fewer than
# the root) passed the verifier everywhere, fp32 outputs included, and gained nothing consistent (results/h200/
# probe_session29_exp2_exact.md, plan exp2_exact.sh, one run, each twice): the bf16 softmax 23.7-23.8 us against
# 23.2-23.3, the sampling softmax 29.5-30.2 against 30.7-31.1, the soft cap 32.8-33.3 against 32.9-33.1, fp32
# 35.9-36.1 against 35.7-36.2. Neither form is in the templates.
# Fortieth session: the folded form guarded, so that it is exact enough everywhere. The rounding of m * log2e costs
# at most |m| * 2^-24 * log2e of the exponent, so where |m| <= 32 (a branch each warp takes as one) the fold loses at
# most 2.8e-6 of an exp, and larger maxima take the exact code. On the roots after the lean reduce, the paired
# prologue and the 8 slots, every swap passed the verifier and none gained (one run, each root and its swaps 4 times;
# results/h200/probe_session40_fold_guarded.json, plan benchmarks/plans/fold_guarded.sh): the softmax [64,262144] bf16
# root 21.7, 21.6, 21.9, 21.7 us, the write folded 21.9, 21.9, 21.8, 21.6, the reduce 21.4, 21.4, 21.6, 21.7, both
# 21.8, 22.0, 21.8, 22.1; the soft cap root 30.2, 30.1, 29.8, 29.8, write 30.5, 29.9, 30.1, 30.3, reduce 30.3, 30.2,
# 30.0, 30.2, both 30.3, 30.4, 30.2, 30.0; fp32 root 35.1, 35.1, 35.0, 34.8, the swaps 34.8-35.3. Not kept.


# Note [writers of their own for whole pieces]
# With the range tests left out (Note [a pack's range test only where a row's last piece is short] in relay.py), the
# plain softmax's search at [64,262144] bf16 took writers of their own (Note [writers of their own] in relay.py) at its
# last iteration: 21.2 us against the joint root's 21.4 in the same search (ops run AL, ops_session47_guards.json).
# Around it, each twice beside the joint root in one run (results/h200/probe_session47_bf16_writers*.json, plans
# bf16_writers.sh and bf16_writers_more.sh): eight reducer and eight writer warps in seven slots of 32 KB 20.9, 20.7
# us, then 20.7, 20.9, against the root's 21.9, 21.6, then 21.4, 21.5; six slots 20.8, 21.2; five 22.4, 22.3; a ramp
# of 1 23.3, 23.1, of 3 21.0, 21.1; two resolvers 22.1, 21.8; four and four warps 21.2, 21.4; 16 KB pieces in 12 or
# 14 slots 22.4-22.8. fp32 [64,262144] (32 KB pieces as well): seven slots 34.2, 34.2 against 34.5, 34.6, six 34.3,
# 34.5. So a plain softmax whose rows are whole pieces takes them as its root; rows with a short last piece keep
# the joint relay (the search reaches writers in one action: [64,248320] bf16 took them in ops run AI). Ops run AM
# (ops_session47_writers.json, 25-iteration searches, each won by this root): bf16 20.8 us, 75.5% of the copy
# bandwidth by events (21.6 and 72.5% in run AI); fp32 34.1 us, 91.9% (35.1, 89.4% in AI).


# Note [a lean reduce]
# The relay's reduce is its critical path: a piece's partial is published only once its consumers have reduced it,
# and a row resolves at its slowest piece (Note [rows relayed through global memory] in relay.py). Its PTX took per
# element of a 16-bit input a conversion and an FMNMX in one dependent chain for the max, then a second conversion,
# the FADD, FMUL and ex2 of the exp, the FADD of the sum, and sexp's test of a row with no finite value (Note [safe
# exp]) as a branch around each exp. Now the max goes over packed pairs (max.bf16x2 or max.f16x2, exact; NaN is
# dropped as fmaxf drops it), a tree of three per 16-byte pack and two widened halves, and the test is taken once for
# the warp's share, whose max it tests. Every dtype takes the hoisted test; only 16-bit packs that hold the softmax's
# own values take the pairs (no prologue, or one evaluated once into them: ``_relay_pair``).
# Measured (thirty-eighth session, one run, the root layout twice beside each source swap; results/h200/
# probe_session38_reduce_lean.json, plan benchmarks/plans/reduce_lean.sh): softmax [64,262144] bf16 with both 21.5
# and 21.4 us against 23.5 and 23.4 (73% of the copy bandwidth against 67%); the pairs alone 21.9, 22.0; the test
# alone 22.8, 23.0; fp32 (the test only) 34.9, 34.8 against 35.0, 34.8. With the ramp of 2 the plain softmaxes' root
# now takes (Note [the first copies a few at a time] in relay.py), ops run AI (ops_session38_final.json, 25-iteration
# searches): softmax [64,262144] bf16 21.6 us, 72.5% of the copy bandwidth by events and 73.2% by graph replay (66.5%
# and 69.6% in run AG); [64,248320] bf16 21.5 (69.0%, 71.5%); the soft cap 32.1 (73.4%, 76.4%). Not kept on top of
# it (probe_session38_reduce_lean_more.json, plan reduce_lean_more.sh, each twice or three times beside the root's
# 21.6-21.8): one running max of pairs over the lane's packs, widened once, 21.5-21.6 (a tie); the sum in two
# accumulators, 21.8-21.9. Nor did the layouts around the root beat it (probe_session38_lean_grid.json, plan
# lean_grid.sh, each twice beside the root's 21.6, 21.4): seven slots with a lag of 4 21.6, 21.5 and writers of their
# own 21.6, 21.8 tied; seven slots with a lag of 3, a lag of 2 in five or six, a ramp of 3, half the consumer warps
# and 8 KB pieces lost (22.2-23.8). The root's timeline (trace_session38_softmax.log): a span of 17.4 us (19.2 with
# the old reduce, trace_session36_softmax.log), the first write at 6.1 us (6.9), the last arrival at 13.3 (14.8), a
# piece's arrival to its published partial 1.3 us at the median (1.5).
# The same session measured what the reduce is bound by, and kept neither of these:
# - exps on the FMA pipe (results/h200/probe_session38_poly_exp.json, plan poly_exp.sh): 2^t as a cubic (p(0) = 1,
#   relative error 8.6e-5 on [0, 1)) times 2^floor(t) built in the exponent bits, about nine FMA-pipe and integer
#   instructions for one MUFU.EX2, on a share of the elements. Slower in every form, and more so the more it took:
#   the bf16 root 23.1 and 23.3 us; every second exp of the write 24.9, 25.2; every fourth 23.8, 24.0; all of the
#   write's 27.5, 27.3; every second of the reduce's 27.1, 27.0; every second of both 29.1, 29.0; all of both 35.4
#   twice (writers of their own, 24.7 and 24.6, lost the same way). On top of the lean reduce, every eighth or fourth
#   exp of the reduce's: 21.7-21.9 against 21.4-21.5. So the reduce's warps are bound by their issue slots as much as
#   by MUFU.EX2, and the write has slack:
# - the reduce's exps kept in the slot in place of x (results/h200/probe_session38_exps_in_slot.json, plan
#   exps_in_slot.sh): exp(x - the warp's max) rounded to the slot's type in pairs, and the write one product by
#   exp(warp max - row max) / sum, so the write loses each element's FADD, FMUL and ex2: bf16 23.4 and 23.3 us
#   against 23.3 and 23.4; fp32 35.0 and 35.1 against 34.7 and 35.1. A tie.
#   On the lean reduce (forty-sixth session, results/h200/probe_session46_exps_in_slot_lean_*.json, plan
#   exps_in_slot_lean.sh, one run, each root twice beside the swap; a share with no finite value keeps its -inf in
#   the slot, which the write's max(e, 0) makes 0): bf16 22.3 and 21.7 us against 21.6 twice; fp32 35.1 and 35.2
#   against 34.8 and 35.0. Still not kept.
# - exps two at a time (ex2.approx.f16x2, ex2.approx.ftz.bf16x2): not timed, since on sm_90 each compiles to two
#   MUFU.EX2 of one half each and a PRMT (results/h200/ex2_sass_session46.txt, cuobjdump on the device), so it takes
#   as many MUFU issues as two fp32 exps, and rounds its argument and result to 16 bits.


def _raw_header(card: OperatorCard, p: dict[str, Any], sizes: dict[str, int]) -> str:
    """``_header`` with T the element as it is in memory (the relay's and the resident kernel's), and
    ``xv(T) -> float``: the softmax's input (Note [a prologue run from the relay's slots] for a fused card)."""
    if not _fused(card):
        return _header(card, p, **sizes) + "\n__device__ __forceinline__ float xv(T v) { return to_f(v); }\n"
    return f"""{PREAMBLE}
{typedefs(T=card.inputs[0].spec.dtype, TO=output_spec(card, 0).dtype, TF=_in_dtype(card))}
{consts(COLS=card.sizes["cols"], VEC=p["vec"], **sizes)}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
{_fused_loader(card)}
__device__ __forceinline__ float xv(T v) {{ return to_f(from_f<TF>(fx(to_f(v)))); }}
{_NARROW}{_pair_prologue(card, p)}
"""


def _pair_prologue(card: OperatorCard, p: dict[str, Any]) -> str:
    """``fx2`` (Note [a prologue two elements at a time] in fused.py) where the relay evaluates the prologue once into
    16-bit packs (``_relay_pair``), else nothing."""
    if not (p.get("once") and _relay_pair(card, True)):
        return ""
    return "\n" + pair_prologue(str(card.scalars["expr"]), _relay_dtype(card))


# A value of T widened to float, back to T: exact, so bf16 takes the top half of the float's bits and fp16 the paired
# conversion (Note [roundings off the MIO pipe] in common.py); only ``once`` uses it, where _once_ok holds.
_NARROW = r"""__device__ __forceinline__ float narrow_to(float v, float*) { return v; }
__device__ __forceinline__ __nv_bfloat16 narrow_to(float v, __nv_bfloat16*) {
  return __ushort_as_bfloat16((unsigned short)(__float_as_uint(v) >> 16));
}
__device__ __forceinline__ __half narrow_to(float v, __half*) { return __ushort_as_half((unsigned short)f16_pair(v)); }
__device__ __forceinline__ T narrow(float v) { return narrow_to(v, (T*)nullptr); }"""


def _relay_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    """Note [rows relayed through global memory] (relay.py): a piece's (max, sum), combined with MaxSum."""
    once, cols = bool(p.get("once")), card.sizes["cols"]  # Note [a prologue evaluated once, into its slot]
    x = "to_f" if once else "xv"
    val = f"{x}(p.v[j]) - m - lse" if log else f"__expf({x}(p.v[j]) - m) * inv"
    pre = "const float lse = __logf(st.y);" if log else "const float inv = 1.f / st.y;"
    # Note [stores of whole sectors]: with ``halves`` a lane takes half packs, each store whole sectors
    n, w, pin, pout, src, take = ("NPL", "VEC", "P", "PO", "sp", "") if not p.get("halves") else (
        "2 * NPL", "(VEC / 2)", "Pack<T, VEC / 2>", "Pack<TO, VEC / 2>", "sh", """
      __syncwarp();  // with once, a lane reads halves that other lanes of the warp put back into the slot
      const Pack<T, VEC / 2>* sh = reinterpret_cast<const Pack<T, VEC / 2>*>(sp);""")
    write = f"""
      const float m = st.x;
      {pre}
      TO* yr = y + row * COLS;{take}
#pragma unroll
      for (int i = 0; i < {n}; ++i) {{
        const int col = c0 + wc + (i * 32 + lane) * {w};
        {pack_test("col < COLS", cols, p["pe"])}{{
          const {pin} p = {src}[i * 32 + lane];
          {pout} o;
#pragma unroll
          for (int j = 0; j < {w}; ++j) o.v[j] = from_f<TO>({val});
          stp<TO, {w}>(yr + col, o);
        }}
      }}"""
    return _raw_header(card, p, relay_consts(p, cols)) + RELAY_HELPERS + """
typedef float2 V;
typedef MaxSum Op;
__device__ __forceinline__ V ident() { return make_float2(-CUDART_INF_F, 0.f); }
__device__ __forceinline__ float2 pack_stat(V v) { return v; }  // (max, sum of exp): the sum is >= 0
__device__ __forceinline__ V unpack_stat(float2 f, int) { return f; }
""" + relay_kernel("softmax_relay", p, "const T* __restrict__ x, TO* __restrict__ y",
                   _relay_reduce(once, _relay_pair(card, once),
                                 pack_test("c0 + wc + (i * 32 + lane) * VEC < COLS", cols, p["pe"])),
                   "\n          const float2 fin = a;", write, wrote_slot=once)


def _resident_source(card: OperatorCard, p: dict[str, Any], log: bool) -> str:
    """Note [a tensor held on chip whole] (resident.py), a fused prologue evaluated once (``_once_ok``)."""
    rows, cols = card.sizes["rows"], card.sizes["cols"]
    val = "to_f(p.v[j]) - m - w" if log else "__expf(to_f(p.v[j]) - m) * w"
    weight = "__logf(s)" if log else "1.f / s"
    write = f"""
      PO o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>({val});
      stp<TO, VEC>(y + gp * VEC, o);"""
    return _raw_header(card, p, resident_consts(p, rows, cols, _relay_isz(card))) + RELAY_HELPERS + f"""
__device__ __forceinline__ float stat_weight(float s) {{ return {weight}; }}
""" + resident_kernel("softmax_resident", "const T* __restrict__ x, TO* __restrict__ y", _fused(card), write)


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    if not valid(card, p):
        raise ValueError(f"softmax params {p} are not valid for {card.op} rows={card.sizes['rows']} "
                         f"cols={card.sizes['cols']}")
    log = card.op == "aten._log_softmax.default"
    rows, cols, isz = _dims(card)
    s, block, vec = p["strategy"], p.get("block", 0), p["vec"]
    what = "log_softmax" if log else f"softmax({card.scalars['expr']})" if _fused(card) else "softmax"
    if s in ("group", "block"):
        rpb = block // p["tpr"] if s == "group" else 1
        smem = _smem_cache_bytes(cols, block, vec, isz) if p["cache"] == "smem" else 0
        launches = [launch("softmax_rows", f"cdiv(rows, {rpb})", block, _in_args(card) + ["out:0", "i64:rows"], smem)]
        src, scratch = _rows_source(card, p, log), None
    elif s == "cluster":
        smem = _smem_cache_bytes(chunk_of(cols, p["cs"], vec), block, vec, isz) if p.get("cache") == "smem" else 0
        if "keep" in p:
            smem = p["keep"] * block * vec * isz
        launches = [launch("softmax_cluster", f"rows * {p['cs']}", block, _in_args(card) + ["out:0"], smem)]
        src, scratch = _cluster_source(card, p, log), None
    elif s == "pipe":
        smem = _smem_cache_bytes(chunk_of(cols, p["cs"], vec), block, vec, isz)
        launches = [launch("softmax_pipe", p["clusters"] * p["cs"], block, _in_args(card) + ["out:0", "i64:rows"],
                           smem)]
        src, scratch = _pipe_source(card, p, log), None
    elif s == "relay":  # Note [rows relayed through global memory]: one block per SM, every block resident
        ppr = cdiv(cols, p["pe"])
        args = _in_args(card) + ["out:0", "scratch:part", "i64:rows"]
        launches = [relay_launch("softmax_relay", p, args, _relay_isz(card))]
        src, scratch = _relay_source(card, p, log), relay_scratch("rows", ppr)
    elif s == "resident":  # Note [a tensor held on chip whole]: one block per SM, every block resident
        args = _in_args(card) + ["out:0", "scratch:part", "i64:rows"]
        launches = [resident_launch("softmax_resident", p, args, rows, cols, _relay_isz(card))]
        src, scratch = _resident_source(card, p, log), resident_scratch()
    else:
        grid = f"rows * {p['splits']}"
        launches = [launch("softmax_part", grid, block, _in_args(card) + ["scratch:part"]),
                    launch("softmax_fin", grid, block, _in_args(card) + ["scratch:part", "out:0"])]
        src, scratch = _split_source(card, p, log), {"part": (f"rows * {p['splits']} * 8", False)}
    desc = f"{what} {s} " + " ".join(f"{k}={v}" for k, v in sorted(p.items()) if k != "strategy")
    return make_candidate(src, launches, desc, p, align_of(vec, _specs(card)), scratch)
