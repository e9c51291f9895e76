"""Depthwise 1-D convolution: ``aten.convolution`` with ``groups == C``, a [C, 1, K] weight, unit stride and
dilation, any padding.

Qwen 3.5's linear-attention layers run one over their 8192 q/k/v channels and the 2048 prefill tokens (kernel 4,
padding 3, then the first L outputs are kept: a causal conv1d) when the fused causal-conv kernel is not installed.
ATen runs it with a generic depthwise kernel: 178 us per call for [1, 8192, 2048] bf16 in Inductor's graph on the
H200 (benchmarks/results/h200/kernels_qwen35_moe_inductor.txt), where the bytes allow 16 us. The input is often a
transposed view ([B, L, C] in memory), so the op is a transpose as well as a convolution.

Six strategies. The first four compute a tile of TL positions x TC channels of one sample per block, with fp32 sums
over k in ascending order, rounded once.
- ``tile``: the block loads the input tile with its TL + K - 1 halo into shared memory with consecutive threads
  along the input's unit-stride dim (channels or positions), then computes and stores with consecutive threads
  along the output's unit-stride dim, so both the loads and the stores coalesce whatever the layouts.
- ``window`` (channels-fast input only; Note [a window of positions in registers]): each thread holds ``vec``
  channels of R consecutive positions plus the halo in registers, read straight from global memory, and stages
  its outputs in shared memory for stores along the output's unit-stride dim.
- ``rows`` (channels-fast input, positions-fast output; Note [a warp per output row]): the tile goes into shared
  memory as channel rows, and each warp computes whole output rows of it with its channel's weights in registers,
  a lane per position, so an output costs K shared loads, K FMAs and one store. With ``lp`` 2 (Note [two positions
  per lane]) a lane computes two adjacent outputs from float2 reads and stores them as one pair.
- ``chunks`` (channels-fast input, positions-fast output; Note [output chunks aligned per channel row]): a thread
  takes a 16-byte vector of channels and a chunk of positions, and stores each channel's chunk as one 16-byte vector,
  every row's chunks shifted to start on a vector boundary.
- ``flat`` (channels-fast input, contiguous output; Note [a block's channel rows as one flat run]): a block takes G
  whole output rows, which lie in memory as one run, puts their inputs in shared memory laid out as that run with the
  padding's zeros between the rows, and stores the run as aligned 16-byte vectors, one per thread, whatever the rows'
  length: no store is partial and no sector is shared between blocks' stores except at a run's two ends.
- ``bands`` (channels-fast input, contiguous output; Note [channel rows over a band of positions], conv_bands.py): a
  block takes G channel rows over one band of positions, reads its window of whole lines, and stores each row's band as
  aligned 16-byte vectors, the band shifted back by the row's phase. The root of Qwen's layout since the twenty-fourth
  session (21.6 us, 73% of the copy bandwidth, in ops run W).

On the H200 (tenth session, benchmarks/results/h200/ops.json, row ``causal_conv1d``, run F): the rows with two
positions per lane ran 30.4 us against Inductor's 193.1 us and eager's 299.3 us, at 52% of the copy bandwidth; inside
Qwen under Inductor they replace ATen's kernel. The ninth session's lane-per-position rows ran 34.1 us (46%); before
them every tile, window and grid order landed at 39-41 us (40%): Nsight Compute showed the tile bound by instructions
(Note [a warp per output row]); output rows aligned to 16 bytes did not help.
"""
from __future__ import annotations

from typing import Any

from ...cards import OperatorCard
from ...contract import Candidate
from .common import (FLOAT_DTYPES, ITEMSIZE, PREAMBLE, SMS, STATIC_SMEM_LIMIT, align_of, cdiv, consts,
                     filter_actions, flag_knob, input_spec, launch, make_candidate, output_spec, scale_knob, typedefs)
from . import conv_bands
from .conv_flat import FLAT_KERNEL, FLAT_PIECES, FLAT_PIPE_KERNEL
from .conv_shared import STORE16, blocks_per_sm, contiguous_output, weights_bytes
from .conv_shared import channels_fast as _channels_fast, conv_params as _conv_params, dims as _dims
from .target import smem_limit

OP = "aten.convolution.default"
MAX_K = 32


def matches(card: OperatorCard) -> bool:
    if card.op != OP:
        return False
    x, w, b, y = (input_spec(card, "input"), input_spec(card, "weight"), input_spec(card, "bias"),
                  output_spec(card, 0))
    if x is None or w is None or y is None or len(x.shape) != 3 or len(w.shape) != 3 or len(y.shape) != 3:
        return False
    if x.dtype not in FLOAT_DTYPES or w.dtype != x.dtype or y.dtype != x.dtype or x.numel == 0 or y.numel == 0:
        return False
    c = x.shape[1]
    s = card.scalars
    if (list(s.get("stride") or ()) != [1] or list(s.get("dilation") or ()) != [1] or s.get("transposed")
            or list(s.get("output_padding") or ()) != [0] or s.get("groups") != c):
        return False
    if list(w.shape) != [c, 1, w.shape[2]] or not 1 <= w.shape[2] <= MAX_K or not w.is_contiguous():
        return False
    if b is not None and (b.dtype != x.dtype or list(b.shape) != [c] or b.stride[0] != 1):
        return False
    pad = list(s.get("padding") or ())
    return len(pad) == 1 and pad[0] >= 0 and y.shape[:2] == x.shape[:2] and \
        y.shape[2] == x.shape[2] + 2 * pad[0] - w.shape[2] + 1 and min(x.stride) >= 0 and min(y.stride) >= 0


CHUNK_KEYS = frozenset({"strategy", "tl", "tc", "block", "vec", "direct", "rowfast", "cfirst"})
MAX_WINDOW = 24  # input vectors a chunk thread holds: 2 * vec + K - 2 (Note [output chunks aligned per channel row])


def _chunks_rows(p: dict[str, Any], k: int) -> int:
    """Input positions of a chunks tile: its TL, plus the shifts' vec - 1 and the K - 1 halo."""
    return p["tl"] + p["vec"] + k - 2


def _chunks_ok(card: OperatorCard, p: dict[str, Any], k: int) -> bool:
    """Note [output chunks aligned per channel row]: 16-byte vectors in and out, a positions-fast output whose rows of
    one sample all start at the same phase of a vector (one sample, or a sample stride that keeps it), a window that
    fits in registers, and no thread without a chunk."""
    y, vec = output_spec(card, 0), p.get("vec", 0)
    if set(p) - CHUNK_KEYS or vec * ITEMSIZE[input_spec(card, "input").dtype] != 16 or not _positions_fast(card):
        return False
    if y.offset_align % 16 or (y.shape[0] > 1 and y.stride[0] % vec) or 2 * vec + k - 2 > MAX_WINDOW:
        return False
    if p.get("direct") not in (None, True) or p.get("rowfast") not in (None, True):
        return False
    if p.get("rowfast") and (p.get("direct") or p["tc"] // vec < 8 or p["tl"] // vec < 8):
        return False  # Note [a warp's stores along one row]: the swizzle needs shared memory and 8 vectors a row
    block = p.get("block", 0)
    return block in (64, 128, 256, 512) and block <= (p["tl"] // vec) * (p["tc"] // vec)


FLAT_KEYS = frozenset({"strategy", "g", "block", "ld", "pipe", "vec"})
MAX_FLAT_LOADS = 16  # 16-byte loads a thread holds in flight (LD, or a whole run with ``pipe``)


def _flat_zs(card: OperatorCard, p: dict[str, Any]) -> int:
    """Elements of one shared run of ``flat``: its G rows' inputs with their zeros (G * L_out), the K - 1 zeros the
    last row's last outputs read, and room for the run's phase in a vector and the neighbour vector the last output
    vector reads (Note [a block's channel rows as one flat run])."""
    _, _, _, l_out, k, _ = _dims(card)
    return cdiv(p["g"] * l_out + k - 1 + 3 * p["vec"], p["vec"]) * p["vec"]


def _flat_buffers(p: dict[str, Any]) -> int:
    """Runs a block holds in shared memory: two with ``pipe`` (Note [the next run's loads in flight]), else one."""
    return 2 if p.get("pipe") else 1


def _flat_smem(card: OperatorCard, p: dict[str, Any]) -> int:
    one = weights_bytes(p["g"], _dims(card)[4]) + _flat_zs(card, p) * ITEMSIZE[input_spec(card, "input").dtype]
    return _flat_buffers(p) * one


def _flat_loads(card: OperatorCard, p: dict[str, Any]) -> int:
    """16-byte loads a thread holds at once: LD, or with ``pipe`` every load of a run."""
    return cdiv(_dims(card)[2] * (p["g"] // p["vec"]), p["block"]) if p.get("pipe") else p.get("ld", 0)


def _flat_min_blocks(card: OperatorCard, p: dict[str, Any]) -> int:
    """Blocks a ``flat`` kernel asks to fit on one SM (``__launch_bounds__``): as many as shared memory allows, but
    never a register bound under 64 a thread, or with ``pipe`` under 64 plus the next run's loads (held through the
    current run's stores: four registers each)."""
    return blocks_per_sm(_flat_smem(card, p), p["block"], 64 + (4 * _flat_loads(card, p) if p.get("pipe") else 0))


def _flat_grid(card: OperatorCard, p: dict[str, Any]) -> int:
    """A block per run, or with ``pipe`` as many blocks as fit on the GPU at once, each walking runs."""
    n, c = _dims(card)[:2]
    runs = n * (c // p["g"])
    return min(runs, SMS * _flat_min_blocks(card, p)) if p.get("pipe") else runs


def _flat_ok(card: OperatorCard, p: dict[str, Any]) -> bool:
    """Note [a block's channel rows as one flat run]: 16-byte channel loads of a channels-fast input, a contiguous
    output (a block's rows are one run), padding that covers the kernel's reach past a row (K - 1 <= padding: a row's
    last outputs read the next row's leading zeros), an output vector's inputs within two vectors (K <= vec + 1) and
    its outputs in at most two rows (L_out >= vec), whole groups of G channels, runs that fit in shared memory and
    loads that fit in registers. With ``pipe`` (Note [the next run's loads in flight]) LD is every load of a run and
    no knob."""
    n, c, _, l_out, k, pad = _dims(card)
    x = input_spec(card, "input")
    vec, g = p.get("vec", 0), p.get("g", 0)
    if set(p) - FLAT_KEYS or vec * ITEMSIZE[x.dtype] != 16 or not _channels_fast(card):
        return False
    if c % vec or x.stride[0] % vec or x.stride[2] % vec or k - 1 > pad or k > vec + 1 or l_out < vec:
        return False
    if not contiguous_output(card):
        return False
    if g not in (8, 16, 32, 64) or g % vec or c % g or p.get("block") not in (128, 256, 512):
        return False
    if p.get("pipe") not in (None, True) or ("ld" in p) == bool(p.get("pipe")) or \
            p.get("ld", 4) not in (4, 8, 16):
        return False
    return _flat_smem(card, p) <= smem_limit(card) and _flat_loads(card, p) <= MAX_FLAT_LOADS and n * (c // g) < 2**31


def _smem_bytes(p: dict[str, Any], k: int) -> int:
    return ((p["tl"] + k - 1) * (p["tc"] + 1) + p["tc"] * k) * 4


def _window_smem_bytes(p: dict[str, Any]) -> int:
    return p["tc"] * (p["tl"] + 1) * 4


def _rows_stride(p: dict[str, Any], k: int) -> int:
    """The shared row's length in floats for ``rows``: the tile's TL + K - 1 positions, made odd (Note [a warp per
    output row]); with ``lp`` 2, TL + K + 2 or more, 2 modulo 4 (Note [two positions per lane])."""
    if p.get("lp", 1) == 2:
        n = p["tl"] + k + 2
        return n + (2 - n % 4) % 4
    return (p["tl"] + k - 1) | 1


def defaults(card: OperatorCard, strategy: str = "tile") -> dict[str, Any]:
    if strategy == "bands":  # Note [channel rows over a band of positions]
        return conv_bands.defaults(card)
    if strategy == "flat":  # Note [a block's channel rows as one flat run]
        return {"strategy": "flat", "g": 16, "block": 512, "ld": 8,
                "vec": 16 // ITEMSIZE[input_spec(card, "input").dtype]}
    if strategy == "chunks":  # Notes [output chunks aligned per channel row], [a warp's stores along one row]
        return {"strategy": "chunks", "tl": 128, "tc": 64, "block": 128,
                "vec": 16 // ITEMSIZE[input_spec(card, "input").dtype], "rowfast": True}
    if strategy == "pairs":  # Note [two positions per lane]
        return {"strategy": "rows", "tl": 256, "tc": 16, "block": 128, "lp": 2,
                "vec": 16 // ITEMSIZE[input_spec(card, "input").dtype]}
    if strategy == "rows":
        return {"strategy": "rows", "tl": 128, "tc": 32, "block": 256,
                "vec": 16 // ITEMSIZE[input_spec(card, "input").dtype]}
    if strategy == "window":
        return {"strategy": "window", "tl": 64, "tc": 64, "vec": 16 // ITEMSIZE[input_spec(card, "input").dtype],
                "r": 8}
    return {"strategy": "tile", "tl": 64, "tc": 64, "block": 256}


def _widest(card: OperatorCard, p: dict[str, Any]) -> dict[str, Any] | None:
    """``p`` with the widest channel vector the input allows (16 bytes first), or None where none is valid."""
    for vec in (16 // ITEMSIZE[input_spec(card, "input").dtype], 4, 2):
        if valid(card, q := {**p, "vec": vec}):
            return q
    return None


def root_params(card: OperatorCard) -> dict[str, Any]:
    """Channel rows over bands of positions (Note [channel rows over a band of positions]) where the input is
    channels-fast and aligned for 16-byte loads and the output contiguous (Qwen's layout), else a block's rows as one
    flat run (Note [a block's channel rows as one flat run]) where that is valid, else warp rows with two positions per
    lane (Note [two positions per lane]) where the output is positions-fast, else the default tile, with vector loads
    where they are allowed (Note [vector loads of a channels-fast input]). On the H200 (twenty-fourth session,
    probe_session24_conv_bands*.json, each line one run) Qwen's conv ran 22.0-22.9 us over bands against 24.9-25.1 us
    in flat runs, the root since the twenty-third session (24.9 us against 29.5 for the pairs' rows of 256 positions x
    16 channels, the root since the tenth session; 29.9 us then against 33.9 for the ninth session's warp rows; in the
    eighth session the vector tile ran 39.0 us against the scalar tile's 52.3 and the best register window's 40.3)."""
    for strategy in ("bands", "flat"):
        if valid(card, p := defaults(card, strategy)):
            return p
    return _widest(card, defaults(card, "pairs")) or _widest(card, defaults(card)) or defaults(card)


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    """The root, then the flat runs, the warp rows in pairs, the aligned chunks, the warp rows with a lane per
    position, the vector tile, a register window and the scalar tile where they are valid and differ from it."""
    out = [root_params(card)]
    chunks, flat = defaults(card, "chunks"), defaults(card, "flat")
    for p in (flat if valid(card, flat) else None, _widest(card, defaults(card, "pairs")),
              chunks if valid(card, chunks) else None, _widest(card, defaults(card, "rows")),
              _widest(card, defaults(card)),
              _widest(card, defaults(card, "window")), defaults(card)):
        if p is not None and p not in out:
            out.append(p)
    return out


def _position_tiles(card: OperatorCard, p: dict[str, Any]) -> int:
    """The grid's position tiles: one per TL outputs, or per ``steps`` of them (Note [the next tile's loads in
    flight]); with ``lp`` 2 the rows that start at an odd element have their tiles one position early (Note [two
    positions per lane])."""
    y = output_spec(card, 0)
    if p.get("strategy") == "chunks":  # every shift of a row: L_out + vec - 1 positions
        return cdiv(y.shape[2] + p["vec"] - 1, p["tl"])
    shifted = p.get("lp", 1) == 2 and (y.stride[0] % 2 or y.stride[1] % 2)
    return cdiv(cdiv(y.shape[2] + shifted, p["tl"]), p.get("steps", 1))


def _positions_fast(card: OperatorCard) -> bool:
    return output_spec(card, 0).stride[2] == 1


def _block(p: dict[str, Any]) -> int:
    """Threads per block: the tile's own, or one per ``vec`` channels and ``r`` positions of a window."""
    if p.get("strategy") == "window":
        return (p["tc"] // p["vec"]) * (p["tl"] // p["r"])
    return p.get("block", 0)


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    if p.get("strategy") == "flat":
        return _flat_ok(card, p)
    if p.get("strategy") == "bands":
        return conv_bands.valid(card, p)
    n, c, _, l_out, k, _ = _dims(card)
    tl, tc, strategy = p.get("tl", 0), p.get("tc", 0), p.get("strategy")
    if strategy not in ("tile", "window", "rows", "chunks") or tl not in (16, 32, 64, 128, 256, 512) or \
            tc not in (8, 16, 32, 64, 128) or (tl == 512 and "lp" not in p and strategy != "chunks"):
        return False  # 512: pairs' rows and chunks only
    if "vec" in p:  # Note [vector loads of a channels-fast input]
        x, vec = input_spec(card, "input"), p["vec"]
        if vec not in (2, 4, 8) or vec * ITEMSIZE[x.dtype] > 16 or not _channels_fast(card):
            return False
        if tc % vec or c % vec or x.stride[0] % vec or x.stride[2] % vec:
            return False
    if strategy == "window":  # Note [a window of positions in registers]
        r = p.get("r", 0)
        if "vec" not in p or r not in (1, 2, 4, 8, 16) or tl % r or r + k - 1 > 40:
            return False
        smem, block = _window_smem_bytes(p), _block(p)
        if block % 32 or not 64 <= block <= 1024:
            return False
    elif strategy == "chunks":  # Note [output chunks aligned per channel row]
        if not _chunks_ok(card, p, k):
            return False
        block = p.get("block", 0)
        smem = (0 if p.get("direct") else _chunks_rows(p, k) * tc * ITEMSIZE[input_spec(card, "input").dtype]) + \
            tc * (k + 1) * 4
    elif strategy == "rows":  # Note [a warp per output row]
        block = p.get("block", 0)
        if "vec" not in p or not _positions_fast(card) or tl % 32 or block not in (64, 128, 256, 512) or \
                block // 32 > tc or p.get("steps", 2) not in (2, 4, 8):  # one step: no key
            return False
        if p.get("lp", 2) != 2 or ("lp" in p and (tl % 64 or "steps" in p)):  # one position per lane: no key
            return False
        smem = (tc * _rows_stride(p, k) + tc * (k + 1)) * 4
    else:
        smem, block = _smem_bytes(p, k), p.get("block", 0)
        if tc > 64 or block not in (64, 128, 256, 512) or block > tl * tc:
            return False
    if ("steps" in p or "lp" in p) and strategy != "rows":
        return False
    if ("direct" in p or "rowfast" in p) and strategy != "chunks":
        return False
    tiles_y = _position_tiles(card, p) if p.get("cfirst") else cdiv(c, tc)
    return smem <= STATIC_SMEM_LIMIT and tiles_y <= 65535 and n <= 65535 and cdiv(l_out, tl) * cdiv(c, tc) < 2**31


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if p["strategy"] == "flat":  # Note [a block's channel rows as one flat run]
        acts = scale_knob(p, "g") + scale_knob(p, "block") + scale_knob(p, "ld")
        if p.get("pipe"):  # Note [the next run's loads in flight]
            acts.append(("pipe True -> False", {**{k: v for k, v in p.items() if k != "pipe"}, "ld": 8}))
        else:
            acts.append(("pipe False -> True", {**{k: v for k, v in p.items() if k != "ld"}, "pipe": True}))
        acts.append(("strategy flat -> rows", _widest(card, defaults(card, "pairs"))))  # Note [two positions per lane]
        acts.append(("strategy flat -> bands", defaults(card, "bands")))  # Note [channel rows over a band of positions]
        return filter_actions(card, p, [(label, q) for label, q in acts if q is not None], valid)
    if p["strategy"] == "bands":  # Note [channel rows over a band of positions]
        acts = conv_bands.actions(card, p) + [("strategy bands -> flat", defaults(card, "flat"))]
        return filter_actions(card, p, acts, valid)
    acts = scale_knob(p, "tl") + scale_knob(p, "tc") + scale_knob(p, "block") + scale_knob(p, "vec") + \
        scale_knob(p, "r") + [flag_knob(p, "cfirst")]
    if p["strategy"] == "window":  # the same tile and threads, computed through shared memory
        acts.append(("strategy window -> tile", {"strategy": "tile", "tl": p["tl"], "tc": p["tc"],
                                                 "block": _block(p), "vec": p["vec"], **_order(p)}))
    elif p["strategy"] == "chunks":
        acts += [flag_knob(p, "direct"), flag_knob(p, "rowfast")]
        acts.append(("strategy chunks -> rows", {k: v for k, v in p.items() if k != "direct"} | {"strategy": "rows"}))
    elif p["strategy"] == "rows":
        one = {k: v for k, v in p.items() if k != "steps"}  # one step: no key
        single = {k: v for k, v in one.items() if k != "lp"}  # one position per lane: no key
        acts.append(("strategy rows -> tile", {**single, "strategy": "tile"}))
        acts.append(("strategy rows -> chunks", {**single, "strategy": "chunks"}))
        acts.append(("strategy rows -> flat", defaults(card, "flat")))
        acts.append((f"lp {p.get('lp', 1)} -> {3 - p.get('lp', 1)}", single if "lp" in p else {**one, "lp": 2}))
        steps = p.get("steps", 1)  # Note [the next tile's loads in flight]
        acts += [(f"steps {steps} -> {q}", {**single, "steps": q} if q > 1 else one) for q in (steps // 2, steps * 2)
                 if q >= 1]
    else:
        if "vec" in p:
            acts.append((f"vec {p['vec']} -> scalar", {k: v for k, v in p.items() if k != "vec"}))
            acts.append(("strategy tile -> window", {"strategy": "window", "tl": p["tl"], "tc": p["tc"],
                                                     "vec": p["vec"], "r": max(1, p["tl"] * p["tc"] // p["vec"]
                                                                               // p["block"]), **_order(p)}))
            acts.append(("strategy tile -> rows", {**p, "strategy": "rows"}))
    return filter_actions(card, p, acts, valid)


def _order(p: dict[str, Any]) -> dict[str, Any]:
    return {"cfirst": True} if p.get("cfirst") else {}


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    if not valid(card, p):
        raise ValueError(f"depthwise conv params {p} are not valid for sizes {card.sizes}")
    if p["strategy"] == "flat":
        return _generate_flat(card, p)
    if p["strategy"] == "bands":
        return conv_bands.generate(card, p)
    n, c, l_in, l_out, k, pad = _dims(card)
    x, y = input_spec(card, "input"), output_spec(card, 0)
    has_bias = input_spec(card, "bias") is not None
    tl, tc, block, vec = p["tl"], p["tc"], _block(p), p.get("vec", 1)
    params, args = _conv_params(card)
    head = f"""{PREAMBLE}
{typedefs(T=x.dtype, TO=y.dtype)}
{consts(C=c, LIN=l_in, LOUT=l_out, K=k, PAD=pad, TL=tl, TC=tc, NT=block, HALO=tl + k - 1,
        XC_FAST=int(x.stride[1] == 1 and x.stride[2] != 1), YL_FAST=int(y.stride[2] == 1),
        CFIRST=int(p.get("cfirst", False)))}
constexpr long long XS0 = {x.stride[0]}LL, XS1 = {x.stride[1]}LL, XS2 = {x.stride[2]}LL;
constexpr long long YS0 = {y.stride[0]}LL, YS1 = {y.stride[1]}LL, YS2 = {y.stride[2]}LL;
"""
    kernel = _window_kernel(vec, p["r"], has_bias) if p["strategy"] == "window" else \
        _chunks_kernel(vec, bool(p.get("direct")), bool(p.get("rowfast")), has_bias) if p["strategy"] == "chunks" else \
        _rows_pairs_kernel(vec, _rows_stride(p, k), has_bias) if p.get("lp") == 2 else \
        _rows_kernel(vec, _rows_stride(p, k), p.get("steps", 1), has_bias) if p["strategy"] == "rows" else \
        _tile_kernel(vec, has_bias)
    source = head + kernel.replace("PARAMS", params)
    tiles = _position_tiles(card, p)
    grid = (cdiv(c, tc), tiles, n) if p.get("cfirst") else (tiles, cdiv(c, tc), n)
    desc = f"depthwise conv1d k={k} {p['strategy']} tl={tl} tc={tc} block={block}" + \
           (f" steps={p['steps']}" if "steps" in p else "") + (" 2 positions per lane" if "lp" in p else "") + \
           (" (input channels-fast)" if _channels_fast(card) else "") + (f" vec={vec}" if vec > 1 else "") + \
           (f" r={p['r']}" if p["strategy"] == "window" else "") + \
           (" channel tiles first" if p.get("cfirst") else "") + \
           (" window read from global memory" if p.get("direct") else "") + \
           (" lanes along a row" if p.get("rowfast") else "")
    name = {"window": "dwconv1d_window", "rows": "dwconv1d_rows2" if "lp" in p else "dwconv1d_rows",
            "chunks": "dwconv1d_chunks"}.get(p["strategy"], "dwconv1d")
    return make_candidate(source, [launch(name, grid, block, args)], desc, p, align_of(vec, [x]))


def _generate_flat(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    """Note [a block's channel rows as one flat run]: a block per run of G channel rows of one sample, or with
    ``pipe`` (Note [the next run's loads in flight]) a block per SM slot walking runs."""
    n, c, l_in, l_out, k, pad = _dims(card)
    x, y = input_spec(card, "input"), output_spec(card, 0)
    params, args = _conv_params(card)
    g, block, vec, pipe = p["g"], p["block"], p["vec"], bool(p.get("pipe"))
    has_bias = input_spec(card, "bias") is not None
    head = f"""{PREAMBLE}
{typedefs(T=x.dtype, TO=y.dtype)}
{consts(C=c, LIN=l_in, LOUT=l_out, K=k, PAD=pad, NT=block, VEC=vec, G=g, PER=_flat_loads(card, p),
        NRUNS=n * (c // g), ZS=_flat_zs(card, p), WS_FLOATS=weights_bytes(g, k) // 4, MINB=_flat_min_blocks(card, p),
        HAS_BIAS=int(has_bias))}
constexpr long long XS0 = {x.stride[0]}LL, XS2 = {x.stride[2]}LL;
"""
    source = head + FLAT_PIECES + (FLAT_PIPE_KERNEL if pipe else FLAT_KERNEL).replace("PARAMS", params).replace(
        "BIAS_PTR", "b" if has_bias else "nullptr")
    desc = f"depthwise conv1d k={k} flat g={g} block={block} " + \
        ("next run's loads in flight" if pipe else f"ld={p['ld']}") + f" (input channels-fast) vec={vec}"
    name = "dwconv1d_flat_pipe" if pipe else "dwconv1d_flat"
    return make_candidate(source, [launch(name, _flat_grid(card, p), block, args, smem=_flat_smem(card, p))],
                          desc, p, align_of(vec, [x]))


def _tile_kernel(vec: int, has_bias: bool) -> str:
    return f"""
// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d(PARAMS) {{
  __shared__ float s[HALO][TC + 1];  // the input tile with its halo; +1: no bank conflicts along either dim
  __shared__ float ws[TC][K];
  // Note [channel tiles first]
  const int l0 = (CFIRST ? blockIdx.y : blockIdx.x) * TL, c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  for (int e = threadIdx.x; e < TC * K; e += NT) {{
    const int i = e / K, c = c0 + i;
    ws[i][e % K] = c < C ? to_f(w[(long long)c * K + e % K]) : 0.f;
  }}
{_tile_load(vec)}
  __syncthreads();
  for (int e = threadIdx.x; e < TL * TC; e += NT) {{
    const int j = YL_FAST ? e % TL : e / TC, i = YL_FAST ? e / TL : e % TC;  // along the output's fast dim
    const int c = c0 + i, l = l0 + j;
    if (c < C && l < LOUT) {{
      float acc = {"to_f(b[c])" if has_bias else "0.f"};
#pragma unroll
      for (int q = 0; q < K; ++q) acc = fmaf(ws[i][q], s[j + q][i], acc);
      y[n * YS0 + c * YS1 + l * YS2] = from_f<TO>(acc);
    }}
  }}
}}
"""


# Note [a window of positions in registers]
# The tile strategy reads every input element K times from shared memory (and each weight as often): at Qwen's
# [1, 8192, 2048] bf16 that is ~8 shared-memory accesses per output, more time than the bytes take. In a window a
# thread owns ``vec`` channels (one 16-byte load at bf16 vec=8) of R consecutive positions: it loads the R + K - 1
# input vectors it needs straight from global memory (the K - 1 halo vectors are its neighbour's too, so they
# come from L1), keeps its ``vec`` x K weights in registers, and computes its R x vec outputs there. The outputs go
# through shared memory only to turn them around: [TL][TC + 1] floats, written per position and read back along
# the output's unit-stride dim for coalesced stores. Within each vector's ``vec`` columns, channel u of vector v sits
# in column (u + v) % vec, so that the lanes of a warp, writing the same u of different vectors, hit different banks
# (the register indices stay compile-time constants).
# Measured (H200, eighth session, probe_conv_window_gn_keep.json): the best window (64 positions x 64 channels, 4
# channels x 8 positions per thread) ran Qwen's conv in 40.3 us, the best vector tile 39.0 us in an earlier call.
# The window cut the shared-memory accesses per output from about 8 to 2 and the time did not move; it stays a seed.


def _window_kernel(vec: int, r: int, has_bias: bool) -> str:
    return f"""
constexpr int VEC = {vec}, R = {r}, NVEC = TC / VEC, W = R + K - 1;

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d_window(PARAMS) {{
  __shared__ float so[TL][TC + 1];  // the block's outputs, turned around for stores along the output's fast dim
  // Note [channel tiles first]
  const int l0 = (CFIRST ? blockIdx.y : blockIdx.x) * TL, c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  const int iv = threadIdx.x % NVEC, g = threadIdx.x / NVEC, cb = c0 + iv * VEC;
  const bool on = cb < C;  // C % VEC == 0: a vector is all in or all out
  float wr[VEC][K], br[VEC];
#pragma unroll
  for (int u = 0; u < VEC; ++u) {{
    br[u] = {"on ? to_f(b[cb + u]) : 0.f" if has_bias else "0.f"};
#pragma unroll
    for (int q = 0; q < K; ++q) wr[u][q] = on ? to_f(w[(long long)(cb + u) * K + q]) : 0.f;
  }}
  Pack<T, VEC> xw[W];
#pragma unroll
  for (int t = 0; t < W; ++t) {{
    const long long l = (long long)l0 + g * R + t - PAD;
    if (on && l >= 0 && l < LIN) {{
      xw[t] = ldp<T, VEC>(x + n * XS0 + cb + l * XS2);
    }} else {{
#pragma unroll
      for (int u = 0; u < VEC; ++u) xw[t].v[u] = from_f<T>(0.f);
    }}
  }}
#pragma unroll
  for (int o = 0; o < R; ++o) {{
#pragma unroll
    for (int u = 0; u < VEC; ++u) {{
      float acc = br[u];
#pragma unroll
      for (int q = 0; q < K; ++q) acc = fmaf(wr[u][q], to_f(xw[o + q].v[u]), acc);
      so[g * R + o][iv * VEC + (u + iv) % VEC] = acc;  // rotated within the vector: lanes hit different banks
    }}
  }}
  __syncthreads();
  for (int e = threadIdx.x; e < TL * TC; e += NT) {{
    const int j = YL_FAST ? e % TL : e / TC, i = YL_FAST ? e / TL : e % TC;  // along the output's fast dim
    const int c = c0 + i, l = l0 + j;
    if (c < C && l < LOUT) y[n * YS0 + c * YS1 + l * YS2] = from_f<TO>(so[j][i - i % VEC + (i + i / VEC) % VEC]);
  }}
}}
"""


def _chunks_kernel(vec: int, direct: bool, rowfast: bool, has_bias: bool) -> str:
    """Note [output chunks aligned per channel row]; ``rowfast``: Note [a warp's stores along one row]."""
    window = ("const long long l = lx + j * VEC + w;\n"
              "      if (l >= 0 && l < LIN) {\n"
              "        win[w] = ldp<T, VEC>(xb + v * VEC + l * XS2);\n"
              "      } else {\n"
              "#pragma unroll\n"
              "        for (int u = 0; u < VEC; ++u) win[w].v[u] = from_f<T>(0.f);\n"
              "      }") if direct else \
        "win[w] = s[j * VEC + w][SWZ(j * VEC + w, v)];"
    staging = "" if direct else """
  __shared__ Pack<T, VEC> s[TLI][NV];  // the tile's input positions (rows) of its channel vectors, as in memory
  Pack<T, VEC> xv[PER];  // every load of the tile in flight before any is stored
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int e = threadIdx.x + t * NT, i = e / NV, v = e % NV;
    const long long l = lx + i;
    if (e < TLI * NV && c0 + v * VEC < C && l >= 0 && l < LIN) {
      xv[t] = ldp<T, VEC>(xb + v * VEC + l * XS2);
    } else {
#pragma unroll
      for (int u = 0; u < VEC; ++u) xv[t].v[u] = from_f<T>(0.f);
    }
  }"""
    store = "" if direct else """
#pragma unroll
  for (int t = 0; t < PER; ++t) {
    const int e = threadIdx.x + t * NT, i = e / NV;
    if (e < TLI * NV) s[i][SWZ(i, e % NV)] = xv[t];
  }"""
    # the thread's tasks: a vector of channels v and a chunk j each
    tasks = """  for (int e = threadIdx.x; e < NV * NJ; e += NT) {
    const int j = e % NJ, v = e / NJ, cb = c0 + v * VEC;  // a warp's lanes on consecutive chunks of a row
    if (cb >= C) break;  // C % VEC == 0: a vector is all in or all out; later tasks have larger v
    const int lb = l0 + j * VEC;  // the chunk's first position before its row's shift
    if (lb - (VEC - 1) >= LOUT) continue;  // no row has an output here""" if rowfast else """\
  const int v = threadIdx.x % NV, cb = c0 + v * VEC;  // this thread's channels: the same in each of its chunks
  if (cb >= C) return;  // C % VEC == 0: a vector is all in or all out
  for (int j = threadIdx.x / NV; j < NJ; j += NT / NV) {
    const int lb = l0 + j * VEC;  // the chunk's first position before its row's shift
    if (lb - (VEC - 1) >= LOUT) break;  // no row has an output here, nor further on"""
    swizzle = ("// Note [a warp's stores along one row]: vector v of input row i sits in column v ^ ((i / VEC) % NV),\n"
               "// so the eight lanes of a phase, on rows VEC apart, read eight columns\n"
               "#define SWZ(i, v) ((v) ^ (((i) / VEC) & (NV - 1)))") if rowfast else "#define SWZ(i, v) (v)"
    return STORE16 + f"""
constexpr int VEC = {vec}, NV = TC / VEC, NJ = TL / VEC, W = 2 * VEC + K - 2, TLI = TL + VEC + K - 2;
constexpr int PER = (TLI * NV + NT - 1) / NT;
{swizzle}

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d_chunks(PARAMS) {{
  __shared__ float ws[TC][K + 1];  // the block's weights (and bias), read once from global memory
  // Note [channel tiles first]
  const int l0 = (CFIRST ? blockIdx.y : blockIdx.x) * TL, c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  const T* xb = x + n * XS0 + c0;
  const long long lx = (long long)l0 - (VEC - 1) - PAD;  // the input position of the tile's first row{staging}
{_block_weights(has_bias)}{store}
  __syncthreads();
{tasks}
    Pack<T, VEC> win[W];  // input positions lb - (VEC - 1) - PAD ...: every shift's window
#pragma unroll
    for (int w = 0; w < W; ++w) {{
      {window}
    }}
    TO* yb = y + n * YS0 + (long long)cb * YS1 + lb;
#pragma unroll
    for (int u = 0; u < VEC; ++u) {{
      // row cb + u starts at this phase of a vector (the same in every sample and vector of channels: the Note);
      // its chunk, shifted back by it, is one aligned vector of outputs
      const int sh = (int)((YS1 * u) % VEC), l = lb - sh;
      float a[VEC];
#pragma unroll
      for (int o = 0; o < VEC; ++o) {{
        a[o] = ws[v * VEC + u][K];
#pragma unroll
        for (int q = 0; q < K; ++q) a[o] = fmaf(ws[v * VEC + u][q], to_f(win[VEC - 1 - sh + o + q].v[u]), a[o]);
      }}
      TO* yr = yb + u * YS1 - sh;
      if (l >= 0 && l + VEC <= LOUT) {{
        store16(yr, a);  // one 16-byte store (assigned as a Pack, NVRTC split the first channel's into seven)
      }} else {{
#pragma unroll
        for (int o = 0; o < VEC; ++o)
          if (l + o >= 0 && l + o < LOUT) yr[o] = from_f<TO>(a[o]);
      }}
    }}
  }}
}}
"""


def _rows_pairs_kernel(vec: int, rs: int, has_bias: bool) -> str:
    """Note [two positions per lane]: the warp rows with each lane on two adjacent outputs, read from shared memory
    as float2 and stored as one pair."""
    return f"""
constexpr int VEC = {vec}, RS = {rs}, NW = NT / 32, RP = TL / 64, NV = TC / VEC, NQ = (K + 2) / 2;
constexpr int HALO2 = TL + K + 1;  // input positions l0 - 2 - PAD ... : the tile for either parity of a row
{_load_layout("HALO2")}
constexpr bool ODD = ((YS0 | YS1) & 1) != 0;  // may a row start at an odd element (then its tiles shift by one)

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d_rows2(PARAMS) {{
  __shared__ __align__(16) float s[TC][RS];  // channel rows; RS even (float2 reads), 2 mod 4 (see the Note)
{_block_origin("l0", "TL")}
{_tile_loads("HALO2", " - 2", "  ")}
{_block_weights(has_bias)}
#pragma unroll
  for (int t = 0; t < PER; ++t) {{
    const int e = threadIdx.x + t * NT, ln = e & 31, ch = e >> 5;
    const int v = (ch % VCH) * VL + ln / PL, j = (ch / VCH) * PL + ln % PL;
    if (ch < PCH * VCH && j < HALO2) {{
#pragma unroll
      for (int u = 0; u < VEC; ++u) {{
        const int i = v * VEC + u;
        const int at = j - (ODD ? (int)((n * YS0 + (long long)(c0 + i) * YS1) & 1) : 0);  // the row's shift
        if (at >= 0) s[i][at] = to_f(xv[t].v[u]);
      }}
    }}
  }}
  __syncthreads();
  const bool whole = l0 >= 1 && l0 + TL < LOUT;  // block-uniform: every pair of this tile is in the output
  for (int i = warp; i < TC && c0 + i < C; i += NW) {{  // warp-uniform
    const int c = c0 + i;
    float wr[K];
#pragma unroll
    for (int q = 0; q < K; ++q) wr[q] = ws[i][q];
    const float bias = ws[i][K];
    const long long row = n * YS0 + (long long)c * YS1;
    const int shift = ODD ? (int)(row & 1) : 0;  // this row's tile starts at l0 - shift: its pairs are aligned
    const float* sr = s[i] + 2 - 2 * shift + 2 * lane;
    const int p0 = l0 - shift + 2 * lane;  // the lane's first pair: outputs p0 and p0 + 1, then 64 further on
    TO* yr = y + row + p0;
#pragma unroll
    for (int r = 0; r < RP; ++r) {{
      float xs[2 * NQ];
#pragma unroll
      for (int h = 0; h < NQ; ++h) {{
        const float2 f = *reinterpret_cast<const float2*>(sr + r * 64 + 2 * h);
        xs[2 * h] = f.x;
        xs[2 * h + 1] = f.y;
      }}
      float a0 = bias, a1 = bias;
#pragma unroll
      for (int q = 0; q < K; ++q) {{
        a0 = fmaf(wr[q], xs[q], a0);
        a1 = fmaf(wr[q], xs[q + 1], a1);
      }}
      const int p = p0 + r * 64;
      if (whole || (p >= 0 && p + 1 < LOUT)) {{
        Pack<TO, 2> o;
        o.v[0] = from_f<TO>(a0);
        o.v[1] = from_f<TO>(a1);
        if constexpr (sizeof(TO) == 2) *reinterpret_cast<unsigned*>(yr + r * 64) = *reinterpret_cast<unsigned*>(&o);
        else *reinterpret_cast<uint2*>(yr + r * 64) = *reinterpret_cast<uint2*>(&o);  // one store for the pair
      }} else {{
        if (p >= 0 && p < LOUT) yr[r * 64] = from_f<TO>(a0);
        if (p + 1 >= 0 && p + 1 < LOUT) yr[r * 64 + 1] = from_f<TO>(a1);
      }}
    }}
  }}
}}
"""


# Note [output chunks aligned per channel row]
# The warp rows (Notes [a warp per output row], [two positions per lane]) turn Qwen's channels-fast input around in
# shared memory as fp32 channel rows: every input element costs a conversion and a scalar store there, and every
# output pair a 4-byte store, about 13 instructions an output in all. In ``chunks`` a thread owns ``vec`` channels
# (one 16-byte vector of the input as it lies in memory) and one chunk of ``vec`` output positions, and stores each of
# its channels' chunk as one 16-byte vector: the turn-around happens in registers, where a conversion to fp32 is one
# instruction and the pack back is the paired conversion (F2FP). A stored vector must start on a multiple of ``vec``
# elements, and Qwen's output rows are 2051 long, so row c starts at phase (c * 2051) % vec of a vector. Each row's
# chunks are shifted back by that phase: chunk j of row c covers outputs j * vec - phase ... , one aligned vector.
# The phase of channel u of a vector is (u * YS1) % vec (the vector's first channel is a multiple of vec, and the
# sample stride is a multiple of vec or there is one sample: ``_chunks_ok``), a constant after unrolling, so the
# thread holds the input positions that any phase needs, 2 * vec + K - 2 vectors (18 for bf16 and K = 4), and each
# channel picks its K + vec - 1 of them by constant indices. The grid covers L_out + vec - 1 positions; a chunk that
# lies partly outside its row stores element by element. The tile's input goes through shared memory as it lies in
# memory (16-byte loads and stores, rows of TC channels: the eight lanes of a phase of a 16-byte shared load read
# one row, conflict-free), or with ``direct`` each thread reads its window from global memory (neighbours' windows
# overlap, so most of it comes from L1). About 7 instructions an output (256 FMAs, 88 unpacks, 32 packs, 18 shared
# loads and 8 stores per 64 outputs in the SASS), 80 registers with shared memory, 112 direct.
# Measured on the H200 (seventeenth session, Qwen's [1, 8192, 2048] bf16, probe_session17_conv_chunks.json, one run,
# the root 29.4 us): with a warp's lanes on 4-8 vectors of channels it lost everywhere, 30.9 us at best (direct, 512
# positions x 32 channels), 32.7 us through shared memory, 44-54 us at 128 channels. Nsight Compute
# (ncu/conv_chunks_direct.txt, ncu/conv_chunks_smem.txt): DRAM 32-35% busy, L2 72-75%, 20-37% of the warps resident.
# Lanes along a row (Note [a warp's stores along one row]) made it a tie with the root. For the ceiling: Inductor
# transposes the same [2048, 8192] bf16 in 19.5 us, 80.7% of the copy bandwidth, against a plain copy's 18.4 us
# (probe_session17_transpose.json), so the layout itself allows about 20 us and the conv is not there yet.

# Note [a warp's stores along one row]
# With ``rowfast`` the tasks of a block run chunk-fastest: the lanes of a warp take consecutive chunks of one vector of
# channels, so each 16-byte store of a warp covers 256-512 contiguous bytes of one output row, where the channel-fast
# order covered 64-128 bytes of 4-8 rows. Its window comes from the shared tile, where eight lanes of a phase now read
# rows VEC apart in one column: a tile of rows of 128 bytes (tc 64 at bf16) would put all eight in one bank group, so
# vector v of row i sits in column v ^ ((i / VEC) % NV) (needs NV >= 8 vectors a row, and 8 chunks a row for the
# phase). Measured on the H200 (seventeenth session, probe_session17_conv_rowfast.json and
# probe_session17_conv_rowfast_more.json, each line one run): 256 positions x 64 channels 30.4 us against 36.7 us
# channel-fast, 128 x 64 with 128 threads 29.3 and 29.7 us against 35.3 us, the root in the same runs 29.4 and 29.2 us;
# 64 x 64 30.6 us, 128 x 128 32.1-33.2 us, channel tiles first 30.1 us. Nsight Compute on 128 x 64
# (ncu/conv_chunks_rowfast.txt): 27.6 us, DRAM 35% busy, L2 75%, issue slots 41% busy, 0.9 eligible warps per
# scheduler. It is the chunks' seed; the root stays the rows in pairs.
# Those stores were not all whole: a SASS scan in the twenty-fourth session (benchmarks/sass_stores.py) found the
# first channel's 16-byte Pack store of each chunk split by NVRTC into six 2-byte stores and one 4-byte store (the
# other seven channels' were one STG.E.128). Stored through store16 (one st.global.v4, conv_shared.py) the chunks ran
# 25.7 and 25.6 us at 128 x 64 with 128 threads (probe_session24_conv_bands_first.json and _grid.json, each one run;
# the flat runs 24.9 and 25.1 us in the same runs), against 29.3 us in the seventeenth session's run (not the same).

# Note [two positions per lane]
# The warp rows (Note [a warp per output row]) spend about 13 instructions per output: K shared loads, K FMAs, a
# conversion, a 2-byte store and the branch around them (SASS of the Qwen root, sm_90). With ``lp`` 2 each lane takes
# two adjacent outputs: it reads the K + 1 inputs they share as (K + 2) / 2 float2 loads, and stores both as one
# 4-byte pair. A pair must start on an even element, and Qwen's output rows are 2051 long, so every other row starts
# at an odd one: a row whose start is odd runs its tiles one position early (outputs l0 - 1 ... l0 + TL - 2), which
# still covers each output once (the grid covers L_out + 1 positions; for a contiguous output, where only an odd L_out
# makes odd rows, that is no extra tile). The block loads input positions
# l0 - 2 - PAD ... l0 + TL + K - 2 - PAD (TL + K + 1 of them) and puts each row at an offset of its shift, so every
# lane's float2 reads are 8-byte aligned. The shared row stride RS is even for those reads and 2 modulo 4, so the fill
# (8 positions x 4 vectors of 8 per warp) has lanes two to a bank, not four (with 2 vectors of 8, at 16 channels per
# block, none share one); the reads of consecutive pairs by consecutive lanes are conflict-free. A tile whose pairs
# all lie in the output stores them without a test (block-uniform); the others test each pair, and store the half of
# one that lies in it.
# Measured on the H200 (tenth session, Qwen's [1, 8192, 2048] bf16, each line from one run):
# - 29.9-30.4 us at 256 positions x 16 channels, 128 threads, against 33.9-34.1 us for the lane-per-position root
#   (probe_session10_conv_pairs.json, probe_session10_conv_pairs_final.json); Nsight Compute at 128 x 32: 16.4 M
#   instructions issued (ncu/conv_pairs_first.txt) against the lane-per-position rows' 18.3 M;
# - a fill with conflict-free stores (16 / VEC vectors per position) together with per-vector flags instead of zero
#   vectors: slower at most layouts (31.7 against 29.9 us at the root's; probe_session10_conv_pairs_fill.json), with
#   56 registers and 52% of the warps resident in Nsight Compute;
# - skipping the rounds of the last, mostly empty tile (Qwen's ninth tile of 256 holds 3 outputs): 30.2 us both
#   ways; bounding the registers for 48 or 64 resident warps: 67.8 and 101.8 us, the spills dominate
#   (probe_session10_conv_skip_warps.json). Neither was kept;
# - four positions per lane (float4 reads, 8-byte stores, tiles shifted by up to 3) in a kernel generalised over the
#   positions per lane, its rows placed at offsets that make the fill conflict-free for any RS: timed against this
#   kernel alternately in one call (probe_session10_conv_lanes_ab.log), 30.4-30.6 us at four per lane and 31.1-31.2
#   us at two, against this kernel's 30.1-30.4 us. Its first build, with 64-bit remainders per stored element, ran
#   42 us (probe_session10_conv_lanes_ab_first.log). Not kept.

# Note [a warp per output row]
# Profiled on the H200 (ninth session, Nsight Compute, benchmarks/results/h200/ncu_session9.md), the best tile ran
# Qwen's conv issuing instructions in 70% of its cycles at 3.0 per cycle, with DRAM 27% busy: it was bound by
# instructions, about 50 per output (the tile's compute loop re-derives each output's channel and position with
# divisions, forms a 64-bit address per store, and reads each weight from shared memory per output). In ``rows``
# the block stores its tile as channel rows, s[TC][RS] floats, and its channels' weights and bias, and each warp
# takes whole channels: it reads the channel's K weights into registers once, then a lane per position computes
# RL = TL / 32 outputs at positions lane, lane + 32, ... from K consecutive row entries, and stores them through one
# row pointer with constant offsets. (Read from global memory at each channel instead, the weights' latency stalled
# every warp: Nsight Compute's largest share of stall samples.) Consecutive lanes read consecutive floats (no bank
# conflicts) and store consecutive positions (coalesced). Every thread issues all its loads of the tile (PER of
# them) before it stores any into shared memory, so they are in flight together rather than one load's latency at
# a time. The load puts a warp on 4 vectors of ``vec`` channels at each of 8 positions (whole 32-byte sectors of the
# channels-fast input); its lanes write rows (v * VEC + u) at column j, banks ((v * VEC + u) * RS + j) % 32, and with
# RS odd the four vectors' rows start 8 * RS apart, on distinct multiples of 8 banks, so the 8 positions x 4 vectors
# hit 32 banks. Needs the output's positions to be its unit-stride dim (Qwen's [1, 8192, 2051]) and vector loads.


# Note [the next tile's loads in flight]
# Nsight Compute on the H200 (ninth session) found the warp rows waiting on their global loads (long scoreboard
# stalls on the loaded registers: the largest share of the stall samples) with the DRAM 28-32% busy: a block loads
# its tile, waits at the barrier, then computes and stores with no load of its own in flight, and the few blocks per
# SM that shared memory allows do not cover that. With ``steps`` a block walks that many consecutive position tiles
# of its channels: it issues the next tile's loads (into registers) right after it has put the current tile into
# shared memory, so they travel while the warps compute and store the current one. The grid has ``steps`` times
# fewer position tiles; the registers hold one more tile's vectors. Measured (ninth session, probe_conv_rows.json, one
# run): it lost, 38.7 us at best against the plain rows' 33.6 (62 registers against 48, fewer warps resident); it
# stays an action, not a seed.


# Note [vector loads of a channels-fast input]
# Qwen's input is a transposed view: channels are the unit-stride dim. With ``vec`` a thread loads ``vec``
# consecutive channels of one position in one access (16 bytes of bf16 at vec=8) instead of one element, so a
# warp moves the tile's rows with an eighth of the load instructions and more bytes in flight per thread. It needs
# the channel tile, C and the other input strides to be multiples of ``vec`` (every vector starts on a multiple of
# ``vec`` elements) and the input pointer aligned to the vector (the launcher's alignment check). The output keeps
# scalar stores: Qwen's [1, 8192, 2051] output rows start at odd element offsets.


# Note [channel tiles first]
# The grid's x dim (which the hardware schedules first) runs over position tiles by default: the blocks in flight
# at one time cover a few channel tiles at every position, and each reads 2 x TC bytes of a channels-fast row per
# position. With ``cfirst`` it runs over channel tiles: the blocks in flight read whole channels-fast rows at a few
# positions, and write TL-position pieces of every output row instead. On the H200 neither order won: Qwen's conv ran
# 38.8 us with channel tiles first, 39.1 us without (same tile, same run, probe_conv_cfirst.json).


def _tile_load(vec: int) -> str:
    """C++: the input tile with its halo into ``s`` (zero outside the input), along the input's fast dim."""
    if vec == 1:
        return """  for (int e = threadIdx.x; e < HALO * TC; e += NT) {
    const int i = XC_FAST ? e % TC : e / HALO, j = XC_FAST ? e / TC : e % HALO;  // along the input's fast dim
    const int c = c0 + i;
    const long long l = (long long)l0 - PAD + j;
    s[j][i] = c < C && l >= 0 && l < LIN ? to_f(x[n * XS0 + c * XS1 + l * XS2]) : 0.f;
  }"""
    return f"""  for (int e = threadIdx.x; e < HALO * (TC / {vec}); e += NT) {{  // {vec} channels per load
    const int i = (e % (TC / {vec})) * {vec}, j = e / (TC / {vec});
    const int c = c0 + i;
    const long long l = (long long)l0 - PAD + j;
    if (c < C && l >= 0 && l < LIN) {{
      const Pack<T, {vec}> v = ldp<T, {vec}>(x + n * XS0 + c + l * XS2);
#pragma unroll
      for (int u = 0; u < {vec}; ++u) s[j][i + u] = to_f(v.v[u]);
    }} else {{
#pragma unroll
      for (int u = 0; u < {vec}; ++u) s[j][i + u] = 0.f;
    }}
  }}"""


def _load_layout(span: str) -> str:
    """C++: how the warp rows' threads split the loads of ``span`` positions of a channels-fast tile (Note [a warp
    per output row])."""
    return f"""constexpr int VL = NV < 4 ? NV : 4, PL = 32 / VL, VCH = NV / VL, PCH = ({span} + PL - 1) / PL;
constexpr int PER = (PCH * VCH * 32 + NT - 1) / NT;  // loads per thread, all in flight before the first store"""


def _tile_loads(span: str, before: str, indent: str) -> str:
    """C++: every load of the tile's ``span`` positions into ``xv``, from input position l0 ``before`` - PAD on
    (zero outside the input), all issued before any is used."""
    return "\n".join(indent + line for line in f"""#pragma unroll
for (int t = 0; t < PER; ++t) {{
  const int e = threadIdx.x + t * NT, ln = e & 31, ch = e >> 5;
  const int v = (ch % VCH) * VL + ln / PL, j = (ch / VCH) * PL + ln % PL;
  const int c = c0 + v * VEC;
  const long long l = (long long)l0{before} - PAD + j;
  if (ch < PCH * VCH && j < {span} && c < C && l >= 0 && l < LIN) {{
    xv[t] = ldp<T, VEC>(x + n * XS0 + c + l * XS2);
  }} else {{
#pragma unroll
    for (int u = 0; u < VEC; ++u) xv[t].v[u] = from_f<T>(0.f);
  }}
}}""".split("\n")).replace(indent + "#pragma", "#pragma")


def _block_origin(first: str, per_block: str) -> str:
    """C++ after the tile's ``s``: the weights' ``ws``, the block's first position unit ``first`` (``per_block`` of
    them per block) and channel ``c0`` (Note [channel tiles first]), ``n``, lane and warp, and the loads' ``xv``."""
    return f"""  __shared__ float ws[TC][K + 1];  // the block's weights (and bias), read once from global memory
  // Note [channel tiles first]
  const int {first} = (CFIRST ? blockIdx.y : blockIdx.x) * {per_block}, c0 = (CFIRST ? blockIdx.x : blockIdx.y) * TC;
  const long long n = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  Pack<T, VEC> xv[PER];  // a warp's load: VL vectors at each of PL positions"""


def _block_weights(has_bias: bool) -> str:
    """C++: the block's channels' weights and bias into ``ws``, read once from global memory."""
    return f"""  for (int e = threadIdx.x; e < TC * (K + 1); e += NT) {{
    const int i = e / (K + 1), q = e % (K + 1), c = c0 + i;
    ws[i][q] = c >= C ? 0.f : q < K ? to_f(w[(long long)c * K + q]) : {"to_f(b[c])" if has_bias else "0.f"};
  }}"""


def _rows_kernel(vec: int, rs: int, steps: int, has_bias: bool) -> str:
    """Note [a warp per output row]; ``steps`` position tiles per block, each tile's loads in flight while the one
    before it computes (Note [the next tile's loads in flight])."""
    return f"""
constexpr int VEC = {vec}, RS = {rs}, NW = NT / 32, RL = TL / 32, NV = TC / VEC, STEPS = {steps};
{_load_layout("HALO")}

// y[n, c, l] = bias[c] + sum_k w[c, 0, k] * x[n, c, l - PAD + k] (zero outside the input), fp32, k ascending.
extern "C" __global__ __launch_bounds__(NT) void dwconv1d_rows(PARAMS) {{
  __shared__ float s[TC][RS];  // channel rows of the input tile with its halo; RS odd (see the Note)
{_block_origin("lt0", "STEPS")}
  auto load = [&](int l0) {{
{_tile_loads("HALO", "", "    ")}
  }};
  load(lt0 * TL);  // the tile's loads first: the weights' below wait for their data before storing it
{_block_weights(has_bias)}
  for (int step = 0; step < STEPS; ++step) {{
    const int l0 = (lt0 + step) * TL;
    if (l0 >= LOUT) break;  // block-uniform
    if (step > 0) __syncthreads();  // every warp is done with the previous tile's rows
#pragma unroll
    for (int t = 0; t < PER; ++t) {{
      const int e = threadIdx.x + t * NT, ln = e & 31, ch = e >> 5;
      const int v = (ch % VCH) * VL + ln / PL, j = (ch / VCH) * PL + ln % PL;
      if (ch < PCH * VCH && j < HALO) {{
#pragma unroll
        for (int u = 0; u < VEC; ++u) s[v * VEC + u][j] = to_f(xv[t].v[u]);
      }}
    }}
    __syncthreads();
    if (step + 1 < STEPS && l0 + TL < LOUT) load(l0 + TL);  // in flight while this tile computes
    for (int i = warp; i < TC && c0 + i < C; i += NW) {{  // warp-uniform
      const int c = c0 + i;
      float wr[K];
#pragma unroll
      for (int q = 0; q < K; ++q) wr[q] = ws[i][q];
      const float bias = ws[i][K];
      const float* sr = s[i] + lane;
      TO* yr = y + n * YS0 + (long long)c * YS1 + l0 + lane;
      const int left = LOUT - l0 - lane;  // output r of this lane is below LOUT when r * 32 < left
#pragma unroll
      for (int r = 0; r < RL; ++r) {{
        if (r * 32 < left) {{
          float acc = bias;
#pragma unroll
          for (int q = 0; q < K; ++q) acc = fmaf(wr[q], sr[r * 32 + q], acc);
          yr[r * 32] = from_f<TO>(acc);
        }}
      }}
    }}
  }}
}}
"""
