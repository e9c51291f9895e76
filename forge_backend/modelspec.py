"""MODEL_SPEC: how the CLI names a model.

Either a Python file exposing ``get_model()`` and ``get_inputs()`` (``examples/resnet50.py``), optionally with
``::NAME`` to pick another pair of functions ``get_model_NAME`` / ``get_inputs_NAME``; or ``package.module:callable``
where the callable returns ``(model, inputs)``.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from .errors import ModelSpecError


@dataclass(frozen=True)
class LoadedModel:
    name: str
    model: torch.nn.Module
    inputs: tuple[Any, ...]


def _as_tuple(inputs: Any) -> tuple[Any, ...]:
    return tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)


def load(spec: str) -> LoadedModel:
    """Load a model and its example inputs from a MODEL_SPEC string."""
    path_part, _, variant = spec.partition("::")
    if path_part.endswith(".py"):
        path = Path(path_part)
        if not path.exists():
            raise ModelSpecError(f"model spec file {path} does not exist")
        mod_name = f"kforge_spec_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(mod_name, path)
        if module_spec is None or module_spec.loader is None:
            raise ModelSpecError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module
        module_spec.loader.exec_module(module)
        suffix = f"_{variant}" if variant else ""
        get_model: Callable | None = getattr(module, f"get_model{suffix}", None)
        get_inputs: Callable | None = getattr(module, f"get_inputs{suffix}", None)
        if get_model is None or get_inputs is None:
            raise ModelSpecError(f"{path} must define get_model{suffix}() and get_inputs{suffix}()")
        model = get_model()
        return LoadedModel(spec, model, _as_tuple(get_inputs()))
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise ModelSpecError(f"model spec {spec!r} is neither FILE.py[::VARIANT] nor package.module:callable")
    if module_name.endswith(".py"):  # FILE.py:NAME, the two forms mixed: a file takes its variant after two colons
        raise ModelSpecError(f"model spec {spec!r}: a file's variant follows two colons, "
                             f"{module_name}::{attr} (get_model_{attr} and get_inputs_{attr})")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ModelSpecError(f"cannot load {spec!r}: {e}") from e
    result = fn()
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ModelSpecError(f"{spec!r} must return (model, inputs)")
    return LoadedModel(spec, result[0], _as_tuple(result[1]))
