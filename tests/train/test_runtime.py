"""Runtime: device and precision choice, determinism, the process group, and each process's GPU
RNG state across machines with fewer GPUs. CUDA is faked; the one real-GPU test is marked gpu."""
from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from bertpre.errors import UserError
from bertpre.train import runtime as runtime_module
from bertpre.train.checkpoint import load_safely
from bertpre.train.rng_state import CUDA_RNG, capture_rng_state, restore_rng_state
from bertpre.train.runtime import (
    PROCESS_GROUP_TIMEOUT,
    choose_device,
    choose_precision,
    init_runtime,
)


@pytest.mark.parametrize("requested, device_type, bf16, expected", [
    ("auto", "cuda", True, ("bf16", "precision bf16 (auto: this GPU supports bf16)")),
    ("auto", "cuda", False, ("fp16", "precision fp16 with loss scaling (auto: this GPU has no bf16)")),
    ("auto", "cpu", False, ("fp32", "precision fp32 (auto: mixed precision gains nothing on a CPU)")),
    ("fp32", "cuda", True, ("fp32", "precision fp32 (as configured)")),
    ("fp32", "cpu", False, ("fp32", "precision fp32 (as configured)")),
    ("fp16", "cuda", True, ("fp16", "precision fp16 with loss scaling (as configured)")),
    ("fp16", "cuda", False, ("fp16", "precision fp16 with loss scaling (as configured)")),
    ("fp16", "cpu", False, ("fp32", "precision fp32 (fp16 needs a CUDA GPU; this is a CPU)")),
    ("bf16", "cuda", True, ("bf16", "precision bf16 (as configured)")),
    ("bf16", "cpu", False, ("bf16", "precision bf16 (as configured)")),
])
def test_choose_precision(requested, device_type, bf16, expected):
    assert choose_precision(requested, device_type, bf16) == expected


def test_bf16_on_a_gpu_without_it_is_refused():
    with pytest.raises(UserError, match="this GPU does not support bf16; use train.precision=fp16"):
        choose_precision("bf16", "cuda", False)


@pytest.mark.parametrize("requested, cuda, env, expected", [
    ("auto", True, None, "cuda"),
    ("auto", False, None, "cpu"),
    ("cpu", True, None, "cpu"),
    ("cuda", True, None, "cuda"),
    ("auto", True, "cpu", "cpu"),  # what the test suite sets
    ("cuda", True, "cpu", "cuda"),  # an explicit train.device wins over the variable
])
def test_choose_device(monkeypatch, requested, cuda, env, expected):
    monkeypatch.delenv("BERTPRE_DEVICE")
    if env is not None:
        monkeypatch.setenv("BERTPRE_DEVICE", env)
    assert choose_device(requested, cuda) == expected


def test_cuda_without_a_gpu_is_refused(monkeypatch):
    monkeypatch.delenv("BERTPRE_DEVICE")
    with pytest.raises(UserError, match="train.device is cuda but torch sees no CUDA GPU"):
        choose_device("cuda", cuda_available=False)
    monkeypatch.setenv("BERTPRE_DEVICE", "gpu")
    with pytest.raises(UserError, match="BERTPRE_DEVICE='gpu' is not a device"):
        choose_device("auto", cuda_available=True)


@pytest.fixture
def global_flags():
    """Put back the process-wide numeric flags init_runtime may change."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             matmul.allow_tf32, cudnn.allow_tf32, cudnn.deterministic, cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    matmul.allow_tf32, cudnn.allow_tf32, cudnn.deterministic, cudnn.benchmark = saved[2:]


class FakeCuda:
    """Stands in for torch.cuda on a CPU machine: records devices set and RNG states given."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, bf16: bool = True, devices: int = 1,
                 current: int = 0) -> None:
        self.bf16, self.devices, self.current = bf16, devices, current
        self.set_devices: list[torch.device] = []
        self.rng = {index: torch.full((16,), index, dtype=torch.uint8) for index in range(devices)}
        self.rng_set: list[tuple[int, torch.Tensor]] = []
        for name in ("is_available", "is_initialized", "set_device", "is_bf16_supported",
                     "get_rng_state", "set_rng_state", "device_count", "current_device",
                     "get_rng_state_all", "set_rng_state_all"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.delenv("BERTPRE_DEVICE", raising=False)

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def set_device(self, device: torch.device) -> None:
        self.set_devices.append(device)

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return self.bf16 or including_emulation

    def device_count(self) -> int:
        return self.devices

    def current_device(self) -> int:
        return self.current

    def get_rng_state(self, device: str = "cuda") -> torch.Tensor:
        assert device == "cuda"
        return self.rng[self.current].clone()

    def set_rng_state(self, state: torch.Tensor, device: str = "cuda") -> None:
        assert device == "cuda"
        self.rng_set.append((self.current, state.clone()))

    def get_rng_state_all(self) -> list[torch.Tensor]:
        raise AssertionError("each process saves only its own device's state")

    def set_rng_state_all(self, states: list[torch.Tensor]) -> None:
        raise AssertionError("each process restores only its own device's state")


def test_auto_on_a_bf16_gpu_is_bf16_on_this_process_device(monkeypatch, global_flags):
    cuda = FakeCuda(monkeypatch, bf16=True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    runtime = init_runtime("auto")
    assert runtime.device == torch.device("cuda", 3) and cuda.set_devices == [runtime.device]
    assert runtime.precision == "bf16" and runtime.note == ""
    assert runtime.precision_line == "precision bf16 (auto: this GPU supports bf16)"
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32


def test_auto_on_an_older_gpu_is_fp16_with_loss_scaling(monkeypatch, global_flags):
    FakeCuda(monkeypatch, bf16=False)  # emulated bf16 only, as on a T4 or V100
    runtime = init_runtime()
    assert runtime.precision == "fp16"
    assert runtime.precision_line == "precision fp16 with loss scaling (auto: this GPU has no bf16)"
    with pytest.raises(UserError, match="does not support bf16"):
        init_runtime("bf16")


def test_explicit_precision_wins_over_auto(monkeypatch, global_flags):
    FakeCuda(monkeypatch, bf16=True)
    assert init_runtime("fp16").precision == "fp16"
    assert init_runtime("fp32").precision == "fp32"


def test_train_device_cpu_keeps_a_gpu_machine_on_the_cpu(monkeypatch, global_flags):
    cuda = FakeCuda(monkeypatch, bf16=True)
    runtime = init_runtime("auto", device="cpu")
    assert runtime.device == torch.device("cpu") and cuda.set_devices == []
    assert runtime.precision == "fp32"


def test_on_cpu_fp16_falls_back_to_fp32_with_a_note():
    runtime = init_runtime("fp16")  # BERTPRE_DEVICE=cpu, set by conftest
    assert runtime.device == torch.device("cpu")
    assert runtime.precision == "fp32"
    assert runtime.note == "precision fp16 needs a CUDA GPU; training in fp32 on this CPU instead"
    assert init_runtime().precision_line == "precision fp32 (auto: mixed precision gains nothing on a CPU)"
    assert init_runtime().note == ""


def test_deterministic_on_cuda_sets_every_switch(monkeypatch, global_flags):
    FakeCuda(monkeypatch)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.backends.cudnn.benchmark = True
    runtime = init_runtime("auto", deterministic=True)
    assert runtime.deterministic
    assert torch.are_deterministic_algorithms_enabled()
    # strict: under warn_only PyTorch keeps attention's non-deterministic backward (and warns)
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert runtime_module.os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32


def test_deterministic_keeps_a_workspace_setting_already_given(monkeypatch, global_flags):
    FakeCuda(monkeypatch)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    init_runtime("auto", deterministic=True)
    assert runtime_module.os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_deterministic_on_cpu_changes_nothing(global_flags):
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32)
    runtime = init_runtime("fp32", deterministic=True)
    assert not runtime.deterministic
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32) == before


@pytest.fixture
def process_group_calls(monkeypatch) -> list[dict]:
    """Launch as torchrun's rank 1 of 2 and record init_process_group's arguments."""
    calls: list[dict] = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda **kwargs: calls.append(kwargs))
    return calls


def test_nccl_is_bound_to_the_device_and_outlasts_a_long_save(monkeypatch, global_flags,
                                                              process_group_calls):
    FakeCuda(monkeypatch, devices=2)
    runtime = init_runtime("auto")
    assert (runtime.rank, runtime.local_rank, runtime.world_size) == (1, 1, 2)
    assert process_group_calls == [{"backend": "nccl", "timeout": PROCESS_GROUP_TIMEOUT,
                                    "device_id": torch.device("cuda", 1)}]
    assert PROCESS_GROUP_TIMEOUT == datetime.timedelta(minutes=60)


def test_gloo_on_cpu_gets_the_same_timeout(process_group_calls):
    init_runtime("fp32")
    assert process_group_calls == [{"backend": "gloo", "timeout": PROCESS_GROUP_TIMEOUT}]


def round_trip(state: dict, tmp_path: Path) -> dict:
    """Through a file, as a checkpoint does, loaded with weights_only=True."""
    torch.save(state, tmp_path / "rng_state_0.pt")
    return load_safely(tmp_path / "rng_state_0.pt")


def test_each_process_saves_and_restores_only_its_own_gpu_rng(monkeypatch, tmp_path):
    saver = FakeCuda(monkeypatch, devices=8, current=5)
    state = round_trip(capture_rng_state(), tmp_path)
    assert "cuda" not in state and torch.equal(state[CUDA_RNG], saver.rng[5])
    # resumed on a machine with one GPU: the state goes onto this process's device
    loader = FakeCuda(monkeypatch, devices=1, current=0)
    restore_rng_state(state)
    assert len(loader.rng_set) == 1
    assert loader.rng_set[0][0] == 0 and torch.equal(loader.rng_set[0][1], saver.rng[5])


def test_a_process_that_never_started_cuda_saves_no_gpu_rng(monkeypatch):
    FakeCuda(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    # asking would start CUDA on a GPU this process does not use
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda *args, **kwargs: pytest.fail("asked"))
    assert CUDA_RNG not in capture_rng_state()


@pytest.mark.parametrize("saved_devices, local_rank, entry", [
    (4, 0, 0),  # saved with 4 GPUs, resumed with 1
    (4, 2, 2),  # the entry of this process's local rank
    (2, 3, 0),  # more processes now than the saver had GPUs: the first entry
])
def test_old_checkpoints_with_every_device_state_still_restore(monkeypatch, tmp_path,
                                                               saved_devices, local_rank, entry):
    state = capture_rng_state()
    state["cuda"] = [torch.full((16,), 10 + index, dtype=torch.uint8)
                     for index in range(saved_devices)]
    state = round_trip(state, tmp_path)
    cuda = FakeCuda(monkeypatch, devices=1, current=0)
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    restore_rng_state(state)
    assert len(cuda.rng_set) == 1 and torch.equal(cuda.rng_set[0][1], state["cuda"][entry])


def test_gpu_rng_is_ignored_on_a_machine_without_cuda(monkeypatch, tmp_path):
    FakeCuda(monkeypatch, devices=2)
    state = round_trip(capture_rng_state(), tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *args, **kwargs: pytest.fail("set"))
    restore_rng_state(state)


@pytest.mark.gpu
def test_auto_on_a_real_gpu_is_bf16_where_it_has_bf16(global_flags):
    runtime = init_runtime("auto")
    assert runtime.device.type == "cuda"
    native_bf16 = torch.cuda.get_device_capability(runtime.device)[0] >= 8
    assert runtime.precision == ("bf16" if native_bf16 else "fp16")
    if native_bf16:
        assert runtime.precision_line == "precision bf16 (auto: this GPU supports bf16)"


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H200", 989e12), ("NVIDIA H200 NVL", 835e12), ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA L4", 121e12), ("NVIDIA L40S", 362e12), ("NVIDIA GeForce RTX 4090", None)])
def test_mfu_is_against_the_data_sheet_peak_of_the_very_card(name, peak):
    assert runtime_module.peak_flops_of(name) == peak
