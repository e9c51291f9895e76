"""The kernel contract: a candidate is data (device-only CUDA source + a declarative launch plan).

Leaf module: it imports nothing from kforge except errors, so proposers, the LLM parser, the runtime and the
verifier all share one definition.

Plan format (JSON-able)::

    {"launches": [{"kernel": "softmax_rows", "grid": ["cdiv(rows, 4)", 1, 1], "block": [128, 1, 1],
                   "smem": "0", "args": ["in:self", "out:0", "i32:rows", "i32:cols"]}],
     "scratch": {"partial": {"bytes": "rows * 8", "zero": false}}}

Arguments, in kernel-parameter order:

* ``in:NAME``      pointer to the input tensor whose schema argument is NAME (``self``, ``input``, ``weight``...)
* ``out:I``        pointer to output I of the ATen op (the card's outputs; only outputs the graph uses exist)
* ``scratch:NAME`` pointer to a scratch buffer declared in ``scratch``
* ``i32:EXPR`` / ``i64:EXPR``  integer arithmetic over the card's named sizes
* ``f32:NAME``     a float scalar of the op (``eps``) or a float literal

A launch may set ``"cooperative": true``: its blocks wait on one another through global memory, so the runtime
launches it with ``cuLaunchCooperativeKernel``, which fails (instead of hanging) when the grid cannot be resident at
once on the device at hand (fewer SMs, less shared memory). The key is left out of the JSON when false, so plans
written before it existed keep their identity.

A scratch buffer may set ``"persist": true`` (with ``"zero": true``): Note [scratch kept between launches].

Expressions are integers, named sizes, ``+ - * // %``, parentheses, and the functions ``cdiv``, ``min``, ``max``.
They are parsed with :mod:`ast` and walked by a tiny evaluator: there is no ``eval``.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import ContractViolation, PlanError

CONTRACT_VERSION = 1

# Headers NVRTC compiles with the CUDA include directory; nothing on disk beyond these.
ALLOWED_INCLUDES = frozenset(
    {
        "cuda_fp16.h",
        "cuda_bf16.h",
        "cuda_fp8.h",
        "cooperative_groups.h",
        "cooperative_groups/reduce.h",
        "cooperative_groups/memcpy_async.h",
        "cuda/pipeline",
        "cuda/barrier",
        "math_constants.h",
        "cuda_pipeline.h",
        "vector_types.h",
        "stdint.h",
        "cstdint",
    }
)

# (pattern, reason). Each is an escape from "device code only" or a way to game the timer.
_FORBIDDEN: tuple[tuple[str, str], ...] = (
    (r"\b__host__\b", "host code (__host__) is not allowed; the contract is device code only"),
    (r"\bint\s+main\s*\(", "a main() function is host code"),
    (r"\bcuda(Malloc|Free|Memcpy|Memset|LaunchKernel|DeviceSynchronize|StreamCreate|GraphLaunch)\w*\s*\(",
     "CUDA runtime API calls are host-side escapes"),
    (r"\b(malloc|free|new|delete)\b\s*[\(\[]?", "device heap allocation is not allowed"),
    (r"\b(clock|clock64)\s*\(", "reading clocks can game the timer"),
    (r"%globaltimer|%clock|%smid", "reading clocks or SM ids in asm can game the timer"),
    (r"\b(printf|fopen|fwrite|system|exec\w*|popen|dlopen)\s*\(", "I/O and process calls are not allowed"),
    (r"\b__nanosleep\s*\(", "sleeping in a kernel is not allowed"),
    (r"\bstatic\s+__device__\b[^;]*=", "static device state persists across launches (stale-result cheats)"),
    (r"^\s*__device__\s+(?!.*\()[^;]*;", "global __device__ variables persist across launches (stale results)"),
)
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
_PRAGMA_RE = re.compile(r"^\s*#\s*(pragma\s+(?!unroll|nv_diag)|line\b|error\b)", re.M)
_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
_KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+' + _BOUNDS + r"void\s+" + _BOUNDS + r"(\w+)\s*\(")
_ARG_RE = re.compile(r"^(in|out|scratch|i32|i64|f32):(.+)$")


@dataclass(frozen=True)
class Launch:
    kernel: str
    grid: tuple[Any, Any, Any]
    block: tuple[Any, Any, Any]
    args: tuple[str, ...]
    smem: Any = 0
    cooperative: bool = False

    def to_json(self) -> dict[str, Any]:
        d = {"kernel": self.kernel, "grid": list(self.grid), "block": list(self.block), "smem": self.smem,
             "args": list(self.args)}
        return d | ({"cooperative": True} if self.cooperative else {})

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Launch":
        try:
            grid, block = list(d["grid"]), list(d["block"])
            grid += [1] * (3 - len(grid))
            block += [1] * (3 - len(block))
            cooperative = d.get("cooperative", False)
            if not isinstance(cooperative, bool):
                raise ContractViolation(f"launch entry's 'cooperative' must be true or false, not {cooperative!r}")
            return cls(str(d["kernel"]), tuple(grid[:3]), tuple(block[:3]), tuple(str(a) for a in d["args"]),
                       d.get("smem", 0), cooperative)
        except (KeyError, TypeError) as e:
            raise ContractViolation(f"launch entry is malformed ({e}); it needs kernel, grid, block and args") from e


# Note [scratch kept between launches]
# A zeroed scratch costs a fill before every launch: a kernel of its own, about 2 us on the H200, which is 8% of a
# 64 MB relay softmax. A buffer declared ``"persist": true`` is zeroed once, on its first launch in a stream, and
# every later launch of the same launcher in that stream gets it back as the previous launch left it. The kernel
# must leave it in a state its next launch accepts (the relay flips an epoch: relay.py). A launch captured into a
# CUDA graph has a buffer of its own: Note [a persistent scratch in a CUDA graph]. The verifier runs a candidate
# several times on one launcher, so a kernel that leaves a state its next launch misreads fails on wrong outputs.
# The key is left out of the JSON when false, so earlier plans keep their identity.

# Note [a persistent scratch in a CUDA graph]
# A captured launch cannot use its stream's kept buffer: the graph may replay on any stream, interleaved with eager
# launches that move the buffer's state on. Until the thirty-second session it took a fresh buffer zeroed inside the
# graph, so the zero fill (a memset node) replayed before every launch: the cost persistence removes from eager
# launches, which the thirty-first session's graph-replay timings showed on the relay rows (0.2-3.1 us slower by graph
# than by events). Now the launcher allocates each captured launch a buffer of its own with the driver, zeroed
# at capture time on a side stream, outside the graph (launch.KeptBuffer.beside_a_capture), and keeps it as long as
# itself. Replays then run the kernel alone, each starting from the state the previous replay left, which the
# contract already requires a persistent kernel to accept. Two captured launches never share a buffer. Where the
# driver refuses the side allocation during a capture, the launch falls back to the zero fill inside the graph.


@dataclass(frozen=True)
class Scratch:
    nbytes: Any
    zero: bool = False
    persist: bool = False  # Note [scratch kept between launches]

    def __post_init__(self) -> None:
        if not isinstance(self.persist, bool):
            raise ContractViolation(f"scratch 'persist' must be true or false, not {self.persist!r}")
        if self.persist and not self.zero:
            raise ContractViolation("a persistent scratch starts zeroed: it needs \"zero\": true")

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.nbytes, "zero": self.zero, **({"persist": True} if self.persist else {})}


@dataclass(frozen=True)
class Candidate:
    """Device source plus launch plan. ``description`` is one line for the UI; ``params`` the template knobs."""

    source: str
    launches: tuple[Launch, ...]
    scratch: tuple[tuple[str, Scratch], ...] = ()
    description: str = ""
    params: tuple[tuple[str, Any], ...] = field(default=())
    requires_align: int = 1  # bytes every tensor pointer must be aligned to (vector loads); checked at call time

    def plan_json(self) -> dict[str, Any]:
        return {"launches": [l.to_json() for l in self.launches],
                "scratch": {k: s.to_json() for k, s in self.scratch},
                "requires_align": self.requires_align}

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "plan": self.plan_json(), "description": self.description,
                "params": {k: v for k, v in self.params}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Candidate":
        plan = d.get("plan") or {}
        return cls.from_parts(d["source"], plan, d.get("description", ""), d.get("params", {}))

    @classmethod
    def from_parts(cls, source: str, plan: Mapping[str, Any], description: str = "",
                   params: Mapping[str, Any] | None = None) -> "Candidate":
        if not isinstance(plan, Mapping) or not plan.get("launches"):
            raise ContractViolation("the launch plan needs a non-empty 'launches' list")
        scratch = []
        for name, s in (plan.get("scratch") or {}).items():
            if isinstance(s, Mapping):
                scratch.append((str(name), Scratch(s.get("bytes", 0), bool(s.get("zero", False)),
                                                   s.get("persist", False))))
            else:
                scratch.append((str(name), Scratch(s)))
        return cls(source, tuple(Launch.from_json(l) for l in plan["launches"]), tuple(scratch), description,
                   tuple(sorted((params or {}).items())), int(plan.get("requires_align", 1)))

    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def identity(self) -> str:
        """Hash of source + plan: two candidates with the same identity are the same kernel."""
        blob = json.dumps({"s": self.source, "p": self.plan_json()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------------------------
# screening


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def kernels_defined(source: str) -> set[str]:
    return set(_KERNEL_RE.findall(_strip_comments(source)))


# A candidate's source, at most. The largest template source is about 22 KB (a relay softmax) and an LLM's a few
# KB; a megabyte source from a shared cache or a model's answer would only cost NVRTC and the screen's regexes time.
MAX_SOURCE_BYTES = 256 * 1024


def screen(candidate: Candidate) -> None:
    """Raise ContractViolation with a clear message when the candidate escapes the contract."""
    size = len(candidate.source.encode("utf-8", "replace"))
    if size > MAX_SOURCE_BYTES:
        raise ContractViolation(f"the source is {size:,} bytes, over the {MAX_SOURCE_BYTES:,} a candidate may have")
    src = _strip_comments(candidate.source)
    for inc in _INCLUDE_RE.findall(src):
        if inc not in ALLOWED_INCLUDES:
            raise ContractViolation(
                f"#include <{inc}> is not allowed; only headers NVRTC ships: {', '.join(sorted(ALLOWED_INCLUDES))}"
            )
    m = _PRAGMA_RE.search(src)
    if m:
        raise ContractViolation(f"preprocessor directive '#{m.group(1).strip()}' is not allowed")
    for pattern, reason in _FORBIDDEN:
        m = re.search(pattern, src, flags=re.M)
        if m:
            line = src[: m.start()].count("\n") + 1
            raise ContractViolation(f"line {line}: {reason} (found {m.group(0).strip()!r})")
    defined = kernels_defined(candidate.source)
    for launch in candidate.launches:
        if launch.kernel not in defined:
            raise ContractViolation(
                f"launch names kernel {launch.kernel!r}, but the source defines only {sorted(defined) or 'none'} "
                f"as extern \"C\" __global__"
            )
        for a in launch.args:
            _check_arg(a, candidate)


def _check_arg(arg: str, candidate: Candidate) -> None:
    m = _ARG_RE.match(arg)
    if not m:
        raise ContractViolation(f"launch argument {arg!r} must start with in:, out:, scratch:, i32:, i64: or f32:")
    kind, rest = m.groups()
    if kind == "scratch" and rest not in dict(candidate.scratch):
        raise ContractViolation(f"argument {arg!r} names an undeclared scratch buffer")
    if kind in ("i32", "i64"):
        parse_expr(rest)


# --------------------------------------------------------------------------------------------------------------------
# the tiny safe evaluator

_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_FUNCS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


def parse_expr(expr: Any) -> ast.AST:
    """Parse and check an integer expression; raises ContractViolation for anything but arithmetic over names."""
    if isinstance(expr, bool):
        raise ContractViolation(f"expression {expr!r} is a bool, not an integer")
    if isinstance(expr, int):
        return ast.Constant(expr)
    if not isinstance(expr, str) or len(expr) > 200:
        raise ContractViolation(f"expression {expr!r} must be an int or a short string")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ContractViolation(f"expression {expr!r} does not parse: {e.msg}") from e
    _check_node(tree.body, expr)
    return tree.body


def _check_node(node: ast.AST, expr: str) -> None:
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, int) or isinstance(node.value, bool):
            raise ContractViolation(f"in {expr!r}: only integer constants are allowed, not {node.value!r}")
    elif isinstance(node, ast.Name):
        if not node.id.isidentifier() or node.id.startswith("_"):
            raise ContractViolation(f"in {expr!r}: name {node.id!r} is not allowed")
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise ContractViolation(f"in {expr!r}: operator {type(node.op).__name__} is not allowed (+ - * // % only)")
        _check_node(node.left, expr)
        _check_node(node.right, expr)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check_node(node.operand, expr)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
            raise ContractViolation(f"in {expr!r}: only calls of {sorted(_FUNCS)} are allowed")
        if len(node.args) != 2:
            raise ContractViolation(f"in {expr!r}: {node.func.id} takes two arguments")
        for a in node.args:
            _check_node(a, expr)
    else:
        raise ContractViolation(f"in {expr!r}: {type(node).__name__} is not allowed (arithmetic over named sizes only)")


def evaluate(expr: Any, sizes: Mapping[str, int]) -> int:
    """Evaluate an integer plan expression over named sizes."""
    return _eval_node(parse_expr(expr), sizes, expr)


def _eval_node(node: ast.AST, sizes: Mapping[str, int], expr: Any) -> int:
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.Name):
        if node.id not in sizes:
            raise PlanError(f"in {expr!r}: unknown size {node.id!r}; known sizes: {', '.join(sorted(sizes))}")
        return int(sizes[node.id])
    if isinstance(node, ast.BinOp):
        left, right = _eval_node(node.left, sizes, expr), _eval_node(node.right, sizes, expr)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            raise PlanError(f"in {expr!r}: division by zero")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        v = _eval_node(node.operand, sizes, expr)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call):
        a, b = (_eval_node(x, sizes, expr) for x in node.args)
        if node.func.id == "cdiv" and b == 0:  # type: ignore[attr-defined]
            raise PlanError(f"in {expr!r}: cdiv by zero")
        return int(_FUNCS[node.func.id](a, b))  # type: ignore[attr-defined]
    raise PlanError(f"cannot evaluate {expr!r}")


@dataclass(frozen=True)
class ResolvedScratch:
    name: str
    nbytes: int
    zero: bool
    persist: bool = False


@dataclass(frozen=True)
class ResolvedLaunch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    args: tuple[tuple[str, Any], ...]  # (kind, payload): ("in", name) ("out", i) ("scratch", name) ("i32", 5)
    cooperative: bool = False


# Note [the GPU's SM count in a plan]
# A plan's expressions name the card's sizes, which are the same on every GPU, and one name that is not: ``num_sms``,
# the streaming multiprocessors of the GPU that launches the kernel (``multi_processor_count``; where a green context of
# that GPU is current as the launcher is built, the context's share: runtime/launch.py's ``context_sm_count``), which
# the launcher passes when it resolves the plan. A grid of one block per SM then fits the GPU it runs on: a cooperative
# layout of ``num_sms`` blocks launches on an H100 PCIe's 114 SMs as on the H200's 132, where a grid of 132 is refused,
# and a kernel must take its block count from ``gridDim`` (the relay does: Note [rows relayed through global memory] in
# search/templates/relay.py). A plan that names it is resolved per GPU, so the same record serves GPUs of one
# architecture with different SM counts; it is verified on each (Note [a record that fails here is searched] in
# runtime/cuda_provider.py), and at a green context's count when a launcher is built in one (Note [a plan resolved for
# SMs it was not verified on] in runtime/launch.py).
NUM_SMS = "num_sms"


def resolve_plan(candidate: Candidate, sizes: Mapping[str, int], floats: Mapping[str, float],
                 num_sms: int | None = None) -> tuple[tuple[ResolvedLaunch, ...], tuple[ResolvedScratch, ...]]:
    """Evaluate every expression of the plan for one signature, and for a GPU of ``num_sms`` SMs where the plan names
    them (Note [the GPU's SM count in a plan]; without it such a plan is a PlanError). Returns (launches, scratch
    buffers)."""
    if num_sms is not None:
        if num_sms < 1:
            raise PlanError(f"a GPU of {num_sms} SMs")
        sizes = {**sizes, NUM_SMS: num_sms}
    launches = []
    for l in candidate.launches:
        grid = tuple(evaluate(g, sizes) for g in l.grid)
        block = tuple(evaluate(b, sizes) for b in l.block)
        smem = evaluate(l.smem, sizes)
        if min(grid) < 1 or min(block) < 1 or block[0] * block[1] * block[2] > 1024 or smem < 0 or grid[1] > 65535 \
                or grid[2] > 65535 or grid[0] >= 2**31:
            raise PlanError(f"launch {l.kernel}: grid {grid}, block {block}, smem {smem} is outside CUDA's limits")
        args = tuple(_resolve_arg(a, sizes, floats) for a in l.args)
        launches.append(ResolvedLaunch(l.kernel, grid, block, smem, args, l.cooperative))  # type: ignore[arg-type]
    scratch = tuple(ResolvedScratch(name, evaluate(s.nbytes, sizes), s.zero, s.persist)
                    for name, s in candidate.scratch)
    for s in scratch:
        if s.nbytes < 0:
            raise PlanError(f"scratch {s.name} has negative size {s.nbytes}")
    return tuple(launches), scratch


def _resolve_arg(arg: str, sizes: Mapping[str, int], floats: Mapping[str, float]) -> tuple[str, Any]:
    m = _ARG_RE.match(arg)
    if not m:
        raise ContractViolation(f"launch argument {arg!r} must start with in:, out:, scratch:, i32:, i64: or f32:")
    kind, rest = m.groups()
    if kind == "out":
        if not rest.isdigit():
            raise ContractViolation(f"argument {arg!r}: out: takes an output index")
        return kind, int(rest)
    if kind in ("in", "scratch"):
        return kind, rest
    if kind in ("i32", "i64"):
        v = evaluate(rest, sizes)
        if kind == "i32" and not -(2**31) <= v < 2**31:
            raise PlanError(f"argument {arg!r} = {v} overflows int32; use i64")
        return kind, v
    if rest in floats:
        return "f32", float(floats[rest])
    try:
        return "f32", float(rest)
    except ValueError as e:
        raise PlanError(f"argument {arg!r}: unknown float scalar; known: {', '.join(sorted(floats))}") from e
