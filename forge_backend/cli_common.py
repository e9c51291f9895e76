"""What the ``kforge`` commands share (cli.py, cli_cache.py): consoles sized for a terminal or a log, and library
errors turned into one line."""
from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator

import typer
from rich.console import Console
from rich.text import Text

from .errors import KforgeError


def console_for(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that wraps at the terminal's width, or at 160 columns when piped (CI logs, the
    device machine), where rich would otherwise wrap at 80.

    It reads no markup: what kforge prints holds brackets of its own (``pip install kforge[nvrtc]``, a Note's name,
    a path, an error from a model or a compiler) that rich would take for style tags and drop. Colour goes through
    ``style=`` or :class:`rich.text.Text`."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, markup=False, highlight=False, soft_wrap=True,
                   width=None if stream.isatty() else 160)


@contextlib.contextmanager
def kforge_errors() -> Iterator[None]:
    """Turn a kforge error (a bad model spec, option or record: :class:`KforgeError`) or a file the system refuses (a
    path the user gave that is missing or not writable: OSError) into one red line on stderr and exit status 1,
    instead of a traceback. With ``--verbose`` an OSError keeps its traceback (it may come from deeper than a path)."""
    try:
        yield
    except KforgeError as e:
        _fail(str(e), e)
    except OSError as e:
        if logging.getLogger().isEnabledFor(logging.INFO):
            raise
        _fail(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e), e)


def _fail(message: str, cause: BaseException) -> None:
    console_for(stderr=True).print(Text.assemble(("error:", "red"), f" {message}"))
    raise typer.Exit(1) from cause
