"""GPU: launcher, verifier against planted bad kernels, and crash isolation in the worker process."""
import time

import pytest
import torch

from forge_backend.errors import CandidateFailure
from forge_backend.runtime.launch import Launcher
from forge_backend.runtime.nvrtc import compile_candidate
from forge_backend.runtime.worker import WorkerClient
from forge_backend.verify import verify
from planted import COUNT_PLAN, PLANTED, UNARY_PLAN, candidate, unary_card

pytestmark = pytest.mark.gpu
DEV = torch.device("cuda", 0) if torch.cuda.is_available() else None


def launcher(name, card, plan=None):
    c = candidate(name, plan)
    return Launcher(card, c, compile_candidate(c, "sm_90").cubin, DEV)


def test_good_kernel_runs_on_the_current_stream_and_passes():
    card = unary_card("aten.relu.default", 1000)
    run = launcher("relu_good", card)
    x = torch.randn(1000, device=DEV)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        (y,) = run([x])
    s.synchronize()
    torch.testing.assert_close(y, torch.relu(x))
    rep = verify(card, run.launch_into, run.allocate_outputs, DEV)
    assert rep.ok and rep.trials_passed == 5, rep


@pytest.mark.parametrize("name,card_fn,plan,check", PLANTED, ids=[p[0] for p in PLANTED])
def test_verifier_rejects_planted_kernel(name, card_fn, plan, check):
    card = card_fn()
    run = launcher(name, card, plan)
    rep = verify(card, run.launch_into, run.allocate_outputs, DEV)
    assert not rep.ok and rep.failed_check == check, rep


def test_a_persistent_scratch_is_kept_per_stream_and_per_captured_launch():
    """Note [scratch kept between launches]: count_launches adds to x the launches its scratch has seen. On one stream
    the count goes on from launch to launch; another stream has its own buffer. Note [a persistent scratch in a CUDA
    graph]: each launch captured into a graph has its own buffer, zeroed outside the graph, so the replays count on
    from 0 (a zero fill inside the graph would make every replay read 0), two captured launches count apart, and the
    streams' buffers are untouched by them."""
    card = unary_card("aten.relu.default", 1000)
    run = launcher("count_launches", card, COUNT_PLAN)
    x = torch.arange(1000, device=DEV, dtype=torch.float32) - 500  # integers: x + n - x is exactly n
    for n in range(3):
        assert torch.equal(run([x])[0] - x, torch.full_like(x, float(n)))
    other = torch.cuda.Stream()
    other.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(other):
        (y,) = run([x])
    torch.cuda.current_stream().wait_stream(other)
    assert float((y - x).abs().max()) == 0.0
    from torch._dynamo.utils import counters

    counters.clear()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (g,) = run([x])
        (h,) = run([x])
    assert counters["kforge"]["graph_scratch_buffers"] == 2  # not the zero fill inside the graph
    for n in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(g - x, torch.full_like(x, float(n))) and torch.equal(h - x, torch.full_like(x, float(n)))
    assert torch.equal(run([x])[0] - x, torch.full_like(x, 3.0))
    (kept,) = run.kept_scratch().values()
    assert kept.view(torch.int32).item() == 4  # the default stream's buffer, shared with the tensor


def test_misaligned_input_falls_back_to_the_original_op():
    from forge_backend.reference import call_aten

    card = unary_card("aten.relu.default", 999)
    c = candidate("relu_good")
    c = type(c)(c.source, c.launches, c.scratch, c.description, c.params, requires_align=16)
    sig = card.signature_obj()
    run = Launcher(card, c, compile_candidate(c, "sm_90").cubin, DEV, fallback=lambda i: call_aten(sig, i))
    x = torch.randn(1000, device=DEV)[1:]  # 4-byte aligned only
    (y,) = run([x])
    torch.testing.assert_close(y, torch.relu(x))


def test_outputs_take_the_strides_asked_for_on_size1_dims():
    """Note [outputs laid out as eager lays them out]: the eager path asks for PyTorch's strides, which may differ from
    the card's on a size-1 dimension; the kernel writes the same elements either way. Through LaidOutAsEager with
    PyTorch's division by 1.0 (which keeps its input's strides), the second call runs the kernel into them."""
    from forge_backend.cards import build_card
    from forge_backend.eager_layout import LaidOutAsEager
    from forge_backend.registry import KernelImpl
    from forge_backend.signature import ArgSpec, OpSignature, TensorSpec

    card_cl, real_cl = (128, 1, 32, 8), (8, 1, 32, 8)
    spec = TensorSpec((1, 8, 4, 4), card_cl, "float32")
    card = build_card(OpSignature("aten.relu.default", (ArgSpec("self", spec),), (spec,), (0,), "sm_90"))
    run = launcher("relu_good", card)
    x = torch.randn(128, device=DEV).as_strided((1, 8, 4, 4), real_cl)
    (y,) = run([x], [real_cl])
    assert y.stride() == real_cl
    torch.testing.assert_close(y, torch.relu(x))
    assert run([x])[0].stride() == card_cl

    def eager(inputs):  # relu, then PyTorch's division by a Python scalar: it keeps the input's strides
        return [torch.ops.aten.div.Tensor(torch.relu(inputs[0]).as_strided(inputs[0].shape, inputs[0].stride()),
                                          1.0)]

    impl = KernelImpl(card.key, card.op, (spec,), run, run_strided=run, eager=eager)
    call = LaidOutAsEager(impl)
    first, second = call([x])[0], call([x])[0]
    assert first.stride() == real_cl and second.stride() == real_cl
    assert call.plan([x]) == (real_cl,)
    torch.testing.assert_close(second, torch.relu(x))


def _evaluate(client, name):
    card = unary_card("aten.relu.default", 1000)
    c = candidate(name)
    return client.call({"cmd": "evaluate", "card": card.to_json(), "candidate": c.to_json(),
                        "cubin": compile_candidate(c, "sm_90").cubin})


def test_fault_and_hang_kill_only_the_worker(tmp_path):
    client = WorkerClient(tmp_path, 0, timeout_s=60)
    try:
        assert _evaluate(client, "relu_good")["ok"]
        with pytest.raises(CandidateFailure) as fault:
            _evaluate(client, "bad_fault")
        assert fault.value.stage in ("crash", "launch", "verify")
        assert _evaluate(client, "relu_good")["ok"]  # a fresh worker carries on
        client.timeout_s = 15
        t0 = time.monotonic()
        with pytest.raises(CandidateFailure) as hang:
            _evaluate(client, "bad_hang")
        assert hang.value.stage == "timeout" and time.monotonic() - t0 < 60
        client.timeout_s = 60
        assert _evaluate(client, "relu_good")["ok"]
        assert client.restarts >= 2
    finally:
        client.close()
    x = torch.randn(10, device=DEV)
    assert torch.relu(x).sum().isfinite()  # and this process's own CUDA context is fine


def test_the_worker_describes_its_gpu_as_the_templates_see_its_arch(tmp_path):
    """The baseline reply's ``gpu`` (what the LLM's prompt says of this GPU) matches the device, and the shared
    memory a block may opt into matches the table the templates keep for its arch (Note [templates for the card's
    architecture] in search/templates/target.py)."""
    from forge_backend.search.templates.target import Target
    from forge_backend.signature import arch_of

    card = unary_card("aten.relu.default", 1000)
    client = WorkerClient(tmp_path, 0, timeout_s=60)
    try:
        gpu = client.call({"cmd": "baseline", "card": card.to_json()})["gpu"]
    finally:
        client.close()
    props = torch.cuda.get_device_properties(DEV)
    assert (gpu["name"], gpu["arch"], gpu["sm_count"]) == (props.name, arch_of(DEV), props.multi_processor_count)
    assert gpu["smem_per_block_kb"] * 1024 == Target(props.major * 10 + props.minor).smem_limit
    assert gpu["l2_mb"] >= 1 and gpu["regs_per_sm"] >= 65536 and gpu["max_threads_per_sm"] >= 1024


# Note [a kernel called with tensors on another GPU] (launch.py). One GPU: a launcher that says it was built for
# another device index takes this GPU's tensors as another GPU's, so its sibling is built and launched here.
def test_a_call_on_another_gpu_runs_on_that_gpus_own_launcher():
    from torch._dynamo.utils import counters

    card = unary_card("aten.relu.default", 1000)
    run = launcher("relu_good", card)
    run._device_index = torch.cuda.device_count()  # no such GPU: every tensor here is on "another" one
    counters.clear()
    x = torch.randn(1000, device=DEV)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        (y,) = run([x])
        (y2,) = run([x.neg()])
    s.synchronize()
    torch.testing.assert_close(y, torch.relu(x))
    torch.testing.assert_close(y2, torch.relu(-x))
    sibling = run._siblings[DEV.index]
    assert sibling is not None and sibling._device_index == DEV.index and len(run._siblings) == 1
    assert counters["kforge"]["other_gpu_calls"] == 2 and counters["kforge"]["kernel_calls"] == 2


def test_a_gpu_that_refuses_the_kernel_runs_pytorchs_op(monkeypatch, caplog):
    from torch._dynamo.utils import counters

    from forge_backend.runtime import launch as launch_mod

    card = unary_card("aten.relu.default", 1000)
    run = Launcher(card, candidate("relu_good"), compile_candidate(candidate("relu_good"), "sm_90").cubin, DEV,
                   fallback=lambda inputs: [torch.relu(inputs[0])])
    run._device_index = torch.cuda.device_count()

    def refuse(*a, **k):
        raise RuntimeError("CUDA driver call cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU")

    monkeypatch.setattr(launch_mod, "load_module", refuse)
    counters.clear()
    x = torch.randn(1000, device=DEV)
    with caplog.at_level("WARNING", logger="kforge"):
        (y,) = run([x])
        (y2,) = run([x])
    torch.testing.assert_close(y, torch.relu(x))
    torch.testing.assert_close(y2, torch.relu(x))
    assert run._siblings == {DEV.index: None} and counters["kforge"]["other_gpu_fallback"] == 2
    assert caplog.text.count("could not be loaded") == 1 and "NO_BINARY_FOR_GPU" in caplog.text


def test_a_cooperative_launch_the_driver_refuses_runs_pytorchs_op(caplog):
    """Note [a launch the driver refuses at call time]: relu as a cooperative launch of one block per 256 elements.
    Over 4M elements its 16,384 blocks cannot all be resident, the driver refuses the launch, and with a fallback the
    call (and every later one, and a graph captured after it) runs PyTorch's op; the verifier and a launcher without
    a fallback still see a launch failure. Over 4,096 elements the same launch runs."""
    from torch._dynamo.utils import counters

    from forge_backend.runtime.launch import LaunchRefused

    plan = {"launches": [{**UNARY_PLAN["launches"][0], "cooperative": True}]}
    c = candidate("relu_good", plan)
    cubin = compile_candidate(c, "sm_90").cubin
    small = Launcher(unary_card("aten.relu.default", 4096), c, cubin, DEV)
    x = torch.randn(4096, device=DEV)
    torch.testing.assert_close(small([x])[0], torch.relu(x))
    card = unary_card("aten.relu.default", 1 << 22)
    bare = Launcher(card, c, cubin, DEV)
    with pytest.raises(LaunchRefused, match="COOPERATIVE_LAUNCH_TOO_LARGE"):
        bare([torch.randn(1 << 22, device=DEV)])
    rep = verify(card, bare.launch_into, bare.allocate_outputs, DEV)
    assert not rep.ok and rep.failed_check == "launch" and "COOPERATIVE_LAUNCH_TOO_LARGE" in rep.message, rep
    run = Launcher(card, c, cubin, DEV, fallback=lambda inputs: [torch.relu(inputs[0])])
    counters.clear()
    x = torch.randn(1 << 22, device=DEV)
    with caplog.at_level("WARNING", logger="kforge"):
        ys = [run([x])[0] for _ in range(2)]
    for y in ys:
        torch.testing.assert_close(y, torch.relu(x))
    assert counters["kforge"]["launch_fallback"] == 2 and counters["kforge"]["kernel_calls"] == 0
    assert caplog.text.count("the driver refused kernel") == 1 and "COOPERATIVE_LAUNCH_TOO_LARGE" in caplog.text
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (g,) = run([x])
    x.neg_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(g, torch.relu(x))
    assert float(torch.ones(1, device=DEV).add_(1)) == 2.0  # the context is still usable


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_kernel_built_on_gpu_0_runs_tensors_of_gpu_1_there():
    card = unary_card("aten.relu.default", 1000)
    run = launcher("relu_good", card)
    dev1 = torch.device("cuda", 1)
    x = torch.randn(1000, device=dev1)
    s = torch.cuda.Stream(dev1)
    with torch.cuda.stream(s):
        (y,) = run([x])
    s.synchronize()
    assert y.device == dev1 and torch.cuda.current_device() == 0
    torch.testing.assert_close(y, torch.relu(x))
