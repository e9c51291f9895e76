"""Note [Inductor's code calls the kernel, not the op] (forge_backend/inductor_call.py): what Inductor's generated code
calls for a replaced node, and that the graph still computes what eager does."""
import builtins
import operator

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import forge_backend.inductor_call as inductor_call
from cpu_provider import CpuProvider
from forge_backend.backend import make_backend
from forge_backend.inductor_call import CALL_NAME, IMPORT_LINE, direct_calls, op_name
from forge_backend.registry import KERNEL_OP, REGISTRY, KernelImpl
from forge_backend.signature import TensorSpec
from test_backend import Block

OP_CALL = "torch.ops.kforge.kernel.default("


def compiled_code(provider=None, options=None):
    """The generated code of Block compiled by kforge inside Inductor, after checking its outputs against eager."""
    m = Block().eval()
    x, img = torch.randn(4, 32), torch.randn(2, 8, 5, 5)
    reports = []
    backend = make_backend(provider or CpuProvider(), reports.append)
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        fn = torch.compile(m, backend=backend, options={"inner": "inductor", **(options or {})})
        got, codes = run_and_get_code(fn, x, img)
        expected = m(x, img)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    assert len(reports[-1].replaced) == 4
    return "\n".join(codes)


def test_the_op_name_is_inductors_spelling():
    assert op_name() == "torch.ops.kforge.kernel.default"


def test_inductors_code_calls_the_kernel_directly():
    torch._dynamo.reset()
    code = compiled_code()
    assert code.count(IMPORT_LINE) == 1  # once, at the top of the module
    assert code.count(f"= {CALL_NAME}(") == 4 and OP_CALL not in code
    # Inductor's checks around the call stay: each output's size and strides are asserted
    assert code.count("assert_size_stride(") >= 4


def test_a_torch_without_the_table_keeps_the_op(monkeypatch):
    """``install`` answers False where the codegen table is missing, and the op's call is generated as before."""
    from torch._inductor.codegen import custom_extern_kernel_codegen as table

    monkeypatch.delitem(table.CUSTOM_EXTERN_KERNEL_CODEGEN, op_name(), raising=False)
    monkeypatch.setattr(inductor_call, "install", lambda: False)
    torch._dynamo.reset()
    code = compiled_code()
    assert code.count(OP_CALL) == 4 and CALL_NAME not in code


@pytest.mark.parametrize("how", [{"direct_calls": False}, "KFORGE_DIRECT_CALLS"])
def test_the_option_keeps_the_ops_call(monkeypatch, how):
    torch._dynamo.reset()
    if isinstance(how, str):
        monkeypatch.setenv(how, "0")
    code = compiled_code(options=how if isinstance(how, dict) else None)
    assert code.count(OP_CALL) == 4 and CALL_NAME not in code


def test_outside_a_kforge_compile_inductor_keeps_its_line():
    """The codegen is registered process-wide, but writes the direct call only inside a compile kforge makes."""
    from torch._inductor.compile_fx import compile_fx

    key = "direct-call-test-relu"
    REGISTRY.register(KernelImpl(key, "aten.relu.default", (TensorSpec((16,), (1,), "float32"),),
                                 lambda inputs: [torch.relu(inputs[0])]))
    assert inductor_call.install()
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output((g.call_function(operator.getitem, (g.call_function(KERNEL_OP, (key, [x])), 0)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    inp = torch.randn(16)
    for on, call in ((False, OP_CALL), (True, f"= {CALL_NAME}(")):
        with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False), direct_calls(on):
            fn, codes = run_and_get_code(compile_fx, gm, [inp])
        assert call in "\n".join(codes)
        torch.testing.assert_close(fn(inp)[0], torch.relu(inp))


def test_intermediate_hooks_keep_inductors_own_line():
    torch._dynamo.reset()
    with torch._inductor.config.patch(generate_intermediate_hooks=True):
        code = compiled_code()
    assert code.count(OP_CALL) == 4 and f"= {CALL_NAME}(" not in code


def test_install_is_idempotent_and_answers_false_without_the_table(monkeypatch):
    from torch._inductor.codegen import custom_extern_kernel_codegen as table

    assert inductor_call.install()
    first = table.CUSTOM_EXTERN_KERNEL_CODEGEN[op_name()]
    assert inductor_call.install() and table.CUSTOM_EXTERN_KERNEL_CODEGEN[op_name()] is first
    real_import = builtins.__import__

    def no_table(name, *args, **kwargs):
        if name.endswith("custom_extern_kernel_codegen"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr("builtins.__import__", no_table)
    assert inductor_call.install() is False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_inductors_direct_call_runs_the_launcher_on_the_gpu():
    """A chain of planted relu kernels compiled by Inductor: the code calls them directly, and the CUDA results are
    the chain's (relu of relu is relu, so any node that did not run, or ran on stale memory, shows)."""
    from torch._inductor.compile_fx import compile_fx

    from forge_backend.runtime.launch import Launcher
    from forge_backend.runtime.nvrtc import compile_candidate
    from planted import candidate, unary_card

    dev = torch.device("cuda", 0)
    card = unary_card("aten.relu.default", 4099)
    cand = candidate("relu_good")
    major, minor = torch.cuda.get_device_capability(dev)
    run = Launcher(card, cand, compile_candidate(cand, f"sm_{major}{minor}").cubin, dev)
    REGISTRY.register(KernelImpl(card.key, card.op, tuple(t.spec for t in card.outputs), run))
    assert inductor_call.install()
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = x
    for _ in range(3):
        y = g.call_function(operator.getitem, (g.call_function(KERNEL_OP, (card.key, [y])), 0))
    g.output((g.call_function(torch.ops.aten.add.Tensor, (y, x)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    inp = torch.randn(4099, device=dev)
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False), direct_calls(True):
        fn, codes = run_and_get_code(compile_fx, gm, [inp])
        for _ in range(2):
            inp = torch.randn(4099, device=dev)
            torch.testing.assert_close(fn(inp)[0], torch.relu(inp) + inp, rtol=0, atol=0)
    code = "\n".join(codes)
    assert code.count(f"= {CALL_NAME}(") == 3 and OP_CALL not in code
