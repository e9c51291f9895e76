"""Normalisations: layer norm and RMS norm (rows) and inference batch norm (per-channel affine). Group norm, a
split reduction, is its own family (group_norm.py).

Strategies per op (``params["strategy"]``):

* layer_norm / rms_norm: ``group`` (TPR <= 32 threads per row) or ``block`` (one block per row); the row cached in
  registers (``cache=reg``: one DRAM read) or re-read (``cache=none``: 3 reads for layer norm, 2 for RMS norm, the
  later ones mostly from L1/L2). Mean and variance are two-pass (mean first, then sum of squared deviations).
  ``walk`` (Note [row norms walked with the next rows' loads in flight]): either layout, cached in registers, walked
  by ``bps`` blocks per SM, each loading its next rows while it reduces and stores these; an action's, not a seed.
* batch_norm: ``flat`` (channel parameters looked up per vector), ``plane`` (NCHW: one block row per (n, c) plane,
  parameters once per block), ``hoist`` (channels-last: a grid-stride loop whose stride is a multiple of C, so each
  thread keeps the same channels and loads their parameters once).

``kforge.norm`` (norm_fusion.py: a layer/rms norm with the pointwise ops after it) uses the row kernels: every
normalised element, rounded to the norm's output dtype as eager stores it, goes through the epilogue's expression
(fused.py's code and rounding) with the extra inputs' packs at the same column before the store. A group with a
prologue (Note [a norm takes the residual add before it]) loads its row through fused.row_loader's ``ldx``, which
computes the norm's input from the prologue's inputs, and stores that value once as output 1. On the H200
(sixth and seventh sessions) MMDiT's adaLN norm [1, 4096, 1536] bf16 runs 13.8 us against Inductor's 22.5 us.
"""
from __future__ import annotations

from math import gcd
from typing import Any

from ...cards import OperatorCard
from ...contract import NUM_SMS, Candidate
from ...expression import NORM_OP
from .common import (FLOAT_DTYPES, ITEMSIZE, PREAMBLE, REG_CACHE_BLOCK, REG_CACHE_THREAD, ROW_SETUP, SMS, align_of,
                     best_vec, card_tensors, cdiv, clamp, consts, dtype_or, eps_arg, filter_actions, flat_contiguous,
                     input_spec, knob, launch, main_input, make_candidate, output_spec, param_ok, plan_params,
                     pow2_ceil, row_fill, row_loop, row_offset, rows_aligned, same_layout, scale_knob, typedefs, vec_ok,
                     walk_head)
from .epilogue import epilogue_function, epilogue_ok, extras, norm_input, prologue_inputs, prologue_ok
from .fused import row_loader

OPS = {"aten.native_layer_norm.default": "layer_norm", "aten._fused_rms_norm.default": "rms_norm",
       "aten._native_batch_norm_legit_no_training.default": "batch_norm"}
STRATEGIES = {"layer_norm": ("group", "block"), "rms_norm": ("group", "block"),
              "batch_norm": ("flat", "plane", "hoist")}
# reached by an action only, never a seed (Note [row norms walked with the next rows' loads in flight], its last part)
ACTION_ONLY = {"layer_norm": ("walk",), "rms_norm": ("walk",)}
SM_THREADS = 2048  # threads an sm_90 SM holds: a walk's blocks per SM (bps) times its block stay within it
RMS_DEFAULT_EPS = 1.1920928955078125e-07  # torch.finfo(float32).eps: _fused_rms_norm's eps=None


def _kind(card: OperatorCard) -> str:
    return OPS[str(card.scalars["norm"])] if card.op == NORM_OP else OPS[card.op]


def matches(card: OperatorCard) -> bool:
    kind = OPS.get(str(card.scalars.get("norm"))) if card.op == NORM_OP else OPS.get(card.op)
    if kind is None or not card.inputs or (card.op == NORM_OP and (kind not in ("layer_norm", "rms_norm")
                                                                   or not prologue_ok(card) or not epilogue_ok(card))):
        return False
    x, y = norm_input(card), output_spec(card, 0)
    if y is None or x.dtype not in FLOAT_DTYPES or y.dtype not in FLOAT_DTYPES or x.numel == 0:
        return False
    if kind in ("layer_norm", "rms_norm"):
        rows, cols = card.sizes["rows"], card.sizes["cols"]
        stats = [output_spec(card, i) for i in (1, 2)] if card.op != NORM_OP else []  # a group has none
        return (x.is_contiguous() and y.is_contiguous() and param_ok(card, "weight", cols)
                and param_ok(card, "bias", cols)
                and all(s is None or (s.numel == rows and flat_contiguous(s) and s.dtype in FLOAT_DTYPES)
                        for s in stats))
    c = x.shape[1] if len(x.shape) >= 2 else 0  # batch norm
    extra = [output_spec(card, i) for i in (1, 2)]
    return (c > 0 and same_layout(x, y) and (x.is_contiguous() or x.is_channels_last())
            and all(param_ok(card, n, c) for n in ("weight", "bias"))
            and all(input_spec(card, n) is not None and param_ok(card, n, c) for n in ("running_mean", "running_var"))
            and all(s is None or s.numel == 0 for s in extra))


def _rows_aligned(card: OperatorCard, vec: int) -> bool:
    return rows_aligned(vec, output_spec(card, 0), [t.spec for t in extras(card) + prologue_inputs(card)])


# ---------------------------------------------------------------------------------------------------------------------
# parameters


def defaults(card: OperatorCard, strategy: str) -> dict[str, Any]:
    kind = _kind(card)
    if kind in ("layer_norm", "rms_norm") and strategy == "walk":  # the root's layout, walked
        lay = defaults(card, "group" if _short_rows(card) else "block")
        return walked(lay, lay.get("tpr", lay["block"]))
    if kind in ("layer_norm", "rms_norm"):
        cols = card.sizes["cols"]
        vec = best_vec(cols, card_tensors(card))
        while vec > 1 and not _rows_aligned(card, vec):
            vec //= 2
        if strategy == "group":
            tpr = clamp(pow2_ceil(cdiv(cols, vec * 4)), 1, 32)
            p = {"strategy": "group", "vec": vec, "tpr": tpr, "block": 128, "cache": "reg"}
        else:
            block = clamp(pow2_ceil(cdiv(cols, vec * 4)), 64, 1024)
            p = {"strategy": "block", "vec": vec, "block": block, "cache": "reg"}
        return p if valid(card, p) else {**p, "cache": "none"}
    if kind == "batch_norm":
        x = main_input(card)
        inner = x.shape[1] if _channels_last(card) else _hw(card)
        vec = best_vec(gcd(inner, x.numel), card_tensors(card))
        p = {"strategy": strategy, "vec": vec, "block": 256, "unroll": 4}
        if strategy == "plane":
            p.update(block=clamp(pow2_ceil(cdiv(_hw(card), vec * 4)), 32, 256), unroll=1)
        return p


def walked(p: dict[str, Any], tpr: int) -> dict[str, Any]:
    """Note [row norms walked with the next rows' loads in flight]: layout ``p`` (its vector and block, ``tpr``
    threads a row) walked by as many blocks per SM as the threads allow (16 at most, a power of two)."""
    return _bps_that_fit({"strategy": "walk", "vec": p["vec"], "tpr": tpr, "block": p["block"], "bps": 16,
                          "cache": "reg"})


def _short_rows(card: OperatorCard) -> bool:
    """Rows of at most 2 KB: threads of a group (``group``) rather than a block (``block``) take a row."""
    return card.sizes["cols"] * ITEMSIZE[norm_input(card).dtype] <= 2048


def root_params(card: OperatorCard) -> dict[str, Any]:
    kind = _kind(card)
    if kind in ("layer_norm", "rms_norm"):
        order = ("group", "block") if _short_rows(card) else ("block", "group")
    else:
        big_planes = _hw(card) >= 1024
        order = ("hoist", "flat") if _channels_last(card) else (("plane", "flat") if big_planes else ("flat",))
    return next(p for s in order if valid(card, p := defaults(card, s)))


def seeds(card: OperatorCard) -> list[dict[str, Any]]:
    root = root_params(card)
    kind = _kind(card)
    return [root] + [p for s in STRATEGIES[kind] if s != root["strategy"] and valid(card, p := defaults(card, s))]


def action_only(card: OperatorCard) -> list[dict[str, Any]]:
    """The defaults of the strategies the search reaches by an action only (``ACTION_ONLY``), where valid: what no
    seed shows, for the tests that run every strategy."""
    return [p for s in ACTION_ONLY.get(_kind(card), ()) if valid(card, p := defaults(card, s))]


def _hw(card: OperatorCard) -> int:
    x = main_input(card)
    hw = 1
    for s in x.shape[2:]:
        hw *= s
    return hw


def _channels_last(card: OperatorCard) -> bool:
    x = main_input(card)
    return x.is_channels_last() and not x.is_contiguous()


def valid(card: OperatorCard, p: dict[str, Any]) -> bool:
    kind, s, vec, block = _kind(card), p.get("strategy"), p.get("vec", 0), p.get("block", 0)
    if s not in STRATEGIES[kind] + ACTION_ONLY.get(kind, ()) or block % 32 or not 32 <= block <= 1024:
        return False
    isz = ITEMSIZE[norm_input(card).dtype]
    if kind in ("layer_norm", "rms_norm"):
        cols = card.sizes["cols"]
        tpr = p.get("tpr", 0) if s != "block" else block
        per_row = s == "block" or (s == "walk" and tpr == block)  # a block a row
        if not vec_ok(vec, cols, card_tensors(card)) or (not per_row and tpr not in (1, 2, 4, 8, 16, 32)):
            return False
        if not _rows_aligned(card, vec):
            return False  # each extra input's row must start on a whole pack
        if per_row and block > max(64, pow2_ceil(cdiv(cols, vec))):
            return False
        # a walk also holds the next rows' packs: of its input, or of each of its prologue's inputs
        ahead = (sum(ITEMSIZE[t.spec.dtype] for t in prologue_inputs(card)) or isz) if s == "walk" else 0
        per_thread = cdiv(cols, tpr * vec) * vec * (isz + ahead)
        fits = per_thread <= REG_CACHE_THREAD and per_thread * block <= REG_CACHE_BLOCK
        if s == "walk":  # registers only: the prefetch lands there (Note [row norms walked ...])
            return (p.get("cache") == "reg" and fits and p.get("bps") in (1, 2, 4, 8, 16, 32)
                    and block * p["bps"] <= SM_THREADS)
        return p.get("cache") == "none" or (p.get("cache") == "reg" and fits)
    x, cl = main_input(card), _channels_last(card)  # batch norm
    inner = x.shape[1] if cl else _hw(card)
    if not vec_ok(vec, inner, card_tensors(card)) or p.get("unroll") not in (1, 2, 4, 8):
        return False
    if s == "plane":
        return not cl and cdiv(_hw(card), block * vec * p["unroll"]) <= 65535
    if s == "hoist":
        return cl
    return cdiv(x.numel // vec, block * p["unroll"]) < 2**31


def actions(card: OperatorCard, p: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    kind = _kind(card)
    acts = [(f"strategy {p['strategy']} -> {s}", defaults(card, s)) for s in STRATEGIES[kind] if s != p["strategy"]]
    a_row = p["strategy"] == "walk" and p["tpr"] == p["block"]  # a walked block a row keeps its tpr its block
    for name in ("vec", "block", "tpr", "unroll", "bps"):
        scaled = scale_knob(p, name)
        acts += [(label, _walk_fits(q, a_row)) for label, q in scaled] if name == "block" else scaled
    if kind in ("layer_norm", "rms_norm") and (p["strategy"] == "block" or a_row):  # Note [a block that fits the row]
        label, q = knob(p, "block", fit_block(card.sizes["cols"], p["vec"]))
        acts.append((label, _walk_fits(q, a_row)))
    if "cache" in p:
        acts.append(knob(p, "cache", "none" if p["cache"] == "reg" else "reg"))
    if p["strategy"] in ("group", "block") and p.get("cache") == "reg":  # this very layout, walked
        acts.append((f"strategy {p['strategy']} -> walk, same layout",
                     walked(p, p["tpr"] if p["strategy"] == "group" else p["block"])))
    return filter_actions(card, p, acts, valid)


def _walk_fits(p: dict[str, Any], a_row: bool) -> dict[str, Any]:
    """``p`` after its block changed: a walked block a row stays a row a block, and a walk keeps the blocks per SM
    that its threads allow."""
    if p["strategy"] != "walk":
        return p
    return _bps_that_fit(p) | ({"tpr": p["block"]} if a_row else {})


def _bps_that_fit(p: dict[str, Any]) -> dict[str, Any]:
    """Walk ``p`` with its blocks per SM halved until they fit the SM's threads."""
    bps = p["bps"]
    while bps > 1 and p["block"] * bps > SM_THREADS:
        bps //= 2
    return {**p, "bps": bps}


def fit_block(cols: int, vec: int) -> int:
    """Note [a block that fits the row]
    Halving and doubling the block only reach powers of two, and a power of two rarely divides a row into whole
    packs: MMDiT's and Gemma's 1536-wide rows take 192 threads of 8-element packs (or 384 of 4), one pack each, where
    256 threads leave a quarter idle and 128 need a second, partial pass. This is the least multiple of 32 threads
    that covers the row in one pass of ``vec``-element packs (1024 at most). On the H200 (ninth session,
    probe_session9_adaln_fit.json) it tied the best residual adaLN layout at [1, 4096, 1536] (16.6 us) and lost on
    the plain adaLN norm (13.0 against the root's 11.8 us): an action, not a root."""
    return min(1024, cdiv(cdiv(cols, vec), 32) * 32)


# ---------------------------------------------------------------------------------------------------------------------
# code generation


def _row_norm(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    rms = _kind(card) == "rms_norm"
    x = norm_input(card)
    cols, block, vec, cache = card.sizes["cols"], p["block"], p["vec"], p["cache"]
    tpr = block if p["strategy"] == "block" else p["tpr"]
    walk = p["strategy"] == "walk"
    has = {n: input_spec(card, n) is not None for n in ("weight", "bias")}
    mean_i, rstd_i = (9, 1) if rms else (1, 2)  # rms_norm has no mean output (index 9 never exists)
    group = card.op == NORM_OP  # a group's outputs are its expression's (and its prologue's), never the statistics
    has_mean = output_spec(card, mean_i) is not None and not group
    has_rstd = output_spec(card, rstd_i) is not None and not group
    head = prologue_inputs(card)  # Note [a norm takes the residual add before it] in norm_fusion.py
    x_param = [(f"in:{t.name}", f"const TP{t.name[1:]}* __restrict__ {t.name}", "") for t in head] or \
        [("in:input", "const T* __restrict__ x", "")]
    outs = [("out:1", "T* __restrict__ r", "")] if head else \
        ([(f"out:{mean_i}", "TM* __restrict__ mean_out", "")] if has_mean else []) + \
        ([(f"out:{rstd_i}", "TR* __restrict__ rstd_out", "")] if has_rstd else [])
    params, args = plan_params(card, x_param + [
        ("in:weight", "const TW* __restrict__ w", "weight"), ("in:bias", "const TB* __restrict__ b", "bias"),
        ("out:0", "TO* __restrict__ y", "")] + outs + [
        ("i64:rows", "long long rows", ""), (eps_arg(card, RMS_DEFAULT_EPS), "float eps", "")])
    ep_in = extras(card)
    if ep_in:  # the epilogue's inputs, after the norm's own arguments
        params += "".join(f", const TX{t.name[1:]}* __restrict__ {t.name}" for t in ep_in)
        args += [f"in:{t.name}" for t in ep_in]
    src = "reg" if cache == "reg" else "global"
    ld = "ldx" if head else "ldp"  # a prologue's value, computed from its inputs as each pack is loaded
    sq = "d * d" if not rms else "v * v"
    # the prologue's value is written once: from the cache, or in the first pass over global memory
    keep = " stp<T, VEC>(rr + col, p);" if head else ""
    body_sum = (keep if cache != "reg" else "") + \
        "\n#pragma unroll\n for (int j = 0; j < VEC; ++j) s += to_f(p.v[j]);"
    body_sq = (keep if cache != "reg" and rms else "") + \
        f"\n#pragma unroll\n for (int j = 0; j < VEC; ++j) {{ const float v = to_f(p.v[j]), d = v - mean; q += {sq}; }}"
    wload = ("const Pack<TW, VEC> wp = ldp<TW, VEC>(w + col);" if has["weight"] else "") + \
            ("const Pack<TB, VEC> bp = ldp<TB, VEC>(b + col);" if has["bias"] else "")
    expr = "(to_f(p.v[j]) - mean) * rstd" + (" * to_f(wp.v[j])" if has["weight"] else "") + \
           (" + to_f(bp.v[j])" if has["bias"] else "")
    if group:  # Note [fused rounding]: the norm's output is stored in T before the epilogue reads it
        k = int(card.scalars["norm_out"])
        wload += "".join(f"const Pack<TX{i}, VEC> q{i} = ldp<TX{i}, VEC>(er{i} + col);"
                         for i in (t.name[1:] for t in ep_in))
        operands = [f"round_to<T>({expr})" if i == k else f"to_f(q{i}.v[j])" for i in range(len(ep_in) + 1)]
        expr = f"ep({', '.join(operands)})"
    body_out = f"{wload} PO o;\n#pragma unroll\n for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>({expr});\n stp<TO, VEC>(yr + col, o);"
    mean_stats = "const float mean = 0.f;" if rms else \
        f"float s = 0.f;{row_loop(src, body_sum, ld)}\n" \
        "  const float mean = group_all<NT, TPR>(s, Sum(), red) * (1.f / COLS);"
    types = typedefs(T=x.dtype, TO=output_spec(card, 0).dtype, TW=dtype_or(card, "weight", x.dtype),
                     TB=dtype_or(card, "bias", x.dtype), TM=dtype_or(card, f"out{mean_i}", "float32") if not group
                     else "float32", TR=dtype_or(card, f"out{rstd_i}", "float32") if not group else "float32",
                     **{f"TX{t.name[1:]}": t.spec.dtype for t in ep_in}) + epilogue_function(card)
    setup = ROW_SETUP
    if head:
        types += "\n" + row_loader(str(card.scalars["prologue"]), [t.spec for t in head], x, arg="p", typ="TP")
        plain = "const T* xr = x + (ok ? row : 0) * (long long)COLS;"
        assert plain in setup, "ROW_SETUP no longer declares xr as the prologue expects"
        setup = setup.replace(plain, "const XRow xr = x_row(" + ", ".join(t.name for t in head) +
                              ", (ok ? row : 0));\n  T* rr = r + row * (long long)COLS;")
    setup += "".join(
        f"\n  const TX{t.name[1:]}* er{t.name[1:]} = {t.name} + (ok ? {row_offset(output_spec(card, 0), t.spec)} : 0);"
        for t in ep_in)
    fill = "P c[NIT];" + row_fill("reg", ld) + (row_loop("reg", keep) if head else "") if cache == "reg" else ""
    if walk:  # Note [row norms walked with the next rows' loads in flight]: the walk fills the cache
        first = "(long long)blockIdx.x * RPB"
        assert first in setup, "ROW_SETUP no longer numbers the rows as the walk expects"
        # every read is of the cache, so the row's pointer (xr) is left out
        setup = "\n".join(line for line in setup.replace(first, "g * RPB").split("\n") if " xr = " not in line)
        fill = row_loop("reg", keep) if head else ""
    body = f"""{setup}
  {fill}
  {mean_stats}
  float q = 0.f;{row_loop(src, body_sq, ld)}
  const float rstd = rsqrtf(group_all<NT, TPR>(q, Sum(), red) * (1.f / COLS) + eps);{row_loop(src, body_out, ld)}
  if (ok && lane == 0) {{{" mean_out[row] = from_f<TM>(mean);" if has_mean else ""}{" rstd_out[row] = from_f<TR>(rstd);" if has_rstd else ""} }}"""
    kernel = "norm_walk" if walk else "norm_rows"
    if walk:
        regs, loads, value = _next_rows(head)
        body = f"""
  const long long ncl = gridDim.x, items = (rows + RPB - 1) / RPB;
  P c[NIT];{walk_head("g", "items", "blockIdx.x", loads, "true", "c[i]", regs, value)}{body}
  }}"""
    source = f"""{PREAMBLE}
{types}
{consts(COLS=cols, VEC=vec, TPR=tpr, NT=block, RPB=block // tpr, NIT=cdiv(cols, tpr * vec))}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;{_prologue_of_packs(head) if walk and head else ""}

extern "C" __global__ __launch_bounds__(NT) void {kernel}({params}) {{
  __shared__ float red[32];{body}
}}
"""
    rpb = block // tpr
    desc = f"{_kind(card)} {p['strategy']} " + " ".join(f"{k}={v}" for k, v in sorted(p.items()) if k != "strategy")
    if head:
        desc = f"{card.scalars['prologue']}, then " + desc
    if group:
        desc += f" then {card.scalars['expr']}"
    grid = f"min(cdiv(rows, {rpb}), {NUM_SMS} * {p['bps']})" if walk else f"cdiv(rows, {rpb})"
    return make_candidate(source, [launch(kernel, grid, block, args)], desc, p, align_of(vec, card_tensors(card)))


# Note [row norms walked with the next rows' loads in flight]
# A row norm loads its rows, reduces them, then stores them, and a block does nothing else: in a grid of a block per
# row (or per RPB rows of TPR threads), a wave of resident blocks first all load, then all reduce and store. MMDiT's
# adaLN norm [1, 4096, 1536] bf16 runs 4,096 rows as about two such waves (2,112 resident blocks of 128 threads) at
# about half of the copy bandwidth (docs/STATUS.md, the thirtieth session's Next 4). ``walk`` takes the same layout and
# launches ``bps`` blocks per SM (``num_sms`` times that, at most one per row group), each walking the row groups
# blockIdx.x, blockIdx.x + gridDim.x, ... (common.walk_head): the next group's packs are loaded into registers (nx)
# before this group's statistics, barriers and stores, so a block's reads and writes overlap. A thread holds its row's
# packs twice (``valid`` counts both against the register budget), so only ``cache=reg``. A group with a prologue (Note
# [a norm takes the residual add before it]) prefetches the packs of each of the prologue's inputs and computes the
# norm's input from them (``prologue_of``, rounded as ldx rounds) as they move into the cache at the next step, once
# they have landed (computed as they were loaded, the prefetch would wait for them there); then it writes that value
# as output 1, as the other strategies do. Every block runs the same number of steps (the walk depends on blockIdx.x
# only), so the block-wide reductions stay whole; no step waits for another block, so the walk is correct whatever the
# number of resident blocks.
#
# Measured on an H100 (fifty-eighth session, benchmarks/plans/norm_walk.sh;
# benchmarks/results/h100/*session58_norm_walk*), each case's root beside its walks in one run, by events: the best walk
# ran 13.2 us against the root's 12.8 (the adaLN norm [1,4096,1536] bf16), 18.7 against 18.4 (the same with the residual
# add), 14.6 against 14.7 (layer norm [4096,2048] bf16) and 13.4 against 13.7 (rms norm [4096,2048] bf16); 2 blocks an
# SM always lost most, 8-16 did best. The ops rows' 25-iteration searches, the walk a seed, kept a ``block`` every time
# (the rms norm's 13.0 us against its best walk's 13.3). So the walk is no seed: it is reached by an action only
# (``ACTION_ONLY``, ``strategy group|block -> walk, same layout``, one step from any layout cached in registers), and
# keeps the verifier's cases.


def _next_rows(head: list) -> tuple[str, str, str]:
    """The walk's registers for the next rows (``nx``: packs of the input, or ``nx<k>``: of each prologue input
    ``p<k>``), the C++ that loads row group ``ng``'s packs into them, and pack i's value of the norm's input."""
    if not head:
        return "P nx[NIT];", _next_loads("const T* xn = x + nr * (long long)COLS;", "nx[i] = ldp<T, VEC>(xn + col);"), \
            "nx[i]"
    ks = [t.name[1:] for t in head]
    regs = " ".join(f"Pack<TP{k}, VEC> nx{k}[NIT];" for k in ks)
    row = "const XRow xn = x_row(" + ", ".join(t.name for t in head) + ", nr);"
    loads = "{ const XAt a = xn + col; " + " ".join(f"nx{k}[i] = ldp<TP{k}, VEC>(a.p{k});" for k in ks) + " }"
    return regs, _next_loads(row, loads), "prologue_of(" + ", ".join(f"nx{k}[i]" for k in ks) + ")"


def _next_loads(row: str, load: str) -> str:
    return f"""{{
      const long long nr = ng * RPB + threadIdx.x / TPR;
      if (nr < rows) {{
        {row}
#pragma unroll
        for (int i = 0; i < NIT; ++i) {{
          const int col = (i * TPR + threadIdx.x % TPR) * VEC;
          if (col < COLS) {load}
        }}
      }}
    }}"""


def _prologue_of_packs(head: list) -> str:
    """``prologue_of``: a pack of the norm's input from packs of the prologue's inputs, computed and rounded as ldx
    (fused.row_loader) computes it from memory."""
    ks = [t.name[1:] for t in head]
    params = ", ".join(f"const Pack<TP{k}, VEC>& q{k}" for k in ks)
    args = ", ".join(f"to_f(q{k}.v[j])" for k in ks)
    return f"""
__device__ __forceinline__ P prologue_of({params}) {{
  P r;
#pragma unroll
  for (int j = 0; j < VEC; ++j) r.v[j] = from_f<T>(fx({args}));
  return r;
}}"""


def _batch_norm(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    x = main_input(card)
    s, vec, block, unroll = p["strategy"], p["vec"], p["block"], p["unroll"]
    cl, c, hw = _channels_last(card), x.shape[1], _hw(card)
    has_w, has_b = input_spec(card, "weight") is not None, input_spec(card, "bias") is not None
    params, args = plan_params(card, [
        ("in:input", "const T* __restrict__ x", ""), ("in:weight", "const TW* __restrict__ w", "weight"),
        ("in:bias", "const TW* __restrict__ b", "bias"), ("in:running_mean", "const TS* __restrict__ rm", ""),
        ("in:running_var", "const TS* __restrict__ rv", ""), ("out:0", "TO* __restrict__ y", ""),
        (eps_arg(card, 1e-5), "float eps", "")])
    wdt = dtype_or(card, "weight", dtype_or(card, "bias", "float32"))
    # ATen: ((x - mean) * invstd) * weight + bias, in fp32.
    param = (f"__device__ __forceinline__ float4 chan(const TW* w, const TW* b, const TS* rm, const TS* rv, int c, float eps) {{\n"
             f"  return make_float4(to_f(rm[c]), rsqrtf(to_f(rv[c]) + eps), {'to_f(w[c])' if has_w else '1.f'}, "
             f"{'to_f(b[c])' if has_b else '0.f'});\n}}\n"
             "__device__ __forceinline__ float apply(float v, float4 q) { return (v - q.x) * q.y * q.z + q.w; }")
    wb = f"{'w' if has_w else '(const TW*)nullptr'}, {'b' if has_b else '(const TW*)nullptr'}"
    numel = x.numel
    grid_stride = 8 * SMS
    if s == "hoist":
        g0 = c // gcd(c, block * vec)
        grid = g0 * max(1, min(cdiv(grid_stride, g0), cdiv(cdiv(numel, vec), block * g0)))
    elif s == "plane":
        grid = (x.shape[0] * c, cdiv(hw, block * vec * unroll))
    else:
        grid = cdiv(cdiv(numel, vec), block * unroll)
    body = {
        "flat": f"""
  const I base = (I)blockIdx.x * NT * UNROLL + threadIdx.x;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {{
    const I e = (base + (I)u * NT) * VEC;
    if (e < NUMEL) {{
      const P p = ldp<T, VEC>(x + e); PO o;
      const float4 q0 = CL ? make_float4(0.f, 0.f, 0.f, 0.f) : chan({wb}, rm, rv, (int)((e / HW) % C), eps);
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>(apply(to_f(p.v[j]), CL ? chan({wb}, rm, rv, (int)((e + j) % C), eps) : q0));
      stp<TO, VEC>(y + e, o);
    }}
  }}""",
        "plane": f"""
  const float4 q = chan({wb}, rm, rv, (int)(blockIdx.x % C), eps);
  const T* xp = x + (I)blockIdx.x * HW;
  TO* yp = y + (I)blockIdx.x * HW;
#pragma unroll
  for (int u = 0; u < UNROLL; ++u) {{
    const int e = ((blockIdx.y * UNROLL + u) * NT + threadIdx.x) * VEC;
    if (e < HW) {{
      const P p = ldp<T, VEC>(xp + e); PO o;
#pragma unroll
      for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>(apply(to_f(p.v[j]), q));
      stp<TO, VEC>(yp + e, o);
    }}
  }}""",
        "hoist": f"""
  // The stride is a multiple of C, so this thread's VEC channels never change.
  const I e0 = ((I)blockIdx.x * NT + threadIdx.x) * VEC;
  const int c0 = (int)(e0 % C);
  float4 q[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) q[j] = chan({wb}, rm, rv, c0 + j, eps);
#pragma unroll {unroll}
  for (I e = e0; e < NUMEL; e += (I)gridDim.x * NT * VEC) {{
    const P p = ldp<T, VEC>(x + e); PO o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) o.v[j] = from_f<TO>(apply(to_f(p.v[j]), q[j]));
    stp<TO, VEC>(y + e, o);
  }}"""}[s]
    source = f"""{PREAMBLE}
{typedefs(T=x.dtype, TO=output_spec(card, 0).dtype, TW=wdt, TS=dtype_or(card, "running_mean", "float32"))}
typedef {"long long" if numel > 2**31 - 1 else "int"} I;
{consts(NUMEL=numel, C=c, HW=hw, CL=int(cl), VEC=vec, NT=block, UNROLL=unroll)}
typedef Pack<T, VEC> P;
typedef Pack<TO, VEC> PO;
{param}

extern "C" __global__ __launch_bounds__(NT) void bn_apply({params}) {{{body}
}}
"""
    desc = "batch_norm " + " ".join(f"{k}={v}" for k, v in sorted(p.items())) + (" channels_last" if cl else "")
    return make_candidate(source, [launch("bn_apply", grid, block, args)], desc, p, align_of(vec, card_tensors(card)))


def generate(card: OperatorCard, p: dict[str, Any]) -> Candidate:
    if not valid(card, p):
        raise ValueError(f"{_kind(card)} params {p} are not valid for {card.op} sizes {card.sizes}")
    kind = _kind(card)
    if kind in ("layer_norm", "rms_norm"):
        return _row_norm(card, p)
    return _batch_norm(card, p)
