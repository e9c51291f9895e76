"""``kforge cache``: list, show, clear, verify, export, import and publish KernelRecords.

The lead CLI mounts :data:`cache_app` as ``kforge cache``. Every command takes ``--cache-dir`` (default
``KforgeConfig.load().cache_dir``). Keys may be given by any unique prefix. Library errors (:class:`KforgeError`)
become one red line and exit status 1; nothing here holds logic the store lacks.
"""
from __future__ import annotations

import datetime as _dt
import difflib
import json
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import track
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from .cli_common import console_for, kforge_errors
from .errors import KforgeError
from .store import (CorruptRecord, KernelRecord, LocalStore, Published, RecordDirectory, RecordReader, ShippedStore,
                    TeamStore, TeamStoreUnavailable)
from .store.gpu_model import this_gpu
from .store.reverified import Reverified, taken_here, timed_elsewhere

cache_app = typer.Typer(name="cache", help="Inspect and manage kforge's kernel cache.", no_args_is_help=True,
                        add_completion=False)

CacheDir = Annotated[Optional[Path], typer.Option(
    "--cache-dir", help="Cache directory (default: KFORGE_CACHE_DIR or ~/.cache/kforge).", show_default=False)]
Shipped = Annotated[bool, typer.Option("--shipped", help="Include the read-only shipped records (kernels_cache/).")]
Team = Annotated[bool, typer.Option("--team", help="Include the team store's records (KFORGE_TEAM_STORE).")]
TeamDir = Annotated[Optional[Path], typer.Option(
    "--team-dir", help="The team store's directory (default: KFORGE_TEAM_STORE); implies --team.", show_default=False)]
MANY = 20  # records past which a command shows a progress bar (a team store on a network filesystem is slow)


def _store(cache_dir: Path | None) -> LocalStore:
    if cache_dir is None:
        from .config import KforgeConfig

        cache_dir = KforgeConfig.load().cache_dir
    return LocalStore(cache_dir, this_gpu())  # Note [a cache directory that GPU models share] in store/local.py


# --------------------------------------------------------------------------------------------------------------------
# key prefixes


class KeyLookupError(KforgeError):
    """A key prefix matches no record, or several."""


def resolve_key(prefix: str, keys: list[str], describe: Callable[[str], str] = lambda k: "") -> str:
    """The one key starting with ``prefix``; otherwise KeyLookupError listing close or ambiguous matches."""
    prefix = prefix.strip().lower()
    matches = [k for k in keys if k.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        listed = "\n".join(f"  {k}  {describe(k)}" for k in matches[:20])
        raise KeyLookupError(f"prefix {prefix!r} matches {len(matches)} records; give more characters:\n{listed}")
    if not keys:
        raise KeyLookupError(f"no record matches {prefix!r}: the cache is empty")
    ranked = sorted(keys, key=lambda k: difflib.SequenceMatcher(None, prefix, k[: len(prefix)]).ratio(), reverse=True)
    close = [k for k in ranked[:5] if difflib.SequenceMatcher(None, prefix, k[: len(prefix)]).ratio() >= 0.5]
    hint = ("; close matches:\n" + "\n".join(f"  {k}  {describe(k)}" for k in close)) if close else ""
    raise KeyLookupError(f"no record key starts with {prefix!r} ({len(keys)} records){hint}")


# --------------------------------------------------------------------------------------------------------------------
# row helpers


def _first_input(rec: KernelRecord) -> dict[str, Any]:
    inputs = rec.card.get("inputs") or []
    return inputs[0] if inputs else {}


def _shape(rec: KernelRecord) -> str:
    shape = _first_input(rec).get("shape")
    return "x".join(str(s) for s in shape) if shape is not None else "-"


def _num(v: Any, fmt: str) -> str:
    return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def age(created_at: Any, now: _dt.datetime | None = None) -> str:
    """'45s', '12m', '3h', '2d' since an ISO 8601 timestamp; '?' when it does not parse."""
    try:
        t = _dt.datetime.fromisoformat(str(created_at))
    except ValueError:
        return "?"
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    s = max(0, int(((now or _dt.datetime.now(_dt.timezone.utc)) - t).total_seconds()))
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{s // n}{unit}"
    return f"{s}s"


def _team(team_dir: Path | None) -> TeamStore:
    """The team store ``team_dir`` names, else the configured one (``KFORGE_TEAM_STORE``); an error when neither, or
    when its directory is missing."""
    if team_dir is None:
        from .config import KforgeConfig

        configured = KforgeConfig.load().team_store
        if not configured:
            raise TeamStoreUnavailable("no team store is configured: set KFORGE_TEAM_STORE (the team_store option) or "
                                       "pass --team-dir DIR")
        team_dir = Path(configured)
    team = TeamStore(team_dir, this_gpu())  # this GPU model's records first (Note [a team of several GPU models])
    if not team.directory.is_dir():
        raise TeamStoreUnavailable(team.missing())
    return team


def _records(store: LocalStore, *tiers: RecordReader) -> list[tuple[str, KernelRecord | None, str]]:
    """(key, record or None when corrupt, corrupt reason) across ``store`` and then ``tiers``, in lookup order."""
    rows: list[tuple[str, KernelRecord | None, str]] = []
    seen: set[str] = set()
    for tier in (store, *tiers):
        for key in tier.keys():
            if key in seen:
                continue
            seen.add(key)
            try:
                rows.append((key, tier.read(key), ""))
            except CorruptRecord as e:
                rows.append((key, None, str(e)))
    return rows


# --------------------------------------------------------------------------------------------------------------------
# commands


@cache_app.command("ls")
def ls_cmd(cache_dir: CacheDir = None, shipped: Shipped = False, team: Team = False, team_dir: TeamDir = None) -> None:
    """List cached records: op, first input, decision, speedup over eager and over Inductor's single op (once timed),
    bandwidth fraction, proposer, age. Tiers in lookup order: local, then team, then shipped."""
    with kforge_errors():
        store = _store(cache_dir)
        tiers: list[RecordDirectory] = []
        if team or team_dir is not None:
            tiers.append(_team(team_dir))
        if shipped:
            tiers.append(ShippedStore())
        rows = _records(store, *tiers)
        console = console_for()
        where = " + ".join([str(store.root)] + [str(t.directory) for t in tiers])
        if not rows:
            console.print(f"no records in {where}")
            return
        table = Table(title=f"kforge cache: {where}", title_justify="left")
        numeric = ("speedup", "x Inductor op", "%bw", "age")
        columns = ("key", "op", "input", "dtype", "decision", *numeric[:2], "%bw", "timed on", "proposer", "age",
                   "source")
        for col in columns:
            table.add_column(col, no_wrap=True, justify="right" if col in numeric else "left")
        for key, rec, reason in rows:
            if rec is None:
                table.add_row(key[:16], "-", "-", "-", Text("CORRUPT", "red"), *["-"] * (len(columns) - 5))
                continue
            t, p = rec.timings, rec.provenance
            table.add_row(key[:16], rec.signature.get("op", "?"), _shape(rec), str(_first_input(rec).get("dtype", "-")),
                          rec.decision, _num(t.get("speedup_vs_eager"), "{:.2f}x"), _vs_inductor(t),
                          _num(t.get("pct_bw"), "{:.0f}%"), _gpu(p.get("gpu")),
                          str(p.get("proposer") or "-"), age(p.get("created_at")),
                          rec.source + ("" if rec.trusted else " (untrusted)"))
        console.print(table)


def _gpu(name: Any) -> str:
    """The GPU whose times a record holds (Note [a record timed on another GPU model]), without the vendor's name."""
    return str(name).removeprefix("NVIDIA ") if name else "-"


def _vs_inductor(timings: dict) -> str:
    """Inductor's single-op time over the kernel's (Note [the baseline inside Inductor]); '-' until it was timed."""
    ind, kf = timings.get("inductor_us"), timings.get("kforge_us")
    return f"{ind / kf:.2f}x" if ind and kf else "-"


@cache_app.command("show")
def show_cmd(key: Annotated[str, typer.Argument(help="A record key or a unique prefix of one.")],
             cache_dir: CacheDir = None) -> None:
    """Show one record: operator card, kernel source, launch plan, timings, verification, provenance. The key is
    looked up as a compile looks it up: local, then the team store (when one is configured), then shipped."""
    from .config import KforgeConfig
    from .store.team import team_store

    with kforge_errors():
        store = _store(cache_dir)
        tiers = [t for t in (store, team_store(KforgeConfig.load()), ShippedStore()) if t is not None]
        full = resolve_key(key, sorted(set().union(*(t.keys() for t in tiers))), _describer(tiers))
        try:
            rec = _first_read(tiers, full)
        except CorruptRecord as e:
            raise CorruptRecord(f"record {full} is corrupt: {e}") from e
        if rec is None:  # deleted by another process since the listing
            raise KeyLookupError(f"record {full} is gone")
        _show(console_for(), rec, store)


def _first_read(tiers: list[RecordReader], key: str) -> KernelRecord | None:
    """The record of ``key`` in the first tier that holds it; raises CorruptRecord for a corrupt one."""
    tier = next((t for t in tiers if key in t), None)
    return None if tier is None else tier.read(key)


def _describer(tiers: list[RecordReader]) -> Callable[[str], str]:
    def describe(key: str) -> str:
        try:
            rec = _first_read(tiers, key)
        except CorruptRecord:
            return "(corrupt)"
        return "" if rec is None else f"{rec.signature.get('op', '?')} {_shape(rec)} {rec.decision} ({rec.source})"

    return describe


def _show(console: Console, rec: KernelRecord, store: LocalStore) -> None:
    console.rule(f"{rec.key}")
    console.print(f"decision: {rec.decision}   source: {rec.source}   trusted: {rec.trusted}")
    console.print(rec.card_obj().render(rec.timings.get("bandwidth_gbps") or None))
    cand = rec.candidate_obj()
    if cand is not None:
        console.rule("kernel")
        if cand.description:
            console.print(cand.description)
        console.print(Syntax(cand.source, "cuda", line_numbers=True, word_wrap=False))
        console.rule("launch plan")
        plan = cand.plan_json()
        lines = ["launches:"] + [f"  {json.dumps(launch)}" for launch in plan["launches"]]
        lines += [f"scratch: {json.dumps(plan['scratch'])}", f"requires_align: {plan['requires_align']}"]
        console.print("\n".join(lines))
        if cand.params:
            console.print("params: " + ", ".join(f"{k}={v}" for k, v in cand.params))
    for title, d in (("timings", rec.timings), ("verification", rec.verification), ("provenance", rec.provenance)):
        console.rule(title)
        for k, v in sorted(d.items()):
            console.print(f"{k:>18}: {v}")
    if rec.key in store.searches():
        console.print(f"search record: {store.searches_dir / (rec.key + '.json')}")


@cache_app.command("clear")
def clear_cmd(cache_dir: CacheDir = None,
              yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
              searches: Annotated[bool, typer.Option("--searches", help="Also delete the search records.")] = False
              ) -> None:
    """Delete every local record (shipped records are read-only and stay)."""
    with kforge_errors():
        store = _store(cache_dir)
        n = len(store.keys())
        what = f"{n} records" + (f" and {len(store.searches())} search records" if searches else "")
        if not yes:
            typer.confirm(f"Delete {what} in {store.root}?", abort=True)
        removed = store.clear()
        cleared = store.clear_searches() if searches else 0
        console_for().print(f"removed {removed} records" + (f" and {cleared} search records" if searches else "")
                            + f" from {store.root}")


@cache_app.command("verify")
def verify_cmd(cache_dir: CacheDir = None, shipped: Shipped = False, team: Team = False, team_dir: TeamDir = None,
               gpu: Annotated[bool, typer.Option("--gpu", help="Also re-run each kernel's verification on this "
                                                              "GPU; passing records become trusted.")] = False
               ) -> None:
    """Check the integrity of every entry (with --team and --shipped, of those tiers too); with --gpu, re-verify
    their kernels on this GPU (a team or shipped kernel that passes becomes a trusted local copy)."""
    with kforge_errors():
        store = _store(cache_dir)
        console = console_for()
        shipped_store = ShippedStore() if shipped else None
        tiers: list[tuple[str, Path, Any]] = [("local", store.root, store)]
        team_store_ = _team(team_dir) if team or team_dir is not None else None
        if team_store_ is not None:
            tiers.append(("team", team_store_.directory, team_store_))
        if shipped_store is not None:
            tiers.append(("shipped", shipped_store.directory, shipped_store))
        corrupt = 0
        for name, where, tier in tiers:
            report = tier.check()
            corrupt += len(report.corrupt)
            console.print(f"{name} ({where}): {len(report.ok)} ok, {len(report.corrupt)} corrupt")
            for key, why in report.corrupt.items():
                console.print(f"  corrupt {key[:16]}: {why}")
        failed = _verify_gpu(console, store, team_store_, shipped_store) if gpu else 0
        if corrupt or failed:
            raise typer.Exit(1)


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _verify_gpu(console: Console, store: LocalStore, *tiers: RecordReader | None) -> int:
    """Re-verify every kernel record of ``store`` and then of ``tiers`` (the team's, the shipped ones: each key
    once, in lookup order) on this GPU; returns how many failed. Unavailable is not a failure, nor is a kernel timed
    on another GPU model that is correct here but does not beat eager by the margin: it is reported and stays
    untrusted, so that a compile searches its signature (Note [a record timed on another GPU model] in
    store/reverified.py)."""
    try:
        from .runtime.provider import reverify_records
    except ImportError as e:
        console.print(f"GPU re-verification unavailable: {e}")
        return 0
    if not _cuda_available():
        console.print("GPU re-verification unavailable: no CUDA device")
        return 0
    records, seen = [r for _, r in store.items() if r.decision == "kernel"], set(store.keys())
    for tier in filter(None, tiers):
        records += [r for k, r in tier.items() if r.decision == "kernel" and k not in seen]
        seen.update(tier.keys())
    from .config import KforgeConfig

    margin = KforgeConfig.load().margin
    counts = {"ok  ": 0, "FAIL": 0, "slow": 0, "skip": 0}
    for rec, found, message in reverify_records(records):
        word, copy, why = _reverified_copy(rec, found, margin)
        counts[word] += 1
        if copy is not None:
            store.put(copy)
        console.print(f"  {word} {rec.key[:16]} {rec.signature.get('op')}: {why or message}")
    console.print(f"GPU re-verification: {counts['ok  ']} passed, {counts['FAIL']} failed"
                  + (f", {counts['slow']} correct but slower here than eager by the margin (not used)"
                     if counts["slow"] else "")
                  + (f", {counts['skip']} for another GPU arch skipped" if counts["skip"] else ""))
    return counts["FAIL"]


def _reverified_copy(rec: KernelRecord, found: Reverified | None, margin: float
                     ) -> tuple[str, KernelRecord | None, str]:
    """How ``kforge cache verify --gpu`` words a re-verification, the record it stores (None: nothing) and why. A
    record timed on this GPU model keeps its source (this machine's own search stays publishable); one re-timed here
    is the copy a compile would keep."""
    if found is None:  # made for another arch: nothing here can use it, so it is neither passed nor failed
        return "skip", None, ""
    kept, why = taken_here(rec, found, margin)
    if kept is None:
        return ("slow" if found.ok else "FAIL"), rec.replace(trusted=False), why
    if rec.decision == "kernel" and timed_elsewhere(rec, found.gpu):
        return "ok  ", kept, why
    return "ok  ", rec.replace(trusted=True), why


@cache_app.command("export")
def export_cmd(directory: Annotated[Path, typer.Argument(help="Bundle directory to write.")],
               key: Annotated[Optional[list[str]], typer.Option(
                   "--key", "-k", help="Export only this key (prefix allowed); repeat for several.")] = None,
               cache_dir: CacheDir = None) -> None:
    """Write records as a bundle: one <key>.json per record plus index.json."""
    with kforge_errors():
        store = _store(cache_dir)
        keys = None
        if key:
            known = store.keys()
            keys = [resolve_key(k, known) for k in key]
        index = store.export_bundle(keys, directory)
        n = len(json.loads(index.read_text())["records"])
        console_for().print(f"exported {n} records to {directory}")


@cache_app.command("import")
def import_cmd(directory: Annotated[Path, typer.Argument(help="Bundle directory to read.")],
               trust: Annotated[bool, typer.Option(
                   "--trust", help="Trust the records without re-verifying them on this GPU.")] = False,
               overwrite: Annotated[bool, typer.Option(
                   "--overwrite", help="Replace valid records already stored under the same keys.")] = False,
               cache_dir: CacheDir = None) -> None:
    """Import a bundle; records are untrusted (re-verified before first use) unless --trust."""
    with kforge_errors():
        store = _store(cache_dir)
        report = store.import_bundle(directory, trust=trust, overwrite=overwrite)
        console = console_for()
        console.print(f"imported {len(report.imported)} records ({'trusted' if trust else 'untrusted'}), "
                      f"skipped {len(report.skipped)} already stored, rejected {len(report.rejected)}")
        for name, why in report.rejected.items():
            console.print(f"  rejected {name}: {why}")
        if report.rejected:
            raise typer.Exit(1)


@cache_app.command("publish")
def publish_cmd(keys: Annotated[Optional[list[str]], typer.Argument(
                    help="Keys or unique prefixes to publish (default: every kernel this machine's searches found).",
                    metavar="KEY", show_default=False)] = None,
                team: Annotated[Optional[Path], typer.Option(
                    "--team", "--team-dir", help="The team store's directory (default: KFORGE_TEAM_STORE).",
                    show_default=False)] = None,
                cache_dir: CacheDir = None) -> None:
    """Push this machine's trusted kernels to the team store (PyTorch's decisions only when named). A team kernel is
    replaced only by a faster one measured on the same GPU (see "what a publish replaces" in store/team.py)."""
    with kforge_errors():
        target = _team(team)
        target.check_writable()
        store = _store(cache_dir)
        records = _to_publish(store, keys)
        console = console_for()
        done = [target.publish(rec, store.get_search(rec.key))  # Note [a search tree beside a team's kernel]
                for rec in track(records, description=escape(f"publishing to {target.directory}"), console=console,
                                 transient=True, disable=len(records) < MANY)]
        _print_published(console, target, records, done)


def _to_publish(store: LocalStore, keys: list[str] | None) -> list[KernelRecord]:
    """The records named by ``keys`` (prefixes allowed; a corrupt one is an error), else every valid kernel record
    (Note [what a publish replaces] in store/team.py: PyTorch's decisions only when named)."""
    if not keys:
        return [rec for _, rec in store.items() if rec.decision == "kernel"]
    known = store.keys()
    records = []
    for full in dict.fromkeys(resolve_key(k, known) for k in keys):  # each key once, in the order given
        rec = store.read(full)
        if rec is None:  # deleted by another process since the listing
            raise KeyLookupError(f"record {full} is gone")
        records.append(rec)
    return records


def _print_published(console: Console, team: TeamStore, records: list[KernelRecord], done: list[Published]) -> None:
    written = sum(p.written for p in done)
    console.print(f"published {written} of {len(done)} records to {team.directory}, skipped {len(done) - written}")
    for rec, p in zip(records, done):
        what = f"{rec.key[:16]} {rec.signature.get('op', '?')} {_shape(rec)} {rec.decision}"
        tree = " (with its search tree)" if p.tree else ""
        console.print(f"  {'published' if p.written else 'skipped  '} {what}{tree}: {p.why}")


@cache_app.command("queue")
def queue_cmd(cache_dir: CacheDir = None,
              clear: Annotated[bool, typer.Option("--clear", help="Empty the queue.")] = False) -> None:
    """The misses compiles queued for `kforge prewarm --queued` (search='queue', or past their search budget)."""
    from .cards import inputs_text
    from .config import KforgeConfig
    from .store.queue import MissQueue

    with kforge_errors():
        queue = MissQueue(cache_dir or KforgeConfig.load().cache_dir)
        console = console_for()
        if clear:
            console.print(f"removed {queue.clear()} queued misses from {queue.directory}")
            return
        misses = queue.misses()
        if not misses:
            console.print(f"no queued misses in {queue.directory}")
            return
        table = Table(title=f"queued misses: {queue.directory}", title_justify="left")
        for col in ("key", "op", "inputs", "arch", "processes", "last missed", "why not searched"):
            table.add_column(col, no_wrap=col != "why not searched")
        for m in misses:
            table.add_row(m.key[:12], str(m.card.get("op", "?")), inputs_text(m.card, 2), str(m.card.get("arch", "?")),
                          str(m.misses),
                          age(_dt.datetime.fromtimestamp(m.last_seen, _dt.timezone.utc).isoformat()), m.why)
        console.print(table)
        console.print(f"{len(misses)} signatures; search them with: kforge prewarm --queued")
