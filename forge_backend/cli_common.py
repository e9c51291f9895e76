"""What the ``kforge`` commands share (cli.py, cli_cache.py): consoles sized for a terminal or a log, and library
errors turned into one line."""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator

import typer
from rich.console import Console

from .errors import KforgeError


def console_for(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that wraps at the terminal's width, or at 160 columns when piped (CI logs, the
    device machine), where rich would otherwise wrap at 80."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=None if stream.isatty() else 160)


@contextlib.contextmanager
def kforge_errors() -> Iterator[None]:
    """Turn a kforge error (a bad model spec, option or record: :class:`KforgeError`) into one red line on stderr and
    exit status 1, instead of a traceback."""
    try:
        yield
    except KforgeError as e:
        console_for(stderr=True).print(f"[red]error:[/red] {e}", markup=True)
        raise typer.Exit(1) from e
