"""The 1-D depthwise convolution (Note [the one convolution kforge takes by default] in selection.py): captured
without opting in, replaced through both inners, and matching eager. CPU only; the kernel is the CPU provider's."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from cpu_provider import DEFAULT_OPS, CpuProvider
from forge_backend.backend import make_backend
from forge_backend.capture import scan

CONV = "aten.convolution.default"


class CausalConv(torch.nn.Module):
    """Qwen 3.5's linear-attention conv: a [B, L, C] activation seen as [B, C, L], depthwise kernel 4, causal."""

    def __init__(self, channels: int = 24, k: int = 4, dense: bool = False) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(channels, channels, k, groups=1 if dense else channels, padding=k - 1,
                                    bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x.shape[1]
        return torch.nn.functional.silu(self.conv(x.transpose(1, 2))[:, :, :seq])


def _ops(model: torch.nn.Module, x: torch.Tensor) -> list[str]:
    with torch.no_grad():
        gm = make_fx(model)(x)
    return [c.signature.op for c in scan(gm).candidates]


def test_depthwise_conv1d_is_a_candidate_and_a_dense_one_is_not():
    x = torch.randn(2, 11, 24)
    assert _ops(CausalConv(), x).count(CONV) == 1
    assert CONV not in _ops(CausalConv(dense=True), x)


@pytest.mark.parametrize("inner", ["eager", "inductor"])
def test_backend_replaces_the_causal_conv_and_matches_eager(inner):
    torch.manual_seed(0)
    model, x = CausalConv().eval(), torch.randn(2, 11, 24)
    provider, reports = CpuProvider(ops=DEFAULT_OPS + (CONV,)), []
    with torch.no_grad():
        expected = model(x)
        got = torch.compile(model, backend=make_backend(provider, reports.append), options={"inner": inner})(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert CONV in [op for r in reports for op, _, _ in r.replaced]
    assert provider.calls[CONV] >= 1
    [card] = [c for c in provider.cards_seen if c.op == CONV]
    assert card.family == "conv" and card.scalars["groups"] == 24


def test_cards_and_prewarm_list_the_depthwise_conv(tmp_path):
    """`kforge cards` / `kforge prewarm` take their cards from model_cards: the depthwise conv is among them on both
    paths, as the compile looks it up; a dense conv is not."""
    from forge_backend.inspect_model import model_cards

    spec = tmp_path / "causal_spec.py"
    spec.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.dw = torch.nn.Conv1d(24, 24, 4, groups=24, padding=3, bias=False)\n"
        "        self.dense = torch.nn.Conv1d(24, 24, 3, padding=1)\n"
        "    def forward(self, x):\n"
        "        return self.dense(self.dw(x.transpose(1, 2))[:, :, :11])\n"
        "def get_model():\n    return M()\n"
        "def get_inputs():\n    return (torch.randn(2, 11, 24),)\n")
    for inner in ("eager", "inductor"):
        convs = [c for c in model_cards(str(spec), inner=inner).cards if c.op == CONV]
        assert [c.scalars["groups"] for c in convs] == [24], inner
