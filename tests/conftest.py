import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # test helpers (cpu_provider, template_cards, llm_server)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_dynamo(tmp_path, monkeypatch):
    """Every test starts with a clean Dynamo cache and its own kforge cache directory."""
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "kforge-cache"))
    for k in list(os.environ):
        if k.startswith("KFORGE_") and k != "KFORGE_CACHE_DIR":
            monkeypatch.delenv(k)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
