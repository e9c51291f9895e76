"""Decompose single nodes of an ATen graph in place, with Inductor's decomposition table.

Note [a leftover next to a replaced node]
Inside Inductor (Note [kforge inside Inductor]) an overload kforge may replace is taken out of Inductor's
decomposition table for the whole graph. When kforge replaces some of its nodes and leaves others (no kernel for
that signature, or Inductor is faster there), the others still need Inductor's decomposition. Compiling the whole
graph again with the overload decomposed would also decompose the nodes kforge replaced: on the H200 the SD3.5
VAE's 19 replaced group norms (205 us against Inductor's 331 us for one of them) all went back to Inductor because
two small group norms were left to it. So each such node is traced alone through the table and its subgraph
spliced in where it stood. A trace of one node cannot change the strides that other nodes see, unlike a re-trace
of the whole graph; the outputs must keep the node's own strides, or the node is not decomposed here
(``NotDecomposable``) and the caller falls back to the whole-graph retry.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten


class NotDecomposable(Exception):
    """A node cannot be decomposed in place; the caller decomposes its overload (``op``, set by
    ``decompose_nodes``) over the whole graph."""

    op: Any = None


def decompose_nodes(gm: torch.fx.GraphModule, nodes: Sequence[torch.fx.Node],
                    table: Mapping[Any, Callable]) -> None:
    """Replace each of ``nodes`` by the ATen ops ``table`` decomposes it into. On ``NotDecomposable`` the graph
    may hold the nodes done so far; callers discard it (it is the inner compiler's copy)."""
    for node in nodes:
        try:
            _decompose_one(gm.graph, node, table)
        except NotDecomposable as e:
            e.op = node.target
            raise
    if nodes:
        gm.graph.lint()
        gm.recompile()


def _decompose_one(graph: torch.fx.Graph, node: torch.fx.Node, table: Mapping[Any, Callable]) -> None:
    flat, spec = tree_flatten((node.args, node.kwargs))
    at = [i for i, a in enumerate(flat) if isinstance(a, torch.fx.Node)]
    vals = [flat[i].meta.get("val") for i in at]
    if not all(isinstance(v, torch.Tensor) for v in vals):
        raise NotDecomposable(f"{node.format_node()}: an argument is not a tensor with a known value")

    def call(*tensors: torch.Tensor) -> Any:
        args = list(flat)
        for i, t in zip(at, tensors):
            args[i] = t
        a, k = tree_unflatten(args, spec)
        return node.target(*a, **k)

    try:
        sub = _trace(call, vals, table)
    except NotDecomposable:
        raise
    except Exception as e:  # a decomposition that cannot run on these fake values: the whole-graph retry can
        raise NotDecomposable(f"{node.target}: tracing its decomposition failed ({type(e).__name__}: {e})") from e
    with graph.inserting_before(node):
        out = graph.graph_copy(sub.graph, dict(zip(sub.graph.find_nodes(op="placeholder"), (flat[i] for i in at))))
    _check_layout(node, out)
    _reroute(graph, node, out)


def _trace(fn: Callable, vals: list[torch.Tensor], table: Mapping[Any, Callable]) -> torch.fx.GraphModule:
    """The node's decomposition as a graph. The inputs are the graph's fake tensors, so the traced nodes' values
    belong to the same fake mode as the rest of the graph (Inductor's pattern matcher traces replacements alike)."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    if detect_fake_mode(vals) is None:
        raise NotDecomposable("the node's inputs carry no fake tensors")
    with enable_python_dispatcher():
        return make_fx(fn, decomposition_table=dict(table), tracing_mode="real")(*vals)


def _check_layout(node: torch.fx.Node, out: Any) -> None:
    """Every output the graph uses keeps the shape and strides the node had."""
    want = node.meta.get("val")
    got = out if isinstance(out, (tuple, list)) else (out,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    if len(got) != len(want):
        raise NotDecomposable(f"{node.target}: {len(got)} outputs traced, {len(want)} expected")
    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(w, torch.Tensor) or not _used(node, i, len(want)):
            continue
        v = g.meta.get("val") if isinstance(g, torch.fx.Node) else None
        if not isinstance(v, torch.Tensor) or v.shape != w.shape or v.dtype != w.dtype or (
                w.numel() > 1 and _strides(v) != _strides(w)):
            raise NotDecomposable(f"{node.target}: output {i} changes layout in its decomposition")


def _strides(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(s for s, n in zip(t.stride(), t.shape) if n != 1)  # strides of size-1 dims are arbitrary


def _used(node: torch.fx.Node, index: int, outputs: int) -> bool:
    if outputs == 1:
        return bool(node.users)
    return any(u.target is operator.getitem and u.args[1] == index for u in node.users)


def _reroute(graph: torch.fx.Graph, node: torch.fx.Node, out: Any) -> None:
    if isinstance(out, (tuple, list)) and isinstance(node.meta.get("val"), (tuple, list)):
        for user in list(node.users):
            if user.target is not operator.getitem:
                raise NotDecomposable(f"{node.target}: a user reads the output tuple whole")
            user.replace_all_uses_with(out[user.args[1]])
            graph.erase_node(user)
    else:
        node.replace_all_uses_with(out)
    graph.erase_node(node)
