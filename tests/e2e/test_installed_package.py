"""bertpre installed from a wheel (not editable) into a fresh venv, run from another folder:
the presets ship inside the package, and `demo` and `pretrain --config tiny` work."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(command: list, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "PYTHONPATH": "", **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_wheel_ships_presets_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", tmp_path / "dist", ROOT], cwd=tmp_path)
    wheel = next((tmp_path / "dist").glob("bertpre-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "bertpre/configs/tiny.yaml" in names and "bertpre/configs/base.yaml" in names
    assert not any(name.startswith("configs/") for name in names)
    assert {"bertpre/model/remote_code/configuration_bertpre.py",
            "bertpre/model/remote_code/modeling_bertpre.py"} <= set(names)  # copied into exports

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel], cwd=tmp_path)
    # The dependencies come from the test's own environment, as a plain path entry: its .pth
    # files (among them the editable install of this checkout) are not processed.
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    cwd=tmp_path).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([python, "-c", "import bertpre; print(bertpre.__file__)"], cwd=elsewhere).stdout
    assert Path(where.strip()).is_relative_to(venv)
    bertpre = venv / "bin" / "bertpre"
    assert "tiny" in run([bertpre, "pretrain", "--help"], cwd=elsewhere).stdout
    run([bertpre, "demo", "--out", "demo", "--max-steps", "4"], cwd=elsewhere, OMP_NUM_THREADS="1")
    run([bertpre, "pretrain", "--config", "tiny", "--data", "demo/data", "--out", "run",
         "--set", "train.max_steps=2", "--set", "train.eval_every=2"], cwd=elsewhere)
    assert (elsewhere / "run" / "checkpoints" / "latest").read_text().strip() == "step-00000002"
