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
    """Every test starts with a clean Dynamo cache, its own kforge cache directory and no shipped records (the
    repository's kernels_cache/ would otherwise answer a "cold" compile; tests of the shipped tier name their folder)."""
    for k in list(os.environ):
        if k.startswith("KFORGE_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("KFORGE_CACHE_DIR", str(tmp_path / "kforge-cache"))
    monkeypatch.setenv("KFORGE_SHIPPED_DIR", str(tmp_path / "no-shipped-records"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
