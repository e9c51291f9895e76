"""The ``kforge`` command line: doctor, cards, prewarm, cache (cli_cache.py). Only the cli modules print."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from . import __version__
from .cli_common import console_for, kforge_errors
from .errors import BadOption

app = typer.Typer(help="kforge: faster CUDA kernels per operator signature for torch.compile.",
                  no_args_is_help=True, add_completion=False)
console = console_for()


def _version(value: bool) -> None:
    if value:
        console.print(f"kforge {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Log kforge's decisions.")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s")


def _mount_cache_app() -> None:
    try:
        from .cli_cache import cache_app
    except ImportError as e:  # pragma: no cover - only while the store is missing
        logging.getLogger("kforge").debug("cache commands unavailable: %s", e)
        return
    app.add_typer(cache_app, name="cache", help="List, show, verify, export, import, publish or clear cached kernels.")


_mount_cache_app()


@app.command()
def doctor(check_llm: bool = typer.Option(True, "--llm/--no-llm", help="Also test the LLM endpoint.")) -> None:
    """What works on this machine (torch, GPU, NVRTC, cache, LLM endpoint) and what to do about the rest."""
    from .doctor import run_checks

    table = Table(title="kforge doctor")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail / what to do")
    for check in run_checks(check_llm=check_llm):
        status = Text("ok", "green") if check.ok else (Text("warn", "yellow") if check.warn else Text("no", "red"))
        table.add_row(check.name, status, check.detail)
    console.print(table)


@app.command()
def cards(model_spec: str = typer.Argument(..., help="FILE.py[::SETTING] with get_model()/get_inputs(), "
                                                      "or package.module:callable returning (model, inputs)."),
          json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the cards as JSON here."),
          families: str = typer.Option("", help="Opt-in families, e.g. matmul,conv.")) -> None:
    """Print the operator cards of a model: every distinct candidate signature, with bytes, FLOPs and floors."""
    import json

    from .inspect_model import model_cards

    with kforge_errors():  # a model spec that does not load, a --json path the system refuses
        found = model_cards(model_spec, families=tuple(f for f in families.split(",") if f))
        bw = found.bandwidth_gbps
        for card in found.cards:
            console.rule(Text(f"{card.op} x{card.occurrences}", "bold"))
            console.print(card.render(bw))
        console.print(f"\n{len(found.cards)} distinct signatures, {found.candidates} candidate nodes, "
                      f"{found.ops_seen} ATen ops; floors at {bw:.0f} GB/s ({found.bandwidth_source})")
        if json_out:
            json_out.write_text(json.dumps([c.to_json() for c in found.cards], indent=1))
            console.print(f"wrote {json_out}")


@app.command()
def ui(cache_dir: Optional[Path] = typer.Option(None, help="Cache directory (default: KFORGE_CACHE_DIR)."),
       host: str = typer.Option("127.0.0.1", help="Address to listen on; 0.0.0.0 shows the page to your network."),
       port: int = typer.Option(8686, help="Port to listen on (0: any free port)."),
       open_browser: bool = typer.Option(False, "--open", help="Open the page in a browser."),
       team_dir: Optional[Path] = typer.Option(
           None, "--team-dir", show_default=False, help="The team store's directory (default: KFORGE_TEAM_STORE).")
       ) -> None:
    """A local web page of the searches (live ones as they run, each tree, each candidate's code, diff and failure)
    and of the kernels a compile here can use (local, team, shipped)."""
    from .config import KforgeConfig
    from .ui.server import LOOPBACK, UiServer

    with kforge_errors():  # a bad port, a port in use: one line
        if not 0 <= port <= 65535:
            raise BadOption(f"--port must be 0..65535, got {port}")
        cfg = KforgeConfig.load()
        directory = cache_dir or cfg.cache_dir
        team = team_dir or cfg.team_store or None
        server = _ui_server(UiServer, directory, host, port, team)
    console.print(f"kforge ui: {server.url}  (search records in {server.searches_dir}"
                  f"{f'; team store {team}' if team else ''}; Ctrl-C stops)")
    if host not in LOOPBACK:
        console.print(f"Listening on {host}: anyone who can reach this machine can read the page.", style="yellow")
    if open_browser:
        import webbrowser

        webbrowser.open(server.url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("kforge ui: stopped")
    finally:
        server.server_close()


def _ui_server(factory, directory: Path, host: str, port: int, team: Path | str | None = None):
    import errno

    try:
        return factory(directory, host, port, team_dir=team)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise BadOption(f"port {port} on {host} is in use: pass another --port, or --port 0 for a free one") from e
        raise


def main() -> None:
    app()


@app.command()
def prewarm(model_spec: Optional[str] = typer.Argument(None, help="FILE.py[::SETTING] or package.module:callable"),
            iterations: int = typer.Option(50, help="MCTS iterations per signature."),
            seconds_per_op: float = typer.Option(60.0, help="Wall-clock budget per signature."),
            proposer: Optional[str] = typer.Option(None, help="templates | llm | mixed (default: config)."),
            min_share: Optional[float] = typer.Option(None, help="Skip signatures under this share of op time."),
            gpus: int = typer.Option(0, help="Search workers, one per GPU (0 = every visible GPU)."),
            force: bool = typer.Option(False, help="Search again even where the cache has a decision."),
            cache_dir: Optional[Path] = typer.Option(None, help="Cache directory (default: KFORGE_CACHE_DIR)."),
            families: str = typer.Option("", help="Opt-in families, e.g. matmul,conv."),
            queued: bool = typer.Option(False, "--queued", help="Search the misses compiles queued (search='queue', "
                                                                 "or past their budget) instead of a model."),
            json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the final table as JSON here "
                                                                          "(with the GPU, torch and the budget)."),
            shard: Optional[str] = typer.Option(None, help="I/N: search only this machine's share of N (machines "
                                                           "that share a team store split a model's searches).")
            ) -> None:
    """Search every operator signature of a model ahead of time. Resumable: a rerun skips finished searches."""
    import torch
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from . import prewarm as pw
    from .config import KforgeConfig
    from .store.local import LocalStore
    from .store.queue import MissQueue
    from .store.shipped import ShippedStore

    options = {k: v for k, v in {"proposer": proposer, "min_share": min_share, "cache_dir": cache_dir,
                                 "families": families or None}.items() if v is not None}
    with kforge_errors():  # bad options and model specs: one line, before the model is built
        _check_budget(iterations, seconds_per_op, gpus)
        shard_ = pw.parse_shard(shard) if shard is not None else None  # Note [a prewarm split across machines]
        if json_out is not None and not json_out.expanduser().parent.is_dir():  # not after an hour of searching
            raise BadOption(f"--json {json_out}: the directory {json_out.expanduser().parent} does not exist")
        cfg = KforgeConfig.load(options)
        found = _prewarm_cards(model_spec, queued, cfg)
    if queued:
        console.print(f"{len(found.cards)} signatures queued by compiles in {MissQueue(cfg.cache_dir).directory}")
        if not found.cards:
            return
    else:
        console.print(f"{model_spec}: {found.ops_seen} ATen ops, {found.candidates} candidate nodes, "
                      f"{len(found.cards)} distinct signatures")
    _print_cards_table(found.cards, found.bandwidth_gbps)
    if not torch.cuda.is_available():
        console.print("No CUDA GPU here: kforge can list the cards (`kforge cards`), but searching needs a GPU. "
                      "Nothing was searched.", style="yellow")
        return
    from .signature import arch_of

    device = torch.device("cuda", torch.cuda.current_device())
    with kforge_errors():
        n_gpus = _search_workers(gpus, torch.cuda.device_count())
        _check_search_gpus([arch_of(torch.device("cuda", i)) for i in range(n_gpus)], arch_of(device))
    cards_ = [c for c in found.cards if c.arch.startswith("sm_")]
    if queued and (other := [c for c in cards_ if c.arch != arch_of(device)]):  # queued on a GPU of another arch
        cards_ = [c for c in cards_ if c.arch == arch_of(device)]
        console.print(f"{len(other)} queued signatures are for another arch than {arch_of(device)}: left in the "
                      "queue for a prewarm on such a GPU")
    gpu_model = torch.cuda.get_device_name(device)  # Note [a cache directory that GPU models share] (store/local.py)
    store = LocalStore(cfg.cache_dir, gpu_model)
    items = pw.plan(cards_, pw.profile_cards(cards_, device), cfg, store, force=force, shipped=ShippedStore(),
                    shard=shard_)
    if shard_ is not None and not cfg.team_store:
        console.print(f"--shard {shard}: no team store is configured (KFORGE_TEAM_STORE), so the other shards' "
                      "kernels will not reach this machine", style="yellow")
    todo = [i for i in items if i.status in ("search", "shipped")]
    console.print(f"{sum(i.status == 'search' for i in items)} to search and "
                  f"{sum(i.status == 'shipped' for i in items)} shipped to re-verify on {n_gpus} GPU(s), "
                  f"{sum(i.status == 'cached' for i in items)} cached, "
                  f"{sum(i.status.startswith('skipped') for i in items)} skipped; cache {cfg.cache_dir}")
    if todo:
        console.print(f"Watch the searches as they run: kforge ui --cache-dir {cfg.cache_dir}")
    results = {i.card.key: pw.cached_result(i, store) for i in items if i.status == "cached"}
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                  TextColumn("{task.fields[status]}", markup=False),
                  TimeElapsedColumn(), console=console) as bar:
        tasks = {i.card.key: bar.add_task(_label(i.card), total=iterations, status="queued") for i in todo}

        def on_progress(p: pw.Progress) -> None:
            if p.waiting:  # Note [one search of a signature at a time] in store/claims.py
                bar.update(tasks[p.key], status=f"waiting for {p.waiting}")
                return
            best = f"best {p.best_speedup:.2f}x, {p.best_pct_roofline:.0f}% roofline" if p.best_speedup else "no kernel yet"
            llm = f", {p.tokens:,} tokens ${p.cost_usd:.4f}" if p.tokens else ""
            bar.update(tasks[p.key], completed=p.iteration, status=f"it {p.iteration}/{p.budget} {best}{llm}")

        def on_done(r: pw.PrewarmResult) -> None:
            results[r.card.key] = r
            bar.update(tasks[r.card.key], completed=iterations,
                       status=f"{r.decision or r.status}{' (shipped, re-verified)' if r.status == 'shipped' else ''} "
                              f"({r.seconds:.0f}s)")

        try:
            pw.run(items, cfg, iterations, seconds_per_op, n_gpus, on_progress, on_done)
        except KeyboardInterrupt:
            console.print("Interrupted: finished searches are kept, and the trees of the interrupted ones (kforge ui); "
                          "rerun to continue.", style="yellow")
    final = [results.get(i.card.key) or pw.PrewarmResult(i.card, i.share, i.status) for i in items]
    _print_prewarm_table(final)
    if json_out is not None:
        with kforge_errors():
            _write_prewarm_json(json_out, final, cfg, iterations, seconds_per_op, model_spec, device, shard)
        console.print(f"wrote {json_out}")
    resolved = MissQueue(cfg.cache_dir).prune(store)  # Note [a miss kept for later] in store/queue.py
    if resolved:
        console.print(f"{len(resolved)} queued signatures now have a decision and left the queue")


def _write_prewarm_json(path: Path, results, cfg, iterations: int, seconds_per_op: float, model_spec: str | None,
                        device, shard: str | None = None) -> None:
    """The final table as JSON, with what it was measured on and with what budget."""
    import datetime
    import json

    import torch

    from .fsutil import atomic_write
    from .ui.server import finite

    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "kforge": __version__,
           "model_spec": model_spec or "--queued", "shard": shard, "iterations": iterations,
           "seconds_per_op": seconds_per_op, "proposer": cfg.proposer, "inner": cfg.inner,
           "cache_dir": str(cfg.cache_dir),
           "expected_saving": sum(r.expected_gain for r in results), "results": [r.to_json() for r in results]}
    atomic_write(path.expanduser(), (json.dumps(finite(doc), indent=1, allow_nan=False) + "\n").encode())


def _prewarm_cards(model_spec: str | None, queued: bool, cfg):
    """The cards prewarm searches: a model's, or the queued misses' (one of the two)."""
    from .inspect_model import model_cards, queued_cards

    if queued and model_spec is not None:
        raise BadOption("kforge prewarm takes a MODEL_SPEC or --queued, not both")
    if not queued and model_spec is None:
        raise BadOption("kforge prewarm needs a MODEL_SPEC, or --queued to search the misses compiles queued")
    if queued:
        return queued_cards(cfg.cache_dir)
    return model_cards(model_spec, families=cfg.families, inner=cfg.inner)


def _check_budget(iterations: int, seconds_per_op: float, gpus: int) -> None:
    """prewarm's budget flags, in range (BadOption names the flag)."""
    if iterations < 1:
        raise BadOption(f"kforge prewarm --iterations {iterations}: must be >= 1")
    if not seconds_per_op > 0:  # NaN too
        raise BadOption(f"kforge prewarm --seconds-per-op {seconds_per_op}: must be > 0")
    if gpus < 0:
        raise BadOption(f"kforge prewarm --gpus {gpus}: must be >= 0 (0: every visible GPU)")


def _search_workers(gpus: int, visible: int) -> int:
    """prewarm's search workers: ``--gpus``, or every visible GPU for 0; more than are visible is an error."""
    if gpus > visible:
        raise BadOption(f"kforge prewarm --gpus {gpus}: only {visible} GPU(s) visible")
    return gpus or visible


def _check_search_gpus(archs: list[str], want: str) -> None:
    """prewarm's workers run on GPUs 0 ... n-1 (``archs``, their archs), and the model's cards are of the current
    GPU's arch ``want``: a search on a GPU of another arch fails every candidate and stores PyTorch's decision under
    the card's key (Note [a card of another GPU's arch] in runtime/cuda_provider.py), so a mixed set is refused."""
    other = [f"{i} ({a})" for i, a in enumerate(archs) if a != want]
    if other:
        raise BadOption(f"kforge prewarm: the model's signatures are for {want}, but search GPU(s) {', '.join(other)} "
                        f"are not; choose GPUs of one architecture with --gpus or CUDA_VISIBLE_DEVICES")


def _print_cards_table(cards_, bandwidth_gbps: float) -> None:
    table = Table(title="operator signatures")
    for col in ("op", "inputs", "x", "MiB moved", f"floor us @ {bandwidth_gbps:.0f} GB/s"):
        table.add_column(col)
    for c in cards_:
        table.add_row(_op_name(c), ", ".join(f"{t.spec.dtype}{list(t.spec.shape)}" for t in c.inputs),
                      str(c.occurrences), f"{c.bytes_min / 2**20:.2f}", f"{c.floor_us(bandwidth_gbps):.2f}")
    console.print(table)


def _op_name(card) -> str:
    """``softmax.default``; a fused pointwise group shows its expression, a softmax group ``softmax(expression)``, a
    norm group ``native_layer_norm.default -> expression``."""
    from .expression import FUSED_OP, NORM_OP, SOFTMAX_OP

    if card.op == NORM_OP:
        head = f"{card.scalars['prologue']} -> " if "prologue" in card.scalars else ""
        return f"{head}{str(card.scalars.get('norm', '?')).removeprefix('aten.')} -> {card.scalars.get('expr', '?')}"
    if card.op == SOFTMAX_OP:
        return f"softmax({card.scalars.get('expr', '?')})"
    return str(card.scalars.get("expr", card.op)) if card.op == FUSED_OP else card.op.removeprefix("aten.")


def _label(card) -> str:
    shape = list(card.inputs[0].spec.shape) if card.inputs else []
    return f"{_op_name(card)} {shape} {card.inputs[0].spec.dtype if card.inputs else ''}"


def _print_prewarm_table(results) -> None:
    table = Table(title="kforge prewarm")
    for col in ("op", "share", "eager us", "kforge us", "speedup", "x Inductor op", "% roofline", "decision", "iters",
                "tokens", "cost $", "expected gain"):
        table.add_column(col)
    for r in results:
        pct = f"{r.pct_roofline:.0f}%" if r.pct_roofline else ""
        table.add_row(_label(r.card), f"{r.share:.1%}", _num(r.eager_us), _num(r.kforge_us),
                      f"{r.speedup:.2f}x" if r.speedup else "", f"{r.vs_inductor:.2f}x" if r.vs_inductor else "",
                      pct, f"{r.decision} (shipped)" if r.status == "shipped" else r.decision or r.status,
                      str(r.iterations or ""), str(r.tokens or ""), f"{r.cost_usd:.4f}" if r.cost_usd else "",
                      f"{r.expected_gain:.1%}" if r.expected_gain else "")
    console.print(table)
    gain = sum(r.expected_gain for r in results)
    console.print(f"expected saving: {gain:.1%} of the profiled operator time "
                  f"(sum over kernels of share x (1 - 1/speedup))")
    for r in (r for r in results if r.status == "busy"):
        console.print(f"{_label(r.card)}: {r.reason}; a rerun takes its record or searches it")
    tokens, cost = sum(r.tokens for r in results), sum(r.cost_usd for r in results)
    if tokens:
        console.print(f"LLM: {tokens:,} tokens, estimated ${cost:.4f} (prices from KFORGE_LLM_PRICE_IN/_OUT)")


def _num(v) -> str:
    return f"{v:.1f}" if v else ""


if __name__ == "__main__":  # ``python -m forge_backend.cli`` ran nothing and returned 0 before this
    main()
