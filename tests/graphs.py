"""Build ATen graphs (as AOTAutograd would hand them to kforge) for tests."""
from __future__ import annotations

import torch
import torch.fx
from torch._functorch.aot_autograd import aot_module_simplified


def aten_graph(fn, *inputs) -> torch.fx.GraphModule:
    """The inference ATen graph kforge's forward compiler receives for ``fn(*inputs)``."""
    captured = []

    def fw(gm, example_inputs):
        captured.append(gm)
        return gm.forward

    def backend(gm, example_inputs, **kw):
        return aot_module_simplified(gm, example_inputs, fw_compiler=fw, decompositions={})

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    torch._dynamo.reset()
    return captured[0]


def op_nodes(gm: torch.fx.GraphModule, op: str) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target) == op]
