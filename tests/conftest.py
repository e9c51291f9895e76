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


@pytest.fixture(autouse=True)
def _gpu_memory_back(request):
    """After a GPU test, stop the search workers of the providers it made and hand its cached memory back. A provider
    a cache directory (cuda_provider.shared) keeps its worker for the process's life, and every test has a cache
    directory of its own: on an 80 GB H100 the suite's workers and cached blocks left too little for the shipped
    kernels' re-verification and the green-context test (fifty-fifth session, out of memory in both)."""
    yield
    if "gpu" not in request.keywords or not torch.cuda.is_available():
        return
    import gc

    from forge_backend.runtime import cuda_provider

    cuda_provider.close_shared()
    gc.collect()
    torch.cuda.empty_cache()
