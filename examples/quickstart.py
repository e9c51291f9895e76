"""The smallest useful kforge run: a block with the ops kforge targets (layer norm, softmax, group norm, global
pool). As a MODEL_SPEC: `kforge cards examples/quickstart.py` / `kforge prewarm examples/quickstart.py`.
Run directly (`python examples/quickstart.py`) it compiles the block with backend="kforge" and reports what was
replaced; without a GPU every op stays with PyTorch and it says so."""
from __future__ import annotations

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, width: int = 1024, channels: int = 256) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(width)
        self.gn = torch.nn.GroupNorm(32, channels)

    def forward(self, tokens: torch.Tensor, image: torch.Tensor):
        attn = F.softmax(self.ln(tokens), dim=-1)
        pooled = F.adaptive_avg_pool2d(self.gn(image), 1)
        return attn, pooled


def _device_dtype() -> tuple[torch.device, torch.dtype]:
    if torch.cuda.is_available():
        return torch.device("cuda"), torch.bfloat16
    return torch.device("cpu"), torch.float32


def get_model() -> torch.nn.Module:
    device, dtype = _device_dtype()
    return Block().eval().to(device, dtype)


def get_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    device, dtype = _device_dtype()
    g = torch.Generator(device=device).manual_seed(0)
    return (torch.randn(4096, 1024, generator=g, device=device).to(dtype),
            torch.randn(8, 256, 64, 64, generator=g, device=device).to(dtype))


def main() -> None:
    from forge_backend.backend import make_backend

    model, inputs = get_model(), get_inputs()
    reports = []
    with torch.no_grad():
        expected = model(*inputs)
        got = torch.compile(model, backend=make_backend(on_report=reports.append))(*inputs)
    for g_, e in zip(got, expected):
        torch.testing.assert_close(g_.float(), e.float(), rtol=2e-2, atol=2e-2)
    for r in reports:
        print(f"{r.candidates} candidate ops in {r.signatures} signatures; replaced: "
              f"{[op for op, _, _ in r.replaced] or 'none'} ({r.seconds:.1f}s of kforge work)")
    if not torch.cuda.is_available():
        print("No CUDA GPU here: every op stayed with PyTorch (outputs match eager).")


if __name__ == "__main__":
    main()
