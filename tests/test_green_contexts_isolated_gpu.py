"""GPU: tests/test_green_context_gpu.py in a process of its own (its docstring says why), every test passing."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or not hasattr(torch.cuda, "green_contexts"), reason="needs CUDA green contexts")]


def test_the_green_context_tests_pass_in_their_own_process():
    here = Path(__file__).parent
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "-W",
                            "ignore", str(here / "test_green_context_gpu.py")], capture_output=True, text=True,
                           timeout=600, cwd=here.parent, env={**os.environ, "KFORGE_GREEN_CHILD": "1"})
    tail = child.stdout[-6000:] + child.stderr[-3000:]
    assert child.returncode == 0, tail
    summary = re.search(r"(\d+) passed", child.stdout)
    assert summary and int(summary.group(1)) == 9 and " skipped" not in child.stdout.splitlines()[-1], tail
