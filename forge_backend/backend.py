"""The Dynamo entry point: ``torch.compile(model, backend="kforge")``.

Flow: Dynamo graph -> ATen graph (``inner="eager"``: traced without functionalization, Note [the eager path keeps
in-place updates], AOTAutograd as the fallback; ``inner="inductor"``: Inductor's own trace) -> scan candidates ->
ask the kernel provider for verified kernels by signature key -> rewrite -> run the rest eagerly or through
Inductor.

Failure policy (Note [the user's model never breaks]): any exception inside kforge is logged once, naming the
operator it concerns, and the graph falls back to what PyTorch would do; with ``strict`` it is raised instead.
A bad option is always raised: that is the user's error, not kforge's. Dynamo's ``RestartAnalysis`` (raised under
the backend, e.g. when AOTAutograd wants a float scalar made a tensor) is not a failure: it is raised on, so Dynamo
analyses the frame again and compiles the graph it asks for, instead of kforge keeping plain PyTorch for good.
"""
from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import torch
import torch.fx
from torch._dynamo.utils import counters

from .capture import scan
from .cards import OperatorCard
from .config import KforgeConfig
from .conv_fold import fold_conv_bn, has_candidates, with_refresh
from .errors import BadOption
from .expression import FUSED_OP
from .inductor_gate import GateDecision, charged_bytes, decide, host_cost_us, inductor_reorders_layout
from .node_decompose import NotDecomposable, decompose_nodes
from .registry import REGISTRY, KernelImpl
from .rewrite import Replacement, apply
from .selection import is_candidate

log = logging.getLogger("kforge")


class KernelProvider(Protocol):
    """Returns verified kernels for the cards it can serve, keyed by signature key (may search on a miss)."""

    def kernels_for(self, cards: list[OperatorCard], cfg: KforgeConfig) -> dict[str, KernelImpl]: ...


@dataclass
class CompileReport:
    """What one graph compile did; handed to ``on_report`` callbacks and logged."""

    ops_seen: int = 0
    candidates: int = 0
    signatures: int = 0
    replaced: list[tuple[str, str, float | None]] = field(default_factory=list)  # (op, key, speedup)
    groups: int = 0  # groups among the candidates: "kforge.pointwise", "kforge.softmax", "kforge.norm" (fuse_* options)
    fused_overloads: set[str] = field(default_factory=set)  # the ATen overloads inside replaced softmax/norm groups
    folded: int = 0  # conv + batch norm chains folded (Note [a batch norm folded into its convolution], conv_fold.py)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    fallback: str | None = None
    seconds: float = 0.0
    cached: bool = False  # Inductor's cache served the compiled graph (no rewrite ran in this process)
    # inner="inductor": each node with a kernel that the gate judged, replaced or kept (Note [what replacing a node
    # costs inside Inductor]); a retry's report carries earlier attempts' decisions on overloads it decomposed
    gate: list[GateDecision] = field(default_factory=list)


def _needs_backward(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    if not torch.is_grad_enabled():
        return False
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    tensors += list(gm.parameters())
    return any(t.requires_grad for t in tensors)


def _run_inner(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cfg: KforgeConfig) -> Callable:
    """What PyTorch would do with this graph: Inductor, or the graph's own forward."""
    if cfg.inner == "inductor":
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, list(example_inputs))
    return gm.forward


def _boxed(fn: Callable) -> Callable:
    def run(args: list[Any]) -> Any:
        return fn(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _default_provider(cfg: KforgeConfig) -> KernelProvider:
    from .runtime.provider import default_provider

    return default_provider(cfg)


def make_backend(provider: KernelProvider | None = None,
                 on_report: Callable[[CompileReport], None] | None = None) -> Callable:
    """Build a backend function. ``provider`` defaults to the GPU runtime; tests pass a CPU provider."""

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Callable:
        mode = kwargs.pop("mode", None)
        options = dict(kwargs.pop("options", None) or {})
        options.update(kwargs)
        cfg = KforgeConfig.load(options)
        with torch._inductor.config.patch(_inductor_mode(mode, cfg)):
            return _compile(gm, example_inputs, cfg, provider, on_report)

    return backend


def _inductor_mode(mode: str | None, cfg: KforgeConfig) -> dict[str, Any]:
    """Note [torch.compile's mode]
    ``torch.compile(model, backend="kforge", mode=...)`` hands the mode to the backend. It names Inductor settings
    (``reduce-overhead``: CUDA graphs; ``max-autotune``: autotuned GEMM templates and CUDA graphs), so kforge
    applies them to every Inductor compile it makes: the graph with kforge's kernels in it, and the fallbacks. With
    ``inner="eager"`` nothing is compiled by Inductor, and the mode is ignored with a warning. An unknown mode is a
    ``BadOption`` that lists the valid ones."""
    from torch._inductor import list_mode_options

    if mode in (None, "default"):
        return {}
    modes = list_mode_options()
    if mode not in modes:
        raise BadOption(f"mode={mode!r} is not a torch.compile mode; valid: {', '.join(sorted(modes))}")
    if cfg.inner != "inductor":
        log.warning("kforge: mode=%r sets Inductor options, but inner=%r compiles nothing with Inductor; ignored",
                    mode, cfg.inner)
        return {}
    return dict(modes[mode])


def _compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cfg: KforgeConfig,
             provider: KernelProvider | None, on_report: Callable[[CompileReport], None] | None) -> Callable:
    report = CompileReport()
    original, original_inputs = gm, example_inputs
    if _needs_backward(gm, example_inputs):
        log.info("kforge: graph needs a backward pass; passing it through unchanged (inner=%s)", cfg.inner)
        report.fallback = "backward"
        _emit(report, on_report)
        return _run_inner(gm, example_inputs, cfg)
    try:
        folded, refresher = _fold_conv_bn(gm, example_inputs, cfg, report)
        if refresher is not None:  # the folded graph's inputs (Note [the folded graph's dead inputs])
            example_inputs = refresher.arguments(example_inputs)
        if cfg.inner == "inductor":  # compile_fx may mutate its input: keep gm intact for the fallback
            return with_refresh(_compile_with_inductor(folded if folded is not gm else _copy_module(gm),
                                                         example_inputs, cfg, provider, on_report, report), refresher)
        gm = folded  # the fallback below keeps the caller's graph: Note [the user's model never breaks]
        traced = _trace_in_place(gm, example_inputs)
        if traced is not None:
            return with_refresh(_rewrite_or_keep(traced, cfg, provider, report, on_report).forward, refresher)
        from torch._functorch.aot_autograd import aot_module_simplified

        fw = functools.partial(_forward_compiler, cfg=cfg, provider=provider, report=report, on_report=on_report)
        return with_refresh(aot_module_simplified(gm, list(example_inputs), fw_compiler=fw, decompositions={}),
                            refresher)
    except Exception as e:  # Note [the user's model never breaks]
        if cfg.strict or isinstance(e, torch._dynamo.exc.RestartAnalysis):
            raise  # a restart is Dynamo's to handle (it analyses the frame again), not a failure of kforge's
        counters["kforge"]["graph_fallback"] += 1
        log.warning("kforge: graph capture failed (%s: %s); running the graph with plain PyTorch (inner=%s)",
                    type(e).__name__, e, cfg.inner)
        return _run_inner(original, original_inputs, cfg)


def _fold_conv_bn(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cfg: KforgeConfig,
                  report: CompileReport) -> tuple[torch.fx.GraphModule, Any]:
    """A copy of Dynamo's graph with its conv + batch norm chains folded (Note [a batch norm folded into its
    convolution] in conv_fold.py) and the Refresher its compiled form must run before each call; ``gm`` itself and
    None when there are none or ``fold_conv_bn`` is off."""
    if not cfg.fold_conv_bn:
        return gm, None
    if not has_candidates(gm):
        return gm, None
    if cfg.inner == "inductor" and torch._inductor.config.freezing:
        # Inductor's freezing folds batch norms into convolutions itself, into constants a refold cannot reach
        report.skipped.append(("conv + batch norm fold", "Inductor's freezing is on: Inductor folds them"))
        return gm, None
    copy = _copy_module(gm)
    report.folded, refused, refresher = fold_conv_bn(copy, example_inputs, cfg.cache_dir)
    report.skipped += [("conv + batch norm fold", why) for why in refused]
    if not report.folded:
        return gm, None
    counters["kforge"]["folded_conv_bn"] += report.folded
    return copy, refresher


def _trace_in_place(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> torch.fx.GraphModule | None:
    """Note [the eager path keeps in-place updates]
    AOTAutograd's graph is *functional*: each in-place update of a view (a KV-cache write, a recurrent state update
    in a loop, an interleaved rotary embedding) becomes a ``select_scatter``/``slice_scatter`` that copies the whole
    base, plus copies back. Inductor fuses those away; run eagerly, they are real copies (Qwen 3.5 MoE on the H200:
    ``aten::copy_`` 12.9 ms of 33.5 ms GPU time through kforge's eager path, 4.2 ms in eager PyTorch). So with
    ``inner="eager"`` the Dynamo graph is traced to ATen with ``make_fx`` and no functionalization: in-place ops
    stay in place, in program order, and kforge only swaps functional candidate nodes, whose inputs are read at the
    same point as before. Graphs with non-tensor inputs (symbolic sizes) and any trace failure take the AOTAutograd
    path instead. Returns None then."""
    if not example_inputs or not all(isinstance(t, torch.Tensor) for t in example_inputs):
        return None
    from torch._guards import TracingContext, detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    try:
        ctx = TracingContext.try_get()
        fake_mode = detect_fake_mode(example_inputs) or (ctx.fake_mode if ctx is not None else None) or \
            FakeTensorMode()
        fake = [t if isinstance(t, torch._subclasses.FakeTensor) else fake_mode.from_tensor(t)
                for t in example_inputs]
        with fake_mode, torch.no_grad():
            traced = make_fx(gm, pre_dispatch=False)(*fake)
        for node in traced.graph.find_nodes(op="get_attr"):
            if isinstance(getattr(traced, node.target, None), torch._subclasses.FakeTensor):
                raise RuntimeError(f"constant {node.target} was captured as a fake tensor")
    except Exception as e:  # the AOTAutograd path still works: Note [the user's model never breaks]
        counters["kforge"]["in_place_trace_fallback"] += 1
        log.info("kforge: tracing without functionalization failed (%s: %s); using AOTAutograd",
                 type(e).__name__, e)
        return None
    return traced


def _emit(report: CompileReport, on_report: Callable[[CompileReport], None] | None) -> None:
    if on_report is not None:
        on_report(report)


def _forward_compiler(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, cfg: KforgeConfig,
                      provider: KernelProvider | None, report: CompileReport,
                      on_report: Callable[[CompileReport], None] | None) -> Callable:
    gm = _rewrite_or_keep(gm, cfg, provider, report, on_report)
    return _boxed(gm.forward)


class _Leftovers(Exception):
    """Raised inside Inductor's inner compiler: these overloads have nodes kforge did not replace."""

    def __init__(self, ops: set) -> None:
        super().__init__(f"{len(ops)} overload(s) with nodes left to Inductor")
        self.ops = ops


class _Restart(Exception):
    """Raised inside Inductor's inner compiler: its searches changed kforge's fingerprint (Note [a cold compile
    leaves a warm cache])."""


def _ours_in(e: BaseException, cls: type) -> Any:
    """Inductor may wrap an exception raised by the inner compiler; find ours (a ``cls``) in the chain."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, cls):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


_INDUCTOR_ATTEMPTS = 3


class _DecompTable(dict):
    """Note [a decomposition table Inductor's cache can key on]
    Inductor's decomposition table without the overloads kforge keeps. Inductor puts a custom table into the
    FX graph cache's key, and a plain dict of OpOverloads cannot be pickled for that key, so every compile would
    bypass the cache (a warm kforge+Inductor compile then regenerates all code: +10 s on the Qwen example). This
    dict pickles as the names of the overloads it leaves out, which is stable across processes."""

    def __init__(self, table: dict, dropped: set) -> None:
        super().__init__({op: fn for op, fn in table.items() if str(op) not in dropped})
        self.dropped = tuple(sorted(dropped))

    def __reduce__(self):
        return (_decomp_table_without, (self.dropped,))


class _CacheKey:
    """A no-op post-grad pass whose uuid carries the provider's fingerprint into Inductor's cache keys."""

    def __init__(self, fingerprint: str) -> None:
        self.fingerprint = fingerprint

    def __call__(self, graph: torch.fx.Graph) -> None:
        return None

    def uuid(self) -> str:
        return self.fingerprint


def _cache_patches(provider: Any, cfg: KforgeConfig) -> dict[str, dict[str, Any]]:
    """Config patches for one compile: Note [kforge and Inductor's caches]."""
    if getattr(provider, "serves_nothing", False):
        return {"functorch": {}, "inductor": {}}  # Inductor's own graph: its caches as they are
    off = {"functorch": {"enable_autograd_cache": False}, "inductor": {}}
    fingerprint, load = getattr(provider, "fingerprint", None), getattr(provider, "load", None)
    if fingerprint is None or load is None or torch._inductor.config.post_grad_custom_post_pass is not None:
        return off
    from torch._inductor.custom_graph_pass import CustomGraphPass

    key = CustomGraphPass.register(_CacheKey)  # an ABC: the pass is accepted by Inductor's cacheability checks
    fp = fingerprint(cfg)
    if not fp:
        return off
    REGISTRY.add_loader(load)  # code from the cache calls kernels this process has not registered yet
    return {"functorch": {}, "inductor": {"post_grad_custom_post_pass": key(_cache_uuid(fp, cfg))}}


def _cache_uuid(fingerprint: str, cfg: KforgeConfig) -> str:
    """The provider's fingerprint, kforge's source and how the generated code calls kernels (``direct_calls``)."""
    return f"kforge:{_source_hash()}:{fingerprint}:{'direct' if cfg.direct_calls else 'op'}"


def _fingerprint_moved(provider: Any, cfg: KforgeConfig, used: dict[str, dict[str, Any]]) -> bool:
    """Note [a cold compile leaves a warm cache]
    The fingerprint in Inductor's cache keys (Note [kforge and Inductor's caches]) is taken when a compile starts.
    A compile that searches changes it on the way, so what it stores would be keyed on a cache state no later
    compile sees, and the next process would compile the graph from scratch again (SD3.5 VAE on the H200: a warm
    kforge+Inductor compile took 11.6 s against Inductor's 3.0 s). The third session compiled such a graph a
    second time under the new fingerprint. Now the inner compiler checks right after its rewrite, before any code
    is generated: if the searches moved the fingerprint it raises ``_Restart``, and the compile starts again under
    the new one (its decisions are all cached by then), so the graph is generated once, not twice.

    Has the provider's fingerprint changed since the compile that uses ``used`` began?"""
    before = used["inductor"].get("post_grad_custom_post_pass")
    if before is None:
        return False
    now = provider.fingerprint(cfg)
    return bool(now) and before.uuid() != _cache_uuid(now, cfg)


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    """kforge's own Python sources: a code change must not reuse graphs compiled by older code."""
    import hashlib
    from pathlib import Path

    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _decomp_table_without(dropped: tuple[str, ...]) -> _DecompTable:
    from torch._inductor.decomposition import select_decomp_table

    return _DecompTable(select_decomp_table(), set(dropped))


def _compile_with_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cfg: KforgeConfig,
                           provider: KernelProvider | None,
                           on_report: Callable[[CompileReport], None] | None,
                           before: CompileReport | None = None) -> Callable:
    """``before``: what was done to Dynamo's graph before this compile (its folds), carried into the report.

    Note [kforge inside Inductor]
    Inductor decomposes softmax and the norms before its inner compiler sees the graph, and re-tracing an ATen graph
    with Inductor's decompositions breaks views whose strides the decompositions change. So kforge runs *inside*
    Inductor's own trace: the overloads kforge may replace are taken out of Inductor's decomposition table, and the
    inner compiler rewrites the nodes that have kernels and hands the graph to ``compile_fx_inner``.

    A node of such an overload that kforge does not replace (no kernel, or Inductor is faster: Note [the baseline
    inside Inductor]) is a *leftover*. Leftovers are not decomposed by re-tracing the graph (that is the re-trace
    above). A leftover beside replaced nodes of the same overload is traced alone and spliced in (Note [a leftover
    next to a replaced node]). For an overload with no replaced node the inner compiler stops, and the whole
    compile runs again with that overload back in Inductor's decomposition table, so Inductor decomposes it in its
    own trace. The kernel decisions are cached by the provider, so a retry costs one more trace. Which overloads a
    graph needs decomposed is remembered per graph (in the cache directory), so a warm compile gets it right the
    first time.

    Note [kforge and Inductor's caches]
    Inductor's FX graph cache keys on the rewritten graph (and on the decomposition table: see Note [a
    decomposition table Inductor's cache can key on]). Its AOTAutograd cache keys on the graph *before* kforge's
    inner compiler runs, and a hit skips that compiler, so it must also key on what kforge would decide: a provider
    with a ``fingerprint`` (the kforge version and source, the options that change decisions, and the set of cached
    signatures) gets it into both keys as the uuid of a no-op post-grad pass. Code that a hit serves calls kernels
    by key, and the registry asks the provider's ``load`` for those not yet in this process. Without a fingerprint
    (or when the user has a post-grad pass of their own) the AOTAutograd cache is bypassed.
    """
    from torch._inductor.decomposition import select_decomp_table

    from .inductor_call import install
    from .inductor_plans import InductorPlans

    install()  # Note [Inductor's code calls the kernel, not the op]
    provider = provider if provider is not None else _default_provider(cfg)
    cache_patches = _cache_patches(provider, cfg)
    # a provider that can serve nothing (no GPU) keeps no overload from Inductor: one plain compile, no retry
    candidates = set() if getattr(provider, "serves_nothing", False) else {
        op for op in select_decomp_table() if is_candidate(str(op), cfg.families, "inductor")}
    plans = InductorPlans(cfg.cache_dir)
    graph_key = plans.key(gm, example_inputs, cfg)
    decompose = {op for op in candidates if str(op) in plans.get(graph_key)}
    # what earlier attempts found out, carried into the report of the attempt that compiles: a rewrite failure,
    # and the time spent planning and searching (a first compile searches in its first attempt)
    fallback, spent, retries, restarted, gate = None, 0.0, 0, False, []
    while True:
        keep = candidates - decompose if retries < _INDUCTOR_ATTEMPTS - 1 else set()
        attempt_report = CompileReport(cached=True)  # stays True only if Inductor's cache skipped the inner compiler
        try:
            compiled = _compile_once(gm, example_inputs, cfg, provider, keep, attempt_report, cache_patches,
                                     restart=not restarted)
        except Exception as e:
            left, restart = _ours_in(e, _Leftovers), _ours_in(e, _Restart)
            if left is None and restart is None:
                raise
            fallback, spent = fallback or attempt_report.fallback, spent + attempt_report.seconds
            gate = _carried(gate, attempt_report.gate)
            if restart is not None:
                restarted, cache_patches = True, _cache_patches(provider, cfg)
                counters["kforge"]["restarted_for_cache"] += 1
                log.info("kforge: searches changed the kernel cache; compiling under its new fingerprint")
                continue
            retries += 1
            counters["kforge"]["inductor_retries"] += 1
            log.info("kforge: %s left to Inductor; compiling again with them decomposed",
                     ", ".join(sorted(str(op) for op in left.ops)))
            decompose |= left.ops
            continue
        if decompose:
            plans.put(graph_key, sorted(str(op) for op in decompose))
        attempt_report.fallback = attempt_report.fallback or fallback
        attempt_report.seconds += spent
        attempt_report.gate = _carried(gate, attempt_report.gate)
        if before is not None:
            attempt_report.folded = before.folded
            attempt_report.skipped = before.skipped + attempt_report.skipped
        _log_kept(attempt_report.gate)
        _emit(attempt_report, on_report)  # one report per graph: the attempt that compiled it
        if attempt_report.cached:
            log.info("kforge: Inductor's cache served this graph; its kernels load by key when first called")
        return compiled


def _carried(earlier: list[GateDecision], later: list[GateDecision]) -> list[GateDecision]:
    """The gate's decisions for one graph over its attempts: a later attempt's, and an earlier one's for signatures
    the later did not judge again (a retry had Inductor decompose their overload: Note [kforge inside Inductor])."""
    judged = {d.key for d in later}
    return [d for d in earlier if d.key not in judged] + later


def _log_kept(gate: list[GateDecision]) -> None:
    for d in gate:
        if not d.replaced:
            log.info("kforge: %s kept with Inductor: %s (key %s)", d.op, d.reason(), d.key)


def _compile_once(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cfg: KforgeConfig, provider: Any,
                  keep: set, report: CompileReport, cache_patches: dict[str, dict[str, Any]],
                  restart: bool = False) -> Callable:
    """One Inductor compile that leaves ``keep`` undecomposed and rewrites their nodes in the inner compiler; raises
    ``_Leftovers`` if some of those nodes keep no kernel (Note [kforge inside Inductor]), and, with ``restart``,
    ``_Restart`` if the rewrite's searches changed the fingerprint (Note [a cold compile leaves a warm cache])."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    from .inductor_call import direct_calls

    def inner(aten_gm: torch.fx.GraphModule, inputs: Sequence[Any], **kwargs: Any) -> Any:
        report.cached = False
        if keep:
            aten_gm = _rewrite_or_keep(aten_gm, cfg, provider, report, None)
            if restart and _fingerprint_moved(provider, cfg, cache_patches):
                raise _Restart()  # before any code generation: the compile restarts under the new fingerprint
            aten_gm = _decompose_leftovers(aten_gm, keep, report)
        return compile_fx_inner(aten_gm, inputs, **kwargs)

    with torch._functorch.config.patch(**cache_patches["functorch"]), \
            torch._inductor.config.patch(**cache_patches["inductor"]), direct_calls(cfg.direct_calls):
        return compile_fx(_copy_module(gm), list(example_inputs), inner_compile=inner,
                          decompositions=_decomp_table_without(tuple(sorted(str(op) for op in keep))))


def _decompose_leftovers(gm: torch.fx.GraphModule, keep: set, report: CompileReport) -> torch.fx.GraphModule:
    """Nodes of kept overloads that kforge did not replace. Where kforge replaced other nodes of the same overload,
    each is decomposed in place (Note [a leftover next to a replaced node]); an overload with no replaced node,
    or a node that cannot be decomposed alone, raises ``_Leftovers``: the compile runs again with the overload
    decomposed by Inductor's own trace (Note [kforge inside Inductor])."""
    from torch._inductor.decomposition import select_decomp_table

    left = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in keep]
    # a replaced softmax (norm) group counts as a replaced softmax (norm): its leftovers are decomposed in place, so
    # the retry that decomposes every softmax (and with them every group) is not needed
    replaced = {op for op, _, _ in report.replaced} | report.fused_overloads
    whole = {n.target for n in left if str(n.target) not in replaced}
    if whole:
        raise _Leftovers(whole)
    if not left:
        return gm
    try:
        decompose_nodes(gm, left, select_decomp_table())
    except NotDecomposable as e:
        log.info("kforge: %s; its overload is decomposed over the whole graph instead", e)
        raise _Leftovers({e.op}) from e
    counters["kforge"]["decomposed_in_place"] += len(left)
    return gm


def _rewrite_or_keep(gm: torch.fx.GraphModule, cfg: KforgeConfig, provider: KernelProvider | None,
                     report: CompileReport, on_report: Callable[[CompileReport], None] | None) -> torch.fx.GraphModule:
    """The rewritten graph, or ``gm`` untouched when anything inside kforge fails (unless strict)."""
    t0 = time.perf_counter()
    work = _copy_module(gm)  # rewrite a copy, so a failure half way leaves the original graph intact
    try:
        _plan_and_rewrite(work, cfg, provider, report)
        gm = work
    except Exception as e:  # Note [the user's model never breaks]
        if cfg.strict:
            raise
        counters["kforge"]["rewrite_fallback"] += 1
        report.fallback = f"{type(e).__name__}: {e}"
        report.replaced.clear()
        report.fused_overloads.clear()
        report.gate.clear()
        log.warning("kforge: rewrite failed (%s: %s); this graph runs without kforge kernels", type(e).__name__, e)
    report.seconds = time.perf_counter() - t0
    log.info("kforge: %d ATen ops, %d candidates (%d signatures, %d fused groups), %d replaced in %.2fs",
             report.ops_seen, report.candidates, report.signatures, report.groups, len(report.replaced), report.seconds)
    _emit(report, on_report)
    return gm


# What Dynamo attaches to its graph module for AOTAutograd (frontend_utils._try_get_metadata_from_dynamo)
_DYNAMO_ATTRS = ("_param_name_to_source", "shape_env", "compile_subgraph_reason", "_source_to_user_stacks")


def _copy_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Note [a copy keeps Dynamo's metadata]
    A copy of the graph that still reads as Dynamo's: AOTAutograd recognises a Dynamo graph by ``meta`` and
    ``_param_name_to_source``, and only then marks the parameters as static inputs. Without them Inductor's
    compiled code treats every parameter as a fresh input and checks each one's alignment on every call: ResNet-50
    at batch 1 through kforge+Inductor ran 3.97 ms against Inductor's 2.28 ms on the H200 with no node replaced
    (tiny CPU ResNet: 0 of 46 inputs static, against 45 through Inductor alone)."""
    graph, copied = torch.fx.Graph(), {}
    out = graph.graph_copy(gm.graph, copied)
    graph.output(out)
    for old, new in copied.items():  # placeholders carry their Dynamo source as a node attribute
        if hasattr(old, "_dynamo_source"):
            new._dynamo_source = old._dynamo_source
    copy = torch.fx.GraphModule(gm, graph)
    copy.meta.update(gm.meta)
    for attr in _DYNAMO_ATTRS:
        if hasattr(gm, attr):
            setattr(copy, attr, getattr(gm, attr))
    return copy


def _plan_and_rewrite(gm: torch.fx.GraphModule, cfg: KforgeConfig, provider: KernelProvider | None,
                      report: CompileReport) -> None:
    if cfg.fuse_pointwise and cfg.inner != "eager":
        log.info("kforge: fuse_pointwise applies with inner='eager' only; Inductor fuses pointwise ops itself")
    found = scan(gm, cfg.families, cfg.inner, fuse=cfg.fuse_pointwise and cfg.inner == "eager",
                 fuse_softmax=cfg.fuse_softmax, fuse_norm=cfg.fuse_norm)
    report.ops_seen, report.candidates = found.ops_seen, len(found.candidates)
    report.skipped = report.skipped + found.skipped  # after the folds refused (_fold_conv_bn)
    report.groups = sum(1 for c in found.candidates if c.group is not None)
    if not found.candidates:
        return
    cards = found.cards()
    report.signatures = len(cards)
    provider = provider if provider is not None else _default_provider(cfg)
    impls = provider.kernels_for(cards, cfg)
    bytes_min = {card.key: card.bytes_min for card in cards}
    reordered = cfg.inner == "inductor" and inductor_reorders_layout(gm)
    host_us = host_cost_us()
    replacements, taken = [], set()
    # softmax and norm groups, then pointwise groups, then single nodes: a replaced group takes its members (scan's
    # docstring)
    for c in sorted(found.candidates, key=lambda c: 2 if c.group is None else 1 if c.group.op == FUSED_OP else 0):
        impl = impls.get(c.signature.key())
        if impl is None or taken.intersection(c.group.members if c.group is not None else (c.node,)):
            continue
        # Note [what replacing a node costs inside Inductor]
        if cfg.inner == "inductor" and "inductor_us" in impl.extra:
            decision = decide(c.signature.op, impl.key, impl.extra["kforge_us"], impl.extra["inductor_us"],
                              bytes_min[impl.key], charged_bytes(c.node, reordered, c.group), cfg.margin, host_us)
            report.gate.append(decision)
            if not decision.replaced:
                counters["kforge"]["kept_for_fusion"] += 1
                continue
        REGISTRY.register(impl)
        replacements.append(Replacement(c.node, c.signature, impl, c.group))
        report.replaced.append((c.signature.op, impl.key, impl.speedup))
        taken.update(c.group.members if c.group is not None else ())
        if c.group is not None and c.group.anchor is not None:  # the overload inside the group counts as replaced
            report.fused_overloads.add(str(c.group.anchor.target))
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    replacements.sort(key=lambda r: order[r.node])  # graph order, as before groups went first
    apply(gm, replacements, direct=cfg.inner == "eager")
    counters["kforge"]["replaced_nodes"] += len(replacements)
    counters["kforge"]["fused_groups"] += sum(1 for r in replacements if r.group is not None)


kforge_backend = make_backend()
