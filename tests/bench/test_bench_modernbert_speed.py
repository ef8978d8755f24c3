"""bench/modernbert_speed.py: a tiny run writes its record with the four models and the ratios."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives at the repository root

from bench import modernbert_speed  # noqa: E402


def test_modernbert_speed_tiny_run(tmp_path, one_thread, capsys):
    out = tmp_path / "results"
    assert modernbert_speed.main(["--steps", "2", "--warmup", "1", "--batch-size", "2", "--seq-length", "32",
                                  "--hidden", "64", "--layers", "3", "--window", "8", "--vocab-size", "200",
                                  "--threads", "1", "--out", str(out)]) == 0
    assert "bertpre / transformers" in capsys.readouterr().out
    [path] = out.iterdir()
    result = json.loads(path.read_text())
    assert set(result["tokens_per_s"]) == set(modernbert_speed.SIDES)
    assert all(len(values) == 2 for values in result["step_s"].values())
    parameters = result["shape"]["parameters"]
    # the cost model counts what torch counts, on both implementations; BERT within a width step
    assert parameters["modernbert"] == parameters["modernbert_counted_by_torch"] == parameters["transformers_counted_by_torch"]
    assert abs(parameters["bert"] - parameters["modernbert"]) <= 2 * 64 * 8 * 3 / 2 + 1
    assert result["ratios"]["bertpre_over_transformers"] > 0 and len(result["load_average_before_after"]) == 2
    assert result["machine"]["load_average_1_5_15"] is not None
