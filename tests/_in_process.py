"""`bertpre ARGS` run through `bertpre.cli.main` in the test's process, as the console script runs
it (a subprocess costs seconds of imports): the exit code, stdout and stderr."""
from __future__ import annotations

import sys

from bertpre.cli import main


def run_main(args: list, monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["bertpre", *map(str, args)])
    capsys.readouterr()
    try:
        main()
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
