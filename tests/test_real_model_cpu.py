"""An unmodified transformers model (random weights) through backend="kforge" on the CPU, matching eager."""
import pytest
import torch

from cpu_provider import CpuProvider
from forge_backend.backend import make_backend

transformers = pytest.importorskip("transformers")


def tiny_gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=500, n_positions=64,
                                  attn_implementation="eager")
    return transformers.GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_gpt2_matches_eager_with_kernels_swapped_in(inner):
    torch.manual_seed(0)
    model = tiny_gpt2()
    ids = torch.randint(0, 500, (2, 24))
    provider, reports = CpuProvider(), []
    with torch.no_grad():
        expected = model(ids).logits
        compiled = torch.compile(model, backend=make_backend(provider, reports.append), options={"inner": inner})
        got = compiled(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    # GPT-2 has 2 x (ln_1, ln_2) + ln_f layer norms and one attention softmax per layer
    assert provider.calls["aten.native_layer_norm.default"] == 5
    assert provider.calls["aten._softmax.default"] == 2
    assert sum(len(r.replaced) for r in reports) == 7


def test_gpt2_with_real_default_backend_on_cpu():
    model = tiny_gpt2()
    ids = torch.randint(0, 500, (1, 16))
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="kforge")(ids).logits, model(ids).logits)
