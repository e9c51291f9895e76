import logging
import os
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
import torch
import torch.nn.functional as F

from cpu_provider import CpuProvider
from forge_backend.backend import make_backend

FRESH = """
import torch, sys
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Softmax(-1))
f = torch.compile(m, backend='kforge')
x = torch.randn(4, 8)
torch.testing.assert_close(f(x), m(x))
with torch.no_grad():
    torch.testing.assert_close(f(x), m(x))
print('forge_backend' in sys.modules, 'kforge' in torch._dynamo.list_backends())
"""


def test_entry_point_is_declared():
    names = {ep.name: ep.value for ep in entry_points(group="torch_dynamo_backends")}
    assert names.get("kforge") == "forge_backend.backend:kforge_backend"


def test_fresh_interpreter_needs_no_import():
    env = {**os.environ, "KFORGE_CACHE_DIR": os.environ["KFORGE_CACHE_DIR"]}
    out = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    loaded_by_torch, listed = out.stdout.split()
    assert listed == "True"  # torch found the backend through the entry point


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.gn = torch.nn.GroupNorm(4, 8)

    def forward(self, x, img):
        return F.softmax(self.ln(self.lin(x)), -1), self.gn(img).mean((2, 3), keepdim=True)


def run_compiled(backend, options=None):
    m = Block().eval()
    x, img = torch.randn(4, 32), torch.randn(2, 8, 5, 5)
    with torch.no_grad():
        expected = m(x, img)
        got = torch.compile(m, backend=backend, options=options or {})(x, img)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_replaced_graph_matches_eager(inner):
    provider, reports = CpuProvider(), []
    run_compiled(make_backend(provider, reports.append), {"inner": inner})
    assert set(provider.calls) == {"aten._softmax.default", "aten.native_layer_norm.default",
                                   "aten.native_group_norm.default", "aten.mean.dim"}
    assert len(reports[-1].replaced) == 4 and reports[-1].fallback is None


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_exception_inside_kforge_falls_back_and_logs_the_operator(caplog, inner):
    provider = CpuProvider(fail_on="aten.native_group_norm.default")
    reports = []
    with caplog.at_level(logging.WARNING, logger="kforge"):
        run_compiled(make_backend(provider, reports.append), {"inner": inner})
    assert "planted failure for aten.native_group_norm.default" in caplog.text
    assert reports[-1].fallback and not reports[-1].replaced
    assert not provider.calls  # nothing of kforge ran; the graph is PyTorch's own


@pytest.mark.parametrize("raised,propagates", [(torch._dynamo.exc.TensorifyScalarRestartAnalysis, True),
                                                (RuntimeError, False)])
def test_dynamos_restart_passes_through_and_a_failure_falls_back(monkeypatch, raised, propagates):
    """A RestartAnalysis raised under kforge's compile is Dynamo's signal to analyse the frame again (Dynamo lets the
    backend's through for that): kforge re-raises it instead of falling back to plain PyTorch for good."""
    import forge_backend.backend as backend_module

    def boom(*args, **kwargs):
        raise raised("planted")

    monkeypatch.setattr(backend_module, "_trace_in_place", boom)
    gm = torch.fx.symbolic_trace(torch.nn.Linear(4, 4))
    backend = make_backend(CpuProvider())
    with torch.no_grad():  # a graph needing a backward would pass through before kforge's compile
        if propagates:
            with pytest.raises(raised):
                backend(gm, [torch.randn(2, 4)], options={"inner": "eager"})
        else:
            fn = backend(gm, [torch.randn(2, 4)], options={"inner": "eager"})
            assert fn(torch.randn(2, 4)).shape == (2, 4)


def test_strict_raises_instead():
    provider = CpuProvider(fail_on="aten.native_group_norm.default")
    with pytest.raises(Exception, match="planted failure"):
        run_compiled(make_backend(provider), {"strict": True})


def test_strict_from_environment(monkeypatch):
    monkeypatch.setenv("KFORGE_STRICT", "1")
    with pytest.raises(Exception, match="planted failure"):
        run_compiled(make_backend(CpuProvider(fail_on="aten._softmax.default")))


def test_graph_needing_backward_passes_through(caplog):
    provider, reports = CpuProvider(), []
    m = Block()
    x, img = torch.randn(4, 32), torch.randn(2, 8, 5, 5)
    with caplog.at_level(logging.INFO, logger="kforge"):
        out = torch.compile(m, backend=make_backend(provider, reports.append))(x, img)
    out[0].sum().backward()
    assert m.lin.weight.grad is not None
    assert reports[-1].fallback == "backward" and not provider.calls
    assert "needs a backward pass" in caplog.text


def test_default_backend_on_cpu_leaves_ops_to_pytorch():
    """On a machine without a GPU the real provider serves nothing, and the model still runs, through Inductor in
    one compile: no overload is held back from Inductor's decompositions, so nothing is left over to retry."""
    from torch._dynamo.utils import counters

    counters["kforge"].clear()
    run_compiled("kforge")
    assert counters["kforge"]["inductor_retries"] == 0 and counters["kforge"]["replaced_nodes"] == 0


def test_inductor_inner_leaves_fusable_pointwise_ops_to_inductor():
    provider = CpuProvider(ops=("aten.relu.default", "aten._softmax.default"))
    f = torch.compile(lambda x: torch.softmax(torch.relu(x) * 2, -1), backend=make_backend(provider),
                      options={"inner": "inductor"})
    x = torch.randn(8, 33)
    with torch.no_grad():
        torch.testing.assert_close(f(x), torch.softmax(torch.relu(x) * 2, -1))
    assert provider.calls == {"aten._softmax.default": 1}


class Some(CpuProvider):
    """Serves softmax and layer norm but not group norm or mean: those nodes are leftovers under Inductor."""

    def __init__(self):
        super().__init__(ops=("aten._softmax.default", "aten.native_layer_norm.default"))


def test_inductor_leftovers_are_decomposed_by_inductor_itself(tmp_path):
    """Note [kforge inside Inductor]: nodes kforge keeps out of Inductor's decompositions but does not replace make
    the compile run again with their overloads decomposed, and the plan makes the next compile of the same graph
    take one attempt."""
    from torch._dynamo.utils import counters

    provider, reports = Some(), []
    opts = {"inner": "inductor", "cache_dir": str(tmp_path)}
    counters["kforge"].clear()
    run_compiled(make_backend(provider, reports.append), opts)
    assert set(provider.calls) == {"aten._softmax.default", "aten.native_layer_norm.default"}
    assert counters["kforge"]["inductor_retries"] == 1
    assert len(reports) == 1 and len(reports[0].replaced) == 2  # one report per graph, from the attempt that ran
    plans = list((tmp_path / "inductor_plans").glob("*.json"))
    assert len(plans) == 1 and "native_group_norm" in plans[0].read_text()  # mean.dim has no decomposition
    torch._dynamo.reset()
    counters["kforge"].clear()
    run_compiled(make_backend(Some()), opts)
    assert counters["kforge"]["inductor_retries"] == 0


def test_inductor_plan_that_went_stale_costs_a_retry_not_correctness(tmp_path):
    """A plan from a compile where everything was replaced, then a provider that serves less: still correct."""
    from torch._dynamo.utils import counters

    opts = {"inner": "inductor", "cache_dir": str(tmp_path)}
    run_compiled(make_backend(CpuProvider()), opts)
    torch._dynamo.reset()
    counters["kforge"].clear()
    run_compiled(make_backend(Some()), opts)
    assert counters["kforge"]["inductor_retries"] == 1


def test_inductor_cache_serves_a_kforge_graph_and_kernels_load_by_key(tmp_path):
    """Note [kforge and Inductor's caches]: the second compile of the same graph is an AOTAutograd cache hit (no
    rewrite runs), and the compiled code gets its kernels from the provider's loader by key."""
    from torch._dynamo.utils import counters

    from forge_backend.registry import REGISTRY

    provider, reports = CpuProvider(), []
    opts = {"inner": "inductor", "cache_dir": str(tmp_path)}
    run_compiled(make_backend(provider, reports.append), opts)
    assert reports[-1].replaced and not reports[-1].cached
    keys = {key for _, key, _ in reports[-1].replaced}
    for key in keys:  # a new process: nothing registered yet
        REGISTRY._impls.pop(key, None)
    torch._dynamo.reset()
    counters.clear()
    provider.calls.clear()
    run_compiled(make_backend(provider, reports.append), opts)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1
    assert reports[-1].cached and not reports[-1].replaced
    assert set(provider.loads) == keys and set(provider.calls) == {
        "aten._softmax.default", "aten.native_layer_norm.default", "aten.native_group_norm.default", "aten.mean.dim"}


def test_a_changed_fingerprint_misses_inductors_cache(tmp_path):
    from torch._dynamo.utils import counters

    provider, reports = CpuProvider(), []
    opts = {"inner": "inductor", "cache_dir": str(tmp_path)}
    run_compiled(make_backend(provider, reports.append), opts)
    provider.generation += 1  # e.g. a search added a signature to the kforge cache
    torch._dynamo.reset()
    counters.clear()
    run_compiled(make_backend(provider, reports.append), opts)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 0 and not reports[-1].cached
    assert len(reports[-1].replaced) == 4


class Searching(CpuProvider):
    """Its first ``kernels_for`` changes the fingerprint, as a search that stores new records does."""

    def kernels_for(self, cards, cfg):
        if not self.served:
            self.generation += 1
        return super().kernels_for(cards, cfg)


def test_a_compile_that_searched_leaves_inductors_cache_warm(tmp_path):
    """Note [a cold compile leaves a warm cache]: the next compile of the graph is a cache hit."""
    from torch._dynamo.utils import counters

    provider, reports = Searching(), []
    opts = {"inner": "inductor", "cache_dir": str(tmp_path)}
    counters.clear()
    run_compiled(make_backend(provider, reports.append), opts)
    assert counters["kforge"]["restarted_for_cache"] == 1
    assert counters["inductor"]["fxgraph_cache_miss"] == 1  # the graph was generated once, after the restart
    torch._dynamo.reset()
    counters.clear()
    run_compiled(make_backend(provider, reports.append), opts)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1 and reports[-1].cached
    assert counters["kforge"]["restarted_for_cache"] == 0


def test_without_a_fingerprint_the_aot_cache_is_bypassed(tmp_path):
    from torch._dynamo.utils import counters

    provider = CpuProvider()
    provider.fingerprinting = False
    opts = {"inner": "inductor", "cache_dir": str(tmp_path)}
    run_compiled(make_backend(provider), opts)
    torch._dynamo.reset()
    counters.clear()
    run_compiled(make_backend(provider), opts)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 0
    assert counters["inductor"]["fxgraph_cache_hit"] == 1  # Note [a decomposition table Inductor's cache can key on]


class ResnetBlock(torch.nn.Module):
    """An SD-VAE ResnetBlock2D: conv -> norm -> silu -> conv -> norm -> silu -> conv, plus the residual. Inside
    Inductor the convs' outputs may be channels-last (Inductor's layout optimisation)."""

    def __init__(self, c=32):
        super().__init__()
        self.n1, self.n2 = torch.nn.GroupNorm(8, c, eps=1e-6), torch.nn.GroupNorm(8, c, eps=1e-6)
        self.c0, self.c1, self.c2 = (torch.nn.Conv2d(c, c, 3, padding=1) for _ in range(3))

    def forward(self, x):
        x = self.c0(x)
        h = self.c1(F.silu(self.n1(x)))
        h = self.c2(F.silu(self.n2(h)))
        return x + h


class ConvPool(torch.nn.Module):
    """A ResNet tail: convs, then the global average pool (``mean.dim``) of a possibly channels-last conv output."""

    def __init__(self, c=32):
        super().__init__()
        self.c0, self.c1 = torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.c1(torch.relu(self.c0(x)))).mean((2, 3))


@pytest.mark.parametrize("inner", ["eager", "inductor"])
@pytest.mark.parametrize("model,op,calls", [(ResnetBlock, "aten.native_group_norm.default", 2),
                                           (ConvPool, "aten.mean.dim", 1)])
def test_kernels_get_inputs_in_their_signature_layout(inner, model, op, calls):
    """Note [kernel inputs keep their layout]: a provider that reads memory with the signature's strides, as a CUDA
    kernel does, must still match eager: Inductor may not hand it a channels-last conv output."""
    torch.manual_seed(0)
    m, x = model().eval(), torch.randn(2, 32, 16, 16)
    provider = CpuProvider(ops=[op], reads_signature_layout=True)
    with torch.no_grad():
        expected = m(x)
        got = torch.compile(m, backend=make_backend(provider), options={"inner": inner})(x)
    assert provider.calls[op] == calls
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_both_paths_ask_for_one_signature_of_a_norm_whose_stats_nothing_reads():
    """Note [an output nothing reads is not used]: the eager path's graph keeps getitems of the group norm's mean and
    rstd that nothing reads; they are not uses, so its signature is the Inductor path's (and a prewarm, which
    captures as the eager path does, serves both)."""
    from forge_backend.inspect_model import RecordingProvider

    m, x = ResnetBlock().eval(), torch.randn(2, 32, 16, 16)
    keys = {}
    for inner in ("eager", "inductor"):
        provider = RecordingProvider()
        torch._dynamo.reset()
        with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            torch.compile(m, backend=make_backend(provider), options={"inner": inner, "search": "off"})(x)
        norms = [c for c in provider.cards if c.op == "aten.native_group_norm.default"]
        assert norms and all(c.signature_obj().used_outputs == (0,) for c in norms)
        keys[inner] = {c.key for c in norms}
    assert keys["eager"] == keys["inductor"]


def test_layout_key_ignores_size_one_dims_and_tells_layouts_apart():
    from forge_backend.signature import TensorSpec, layout_key_of

    x = torch.randn(1, 8, 4, 4)
    assert layout_key_of(x) == TensorSpec.of(x).layout_key()
    cl = x.to(memory_format=torch.channels_last)
    assert layout_key_of(cl) != TensorSpec.of(x).layout_key()
    assert layout_key_of(torch.randn(8, 1, 16)) == layout_key_of(torch.randn(8, 16).unsqueeze(1))


def _targets_seen(monkeypatch):
    import forge_backend.backend as backend_mod

    seen = []
    original = backend_mod._rewrite_or_keep

    def spy(gm, *args, **kwargs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return original(gm, *args, **kwargs)

    monkeypatch.setattr(backend_mod, "_rewrite_or_keep", spy)
    return seen


def test_eager_path_keeps_in_place_updates(monkeypatch):
    """Note [the eager path keeps in-place updates]: an in-place write into a view stays a copy_ into that view,
    not a scatter that copies the whole base, and the replaced softmaxes read the values at the right point."""
    seen = _targets_seen(monkeypatch)

    def f(x):
        y = x * 2
        y[:, 1:5] = torch.softmax(y[:, 1:5], -1)
        return torch.softmax(y, -1)

    provider, x = CpuProvider(), torch.randn(6, 9)
    with torch.no_grad():
        got = torch.compile(f, backend=make_backend(provider), options={"inner": "eager"})(x)
    torch.testing.assert_close(got, f(x))
    assert provider.calls["aten._softmax.default"] == 2
    assert "aten.copy_.default" in seen and not any("scatter" in t for t in seen)


def test_dynamic_shapes_take_the_aot_path(monkeypatch):
    seen = _targets_seen(monkeypatch)
    provider = CpuProvider()
    f = torch.compile(lambda x: torch.softmax(x * 2, -1), backend=make_backend(provider), dynamic=True,
                      options={"inner": "eager"})
    with torch.no_grad():
        for n in (5, 7):
            x = torch.randn(n, 9)
            torch.testing.assert_close(f(x), torch.softmax(x * 2, -1))
    assert seen  # kforge still saw the graph; symbolic sizes leave its nodes to PyTorch


def test_eager_path_with_a_tensor_constant_in_forward():
    """Constants made inside forward (torch.tensor) must be real in the traced graph."""
    provider = CpuProvider()

    def f(x):
        return torch.softmax(x * torch.tensor([2.0, 3.0, 4.0]), -1)

    x = torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(f, backend=make_backend(provider))(x), f(x))
    assert provider.calls["aten._softmax.default"] == 1


def test_inside_inductor_parameters_stay_static_inputs(monkeypatch):
    """Note [a copy keeps Dynamo's metadata]: kforge's copy of the graph must still read as Dynamo's, or Inductor's
    code checks every parameter's alignment on every call (host time that grows with the parameter count)."""
    import torch._inductor.compile_fx as compile_fx_module

    seen = []
    real = compile_fx_module.compile_fx_inner

    def spy(gm, inputs, **kwargs):
        seen.append(len(kwargs.get("static_input_idxs") or []))
        return real(gm, inputs, **kwargs)

    monkeypatch.setattr(compile_fx_module, "compile_fx_inner", spy)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    # Inductor's caches off, so that both compiles reach the inner compiler (config.patch restores them after)
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        torch.compile(model, backend=lambda gm, ex: compile_fx_module.compile_fx(gm, ex, inner_compile=spy))(x)
        torch._dynamo.reset()
        torch.compile(model, backend=make_backend(CpuProvider()), options={"inner": "inductor"})(x)
    assert len(seen) == 2 and seen[0] == seen[1] == 6  # two weights, two biases, the norm's weight and bias


def test_inductor_report_counts_the_planning_time_of_every_attempt(tmp_path, monkeypatch):
    """A first compile searches in its first attempt; the report of the attempt that compiles (after a retry for
    leftovers) must still carry that time. A fake clock makes every rewrite take exactly 1 s."""
    import types

    import forge_backend.backend as backend_mod

    ticks = iter(range(1000))
    monkeypatch.setattr(backend_mod, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    from torch._dynamo.utils import counters

    counters["kforge"].clear()
    reports = []
    run_compiled(make_backend(Some(), reports.append), {"inner": "inductor", "cache_dir": str(tmp_path)})
    assert counters["kforge"]["inductor_retries"] == 1  # two attempts rewrote the graph
    assert len(reports) == 1 and reports[0].seconds == 2.0


def test_torch_compile_mode_reaches_inductor(monkeypatch):
    """Note [torch.compile's mode]: the mode's Inductor settings are active while kforge compiles with Inductor."""
    import forge_backend.backend as backend_mod

    seen = []
    original = backend_mod._compile_with_inductor

    def spy(*args, **kwargs):
        seen.append((torch._inductor.config.max_autotune, torch._inductor.config.coordinate_descent_tuning))
        return original(*args, **kwargs)

    monkeypatch.setattr(backend_mod, "_compile_with_inductor", spy)
    f = torch.compile(lambda x: torch.softmax(x * 2, -1), backend=make_backend(CpuProvider()),
                      mode="max-autotune-no-cudagraphs")
    x = torch.randn(8, 33)
    with torch.no_grad():
        torch.testing.assert_close(f(x), torch.softmax(x * 2, -1))
    assert seen == [(True, True)]
    assert torch._inductor.config.max_autotune is False  # only for the compile


def test_an_unknown_mode_is_a_clear_error():
    f = torch.compile(lambda x: x.softmax(-1), backend=make_backend(CpuProvider()), mode="fastest")
    with pytest.raises(Exception, match=r"mode='fastest' is not a torch.compile mode; valid: .*reduce-overhead"):
        f(torch.randn(4, 4))


def test_mode_with_the_eager_inner_is_ignored_with_a_warning(caplog, monkeypatch):
    monkeypatch.setenv("KFORGE_INNER", "eager")  # torch.compile takes mode or options, not both
    f = torch.compile(lambda x: x.softmax(-1), backend=make_backend(CpuProvider()), mode="reduce-overhead")
    x = torch.randn(4, 4)
    with caplog.at_level(logging.WARNING, logger="kforge"):
        torch.testing.assert_close(f(x), x.softmax(-1))
    assert "inner='eager' compiles nothing with Inductor; ignored" in caplog.text
