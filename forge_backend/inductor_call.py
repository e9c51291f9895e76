"""Note [Inductor's code calls the kernel, not the op]
Inside Inductor (``inner="inductor"``) a replaced node is a ``kforge::kernel`` node (Note [one generic custom op] in
registry.py), and Inductor lowers it to a fallback kernel: its generated Python calls
``torch.ops.kforge.kernel.default(key, [inputs])``. That call goes from Python into the C++ dispatcher, which boxes the
arguments and calls back into Python for ``registry.call_kernel``. On the H200 host the round trip made one call cost
14.8 us against 9.69 for the launcher alone (benchmarks/results/h200/overhead.md), and the gate charged every replaced
node 5 us for it (Note [what replacing a node costs inside Inductor] in inductor_gate.py).

So the generated code calls ``registry.call_kernel`` itself. On H100 hosts (three calls, one run each,
benchmarks/results/h100/inductor_call_session58*.md and overhead_session58.md) a graph of 16 such nodes on 1024 elements
ran 17.1, 10.6 and 15.3 us a node against 25.9, 15.6 and 18.9 through the op (0.66-0.81x), and one call 9.59 us against
13.54 through the op and 9.17 for the launcher alone. ``install`` registers a codegen for the op in Inductor's table of
custom extern-kernel codegens (``torch._inductor.codegen.custom_extern_kernel_codegen``, present in torch 2.11 and
2.13). For the op's fallback kernel it imports ``call_kernel`` once at the top of the generated module and writes
``bufN = kforge_call_kernel(key, [inputs])`` where Inductor would have written the op's call; everything around the
line stays Inductor's: the lowering, the input layout constraints, the multi-output unpacking and the size asserts on
the outputs. The op stays what Dynamo, FakeTensorMode and ``opcheck`` see; only the line changes.

The line is written only in a compile kforge makes with ``direct_calls`` on (the default; ``KFORGE_DIRECT_CALLS=0``
keeps the op's call, and Inductor's caches key on the choice), and only in the main Python wrapper. Elsewhere
Inductor's own line is kept: the C++ wrapper and AOTInductor (they never ask this table), the FX wrapper, a subgraph's
or a CUDA-graph partition's wrapper (a replay runs no host code per node), and a compile with intermediate hooks (a
debugging mode). A torch without the table keeps the op's call everywhere. Inductor's caches hold the generated module
whole, import line included, so code that a cache serves in another process finds ``call_kernel`` by importing it.

What the dispatcher did besides the call, nothing here needs: the op is inference-only and its kernel is
``CompositeExplicitAutograd`` (no autograd or device guard of its own), and Inductor's code already runs under its
device guard. The profiler no longer shows a ``kforge::kernel`` range around each call; the kernel's own launch is
still in the trace under its NVRTC name.
"""
from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any, Callable, Iterator

from .registry import KERNEL_OP

log = logging.getLogger("kforge")

CALL_NAME = "kforge_call_kernel"  # the name the generated module binds registry.call_kernel to
IMPORT_LINE = f"from forge_backend.registry import call_kernel as {CALL_NAME}"
# on for the compile under way when it was made with direct_calls (a context variable: the codegen runs inside it)
_DIRECT = contextvars.ContextVar("kforge_direct_calls", default=False)


def op_name() -> str:
    """The op's name as Inductor spells it in generated code, and the key of its codegen table."""
    return f"{KERNEL_OP.__module__.replace('._ops.', '.ops.')}.{KERNEL_OP.__name__}"


def install() -> bool:
    """Have Inductor's generated code call kforge kernels directly (see the Note). Idempotent; False where this
    torch has no custom extern-kernel codegen table, and Inductor keeps calling the op."""
    try:
        from torch._inductor.codegen.custom_extern_kernel_codegen import CUSTOM_EXTERN_KERNEL_CODEGEN, CustomCodegen
    except ImportError:
        log.debug("kforge: this torch has no custom extern-kernel codegen; Inductor's code calls the kforge op")
        return False
    CUSTOM_EXTERN_KERNEL_CODEGEN.setdefault(op_name(), CustomCodegen(python=_direct_call))
    return True


@contextlib.contextmanager
def direct_calls(on: bool) -> Iterator[None]:
    """Within: Inductor's code for a kforge node calls the kernel directly if ``on`` (and ``install`` succeeded)."""
    token = _DIRECT.set(on)
    try:
        yield
    finally:
        _DIRECT.reset(token)


def _direct_call(node: Any, writeline: Callable[[Any], None]) -> None:
    """The codegen for one ``kforge::kernel`` fallback kernel in a Python wrapper."""
    import torch._inductor.config as inductor_config
    from torch._inductor.codegen.wrapper import ExternKernelAllocLine, PythonWrapperCodegen
    from torch._inductor.virtualized import V

    wrapper = V.graph.wrapper_code
    if not _DIRECT.get() or type(wrapper) is not PythonWrapperCodegen or inductor_config.generate_intermediate_hooks:
        writeline(ExternKernelAllocLine(wrapper, node))  # Inductor's own line (see the Note)
        return
    wrapper.add_import_once(IMPORT_LINE)
    args = ", ".join([*node.codegen_args(), *node.codegen_kwargs()])
    writeline(f"{node.get_name()} = {CALL_NAME}({args})")
