"""The `bertpre` command line: each command parses its options and calls one library function."""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from bertpre.errors import UserError
from data_prep.errors import CorpusError

app = typer.Typer(
    name="bertpre",
    help="Pretrain BERT-style encoders from scratch on your own corpus.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)

EXIT_BAD_INPUT = 2


def fail(message: str) -> typer.Exit:
    """Print one line to stderr and return the exit for bad input (raise the result)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(EXIT_BAD_INPUT)


# --- commands ------------------------------------------------------------------------------
# Each command below is a thin wrapper: parse options, call the library, print a summary.
# (sections are added per command; keep each self-contained)


def main() -> None:
    """Console-script entry point: user errors become one line on stderr and exit code 2."""
    try:
        app()
    except (UserError, CorpusError) as error:
        typer.echo(f"error: {error}", err=True)
        sys.exit(EXIT_BAD_INPUT)


_ = Path  # used by the command sections
