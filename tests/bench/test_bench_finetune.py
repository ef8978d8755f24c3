"""bench.finetune: its paired interval."""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import finetune  # noqa: E402


def test_paired_interval_matches_the_textbook_case():
    # differences 1, 2, 3: mean 2, sd 1, t(2) at 97.5% = 4.303
    result = finetune.paired([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    half = 4.303 / math.sqrt(3)
    assert result["difference"] == 2.0
    assert result["interval"] == [2.0 - half, 2.0 + half]
    assert result["std_of_differences"] == 1.0
    assert finetune.paired([1.0], [2.0])["interval"] is None


def test_pairing_takes_seed_noise_shared_by_both_sides_out():
    shared = [0.20, 0.30, 0.25, 0.35]
    ours = [value + 0.01 for value in shared]
    paired = finetune.paired(ours, shared)
    welch = finetune.welch(ours, shared)
    assert paired["interval"][1] - paired["interval"][0] < 1e-9
    assert welch["interval"][1] - welch["interval"][0] > 0.1
