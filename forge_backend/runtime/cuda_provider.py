"""The GPU kernel provider: store lookup, re-verification of untrusted records, search on a miss, launchers.

Per card, in order: a kernel already loaded in this process; a trusted local record (load its cubin: the cubin
cache makes that 0 NVRTC compiles and 0 timings); an untrusted (team, shipped or imported) record, re-verified in the
worker first; else, with ``search="on_miss"`` and a template family for the op, an MCTS search within the compile's
budget, also where an untrusted record failed its re-verification (Note [a record that fails here is searched]).
A miss that is not searched (``search="queue"``, or the budget spent) is queued for ``kforge prewarm --queued``
(Note [a miss kept for later] in store/queue.py). A search first claims its signature and its GPU; a signature
another process is searching is waited for and its record taken (Note [one search of a signature at a time] in
store/claims.py). A failure for one card is logged once with its op and leaves that
op to PyTorch (strict: raised).

Note [a record that fails here is searched]
A shipped or imported record was verified on another GPU. Its kernel can fail here: a relay kernel's cooperative
launch needs its 132 blocks resident at once, which a GPU of the same arch with fewer SMs (an H100 PCIe: 114)
refuses, and a record can simply be wrong. A kernel timed on another GPU model can also be correct here and no
faster than eager (Note [a record timed on another GPU model] in store/reverified.py). Such a record is then
treated as a miss: with ``search="on_miss"`` the signature is searched on this GPU, and the winner (or PyTorch's
decision) goes to the local cache, whose tier comes before the shipped one, so the next compile takes it without
asking the failed record again (``kforge prewarm`` does the same: Note [a shipped record in a prewarm] in
prewarm.py). Without a search the op stays with PyTorch, and the failure is remembered for the rest of the process
(by the record's integrity digest), so a model that meets the signature in several graphs re-verifies it once; a
new process asks again, as the record may have been replaced. The counter ``kforge.reverify_failed`` counts them.

Note [a card of another GPU's arch]
A card's arch is that of the GPU its tensors are on, but the worker that searches and verifies, and the launcher a
kernel is loaded into, are on the current GPU. On a host of mixed GPUs (an sm_89 and an sm_86 card) a model on the
other one would have its cards searched here, every candidate would fail to load (a cubin for another arch), and the
search would store PyTorch's decision under that arch's key, which a later compile on that very GPU would then take
for an answer. So such a card is left to PyTorch, with a warning that says to make that GPU current; GPUs of the
same arch share kernels (Note [a kernel called with tensors on another GPU] in launch.py).

Note [the baseline inside Inductor]
A record says its kernel beats *eager*. Inside Inductor (``inner="inductor"``) the op would otherwise run as
Inductor's own kernel, often much faster than eager, and a replaced node also costs Inductor its fusions around
it. So under Inductor a kernel is used only when it beats Inductor's compiled version of the same single op by the
margin, with the costs of an extern call added (Note [what replacing a node costs inside Inductor]). That time is
measured once per signature in the worker (device time of a CUDA-graph replay, so Inductor's
Python wrapper is not counted against it) and kept in the record as ``timings["inductor_us"]``. This decision is per
signature; the fusions Inductor would lose around each node are weighed per node by the rewrite.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import torch
from torch._dynamo.utils import counters

from ..cards import OperatorCard
from ..check import checked
from ..config import KforgeConfig
from ..errors import CandidateFailure, KforgeError
from ..inductor_gate import host_cost_us, replaces
from ..reference import call_aten
from ..registry import KernelImpl, conform
from ..signature import arch_of
from ..store.claims import ClaimBusy, search_claims
from ..store.gpu_model import this_gpu, timed_on_another_model
from ..store.local import LocalStore
from ..store.queue import MissQueue
from ..store.record import KernelRecord
from ..store.reverified import Reverified, taken_here, timed_elsewhere
from ..store.shipped import ShippedStore, TieredStore
from ..store.team import team_store
from ..store.team_markers import MarkedElsewhere, markers_of
from .inductor_baseline import inductor_us
from .launch import Launcher
from .nvrtc import compile_candidate
from .worker import WorkerClient

log = logging.getLogger("kforge")

# One provider per cache directory and process: it owns the worker process and the loaded modules, which must
# outlive a single torch.compile call (recompiles reuse them).
_SHARED: dict[str, "CudaProvider"] = {}


def close_shared() -> None:
    """Stop the shared providers' search workers and forget the providers (what a new process starts from)."""
    for provider in list(_SHARED.values()):
        if provider._client is not None:
            provider._client.close()
    _SHARED.clear()


def impl_from_record(card: OperatorCard, record: KernelRecord, cfg: KforgeConfig) -> KernelImpl:
    """Load a verified record's kernel into this process (its cubin comes from the cache when present)."""
    candidate = record.candidate_obj()
    sig = card.signature_obj()
    compiled = compile_candidate(candidate, card.arch, cfg.cache_dir)
    device = torch.device("cuda", torch.cuda.current_device())

    def fallback(inputs):
        return call_aten(sig, inputs)

    launcher = Launcher(card, candidate, compiled.cubin, device, fallback=fallback)
    run = checked(card, launcher, cfg.strict) if cfg.check else launcher
    # a checked kernel keeps the card's strides on the eager path too: every call of it goes through the check
    return KernelImpl(card.key, card.op, tuple(t.spec for t in card.outputs), run, candidate.description,
                      record.timings.get("speedup_vs_eager"), run_strided=None if cfg.check else launcher,
                      eager=fallback)


class CudaProvider:
    def __init__(self, cfg: KforgeConfig) -> None:
        self.cfg = cfg
        self.local = LocalStore(cfg.cache_dir, this_gpu())  # Note [a cache directory that GPU models share]
        self.store = TieredStore(self.local, ShippedStore(), team_store(cfg))  # local, then team, then shipped
        self._client: WorkerClient | None = None
        self._loaded: dict[tuple[str, bool], KernelImpl] = {}  # (key, check) -> loaded kernel
        # key -> (kforge_us, inductor_us) where the kernel beats Inductor's single op, None where it does not
        self._vs_inductor: dict[tuple[str, float], tuple[float, float] | None] = {}
        # (key, record integrity) of the records from elsewhere not used on this GPU (the Note above)
        self._failed_here: set[tuple[str, str]] = set()
        self.queue = MissQueue(cfg.cache_dir)  # Note [a miss kept for later] in store/queue.py
        self._queued: set[str] = set()  # keys this process queued: one entry, and one count, a process

    @classmethod
    def shared(cls, cfg: KforgeConfig) -> "CudaProvider":
        key = str(cfg.cache_dir)
        if key not in _SHARED:
            _SHARED[key] = cls(cfg)
        provider = _SHARED[key]
        if cfg.team_store != provider.cfg.team_store:  # a compile that names another team store looks there
            provider.store = TieredStore(provider.local, provider.store.shipped, team_store(cfg))
        provider.cfg = cfg
        return provider

    @property
    def client(self) -> WorkerClient:
        if self._client is None:
            self._client = WorkerClient(self.cfg.cache_dir, torch.cuda.current_device())
        return self._client

    def kernels_for(self, cards: list[OperatorCard], cfg: KforgeConfig) -> dict[str, KernelImpl]:
        self.cfg = cfg
        deadline = time.monotonic() + cfg.search_seconds
        impls: dict[str, KernelImpl] = {}
        here, elsewhere = "", []  # the current GPU's arch, asked at the first GPU card; cards of another arch
        for card in sorted(cards, key=lambda c: -c.bytes_min * c.occurrences):  # biggest first, for the budget
            if not card.arch.startswith("sm_"):
                continue
            here = here or arch_of(torch.device("cuda", torch.cuda.current_device()))
            if card.arch != here:  # Note [a card of another GPU's arch]
                elsewhere.append(card)
                continue
            try:
                impl = self._kernel_for(card, cfg, deadline)
            except (KforgeError, RuntimeError, OSError) as e:
                if cfg.strict:
                    raise
                counters["kforge"]["card_errors"] += 1
                log.warning("kforge: %s %s left to PyTorch: %s: %s", card.op,
                            [list(t.spec.shape) for t in card.inputs[:1]], type(e).__name__, e)
                continue
            if impl is not None and cfg.inner == "inductor":
                times = self._vs_inductor_times(card, cfg)
                if times is None:
                    counters["kforge"]["kept_for_inductor"] += 1
                    continue
                kf, ind = times  # the rewrite weighs each node's fusions with them
                impl = dataclasses.replace(impl, extra={**impl.extra, "kforge_us": kf, "inductor_us": ind})
            if impl is not None:
                impls[card.key] = impl
        if elsewhere:
            counters["kforge"]["other_arch_cards"] += len(elsewhere)
            log.warning("kforge: %d signature(s) run on a GPU of %s, but kforge searches and loads kernels on the "
                        "current GPU (%s); left to PyTorch (make that GPU current with torch.cuda.set_device before "
                        "compiling)", len(elsewhere), ", ".join(sorted({c.arch for c in elsewhere})), here)
        return impls

    def fingerprint(self, cfg: KforgeConfig) -> str:
        """What a graph compiled with kforge inside Inductor depends on, for Inductor's caches (Note [kforge and
        Inductor's caches] in backend.py): the kforge version, the options that change which nodes are replaced,
        and which signatures the caches hold. A record's *content* is not part of it: compiled code calls kernels
        by key, and :meth:`load` serves whatever the record holds when it runs."""
        import hashlib
        import json

        from .. import __version__

        keys = self.store.keys()
        text = json.dumps([__version__, cfg.families, cfg.margin, cfg.check, cfg.strict, cfg.search,
                           cfg.fuse_softmax, cfg.fuse_norm,
                           torch.cuda.get_device_capability() if torch.cuda.is_available() else None, keys])
        return hashlib.sha256(text.encode()).hexdigest()

    def load(self, key: str) -> KernelImpl | None:
        """The kernel of ``key`` for code that Inductor's cache served (a registry loader). A record whose decision
        is now "pytorch" (or whose kernel fails to load) runs PyTorch's op instead, so cached code stays correct."""
        record = self.store.get(key)
        if record is None:
            return None
        card = record.card_obj()
        try:
            impl = self._use_record(card, record, self.cfg) if record.decision == "kernel" else None
        except (KforgeError, RuntimeError, OSError) as e:
            log.warning("kforge: kernel %s of a cached graph failed to load (%s); running PyTorch's %s", key[:12],
                        e, card.op)
            impl = None
        if impl is not None:
            return impl
        sig = card.signature_obj()
        specs = [sig.outputs[i] for i in sig.used_outputs]
        return KernelImpl(key, card.op, tuple(specs), lambda inputs: conform(call_aten(sig, inputs), specs),
                          "PyTorch (the record no longer holds a kernel)", None)

    def _vs_inductor_times(self, card: OperatorCard, cfg: KforgeConfig) -> tuple[float, float] | None:
        """Note [the baseline inside Inductor]: (kforge_us, inductor_us) where the kernel beats Inductor's single
        op, else None."""
        host_us = host_cost_us()
        memo = (card.key, host_us)  # a CUDA-graph compile decides without the extern call's host cost
        if memo in self._vs_inductor:
            return self._vs_inductor[memo]
        record = self.store.get(card.key)
        if record is None or record.decision != "kernel":
            return None
        try:
            ind = inductor_us(card, record, self.client, self.local)
        except (CandidateFailure, RuntimeError) as e:
            log.warning("kforge: could not time Inductor's %s (%s); left to Inductor", card.op, e)
            self._vs_inductor[memo] = None
            return None
        kf = record.timings.get("kforge_us")
        ok = kf is not None and replaces(kf, ind, card.bytes_min, 0, cfg.margin, host_us)
        log.info("kforge: %s kernel %.1f us vs Inductor %.1f us: %s", card.op, kf or float("nan"), ind,
                 "replaced" if ok else "left to Inductor")
        self._vs_inductor[memo] = (kf, ind) if ok else None
        return self._vs_inductor[memo]

    def _kernel_for(self, card: OperatorCard, cfg: KforgeConfig, deadline: float) -> KernelImpl | None:
        if (card.key, cfg.check) in self._loaded:
            return self._loaded[(card.key, cfg.check)]
        record = self.store.get(card.key)
        if record is not None:
            counters["kforge"]["cache_hit"] += 1
            impl = self._use_record(card, record, cfg)
            if impl is not None or record.decision != "kernel" or self._settled(record):
                return impl
            counters["kforge"]["reverify_failed"] += 1  # Note [a record that fails here is searched]
        else:
            counters["kforge"]["cache_miss"] += 1
        return self._miss(card, cfg, deadline)

    def _miss(self, card: OperatorCard, cfg: KforgeConfig, deadline: float) -> KernelImpl | None:
        """A card with no usable record: searched within the compile's budget (``on_miss``), or queued for
        ``kforge prewarm --queued`` (Note [a miss kept for later] in store/queue.py), or left alone (``off``)."""
        from .search_runner import gpu_name, has_template, run_search, searchable

        if cfg.search == "off" or not searchable(card, cfg):
            return None
        if cfg.search == "queue":
            return self._queue(card, "search='queue': kept for kforge prewarm --queued")
        if time.monotonic() >= deadline:
            return self._queue(card, "the compile's search budget (search_seconds) was spent on other signatures")
        if not has_template(card):  # a compile searches with the templates only; prewarm may ask the LLM
            return self._queue(card, "no template family covers it; the LLM proposer can search it in a prewarm")
        markers = markers_of(self.store.team)  # Note [a search a teammate is running] in store/team_markers.py
        what, say = f"a compile's search of {card.op}", self._waiting(card)
        try:  # Note [one search of a signature at a time] in store/claims.py
            team = None if markers is None else markers.record_after(card.key, deadline - time.monotonic(), say)
            settled, impl = self._from_team(card, team, cfg)
            if settled:
                return impl
            with search_claims(cfg.cache_dir, card.key, gpu_name(self._device_index()), what,
                               max(deadline - time.monotonic(), 0.0), say) as waited:
                record = self.local.get(card.key) if waited else None
                if record is not None:  # the process we waited for searched it
                    counters["kforge"]["searched_elsewhere"] += 1
                    return self._use_record(card, record, cfg)
                with markers.searching(card.key, what) if markers is not None else contextlib.nullcontext():
                    outcome = run_search(card, cfg, self.client, self.local, iterations=cfg.search_iterations,
                                         seconds=max(deadline - time.monotonic(), 1.0))
        except MarkedElsewhere as e:  # a teammate marked it since record_after looked
            return self._after_teammate(card, cfg, markers, deadline, e)
        except ClaimBusy as e:
            return self._queue(card, f"not searched by this compile: {e}")
        counters["kforge"]["searches"] += 1
        log.info("kforge: searched %s in %.1fs: %s", card.op, outcome.seconds, outcome.result.record.reason)
        if outcome.record is None:
            return self._queue(card, "its search ran out of the compile's budget before any verdict")
        if outcome.record.decision != "kernel":
            return None
        return self._use_record(card, outcome.record, cfg)

    def _after_teammate(self, card: OperatorCard, cfg: KforgeConfig, markers, deadline: float,
                        marked: MarkedElsewhere) -> KernelImpl | None:
        """Note [a search a teammate is running]: a teammate marked ``card`` between this compile's look and its
        search. Its record is waited for within the budget and used; where it leaves none usable here, the miss is
        queued rather than searched again."""
        try:
            team = markers.record_after(card.key, max(deadline - time.monotonic(), 0.0), self._waiting(card))
        except ClaimBusy as e:
            return self._queue(card, f"not searched by this compile: {e}")
        settled, impl = self._from_team(card, team, cfg)
        if settled:
            return impl
        return self._queue(card, f"not searched by this compile: a teammate searched it ({marked.marker.describe()})"
                                 " and left no record usable here")

    def _from_team(self, card: OperatorCard, team: KernelRecord | None, cfg: KforgeConfig
                   ) -> tuple[bool, KernelImpl | None]:
        """Whether the team's record of ``card`` settles it here, and the kernel it gives: a teammate's verdict, or
        its kernel re-verified here. A kernel that fails here (or failed here before) settles nothing."""
        if team is None:
            return False, None
        impl = self._use_record(card, team, cfg)
        if impl is None and team.decision == "kernel":
            return False, None
        counters["kforge"]["searched_elsewhere"] += 1
        return True, impl

    def _device_index(self) -> int:
        """The GPU this provider's worker searches on (the current one until the worker starts)."""
        index = getattr(self._client, "device_index", None)
        if index is None:
            index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return int(index)

    @staticmethod
    def _waiting(card: OperatorCard):
        def say(holder) -> None:  # a claim's holder on this machine, or a teammate's marker
            log.info("kforge: waiting for another search of %s (%s)", card.op,
                     holder.describe() if holder else "holder unknown")
        return say

    def _queue(self, card: OperatorCard, why: str) -> None:
        """Queue ``card`` once a process; a queue that cannot be written is warned about once, never raised."""
        if card.key in self._queued:
            return None
        self._queued.add(card.key)
        try:
            self.queue.add(card, why)
        except OSError as e:
            counters["kforge"]["queue_failed"] += 1
            if counters["kforge"]["queue_failed"] == 1:
                log.warning("kforge: could not queue missed signatures in %s (%s)", self.queue.directory, e)
            return None
        counters["kforge"]["queued"] += 1
        return None

    def _settled(self, record: KernelRecord) -> bool:
        """Whether ``record`` is used here as it is: trusted, and timed on this GPU model (or an unnamed one)."""
        return record.trusted and not timed_on_another_model(record, self.local.gpu)

    def _use_record(self, card: OperatorCard, record: KernelRecord, cfg: KforgeConfig) -> KernelImpl | None:
        if record.decision != "kernel":
            return None
        if not self._settled(record):  # another machine's, or this cache's timed on another GPU model
            source = record.source if not record.trusted else f"this cache, timed on {record.provenance['gpu']}"
            memo = (record.key, record.integrity())
            if memo in self._failed_here:  # Note [a record that fails here is searched]: asked once a process
                return None
            record, why = reverified_locally(record, self.client, cfg, self.local)
            if record is None:
                self._failed_here.add(memo)
                then = "searched here" if cfg.search == "on_miss" else "left to PyTorch"
                log.warning("kforge: %s record from %s not used on this GPU (%s); %s", card.op, source, why, then)
                return None
        impl = impl_from_record(card, record, cfg)
        self._loaded[(card.key, cfg.check)] = impl
        return impl


def reverified_locally(record: KernelRecord, client: WorkerClient | None, cfg: KforgeConfig, local: LocalStore,
                       reverify=None) -> tuple[KernelRecord | None, str]:
    """A record from another machine (team, shipped, imported) re-verified on this GPU (``reverify``, default
    ``reverify_record``) and kept in ``local`` as trusted, with why it was taken; (None, why not) when it fails here,
    or was timed on another GPU model and does not beat eager by the margin here (Note [a record timed on another
    GPU model] in store/reverified.py). A first compile and ``kforge prewarm`` take shipped records this way."""
    kept, why = taken_here(record, (reverify or reverify_record)(record, client, cfg), cfg.margin)
    if kept is not None:
        local.put(kept)
    return kept, why


def reverify_record(record: KernelRecord, client: WorkerClient | None = None,
                    cfg: KforgeConfig | None = None) -> Reverified:
    """Verify a record's kernel on this GPU in a worker process (for shipped, imported or team records), and time it:
    in fresh runs where the record was timed on another GPU model (Note [a record timed on another GPU model])."""
    cfg = cfg or KforgeConfig.load()
    if not torch.cuda.is_available():
        return Reverified(False, "no CUDA GPU")
    candidate = record.candidate_obj()
    if candidate is None:
        return Reverified(True, "decision 'pytorch': nothing to verify")
    card = record.card_obj()
    own_client = client is None
    client = client or WorkerClient(cfg.cache_dir, torch.cuda.current_device())
    gpu = torch.cuda.get_device_name(getattr(client, "device_index", None))
    try:
        compiled = compile_candidate(candidate, card.arch, cfg.cache_dir)
        req = {"card": card.to_json(), "candidate": candidate.to_json(), "cubin": compiled.cubin}
        r = client.call({"cmd": "evaluate", **req})
        if not r["ok"]:
            rep = r["verify_report"]
            return Reverified(False, f"{rep['failed_check']}: {rep['message']}", gpu)
        times = (r["time_us"],)
        if timed_elsewhere(record, gpu):  # as a search re-measures its winner: no single lucky run decides
            times = tuple(client.call({"cmd": "remeasure", **req, "runs": 3})["times_us"])
    except CandidateFailure as e:
        return Reverified(False, f"{e.stage}: {e.message}", gpu)
    finally:
        if own_client:
            client.close()
    found = Reverified(True, "", gpu, times, r["eager_us"], r.get("bandwidth_gbps"))
    return dataclasses.replace(found, why=f"verified; {found.kforge_us:.2f} us, {found.speedup:.2f}x eager on {gpu}")
