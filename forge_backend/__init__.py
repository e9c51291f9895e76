"""kforge: a torch.compile backend that searches, verifies and caches faster CUDA kernels per operator signature.

``torch.compile(model, backend="kforge")`` finds this package through its ``torch_dynamo_backends`` entry point;
importing the package also registers the backend by name.

Layering (imports point downwards only):
    cli, cli_cache, cli_common    -> everything below
    ui/ (data, kernels, server)   -> search.records, runtime.live_record, cards, store (record, queue, local,
                                     shipped, team)
    backend                       -> capture, rewrite, registry, config; runtime.provider (lazily)
    capture, rewrite              -> signature, cards, selection, registry
    runtime/ (nvrtc, launch, worker, provider) -> contract, verify, measure, store, search
    search/ (mcts, templates, llm) -> contract, cards          (never CUDA or Dynamo)
    cards, roofline, signature    -> contract (CONTRACT_VERSION), selection
    contract, selection, errors, config   leaf modules
"""
from __future__ import annotations

__version__ = "0.1.0"


def _register() -> None:
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    from .backend import kforge_backend

    if "kforge" not in _BACKENDS or _BACKENDS.get("kforge") is None:
        register_backend(kforge_backend, name="kforge")


_register()
