"""The pretraining progress bar's line on stderr: ended, whatever cuts its close short."""
from __future__ import annotations

from unittest import mock

import pytest

from bertpre.train.metrics import ProgressBar


def test_a_close_cut_short_still_ends_the_bars_line(capsys):
    """A second data loading process's death raises from torch's signal handler inside the bar's
    close (seen in the suite: `… tok_s=5,517]error: a data loading process ended …` on one line)."""
    bar = ProgressBar(start_step=0, max_steps=10)
    bar.update(loss=1.0, lr=1e-3, tokens_per_s=10.0)
    died = RuntimeError("DataLoader worker (pid 1) is killed by signal: Killed")
    with mock.patch.object(bar._bar, "close", side_effect=died), pytest.raises(RuntimeError):
        bar.close()
    assert capsys.readouterr().err.endswith("\n")
