"""What a record's kernel did when re-verified on this GPU, and the record this machine keeps of it.

Note [a record timed on another GPU model]
GPUs of one arch share a key (an H100 and an H200 are both sm_90), so a shipped, team or imported record made on one
model is served on the other. Re-verifying its kernel here shows it correct on this GPU; its times are the other
model's. Kept as they were, they misled twice: the record said the kernel beat eager by the margin, which it may not
do on a GPU of other bandwidth, SM count or clocks, and under Inductor the gate weighed the other GPU's kernel time
against Inductor's op timed here (Note [the baseline inside Inductor] in runtime/cuda_provider.py), or against the
other GPU's Inductor time, which the record carried. So the re-verification also times the kernel, and:

* a record timed on this GPU model (``provenance["gpu"]``, the name torch gives) is kept as it is, trusted;
* a record timed on another model, or on an unnamed one, is timed here in fresh runs as a search times its winner
  (runtime/worker.py ``remeasure``). Beating eager by the margin here, it is kept with this GPU's times: the kernel's,
  eager's, the copy bandwidth's and the percent of it; the other GPU's ``inductor_us`` is dropped, so that the gate
  times Inductor here. Its provenance names this GPU and keeps the other one's figures (``first_timed_on``). Not
  beating eager by the margin here, it is not taken: like a kernel that fails here, the signature is searched on
  this GPU (Note [a record that fails here is searched] in runtime/cuda_provider.py), or left to PyTorch.

A re-verified copy is never published to the team again (``team.not_publishable``), so a copy that names this GPU
cannot pass for this machine's own search there. A "pytorch" record is not re-timed: it holds no kernel to run, and
to check its verdict here is to search. A trusted local record that names another model (a cache directory that
machines of several models share) is re-timed here the same way, and this GPU's copy is kept beside it (Note [a
cache directory that GPU models share] in local.py).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .record import KernelRecord


@dataclass(frozen=True)
class Reverified:
    """A record's kernel run through the verifier on this GPU (runtime/cuda_provider.reverify_record).

    ``ok``: it passed; ``why``: the check it failed and how, or its time here. ``gpu``: this GPU's name. The times
    are set when it passed: ``times_us`` the kernel's (one median, or several fresh runs' for a record timed on
    another GPU model), ``eager_us`` PyTorch's, ``bandwidth_gbps`` the copy bandwidth measured here."""

    ok: bool
    why: str
    gpu: str = ""
    times_us: tuple[float, ...] = field(default_factory=tuple)
    eager_us: float | None = None
    bandwidth_gbps: float | None = None

    @property
    def kforge_us(self) -> float | None:
        return statistics.median(self.times_us) if self.times_us else None

    @property
    def speedup(self) -> float | None:
        kf = self.kforge_us
        return None if kf is None or self.eager_us is None or kf <= 0 else self.eager_us / kf


def timed_elsewhere(record: KernelRecord, gpu: str) -> bool:
    """Whether ``record``'s times were not taken on a GPU named ``gpu`` (an unnamed one counts as another)."""
    timed_on = str(record.provenance.get("gpu") or "")
    return not timed_on or timed_on != gpu


def taken_here(record: KernelRecord, found: Reverified, margin: float) -> tuple[KernelRecord | None, str]:
    """The trusted local record this machine keeps of ``record`` after ``found``, and why; (None, why) when the
    kernel is not used here (Note [a record timed on another GPU model])."""
    if not found.ok:
        return None, f"failed re-verification: {found.why}"
    if record.decision != "kernel" or not timed_elsewhere(record, found.gpu):
        return record.marked(source="local", trusted=True, reverified=True), found.why
    before = _figures(record)
    speedup = found.speedup
    if speedup is None:
        raise ValueError(f"a passed re-verification of {record.key[:12]} carries no times")
    if speedup < 1.0 + margin:
        return None, (f"slower here: {speedup:.2f}x eager on {found.gpu} (timed on {before}), short of the "
                      f"{margin:.0%} margin")
    timings = _timings_here(record, found)
    kept = record.replace(timings=timings).marked(
        source="local", trusted=True, reverified=True, gpu=found.gpu,
        first_timed_on={"gpu": record.provenance.get("gpu") or "", **{
            k: record.timings[k] for k in ("kforge_us", "speedup_vs_eager", "pct_bw") if k in record.timings}})
    return kept, f"{found.why}; re-timed here, it was timed on {before}"


def _timings_here(record: KernelRecord, found: Reverified) -> dict[str, float | list[float]]:
    kf, eager = found.kforge_us, found.eager_us
    assert kf is not None and eager is not None
    timings: dict[str, float | list[float]] = {"kforge_us": kf, "eager_us": eager, "speedup_vs_eager": eager / kf,
                                               "remeasured_us": list(found.times_us)}
    if found.bandwidth_gbps:
        floor = record.card_obj().floor_us(found.bandwidth_gbps)
        timings.update(bandwidth_gbps=found.bandwidth_gbps, floor_us=floor, pct_bw=100.0 * floor / kf)
    return timings


def _figures(record: KernelRecord) -> str:
    """The GPU a record was timed on and its speedup there, for a message."""
    gpu = record.provenance.get("gpu") or "an unnamed GPU"
    s = record.timings.get("speedup_vs_eager")
    return f"{gpu} at {s:.2f}x" if isinstance(s, (int, float)) else str(gpu)
