"""The fused pointwise expression: what one ``kforge.pointwise`` signature computes, as a small canonical language.

A group of pointwise ATen nodes (fusion.py) is described by one expression over its external inputs ``x0..xk``,
numbered in order of first appearance, e.g. ``mul(silu(x0),x0)`` or ``to_bfloat16(mul(relu(x0),2.0))``::

    expr  := NAME '(' arg (',' arg)* ')' | 'x' DIGITS | NUMBER
    arg   := expr | 'alpha=' NUMBER              (add / sub only; omitted when 1)
    NAME  := silu gelu gelu_tanh relu sigmoid tanh add sub mul div to_float32 to_float16 to_bfloat16
    NUMBER:= Python's repr of an int or float (``2``, ``0.1``, ``1e-05``, ``-inf``, ``nan``)

Each name is one ATen overload (OPS). Dtypes follow from the inputs' dtypes by PyTorch's type promotion, so only
casts spell one. This module parses (a tiny recursive-descent parser, never ``eval``), prints, infers dtypes, and
evaluates an expression with the same ATen ops, in the same order and dtypes, as eager ran them: that is the
reference for the verifier, the eager baseline for the timer, and the fallback. The printed form is part of the
signature key: changing what a printed expression means must bump ``signature.SIGNATURE_VERSION``.

Leaf module: imports nothing from kforge.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Sequence, Union

import torch

FUSED_OP = "kforge.pointwise"  # the op string of a fused group's signature; not an ATen overload
# softmax over the last dim of an expression, cast to the output's dtype (softmax_fusion.py); not an ATen overload
SOFTMAX_OP = "kforge.softmax"
# a layer/rms norm followed by an expression of its output (norm_fusion.py); not an ATen overload
NORM_OP = "kforge.norm"
CAST_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class PointwiseOp:
    name: str  # the expression's spelling
    aten: str  # str(OpOverload)
    arity: int
    approximate: str | None = None  # gelu only
    dtype: str | None = None  # casts only


OPS: dict[str, PointwiseOp] = {op.name: op for op in (
    PointwiseOp("silu", "aten.silu.default", 1),
    PointwiseOp("gelu", "aten.gelu.default", 1, approximate="none"),
    PointwiseOp("gelu_tanh", "aten.gelu.default", 1, approximate="tanh"),
    PointwiseOp("relu", "aten.relu.default", 1),
    PointwiseOp("sigmoid", "aten.sigmoid.default", 1),
    PointwiseOp("tanh", "aten.tanh.default", 1),
    PointwiseOp("add", "aten.add.Tensor", 2),
    PointwiseOp("sub", "aten.sub.Tensor", 2),
    PointwiseOp("mul", "aten.mul.Tensor", 2),
    PointwiseOp("div", "aten.div.Tensor", 2),
    *(PointwiseOp(f"to_{d}", "aten._to_copy.default", 1, dtype=d) for d in CAST_DTYPES),
)}
WITH_ALPHA = frozenset({"add", "sub"})
FUSABLE_ATEN = frozenset(op.aten for op in OPS.values())


@dataclass(frozen=True)
class Input:
    index: int


@dataclass(frozen=True)
class Const:
    value: int | float

    # equal by printed form: 0.0 and -0.0 differ (signed zeros), nan equals nan, 1 and 1.0 stay apart
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and repr(self.value) == repr(other.value)

    def __hash__(self) -> int:
        return hash(repr(self.value))


@dataclass(frozen=True)
class Call:
    op: str
    args: tuple["Expr", ...]
    alpha: int | float | None = None  # add / sub: self + alpha * other; None means 1


Expr = Union[Input, Const, Call]


def number_text(v: int | float) -> str:
    """Python's repr, which round-trips exactly through float() / int()."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expression constants are ints or floats, not {v!r}")
    return repr(v)


def to_text(e: Expr, limit: int = 4000) -> str:
    """The canonical printed form. Shared subexpressions print once per use; ValueError past ``limit`` chars."""
    memo: dict[int, str] = {}

    def show(n: Expr) -> str:
        if id(n) in memo:
            return memo[id(n)]
        if isinstance(n, Input):
            s = f"x{n.index}"
        elif isinstance(n, Const):
            s = number_text(n.value)
        else:
            parts = [show(a) for a in n.args]
            if n.alpha is not None and n.alpha != 1:
                parts.append(f"alpha={number_text(n.alpha)}")
            s = f"{n.op}({','.join(parts)})"
        if len(s) > limit:
            raise ValueError(f"expression longer than {limit} characters")
        memo[id(n)] = s
        return s

    return show(e)


# ---------------------------------------------------------------------------------------------------------------------
# parsing

_TOKEN = re.compile(r"\s*(?:(?P<num>-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?))(?![\w.])|(?P<name>[A-Za-z_]\w*)"
                    r"|(?P<punct>[(),=]))")
_INT = re.compile(r"-?\d+")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"expression {text!r}: cannot read from position {pos} ({text[pos:pos + 10]!r})")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _number(tok: str) -> int | float:
    return int(tok) if _INT.fullmatch(tok) else float(tok)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.toks, self.i = text, _tokens(text), 0

    def fail(self, why: str) -> ValueError:
        return ValueError(f"expression {self.text!r}: {why}")

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i] if self.i < len(self.toks) else ("end", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok[0] == "end" or (value is not None and tok[1] != value):
            raise self.fail(f"expected {value or 'more'} at token {self.i}, found {tok[1] or 'the end'!r}")
        self.i += 1
        return tok

    def expr(self, depth: int = 0) -> Expr:
        if depth > 200:
            raise self.fail("nested too deeply")
        kind, tok = self.take()
        if kind == "num":
            return Const(_number(tok))
        if kind != "name":
            raise self.fail(f"unexpected {tok!r}")
        if is_input_name(tok):
            return Input(int(tok[1:]))
        if tok not in OPS:
            raise self.fail(f"unknown op {tok!r}; known: {', '.join(OPS)}")
        return self.call(tok, depth)

    def call(self, name: str, depth: int) -> Call:
        self.take("(")
        args: list[Expr] = []
        alpha = None
        while True:
            if self.peek() == ("name", "alpha") and self.toks[self.i + 1:self.i + 2] == [("punct", "=")]:
                if name not in WITH_ALPHA or alpha is not None:
                    raise self.fail(f"{name} takes no alpha")
                self.i += 2
                kind, tok = self.take()
                if kind != "num":
                    raise self.fail(f"alpha must be a number, not {tok!r}")
                alpha = _number(tok)
            else:
                args.append(self.expr(depth + 1))
            tok = self.take()[1]
            if tok == ")":
                break
            if tok != ",":
                raise self.fail(f"expected ',' or ')', found {tok!r}")
        if len(args) != OPS[name].arity:
            raise self.fail(f"{name} takes {OPS[name].arity} operand(s), got {len(args)}")
        if not isinstance(args[0], (Input, Call)):
            raise self.fail(f"the first operand of {name} must be a tensor")
        return Call(name, tuple(args), None if alpha == 1 else alpha)


@functools.lru_cache(maxsize=512)  # the fallback and the eager timer parse on every call; the tree is immutable
def parse(text: str) -> Call:
    """Parse and check an expression; ValueError names what is wrong. The root must be an op call, and inputs must
    be numbered x0, x1, ... in order of first appearance (the canonical form)."""
    p = _Parser(text)
    root = p.expr()
    if p.peek()[0] != "end":
        raise p.fail(f"unexpected {p.peek()[1]!r} after the expression")
    if not isinstance(root, Call):
        raise p.fail("the expression must be an op call")
    order = [n.index for n in walk(root) if isinstance(n, Input)]
    first = list(dict.fromkeys(order))
    if first != list(range(len(first))):
        raise p.fail(f"inputs must be numbered x0..x{len(first) - 1} in order of first use, got {first}")
    return root


def walk(e: Expr) -> list[Expr]:
    """Every node in printing order (pre-order, left to right), repeats included."""
    out = [e]
    if isinstance(e, Call):
        for a in e.args:
            out += walk(a)
    return out


def distinct_calls(e: Expr) -> list[Call]:
    """Each distinct call once, operands before their users (the order of evaluation)."""
    seen: dict[Call, None] = {}

    def visit(n: Expr) -> None:
        if isinstance(n, Call) and n not in seen:
            for a in n.args:
                visit(a)
            seen[n] = None

    visit(e)
    return list(seen)


def is_input_name(name: str) -> bool:
    """``x0``, ``x1``, ...: the name of an expression input, as signatures and cards name them."""
    return bool(re.fullmatch(r"x(?:0|[1-9]\d*)", name))


def is_prologue_name(name: str) -> bool:
    """``p0``, ``p1``, ...: an input of a norm group's prologue (Note [a norm takes the residual add before it])."""
    return bool(re.fullmatch(r"p(?:0|[1-9]\d*)", name))


def n_inputs(e: Expr) -> int:
    return 1 + max((n.index for n in walk(e) if isinstance(n, Input)), default=-1)


# ---------------------------------------------------------------------------------------------------------------------
# dtypes and evaluation


def result_dtype(e: Expr, input_dtypes: Sequence[str], memo: dict | None = None) -> str:
    """The dtype eager gives ``e`` when the inputs have ``input_dtypes`` (float inputs; Python numbers never promote a
    float tensor). ``memo`` (Expr -> dtype) collects every subexpression's dtype."""
    memo = {} if memo is None else memo
    if e in memo:
        return memo[e]
    if isinstance(e, Input):
        out = input_dtypes[e.index]
    elif isinstance(e, Const):
        raise ValueError("a constant has no tensor dtype")
    else:
        op = OPS[e.op]
        tensor_dtypes = [result_dtype(a, input_dtypes, memo) for a in e.args if not isinstance(a, Const)]
        if op.dtype is not None:
            out = op.dtype
        else:
            dt = getattr(torch, tensor_dtypes[0])
            for other in tensor_dtypes[1:]:
                dt = torch.promote_types(dt, getattr(torch, other))
            out = str(dt).removeprefix("torch.")
    memo[e] = out
    return out


def evaluate(e: Expr | str, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Run the expression (a tree, or its text) with ATen ops, each distinct subexpression once, as eager computed
    each node once."""
    values: list[Any] = []
    for fn, refs, kwargs in _text_program(e) if isinstance(e, str) else _program(e):
        args = [inputs[i] if kind == "in" else values[i] if kind == "tmp" else i for kind, i in refs]
        values.append(fn(*args, **kwargs))
    return values[-1]


@functools.lru_cache(maxsize=512)  # host time on every fallback call and in the eager baseline: keyed by the text
def _text_program(text: str) -> tuple:
    return _program(parse(text))


def _program(e: Expr) -> tuple[tuple[torch._ops.OpOverload, tuple[tuple[str, Any], ...], dict[str, Any]], ...]:
    """The ATen calls of ``e`` in evaluation order: (overload, operand refs, keyword arguments) per distinct call,
    operands as ("in", input index), ("tmp", earlier step) or ("const", number)."""
    calls = distinct_calls(e)
    step = {c: i for i, c in enumerate(calls)}
    program = []
    for c in calls:
        op = OPS[c.op]
        refs = tuple(("in", a.index) if isinstance(a, Input) else ("const", a.value) if isinstance(a, Const)
                     else ("tmp", step[a]) for a in c.args)
        kwargs: dict[str, Any] = {}
        if op.dtype is not None:
            kwargs["dtype"] = getattr(torch, op.dtype)
        if op.approximate is not None:
            kwargs["approximate"] = op.approximate
        if c.alpha is not None:
            kwargs["alpha"] = c.alpha
        program.append((_overload(op.aten), refs, kwargs))
    return tuple(program)


def _overload(name: str) -> torch._ops.OpOverload:
    packet, overload = name.removeprefix("aten.").rsplit(".", 1)
    return getattr(getattr(torch.ops.aten, packet), overload)


def aten_text(e: Expr) -> str:
    """The expression as nested ATen calls, for cards and prompts."""
    if isinstance(e, Input):
        return f"x{e.index}"
    if isinstance(e, Const):
        return number_text(e.value)
    op = OPS[e.op]
    parts = [aten_text(a) for a in e.args]
    if op.dtype is not None:
        parts.append(f"dtype=torch.{op.dtype}")
    if op.approximate is not None:
        parts.append(f"approximate={op.approximate!r}")
    if e.alpha is not None:
        parts.append(f"alpha={number_text(e.alpha)}")
    return f"torch.ops.{op.aten}({', '.join(parts)})"
