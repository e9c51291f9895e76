"""KernelRecord: what the store keeps for one signature key, as JSON (never pickle).

Note [record integrity is not authenticity]
``to_json`` adds ``integrity``: sha256 of the canonical JSON (sorted keys, compact separators) of every other
field. It catches a truncated write, a flipped byte or a hand edit that forgot to re-hash; it does *not* prove who
wrote the record (anyone can recompute a sha256). That is why trust is decided by the reader, not the file: the
shipped and team tiers and ``import_bundle`` force ``trusted=False`` whatever the file says, and only a
re-verification on this GPU (or an explicit ``--trust``) makes a record trusted.

Note [what a corrupt record is]
Anything that makes a stored record unusable raises :class:`CorruptRecord`: text that is not JSON (a truncated
write), an integrity mismatch, a missing or mistyped field, an unknown record version, a key that is not the
signature's key, or a candidate that no longer parses. Stores turn it into a miss and report it (see
:func:`report_corrupt`); nothing else is swallowed.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..contract import Candidate
from ..errors import ContractViolation, KforgeError
from ..signature import OpSignature

log = logging.getLogger("kforge.store")

RECORD_VERSION = 1
DECISIONS = ("kernel", "pytorch")  # kernel: a verified winner to use; pytorch: searched, leave the op to PyTorch
SOURCES = ("local", "shipped", "imported", "team")


class InvalidRecord(KforgeError, ValueError):
    """A KernelRecord was built with inconsistent fields (a bug in the code that built it)."""


class CorruptRecord(KforgeError):
    """A stored record cannot be used: truncated, integrity mismatch, key mismatch, malformed. A miss, reported."""


class BadKey(KforgeError, ValueError):
    """A string used as a record key is not a signature key (64 lowercase hex digits)."""


_KEY_RE = re.compile(r"^[0-9a-f]{64}$")


def check_key(key: str) -> str:
    """Return ``key`` if it is a signature key; it also names files, so nothing else may pass (no ``../``)."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise BadKey(f"{key!r} is not a signature key (64 lowercase hex digits, as OpSignature.key() returns)")
    return key


def is_key(name: object) -> bool:
    return isinstance(name, str) and bool(_KEY_RE.match(name))


@dataclass
class IntegrityReport:
    """Result of checking every entry of a store: keys that read back whole, and corrupt keys with the reason."""

    ok: list[str] = field(default_factory=list)
    corrupt: dict[str, str] = field(default_factory=dict)

    def add(self, inner: "IntegrityReport", folder: str) -> None:
        """Take a GPU model folder's report in, its keys named ``<folder>/<key>``."""
        self.ok += [f"{folder}/{k}" for k in inner.ok]
        self.corrupt.update({f"{folder}/{k}": why for k, why in inner.corrupt.items()})


@dataclass(frozen=True)
class KernelRecord:
    """One signature's outcome, as plain JSON-able dicts (another machine may read it: never pickle).

    * ``decision``: ``"kernel"`` (``candidate`` is a verified :meth:`Candidate.to_json`) or ``"pytorch"``
      (``candidate`` is None: searched, nothing beat eager by the margin, do not search again).
    * ``verification``: trials, checks_passed, max_abs_err, max_rel_err, tolerance.
    * ``timings``: kforge_us, eager_us, floor_us, pct_bw (percent of measured copy bandwidth, 0-100),
      speedup_vs_eager, remeasured_us (list), bandwidth_gbps.
    * ``provenance``: proposer, created_at (ISO 8601, UTC), hostname, gpu, torch, kforge, nvrtc, search_id, source
      (one of SOURCES); see :func:`make_provenance`.
    * ``trusted``: False for anything read from another machine until it is re-verified on this GPU.
    """

    key: str
    signature: dict[str, Any]
    card: dict[str, Any]
    decision: str
    candidate: dict[str, Any] | None
    verification: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    trusted: bool = True
    version: int = RECORD_VERSION

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise InvalidRecord(f"record decision {self.decision!r} is not valid; "
                                f"choose one of: {', '.join(DECISIONS)}")
        if (self.decision == "kernel") != (self.candidate is not None):
            raise InvalidRecord(f"decision {self.decision!r} with candidate={'set' if self.candidate else 'None'}: "
                                "a 'kernel' record needs a candidate and a 'pytorch' record must not have one")
        source = self.provenance.get("source", "local")
        if source not in SOURCES:
            raise InvalidRecord(f"provenance source {source!r} is not valid; choose one of: {', '.join(SOURCES)}")

    # construction ----------------------------------------------------------------------------------------------
    @classmethod
    def create(cls, sig: OpSignature, card: Any, decision: str, candidate: Candidate | None = None, *,
               verification: Mapping[str, Any] | None = None, timings: Mapping[str, Any] | None = None,
               provenance: Mapping[str, Any] | None = None, trusted: bool = True) -> "KernelRecord":
        """Build a record from live objects (``card`` is an OperatorCard or its JSON dict)."""
        card_json = card.to_json() if hasattr(card, "to_json") else dict(card)
        return cls(key=sig.key(), signature=sig.canonical(), card=_plain(card_json), decision=decision,
                   candidate=None if candidate is None else _plain(candidate.to_json()),
                   verification=_plain(dict(verification or {})), timings=_plain(dict(timings or {})),
                   provenance=dict(provenance) if provenance is not None else make_provenance(),
                   trusted=trusted)

    def replace(self, **changes: Any) -> "KernelRecord":
        return dataclasses.replace(self, **changes)

    def marked(self, *, source: str | None = None, trusted: bool | None = None, **provenance: Any) -> "KernelRecord":
        """A copy with provenance.source / extra provenance fields / trusted changed."""
        prov = dict(self.provenance)
        if source is not None:
            prov["source"] = source
        prov.update(provenance)
        return self.replace(provenance=prov, trusted=self.trusted if trusted is None else trusted)

    # views -----------------------------------------------------------------------------------------------------
    @property
    def source(self) -> str:
        return str(self.provenance.get("source", "local"))

    def signature_obj(self) -> OpSignature:
        return OpSignature.from_json(self.signature)

    def candidate_obj(self) -> Candidate | None:
        return None if self.candidate is None else Candidate.from_json(self.candidate)

    def card_obj(self) -> Any:
        from ..cards import OperatorCard  # cards pulls in roofline/selection; only views need it

        return OperatorCard.from_json(self.card)

    # serialisation ---------------------------------------------------------------------------------------------
    def _body(self) -> dict[str, Any]:
        return {"version": self.version, "key": self.key, "signature": self.signature, "card": self.card,
                "decision": self.decision, "candidate": self.candidate, "verification": self.verification,
                "timings": self.timings, "provenance": self.provenance, "trusted": self.trusted}

    def integrity(self) -> str:
        return _digest(self._body())

    def to_json(self) -> dict[str, Any]:
        body = self._body()
        body["integrity"] = _digest(body)
        return body

    def dumps(self, indent: int | None = None) -> str:
        """JSON text; compact for the local cache, ``indent`` for files people read (bundles, kernels_cache/)."""
        if indent is None:
            return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return json.dumps(self.to_json(), sort_keys=True, indent=indent) + "\n"

    @classmethod
    def loads(cls, text: str | bytes) -> "KernelRecord":
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise CorruptRecord(f"not valid JSON (truncated write?): {e}") from e
        return cls.from_json(d)

    @classmethod
    def from_json(cls, d: Any) -> "KernelRecord":
        """Parse and check a record; raises CorruptRecord (see Note [what a corrupt record is])."""
        if not isinstance(d, dict):
            raise CorruptRecord(f"a record must be a JSON object, not {type(d).__name__}")
        body = dict(d)
        stored = body.pop("integrity", None)
        if not isinstance(stored, str):
            raise CorruptRecord("the record has no integrity field")
        actual = _digest(body)
        if actual != stored:
            raise CorruptRecord(f"integrity mismatch: stored {stored[:16]}, content hashes to {actual[:16]}")
        if body.get("version") != RECORD_VERSION:
            raise CorruptRecord(f"record version {body.get('version')!r} is not supported (this kforge reads "
                                f"version {RECORD_VERSION})")
        rec = _construct(body)
        _check_key(rec)
        return rec


# A record file from a directory others write (a team store, a bundle, the shipped records), at most: the largest
# shipped one is 28 KB, and a candidate's source may have 256 KB (contract.MAX_SOURCE_BYTES).
MAX_RECORD_BYTES = 4 * 1024 * 1024


def read_record_file(path: Path) -> KernelRecord | None:
    """The record in the file ``path`` (None when there is none); CorruptRecord for a file over MAX_RECORD_BYTES
    (not read whole), not UTF-8, or not a valid record."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_RECORD_BYTES:
        raise CorruptRecord(f"{path.name} is over the {MAX_RECORD_BYTES:,} bytes a record file may have")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptRecord(f"{path.name} is not UTF-8 text: {e}") from e
    return KernelRecord.loads(text)


def _construct(body: dict[str, Any]) -> KernelRecord:
    names = {f.name for f in dataclasses.fields(KernelRecord)}
    missing = sorted(n for n in ("key", "signature", "card", "decision", "candidate") if n not in body)
    if missing or set(body) - names:
        raise CorruptRecord(f"record fields do not match: missing {missing}, unknown {sorted(set(body) - names)}")
    for name in ("signature", "card", "verification", "timings", "provenance"):
        if not isinstance(body.get(name, {}), dict):
            raise CorruptRecord(f"record field {name!r} must be an object")
    if not isinstance(body["key"], str) or not isinstance(body.get("trusted", True), bool):
        raise CorruptRecord("record field 'key' must be a string and 'trusted' a bool")
    try:
        rec = KernelRecord(**body)
        rec.candidate_obj()
    except (InvalidRecord, ContractViolation, KeyError, TypeError, AttributeError) as e:
        raise CorruptRecord(f"record is malformed: {e}") from e
    return rec


def _check_key(rec: KernelRecord) -> None:
    try:
        sig_key = rec.signature_obj().key()
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CorruptRecord(f"record {rec.key[:16]}: signature does not parse ({e})") from e
    if sig_key != rec.key:
        raise CorruptRecord(f"record key {rec.key[:16]} is not its signature's key {sig_key[:16]}")
    if rec.card.get("key", sig_key) != sig_key:
        raise CorruptRecord(f"record {rec.key[:16]}: card key {str(rec.card.get('key'))[:16]} differs")


def _digest(body: Mapping[str, Any]) -> str:
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _plain(x: Any) -> Any:
    """JSON round trip, so the in-memory record equals what from_json returns (tuples become lists)."""
    return json.loads(json.dumps(x))


# --------------------------------------------------------------------------------------------------------------------
# provenance


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def make_provenance(proposer: str = "", *, search_id: str = "", gpu: str = "", nvrtc: str = "",
                    source: str = "local", **extra: Any) -> dict[str, Any]:
    """Provenance for a record made on this machine now: time, host, torch and kforge versions."""
    import torch

    from .. import __version__

    return {"proposer": proposer, "created_at": utc_now(), "hostname": socket.gethostname(), "gpu": gpu,
            "torch": torch.__version__, "kforge": __version__, "nvrtc": nvrtc, "search_id": search_id,
            "source": source, **extra}


# --------------------------------------------------------------------------------------------------------------------
# reporting

_reported: set[tuple[str, str]] = set()


def report_corrupt(where: str, key: str, error: CorruptRecord) -> None:
    """Log a corrupt entry once per (store, key) in this process and count it in Dynamo's counters."""
    if (where, key) in _reported:
        return
    _reported.add((where, key))
    log.warning("kforge: ignoring corrupt cache entry %s in %s: %s", key[:16], where, error)
    from torch._dynamo.utils import counters  # the backend's counters; imported late, only when there is news

    counters["kforge"]["corrupt_entries"] += 1
