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

The card's helpers shared with the sources are in softmax_card.py; the sources of ``group``, ``block``, ``cluster``,
``pipe`` and ``split`` in softmax_rows.py; those of ``relay`` and ``resident`` in softmax_relay.py, with the Notes on
the relay's prologue, slots, stores, reduce and root that this module names without a file (Note [a prologue run from
the relay's slots], Note [a prologue evaluated once, into its slot], Note [eight slots for a paired prologue], Note
[stores of whole sectors], Note [writers of their own for whole pieces], Note [a lean reduce]).

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
from ...expression import Const, parse, result_dtype
from .common import (FLOAT_DTYPES, ITEMSIZE, REG_CACHE_BLOCK, REG_CACHE_THREAD, SMS, align_of, best_vec, cdiv, chunk_of,
                     clamp, filter_actions, flag_knob, kept_ok, knob, launch, main_input, make_candidate, output_spec,
                     pow2_ceil, rows_aligned, scale_knob, tma_ok, vec_ok)
from .fused import row_prologue_dtype
from .relay import relay_actions, relay_defaults, relay_launch, relay_scratch, relay_valid, relay_writers
from .resident import resident_actions, resident_defaults, resident_launch, resident_scratch, resident_valid
from .softmax_card import in_dtype, is_fused, launch_order, relay_isz, relay_pair
from .softmax_relay import relay_source, resident_source
from .softmax_rows import (CLUSTER_STATIC_SMEM, cluster_source, in_args, pipe_source, rows_source, smem_cache_bytes,
                           split_source)
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


def matches(card: OperatorCard) -> bool:
    if is_fused(card):
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
    return card.sizes["rows"], card.sizes["cols"], ITEMSIZE[in_dtype(card)]


def _specs(card: OperatorCard) -> list:
    if is_fused(card):
        return [t.spec for t in card.inputs] + [output_spec(card, 0)]
    return [main_input(card), output_spec(card, 0)]


def _vec_ok(card: OperatorCard, vec: int) -> bool:
    """``vec_ok``, and for a fused card every input's row offset a multiple of ``vec``."""
    if not vec_ok(vec, card.sizes["cols"], _specs(card)):
        return False
    return not is_fused(card) or rows_aligned(vec, output_spec(card, 0), [t.spec for t in card.inputs])


def _best_vec(card: OperatorCard) -> int:
    vec = best_vec(card.sizes["cols"], _specs(card))
    while vec > 1 and not _vec_ok(card, vec):
        vec //= 2
    return vec


def _bcast(card: OperatorCard) -> dict[str, str]:
    """The row kernels' default launch order: rows that share a broadcast input row together where there are such
    rows. Thirteenth session's probe (probe_session13_attn_copy.json, same run) at Gemma's masked softmax
    [1,8,2048,2048] bf16: 40.7 us against 41.8 at the root's 64 threads, 40.3 against 41.0 at 128, 43.1 against 45.6
    for a warp per row in blocks of 128 threads; a tie at 256 threads (44.4 against 44.2)."""
    return {"order": "bcast"} if launch_order(card) is not None else {}


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
    if strategy == "relay":  # Note [the first copies a few at a time] (relay_pipeline.py): two at a time
        p = {**relay_defaults(relay_isz(card)), "ramp": 2}
        if _once_ok(card):  # Note [a prologue evaluated once, into its slot]: pieces of 16 KB, 10 slots, a lag of 4;
            # 16-bit packs, whose prologue goes two at a time: 8 slots, a lag of 3 (Note [eight slots for a paired
            # prologue])
            paired = relay_pair(card, True) is not None
            p.update(pe=16384 // relay_isz(card), k=8 if paired else 10, lag=3 if paired else 4, once=True)
        if _wide_out(card, p["vec"]):  # Note [stores of whole sectors]
            p["halves"] = True
        return p
    if strategy == "resident":
        return resident_defaults(rows, cols, relay_isz(card))
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
    if row_bytes >= 256 * 1024 and rows * row_bytes >= 16 * 2**20 and (not is_fused(card) or _once_ok(card)):
        # Note [rows relayed through global memory]: [64, 262144] fp32 ran 38.8 us against the cluster's 43.6, bf16
        # 26.8 against 27.5 (eleventh session, probe_relay.json, same run); the cluster stays the second seed. A fused
        # prologue whose values fit the slots: Note [a prologue evaluated once, into its slot]
        order = ("relay",)
    for s in order + ("cluster", "split", "block"):
        p = defaults(card, s)
        # Note [writers of their own for whole pieces]: where every row is whole pieces, those first
        whole = s == "relay" and not is_fused(card) and cols % p["pe"] == 0
        for q in ([{**relay_writers(p)[1], "k": 7}] if whole else []) + [p]:
            if valid(card, q):
                return q
    raise AssertionError(f"no valid softmax strategy for rows={rows} cols={cols}")  # "block"+"none" always fits


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    root = root_params(card)
    kept = kept_seed(card)
    return [root] + ([kept] if kept is not None and kept != root else []) + \
        [p for s in STRATEGIES if s != root["strategy"] and s != "resident" and valid(card, p := defaults(card, s))
         and not (s == "relay" and is_fused(card) and "once" not in p)]  # Note [a prologue run from the relay's slots];
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
        return _relay_layout_ok(card, vec) and (not is_fused(card) or _once_ok(card)) and \
            resident_valid(p, rows, cols, relay_isz(card), smem_limit(card))
    if s == "relay":  # Note [rows relayed through global memory]: rows of >= 64 KB of the input as it is in memory
        risz = relay_isz(card)
        return cols * risz >= 64 * 1024 and _relay_layout_ok(card, vec) and \
            relay_valid(_relay_knobs(p), rows, cols, risz, smem=smem_limit(card))
    if s not in STRATEGIES or not _vec_ok(card, vec) or block % 32 or not 32 <= block <= 1024:
        return False
    if "order" in p and not (p["order"] == "bcast" and s in ("group", "block") and launch_order(card) is not None):
        return False  # Note [rows that share a broadcast row run together]: the row kernels of a broadcasting prologue
    if "tma" in p and not (tma_ok(p, isz) and not is_fused(card)):
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
                "smem": smem_cache_bytes(cols, block, vec, isz) <= smem_limit(card),
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
            smem_cache_bytes(chunk, block, vec, isz) <= smem_limit(card) - CLUSTER_STATIC_SMEM
    if s == "cluster":
        cs, cache = p.get("cs"), p.get("cache", "reg")
        if cs not in (2, 4, 8, 16) or rows * cs > 2**31 - 1 or cols < cs * vec or cache not in ("reg", "smem", "none"):
            return False
        chunk = chunk_of(cols, cs, vec)
        if block > max(128, pow2_ceil(cdiv(chunk, vec))):
            return False
        if "keep" in p:  # Note [a chunk kept in part]
            return kept_ok(p, _packs(card, p), isz, smem_limit(card) - CLUSTER_STATIC_SMEM)
        if cache == "smem":
            return smem_cache_bytes(chunk, block, vec, isz) <= smem_limit(card) - CLUSTER_STATIC_SMEM
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
    if p["strategy"] in ("group", "block") and launch_order(card) is not None:
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
    if not is_fused(card) or len(card.inputs) != 1:
        return False
    t, tf = card.inputs[0].spec.dtype, in_dtype(card)
    if tf == t:
        return True
    root = parse(str(card.scalars["expr"]))
    if tf != "float32" or root.op != "to_float32":
        return False
    return not isinstance(root.args[0], Const) and result_dtype(root.args[0], [t]) == t


def _relay_layout_ok(card: OperatorCard, vec: int) -> bool:
    """The relay's bulk copies take whole rows of one input laid out as the output (a fused prologue of one input,
    Note [a prologue run from the relay's slots]); its packs are 16 bytes of that input. The output's packs of VEC
    elements may be wider (32 bytes of fp32 after bf16 logits): two stores, on offsets aligned to them."""
    if not is_fused(card):
        return _vec_ok(card, vec)
    y = output_spec(card, 0)
    if len(card.inputs) != 1:
        return False
    x = card.inputs[0].spec
    # offsets are recorded up to 16 bytes; the launcher checks the 32-byte alignment of a wider pack at call time
    return (x.shape == y.shape and x.is_contiguous() and card.sizes["cols"] % vec == 0
            and all(s.offset_align % min(16, vec * ITEMSIZE[s.dtype]) == 0 for s in (x, y)))


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    if not valid(card, p):
        raise ValueError(f"softmax params {p} are not valid for {card.op} rows={card.sizes['rows']} "
                         f"cols={card.sizes['cols']}")
    log = card.op == "aten._log_softmax.default"
    rows, cols, isz = _dims(card)
    s, block, vec = p["strategy"], p.get("block", 0), p["vec"]
    what = "log_softmax" if log else f"softmax({card.scalars['expr']})" if is_fused(card) else "softmax"
    if s in ("group", "block"):
        rpb = block // p["tpr"] if s == "group" else 1
        smem = smem_cache_bytes(cols, block, vec, isz) if p["cache"] == "smem" else 0
        launches = [launch("softmax_rows", f"cdiv(rows, {rpb})", block, in_args(card) + ["out:0", "i64:rows"], smem)]
        src, scratch = rows_source(card, p, log), None
    elif s == "cluster":
        smem = smem_cache_bytes(chunk_of(cols, p["cs"], vec), block, vec, isz) if p.get("cache") == "smem" else 0
        if "keep" in p:
            smem = p["keep"] * block * vec * isz
        launches = [launch("softmax_cluster", f"rows * {p['cs']}", block, in_args(card) + ["out:0"], smem)]
        src, scratch = cluster_source(card, p, log), None
    elif s == "pipe":
        smem = smem_cache_bytes(chunk_of(cols, p["cs"], vec), block, vec, isz)
        launches = [launch("softmax_pipe", p["clusters"] * p["cs"], block, in_args(card) + ["out:0", "i64:rows"],
                           smem)]
        src, scratch = pipe_source(card, p, log), None
    elif s == "relay":  # Note [rows relayed through global memory]: one block per SM, every block resident
        ppr = cdiv(cols, p["pe"])
        args = in_args(card) + ["out:0", "scratch:part", "i64:rows"]
        launches = [relay_launch("softmax_relay", p, args, relay_isz(card))]
        src, scratch = relay_source(card, p, log), relay_scratch("rows", ppr)
    elif s == "resident":  # Note [a tensor held on chip whole]: one block per SM, every block resident
        args = in_args(card) + ["out:0", "scratch:part", "i64:rows"]
        launches = [resident_launch("softmax_resident", p, args, rows, cols, relay_isz(card))]
        src, scratch = resident_source(card, p, log), resident_scratch()
    else:
        grid = f"rows * {p['splits']}"
        launches = [launch("softmax_part", grid, block, in_args(card) + ["scratch:part"]),
                    launch("softmax_fin", grid, block, in_args(card) + ["scratch:part", "out:0"])]
        src, scratch = split_source(card, p, log), {"part": (f"rows * {p['splits']} * 8", False)}
    desc = f"{what} {s} " + " ".join(f"{k}={v}" for k, v in sorted(p.items()) if k != "strategy")
    return make_candidate(src, launches, desc, p, align_of(vec, _specs(card)), scratch)
