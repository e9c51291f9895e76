"""Compile torchvision ResNet-50 (fp16, batch 1, random weights) with backend="kforge" and print what happened as
JSON: used by tests/test_backend_gpu.py in fresh processes (cold cache, then warm cache). Argument: the inner."""
import json
import sys

import torch
import torchvision
from torch._dynamo.utils import counters

from forge_backend.backend import make_backend


def main() -> None:
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval().cuda().half()
    x = torch.randn(1, 3, 224, 224, device="cuda", dtype=torch.half)
    reports = []
    with torch.no_grad():
        expected = model(x)
        got = torch.compile(model, backend=make_backend(on_report=reports.append), options={"inner": sys.argv[1]})(x)
    err = ((got.float() - expected.float()).norm() / expected.float().norm()).item()
    print(json.dumps({"rel_err": err, "replaced": [op for r in reports for op, _, _ in r.replaced],
                      "counters": dict(counters["kforge"])}))


if __name__ == "__main__":
    sys.exit(main())
