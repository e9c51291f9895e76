"""GPU: Note [one search of a signature at a time] (store/claims.py) with real compiles: two processes compile one
model on one GPU at once, sharing a cache directory, and no signature is searched twice. The one that meets a
signature the other is searching waits and takes its record, or finds it in the cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parent.parent

COMPILE = textwrap.dedent("""
    import json, sys, time
    import torch
    from torch._dynamo.utils import counters

    class Model(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x * 0.5, dim=-1), torch.nn.functional.gelu(x)

    x = torch.randn(96, 5000, device="cuda")
    start = float(sys.argv[2])
    while time.time() < start:  # both processes compile at the same moment
        time.sleep(0.01)
    f = torch.compile(Model(), backend="kforge", options={"cache_dir": sys.argv[1], "inner": "eager",
                                                          "search_iterations": 6, "search_seconds": 240})
    y, g = f(x)
    torch.testing.assert_close(y, torch.softmax(x * 0.5, dim=-1))
    torch.testing.assert_close(g, torch.nn.functional.gelu(x))
    print(json.dumps(dict(counters["kforge"])))
""")


def test_two_processes_compiling_one_model_search_each_signature_once(tmp_path):
    import time

    env = {**os.environ, "KFORGE_SHIPPED_DIR": str(tmp_path / "no-shipped"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = str(time.time() + 20.0)  # after both have imported torch and made their inputs
    procs = [subprocess.Popen([sys.executable, "-c", COMPILE, str(tmp_path / "cache"), start], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=540) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    counts = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    searched = sum(c.get("searches", 0) for c in counts)
    taken = sum(c.get("searched_elsewhere", 0) + c.get("cache_hit", 0) for c in counts)
    assert searched >= 1, counts
    assert taken == searched, f"each signature is searched by one process and taken by the other: {counts}"
