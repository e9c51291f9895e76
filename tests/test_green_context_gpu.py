"""GPU: kernels in a green context (``torch.cuda.green_contexts``), which gives launches on its streams only some of
the GPU's SMs: the relay roots run on as many SMs as the context holds (Note [the GPU's SM count in a plan] in
contract.py), and a cooperative grid larger than the context is refused by the driver and runs PyTorch's op (Note [a
launch the driver refuses at call time] in runtime/launch.py).

These tests run in a process of their own (test_green_contexts_isolated_gpu.py starts it, with KFORGE_GREEN_CHILD
set; elsewhere they skip): in the forty-fifth session, after them in the same process, test_measure_graph.py's graph
replays of a copy ran at the speed of a 112-SM context (19.3-19.4 us a 64 MiB copy, 17.7-17.9 otherwise) while single
calls did not slow down, three times out of three."""
import os
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

import template_cards as tc
from forge_backend.runtime.launch import Launcher, context_sm_count
from forge_backend.runtime.nvrtc import compile_candidate
from forge_backend.search.templates import family_for
from forge_backend.verify import verify
from planted import candidate, unary_card

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or not hasattr(torch.cuda, "green_contexts"), reason="needs CUDA green contexts"),
    pytest.mark.skipif(not os.environ.get("KFORGE_GREEN_CHILD"), reason="runs in a process of its own")]
DEV = torch.device("cuda", 0)
SOFTCAP = "to_float32(mul(tanh(div(x0,30.0)),30.0))"


@contextmanager
def green(sms: int):
    """A green context of ``sms`` SMs of GPU 0, current on this thread, its stream current in torch."""
    ctx = torch.cuda.green_contexts.GreenContext.create(num_sms=sms, device_id=0)
    previous = torch.cuda.current_stream()
    ctx.set_context()
    try:
        stream = ctx.Stream()
        with torch.cuda.stream(stream):
            yield ctx
        stream.synchronize()
    finally:
        ctx.pop_context()
        torch.cuda.set_stream(previous)


def root_of(card):
    fam = family_for(card)
    params = fam.root_params(card)
    assert params["strategy"] == "relay", params
    cand = fam.generate(card, params)
    return cand, compile_candidate(cand, card.arch).cubin


# the relay roots of the rows of >= 64 MB under 80% of the copy bandwidth, and the held fp32 group norm whose rows
# put up to 8 pieces of a group in a block at 72 SMs (its progress rule's limit: 7 slots and 1 held)
GREEN_RELAY = [
    (tc.softmax((64, 262144), "bfloat16"), 112),
    (tc.softmax((64, 262144), "bfloat16"), 72),
    (tc.softmax_fused(SOFTCAP, [((64, 262144), "bfloat16")]), 104),
    (tc.group_norm(1, 512, 128, 128, dtype="float32", used=(0,)), 112),
    (tc.group_norm(1, 128, 1024, 1024, dtype="float32", used=(0,)), 72),
]


@pytest.mark.parametrize("case", GREEN_RELAY, ids=lambda c: f"{c[0].op.removeprefix('aten.')}-" +
                         "x".join(map(str, c[0].inputs[0].spec.shape)) + f"-{c[1]}sms")
def test_relay_root_in_a_green_context_takes_its_sms_and_passes_the_verifier(case):
    card, sms = case
    cand, cubin = root_of(card)
    counters.clear()
    with green(sms):
        held = context_sm_count(DEV.index)
        assert held < 132 and held >= sms, held  # the driver may round a request up to its SM granularity
        run = Launcher(card, cand, cubin, DEV)
        assert run.launches[0].grid == (held, 1, 1)
        assert counters["kforge"]["verified_at_sm_count"] == 1 and run.refused is None  # verified as it was built
        rep = verify(card, run.launch_into, run.allocate_outputs, DEV)
    assert rep.ok, (card.op, sms, rep.failed_check, rep.message)
    assert context_sm_count(DEV.index) == torch.cuda.get_device_properties(0).multi_processor_count


def test_a_grid_of_132_in_a_green_context_is_refused_and_runs_pytorchs_op(caplog):
    """A relay record resolved for 132 SMs (a shipped record's grid) launched in a context of 112: the driver
    refuses the cooperative launch, the call and the next run PyTorch's op, and the context goes on working."""
    card = tc.softmax((64, 262144), "bfloat16")
    cand, cubin = root_of(card)
    counters.clear()
    with green(112):
        run = Launcher(card, cand, cubin, DEV, num_sms=132, fallback=lambda inputs: [torch.softmax(inputs[0], -1)])
        x = torch.randn(64, 262144, device=DEV, dtype=torch.bfloat16)
        with caplog.at_level("WARNING", logger="kforge"):
            ys = [run([x])[0] for _ in range(2)]
        want = torch.softmax(x, -1)
        for y in ys:
            torch.testing.assert_close(y, want)
    assert "COOPERATIVE_LAUNCH_TOO_LARGE" in run.refused and counters["kforge"]["launch_fallback"] == 2
    assert caplog.text.count("the driver refused kernel") == 1
    assert float(torch.ones(1, device=DEV).add_(1)) == 2.0


def test_kernels_loaded_outside_a_green_context_are_called_inside_it():
    """The launchers a compiled model holds were built in the primary context: a plain kernel runs in the green
    context's stream, and the relay's grid of 132 is refused there and runs PyTorch's op."""
    relu_card = unary_card("aten.relu.default", 1 << 20)
    c = candidate("relu_good")
    relu = Launcher(relu_card, c, compile_candidate(c, "sm_90").cubin, DEV, fallback=lambda i: [torch.relu(i[0])])
    card = tc.softmax((64, 262144), "bfloat16")
    cand, cubin = root_of(card)
    relay = Launcher(card, cand, cubin, DEV, fallback=lambda inputs: [torch.softmax(inputs[0], -1)])
    assert relay.launches[0].grid == (torch.cuda.get_device_properties(0).multi_processor_count, 1, 1)
    counters.clear()
    with green(112):
        x = torch.randn(1 << 20, device=DEV)
        (y,) = relu([x])
        s = torch.randn(64, 262144, device=DEV, dtype=torch.bfloat16)
        (p,) = relay([s])
        torch.testing.assert_close(y, torch.relu(x))
        torch.testing.assert_close(p, torch.softmax(s, -1))
    assert counters["kforge"]["kernel_calls"] == 1 and relu.refused is None
    assert counters["kforge"]["verified_at_sm_count"] == 0  # built for the whole GPU, as verified
    assert counters["kforge"]["launch_fallback"] == 1 and "COOPERATIVE_LAUNCH_TOO_LARGE" in relay.refused


def test_a_layout_whose_progress_rule_fails_at_the_contexts_sms_is_not_used_there(caplog):
    """Note [a plan resolved for SMs it was not verified on]: 538 pieces a row with a lag of 5 needs at least 90 blocks
    (it passes at 132). Built in a green context of 72 SMs, the kernel would return without writing; the launcher
    verifies it as it is built, and its calls run PyTorch's op, or without a fallback the build fails."""
    from forge_backend.errors import CandidateFailure

    card, params = tc.relay_from_90_blocks()
    cand = family_for(card).generate(card, params)
    cubin = compile_candidate(cand, card.arch).cubin
    counters.clear()
    with green(72):
        with caplog.at_level("WARNING", logger="kforge"):
            run = Launcher(card, cand, cubin, DEV, fallback=lambda inputs: [torch.softmax(inputs[0], -1)])
        assert run.launches[0].grid == (context_sm_count(DEV.index), 1, 1)
        x = torch.randn(2, 1100000, device=DEV)
        torch.testing.assert_close(run([x])[0], torch.softmax(x, -1))
        with pytest.raises(CandidateFailure, match="unwritten"):
            Launcher(card, cand, cubin, DEV)
    assert "unwritten" in run.refused and counters["kforge"]["launch_fallback"] == 1
    assert counters["kforge"]["verified_at_sm_count"] == 2 and counters["kforge"]["kernel_calls"] == 0
    assert caplog.text.count("is not used on the") == 1
    whole = Launcher(card, cand, cubin, DEV)
    assert whole.refused is None and verify(card, whole.launch_into, whole.allocate_outputs, DEV).ok


def test_a_model_compiled_in_a_green_context_runs_its_shipped_relay_kernel_there(monkeypatch):
    """torch.compile inside a green context of 112 SMs: the shipped group norm [1,512,128,128] bf16 (a relay of one
    block per SM) is re-verified (in the worker, on the whole GPU), loaded for the context's 112 SMs, verified there
    once as it is built, and called; the output matches eager. (conftest leaves out the shipped records; this test
    names them.)"""
    monkeypatch.setenv("KFORGE_SHIPPED_DIR", str(Path(__file__).parent.parent / "kernels_cache"))
    model = torch.nn.GroupNorm(32, 512, eps=1e-6).cuda().to(torch.bfloat16).eval()  # the shipped card: the VAE's eps
    x = torch.randn(1, 512, 128, 128, device=DEV, dtype=torch.bfloat16)
    counters.clear()
    with torch.no_grad(), green(112):
        ref = model(x).float()
        compiled = torch.compile(model, backend="kforge", options={"inner": "eager", "search": "off"})
        out = compiled(x).float()
        out = compiled(x).float()
    assert counters["kforge"]["verified_at_sm_count"] == 1, dict(counters["kforge"])
    # two calls, one kernel call: the eager path's first call asks PyTorch's op for its output strides (Note
    # [outputs laid out as eager lays them out] in eager_layout.py)
    assert counters["kforge"]["kernel_calls"] == 1 and counters["kforge"]["launch_fallback"] == 0, \
        dict(counters["kforge"])
    assert ((out - ref).norm() / ref.norm()).item() < 2e-2
