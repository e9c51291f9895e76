"""Depthwise 1-D convolution: ``aten.convolution`` with ``groups == C``, a [C, 1, K] weight, unit stride and
dilation, any padding.

Qwen 3.5's linear-attention layers run one over their 8192 q/k/v channels and the 2048 prefill tokens (kernel 4,
padding 3, then the first L outputs are kept: a causal conv1d) when the fused causal-conv kernel is not installed.
ATen runs it with a generic depthwise kernel: 178 us per call for [1, 8192, 2048] bf16 in Inductor's graph on the
H200 (benchmarks/results/h200/kernels_qwen35_moe_inductor.txt), where the bytes allow 16 us. The input is often a
transposed view ([B, L, C] in memory), so the op is a transpose as well as a convolution.

Seven strategies. The first four compute a tile of TL positions x TC channels of one sample per block, with fp32 sums
over k in ascending order, rounded once; their device code and the Notes named below for them (and Note [vector loads
of a channels-fast input], Note [channel tiles first], Note [the next tile's loads in flight]) are in conv_kernels.py.
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
  session (21.6 us, 73% of the copy bandwidth, in ops run W) until the fifty-first.
- ``lines`` (16-bit channels-fast input, contiguous output; Note [whole lines, 8 x 8 blocks turned in registers],
  conv_lines.py): resident blocks walk tiles of 64 channels over bands of 128 outputs (any multiple of 8 from 64 to
  256; an action goes to the band balanced over the grid), their windows of whole lines copied ahead by ``cp.async``,
  and turn 8 x 8 blocks in registers into aligned 16-byte output vectors, every phase a constant (or 8 x 4 blocks into
  8-byte vectors, ``vo`` 4). The root of Qwen's layout since the fifty-first session; first run on a GPU (an H100, 93-95%
  of its copy bandwidth) in the fifty-fourth.

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
from . import conv_bands, conv_lines
from .conv_flat import FLAT_KERNEL, FLAT_PIECES, FLAT_PIPE_KERNEL
from .conv_kernels import chunks_kernel, rows_kernel, rows_pairs_kernel, tile_kernel, window_kernel
from .conv_shared import blocks_per_sm, contiguous_output, weights_bytes
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
    if strategy == "lines":  # Note [whole lines, 8 x 8 blocks turned in registers]
        return conv_lines.defaults(card)
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
    """Whole lines turned in registers (Note [whole lines, 8 x 8 blocks turned in registers]) where the input is
    16-bit, channels-fast and aligned for 16-byte loads and the output contiguous (Qwen's layout: 19.8-20.1 us against
    the bands' 21.8 in the fifty-first session's probe), else channel rows over bands of positions (Note [channel rows
    over a band of positions]) where the input is channels-fast and aligned for 16-byte loads and the output
    contiguous, else a block's rows as one
    flat run (Note [a block's channel rows as one flat run]) where that is valid, else warp rows with two positions per
    lane (Note [two positions per lane]) where the output is positions-fast, else the default tile, with vector loads
    where they are allowed (Note [vector loads of a channels-fast input]). On the H200 (twenty-fourth session,
    probe_session24_conv_bands*.json, each line one run) Qwen's conv ran 22.0-22.9 us over bands against 24.9-25.1 us
    in flat runs, the root since the twenty-third session (24.9 us against 29.5 for the pairs' rows of 256 positions x
    16 channels, the root since the tenth session; 29.9 us then against 33.9 for the ninth session's warp rows; in the
    eighth session the vector tile ran 39.0 us against the scalar tile's 52.3 and the best register window's 40.3)."""
    for strategy in ("lines", "bands", "flat"):
        if valid(card, p := defaults(card, strategy)):
            return p
    return _widest(card, defaults(card, "pairs")) or _widest(card, defaults(card)) or defaults(card)


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    """The root, then the bands, the flat runs, the warp rows in pairs, the aligned chunks, the warp rows with a lane per
    position, the vector tile, a register window and the scalar tile where they are valid and differ from it."""
    out = [root_params(card)]
    chunks, flat, bands = defaults(card, "chunks"), defaults(card, "flat"), defaults(card, "bands")
    for p in (bands if valid(card, bands) else None, flat if valid(card, flat) else None, _widest(card, defaults(card, "pairs")),
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
    if p.get("strategy") == "lines":
        return conv_lines.valid(card, p)
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
        acts = conv_bands.actions(card, p) + [("strategy bands -> flat", defaults(card, "flat")),
                                              ("strategy bands -> lines", defaults(card, "lines"))]
        return filter_actions(card, p, acts, valid)
    if p["strategy"] == "lines":  # Note [whole lines, 8 x 8 blocks turned in registers]
        acts = conv_lines.actions(card, p) + [("strategy lines -> bands", defaults(card, "bands"))]
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
    if p["strategy"] == "lines":
        return conv_lines.generate(card, p)
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
    kernel = window_kernel(vec, p["r"], has_bias) if p["strategy"] == "window" else \
        chunks_kernel(vec, bool(p.get("direct")), bool(p.get("rowfast")), has_bias) if p["strategy"] == "chunks" else \
        rows_pairs_kernel(vec, _rows_stride(p, k), has_bias) if p.get("lp") == 2 else \
        rows_kernel(vec, _rows_stride(p, k), p.get("steps", 1), has_bias) if p["strategy"] == "rows" else \
        tile_kernel(vec, has_bias)
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
