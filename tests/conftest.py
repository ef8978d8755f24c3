"""Shared test set-up. pytest puts this folder on sys.path, so the helper modules beside this
file (`_tiny_data`, `_tokenize_helpers`, `_hf_models`) import by name from any test folder.

Tests assert CPU-exact values, so on a machine with a GPU every test runs on the CPU except
those marked `gpu`, which are skipped where there is no GPU.

No test sees the checkout as its working directory: a user who followed the README inside the
clone has `data/corpus`, `runs/`, `my-bert/` there, and a preset's relative `data.path` would read
them. Collection runs in one scratch folder, and every test in a fresh one of its own.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from _tiny_data import build_tiny_data

# Asked before hiding the GPUs: the CUDA driver reads CUDA_VISIBLE_DEVICES once, at its first use,
# so this process keeps them for `gpu` tests while every subprocess it starts sees none. Set here
# at import, not in a fixture, because test modules copy os.environ when they are imported.
HAS_CUDA = torch.cuda.is_available()
VISIBLE_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["BERTPRE_DEVICE"] = "cpu"  # train.device auto → cpu in this process too
# No "still working" lines on stderr: on a loaded machine a command passing 30 s would gain a line
# its test did not expect. tests/test_heartbeat.py sets the interval itself.
os.environ["BERTPRE_HEARTBEAT_S"] = "0"
# Nor the oversubscribed-CPU note: the suite's own load would add it to runs that do not expect
# it. tests/train/test_cpu_note.py turns it on.
os.environ["BERTPRE_CPU_NOTE"] = "0"
# transformers copies an export's remote code (`trust_remote_code=True`) into HF_MODULES_CACHE,
# read once when it is imported: a temporary folder here, not ~/.cache; and the Hub is never asked.
if "HF_MODULES_CACHE" not in os.environ:
    os.environ["HF_MODULES_CACHE"] = tempfile.mkdtemp(prefix="bertpre-tests-hf-modules-")
    atexit.register(shutil.rmtree, os.environ["HF_MODULES_CACHE"], ignore_errors=True)
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_configure(config: pytest.Config) -> None:
    # Before collection, so module-level code and module fixtures resolve relative paths there too.
    # pytest resolves its own arguments against `invocation_params.dir`, not the working directory.
    scratch = tempfile.mkdtemp(prefix="bertpre-tests-cwd-")
    os.chdir(scratch)
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_working_directory(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test starts in an empty folder of its own: what it reads or writes by a relative path
    is its own, whatever the checkout or an earlier test left in the working directory."""
    folder = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(folder)
    return folder


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _gpu_tests_see_the_gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `gpu` test, and the subprocesses it starts, see the GPUs again (for this test only)."""
    if request.node.get_closest_marker("gpu") is None:
        return
    monkeypatch.delenv("BERTPRE_DEVICE", raising=False)
    if VISIBLE_DEVICES is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", VISIBLE_DEVICES)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DATA folder of 66 tiny documents (6 held out), made once by the real tokenize pipeline.

    Tests only read it; one that changes DATA builds its own with `build_tiny_data`.
    """
    return build_tiny_data(tmp_path_factory.mktemp("tiny") / "data")


def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# One intra-op thread: a tiny model gains nothing from more, float sums split the same way in
# every run, and on a busy 2-core machine two threads make each step tens of times slower.
one_thread = pytest.fixture(_one_torch_thread)
one_thread_per_module = pytest.fixture(_one_torch_thread, scope="module")
