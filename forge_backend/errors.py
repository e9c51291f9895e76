"""The kforge error hierarchy.

Note [failed candidate vs broken infrastructure]
A candidate kernel that fails to compile, verify, launch or finish in time is *data*: it becomes a
:class:`CandidateFailure` carried in a result record, which feeds the search, the LLM prompt and the UI. Anything else
(a bug in kforge, a missing toolchain) is an exception that propagates with ``raise ... from``; the backend's failure
policy then falls back to PyTorch unless ``KFORGE_STRICT=1``.
"""
from __future__ import annotations


class KforgeError(Exception):
    """Base class of every error kforge raises on purpose."""


class BadOption(KforgeError, ValueError):
    """A configuration value is invalid. The message names the option and the valid values."""


class UnsupportedNode(KforgeError):
    """A graph node cannot be described by a signature (dynamic shapes, unknown meta). Left to PyTorch."""


class ContractViolation(KforgeError):
    """A candidate's source or launch plan breaks the kernel contract (host code, bad include, bad expression)."""


class PlanError(KforgeError):
    """A launch-plan expression could not be evaluated for a signature's sizes."""


class ToolchainUnavailable(KforgeError):
    """NVRTC, the CUDA driver or a GPU is not available on this machine."""


class ModelSpecError(KforgeError):
    """A MODEL_SPEC could not be loaded; the message says what was expected."""


class CandidateFailure(KforgeError):
    """A candidate failed in a named way. ``stage`` is one of STAGES; ``log`` carries the compiler or verifier text."""

    STAGES = ("parse", "screen", "plan", "compile", "launch", "verify", "timeout", "crash", "slower")

    def __init__(self, stage: str, message: str, log: str = "") -> None:
        if stage not in self.STAGES:
            raise ValueError(f"unknown failure stage {stage!r}; valid: {self.STAGES}")
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message
        self.log = log
