"""Adversarial verification of a candidate kernel against PyTorch, on the GPU, on fresh inputs.

A candidate is accepted only if every trial passes every check:
  * fresh random inputs per trial, different seeds and distributions (normal, large magnitude, all negative,
    uniform, and -inf entries plus a fully -inf row where the op allows it: softmax family);
  * outputs pre-filled with NaN (integer outputs with a sentinel) before every launch: an unwritten element shows;
  * inputs unchanged afterwards (bitwise), and nothing written just outside the outputs: each output lives
    between two guard bands of a canary pattern (GUARD_BYTES each), which must be intact after the launch;
  * values within the dtype's tolerance of a float64 reference (one tolerance table, TOLERANCES); NaN positions
    must match the reference's exactly; where PyTorch's own kernel is further from the float64 reference than the
    table allows (large-magnitude fp32 norms), the candidate may be at most 2x PyTorch's own error;
  * a repeat launch on the same inputs must agree bit for bit (races, float atomics in varying order);
  * a last launch on the first trial's own input buffers, one element of each floating input changed, must follow
    the change: a kernel may not answer from what an earlier launch left behind (a kept scratch, a ``__device__``
    array), keyed by addresses or by a sample of the data.
The timeout is the worker's (runtime/worker.py): a hang kills the worker, not the caller.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import torch

from .cards import OperatorCard
from .reference import call_aten

# (rtol, atol scale). atol = atol_scale * mean(|reference|), so an all-zero output can never pass for small-valued
# outputs (softmax over 262144 columns has values near 4e-6).
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-5),
    "float64": (1e-10, 1e-10),
    "float16": (1e-2, 1e-2),
    "bfloat16": (1.6e-2, 1.6e-2),
}
DISTRIBUTIONS = ("normal", "large", "negative", "uniform", "masked")
# Note [the tolerance of a mean]
# atol scales with the output's own magnitude, which is right for values but not for the mean a norm returns: over
# zero-mean data that mean is ~sigma / sqrt(N), far below the data, while any fp32 algorithm that shifts or combines
# partial sums carries a rounding of the data's own magnitude. On the H200 every split group-norm kernel for
# [1, 128, 1024, 1024] fp32 returned means 2.4e-8 off (data ~1: a fifth of an fp32 ulp of 1.0) against an atol of
# 5e-9, so the op was left to PyTorch at 0.12x Inductor's speed. For these outputs atol is at least STAT_EPS fp32
# roundings of the input's mean magnitude; a mean that is wrong by more than the data's rounding still fails.
STAT_OUTPUTS = {"aten.native_group_norm.default": ("out1",), "aten.native_layer_norm.default": ("out1",)}
STAT_EPS = 8 * torch.finfo(torch.float32).eps
_MASKABLE = {"aten._softmax.default", "aten._log_softmax.default", "aten._safe_softmax.default",
             "aten.amax.default", "aten.max_pool2d_with_indices.default", "kforge.softmax"}
_POSITIVE_INPUTS = {"running_var"}


@dataclass
class VerifyReport:
    ok: bool
    failed_check: str | None = None  # mismatch | unwritten | nan | input_modified | out_of_bounds |
    #                                   nondeterministic | stale | launch
    message: str = ""
    trial: int | None = None
    distribution: str | None = None
    output: str | None = None
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    worst_index: list[int] | None = None
    nan_count: int = 0
    expected_nan_count: int = 0
    tolerance: dict[str, float] = field(default_factory=dict)
    trials_passed: int = 0
    compile_log: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def make_inputs(card: OperatorCard, distribution: str, seed: int, device: torch.device) -> list[torch.Tensor]:
    """Fresh inputs for the card, honouring each input's exact strides."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = []
    for t in card.inputs:
        spec = t.spec
        dtype = getattr(torch, spec.dtype)
        base = torch.empty_strided(spec.shape, spec.stride, dtype=dtype, device=device)
        if not dtype.is_floating_point:
            base.copy_(torch.randint(0, 4, spec.shape, generator=gen, device=device))
            out.append(base)
            continue
        x = torch.randn(spec.shape, generator=gen, device=device, dtype=torch.float32)
        if distribution == "large":
            x = x * (1000.0 if dtype == torch.float32 else 100.0)
        elif distribution == "negative":
            x = -(x.abs() + 1.0)
        elif distribution == "uniform":
            x = torch.rand(spec.shape, generator=gen, device=device)
        elif distribution == "masked" and card.op in _MASKABLE and t is card.inputs[0]:
            mask = torch.rand(spec.shape, generator=gen, device=device) < 0.3
            x = x.masked_fill(mask, float("-inf"))
            if x.dim() >= 1 and x.numel() > 0:
                x.view(-1, x.shape[-1])[0].fill_(float("-inf"))  # one fully masked row: PyTorch gives NaN
        if t.name in _POSITIVE_INPUTS:
            x = x.abs() + 0.5
        base.copy_(x)
        out.append(base)
    return out


GUARD_BYTES = 64 * 1024  # per side; a multiple of 256 keeps every output as aligned as a fresh allocation
_CANARY = 0x5A


@dataclass
class _Guarded:
    """An output tensor inside a larger byte buffer whose bytes outside the output hold the canary."""

    out: torch.Tensor
    buf: torch.Tensor  # uint8, GUARD_BYTES + the output's storage span + GUARD_BYTES
    span: int  # bytes of the output's storage span

    def intact(self) -> bool:
        head, tail = self.buf[:GUARD_BYTES], self.buf[GUARD_BYTES + self.span:]
        return bool((head == _CANARY).all()) and bool((tail == _CANARY).all())


def _guarded(like: Sequence[torch.Tensor]) -> list[_Guarded]:
    """Outputs with the shapes, strides and dtypes of ``like``, each between canary guard bands."""
    out = []
    for t in like:
        span = (1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0)) * t.element_size() \
            if t.numel() else 0
        buf = torch.full((GUARD_BYTES * 2 + span,), _CANARY, dtype=torch.uint8, device=t.device)
        view = buf[GUARD_BYTES:GUARD_BYTES + span].view(t.dtype) if span else buf[:0].view(t.dtype)
        out.append(_Guarded(view.as_strided(t.shape, t.stride()), buf, span))
    return out


def _poisoned(outputs: Sequence[torch.Tensor]) -> None:
    for o in outputs:
        if o.dtype.is_floating_point:
            o.fill_(float("nan"))
        elif o.dtype == torch.bool:
            o.fill_(True)
        else:
            o.fill_(torch.iinfo(o.dtype).max)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """A bitwise view for exact comparison (NaN == NaN, -0 != +0)."""
    flat = t.contiguous().view(-1)
    if t.element_size() == 1:
        return flat.view(torch.uint8)
    return flat.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def reference_outputs(card: OperatorCard, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The op on float64-upcast inputs (fp32 upcast where the op refuses float64)."""
    sig = card.signature_obj()
    overrides = {"half_to_float": False} if "half_to_float" in card.scalars else {}
    for dtype in (torch.float64, torch.float32):
        try:
            up = [x.to(dtype) if x.dtype.is_floating_point else x for x in inputs]
            return call_aten(sig, up, **overrides)
        except RuntimeError:
            continue
    return call_aten(sig, list(inputs))


def stat_floor(card: OperatorCard, name: str, inputs: Sequence[torch.Tensor]) -> float:
    """The least atol of output ``name`` (Note [the tolerance of a mean]): 0 unless it is a norm's mean."""
    if name not in STAT_OUTPUTS.get(card.op, ()) or not inputs or not inputs[0].dtype.is_floating_point:
        return 0.0
    x = inputs[0].double()
    finite = x[torch.isfinite(x)]
    return STAT_EPS * finite.abs().mean().item() if finite.numel() else 0.0


def _compare(out: torch.Tensor, ref: torch.Tensor, eager: torch.Tensor, name: str,
             atol_floor: float = 0.0) -> VerifyReport:
    if not out.dtype.is_floating_point:
        bad = (out != ref.to(out.dtype))
        if bad.any():
            idx = bad.nonzero()[0].tolist()
            return VerifyReport(False, "mismatch", f"{name}: integer output differs at {idx}", output=name,
                                worst_index=idx, max_abs_err=float("inf"))
        return VerifyReport(True)
    rtol, ascale = TOLERANCES.get(str(out.dtype).removeprefix("torch."), (1e-2, 1e-2))
    o, r, e = out.double(), ref.double(), eager.double()
    ref_nan, out_nan = torch.isnan(r), torch.isnan(o)
    if (ref_nan != out_nan).any():
        idx = (ref_nan != out_nan).nonzero()[0].tolist()
        check = "unwritten" if int(out_nan.sum()) > int(ref_nan.sum()) else "nan"
        return VerifyReport(False, check, f"{name}: NaN where the reference has none (or the reverse) at {idx}",
                            output=name, worst_index=idx, nan_count=int(out_nan.sum()),
                            expected_nan_count=int(ref_nan.sum()))
    finite = ~ref_nan
    scale = r[finite].abs().mean().item() if finite.any() else 0.0
    atol = max(ascale * scale, atol_floor) + 1e-30
    diff = torch.where(finite, (o - r).abs(), torch.zeros_like(o))
    inf_mismatch = finite & torch.isinf(r) & (o != r)
    diff = torch.where(inf_mismatch, torch.full_like(diff, float("inf")), diff.nan_to_num(0.0))
    bound = atol + rtol * r.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    ratio = diff / bound
    eager_ratio = ((e - r).abs().nan_to_num(0.0) / bound).max().item() if finite.any() else 0.0
    limit = max(1.0, 2.0 * eager_ratio)
    worst = int(ratio.reshape(-1).argmax().item()) if ratio.numel() else 0
    rep = VerifyReport(True, output=name, max_abs_err=float(diff.max().item()) if diff.numel() else 0.0,
                       max_rel_err=float((diff / r.abs().clamp_min(1e-30)).max().item()) if diff.numel() else 0.0,
                       nan_count=int(out_nan.sum()), expected_nan_count=int(ref_nan.sum()),
                       tolerance={"rtol": rtol, "atol": atol, "limit": limit, "eager_ratio": eager_ratio})
    if ratio.numel() and ratio.reshape(-1)[worst].item() > limit:
        rep.ok, rep.failed_check = False, "mismatch"
        rep.worst_index = list(torch.unravel_index(torch.tensor(worst), out.shape)) if out.dim() else []
        rep.worst_index = [int(i) for i in rep.worst_index]
        rep.message = (f"{name}: error {diff.reshape(-1)[worst].item():.3g} at {rep.worst_index} exceeds "
                       f"{limit:.2f} x (atol {atol:.3g} + rtol {rtol:g} x |ref|); ref "
                       f"{r.reshape(-1)[worst].item():.6g}, got {o.reshape(-1)[worst].item():.6g}")
    return rep


LaunchInto = Callable[[Sequence[torch.Tensor], Sequence[torch.Tensor]], None]


@dataclass
class Trial:
    """One trial's fresh inputs with their bit patterns, PyTorch's own outputs and the float64 reference.
    Prepared once per card and reused for every candidate of a search (the reference is the costly part)."""

    index: int
    distribution: str
    inputs: list[torch.Tensor]
    before: list[torch.Tensor]
    eager: list[torch.Tensor]
    reference: list[torch.Tensor]


def prepare_trials(card: OperatorCard, device: torch.device, trials: Sequence[str] = DISTRIBUTIONS,
                   base_seed: int = 1234) -> list[Trial]:
    out = []
    sig = card.signature_obj()
    for i, dist in enumerate(trials):
        if dist == "masked" and card.op not in _MASKABLE:
            dist = "normal"
        inputs = make_inputs(card, dist, base_seed + 7919 * i, device)
        out.append(Trial(i, dist, inputs, [_bits(x).clone() for x in inputs], call_aten(sig, inputs),
                         reference_outputs(card, inputs)))
    return out


def _sync(device: torch.device) -> None:
    """Wait for the launches (a kernel's fault surfaces here). On the CPU there is nothing to wait for: the verifier's
    CPU tests pass kernels written with torch ops (tests/test_verify_cpu.py)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _launched(launch_into: LaunchInto, inputs: Sequence[torch.Tensor], outs: Sequence[torch.Tensor],
              device: torch.device, trial: Trial) -> VerifyReport | None:
    """Launch and wait; a launch error is a failed candidate, reported with its message (None when it ran)."""
    try:
        launch_into(inputs, outs)
        _sync(device)
    except Exception as e:
        return VerifyReport(False, "launch", f"{type(e).__name__}: {e}", trial=trial.index,
                            distribution=trial.distribution)
    return None


def _follows_a_changed_input(card: OperatorCard, launch_into: LaunchInto, allocate: Callable[[], list[torch.Tensor]],
                             device: torch.device, trial: Trial) -> VerifyReport:
    """Change one element (+3) of each floating input of ``trial`` in place, launch on the same buffers, compare with
    a fresh reference, and put the elements back."""
    changed = []
    for x in trial.inputs:
        if x.dtype.is_floating_point and x.numel() > 0:
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor((x.numel() * 5) // 8), x.shape))
            changed.append((x, idx, x[idx].clone()))
            x[idx] = x[idx].float() + 3.0
    if not changed:
        return VerifyReport(True)
    try:
        outs = allocate()
        _poisoned(outs)
        if (failed := _launched(launch_into, trial.inputs, outs, device, trial)) is not None:
            return failed
        eager = call_aten(card.signature_obj(), trial.inputs)
        for o, r, e, t in zip(outs, reference_outputs(card, trial.inputs), eager, card.outputs):
            rep = _compare(o, r.to(o.device), e, t.name, stat_floor(card, t.name, trial.inputs))
            if not rep.ok:
                return VerifyReport(False, "stale", f"{t.name}: on the first trial's input buffers with one element "
                                    f"changed, the kernel did not follow the change ({rep.message})",
                                    trial=trial.index, distribution=trial.distribution)
        return VerifyReport(True)
    finally:
        for x, idx, old in changed:
            x[idx] = old


def verify(card: OperatorCard, launch_into: LaunchInto, allocate: Callable[[], list[torch.Tensor]],
           device: torch.device, trials: Sequence[Trial] | None = None) -> VerifyReport:
    """Run every check on every trial; return the first failure or a passing report."""
    trials = prepare_trials(card, device) if trials is None else trials
    worst = VerifyReport(True)
    names = [t.name for t in card.outputs]
    for trial in trials:
        i, dist = trial.index, trial.distribution
        guarded = _guarded(allocate())
        outs = [g.out for g in guarded]
        _poisoned(outs)
        if (failed := _launched(launch_into, trial.inputs, outs, device, trial)) is not None:
            return failed
        for g, n in zip(guarded, names):
            if not g.intact():
                return VerifyReport(False, "out_of_bounds", f"{n}: the kernel wrote outside the output (guard band "
                                    f"of {GUARD_BYTES} bytes changed)", trial=i, distribution=dist)
        for x, b, t in zip(trial.inputs, trial.before, card.inputs):
            if not torch.equal(_bits(x), b):
                return VerifyReport(False, "input_modified", f"input {t.name} was modified", trial=i,
                                    distribution=dist)
        for o, r, e, n in zip(outs, trial.reference, trial.eager, names):
            rep = _compare(o, r.to(o.device), e, n, stat_floor(card, n, trial.inputs))
            if not rep.ok:
                rep.trial, rep.distribution, rep.trials_passed = i, dist, i
                return rep
            if rep.max_abs_err >= worst.max_abs_err:
                worst = rep
        again = allocate()
        _poisoned(again)
        if (failed := _launched(launch_into, trial.inputs, again, device, trial)) is not None:
            return failed
        for o, a, n in zip(outs, again, names):
            if not torch.equal(_bits(o), _bits(a)):
                return VerifyReport(False, "nondeterministic", f"{n}: a repeat run on the same inputs differs",
                                    trial=i, distribution=dist, trials_passed=i)
    if trials:
        rep = _follows_a_changed_input(card, launch_into, allocate, device, trials[0])
        if not rep.ok:
            rep.trials_passed = len(trials)
            return rep
    worst.trials_passed = len(trials)
    worst.ok, worst.failed_check, worst.trial, worst.distribution = True, None, None, None
    worst.message = f"passed {len(trials)} trials"
    if not math.isfinite(worst.max_rel_err):
        worst.max_rel_err = 0.0
    return worst
