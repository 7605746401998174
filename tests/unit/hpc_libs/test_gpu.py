"""Slurm's own GPU detection as hpc_libs reads it, and the optional NVIDIA driver install."""

from pathlib import Path

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import apt, host
from hpc_libs.slurm import gpu
from hpc_libs.slurm.slurmd import SlurmdManager
from hpc_libs_fakes import FakeRun

FIRST_LINE = (
    "NodeName=juju-1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=2 "
    "RealMemory=31906"
)
NO_GPU = f"{FIRST_LINE}\nUpTime=0-03:12:41\n"
TWO_T4 = (
    f"{FIRST_LINE} Gres=gpu:tesla_t4:2\n"
    "Found gpu:tesla_t4:2 with Autodetect=nvidia (Substring of gpu name may be used instead)\n"
    "UpTime=0-03:12:41\n"
)


def load_driver(root: Path) -> None:
    (root / gpu.NVIDIA_DRIVER_DIR).mkdir(parents=True)


def test_gres_is_read_from_the_first_line_only() -> None:
    assert gpu.gres_from_slurmd_c(TWO_T4) == "gpu:tesla_t4:2"
    assert gpu.gres_from_slurmd_c(NO_GPU) == ""
    assert gpu.gres_from_slurmd_c("") == ""
    assert gpu.gres_from_slurmd_c(f"{FIRST_LINE}\nGres=gpu:x:1\n") == ""


def test_several_types_are_kept_as_slurm_prints_them() -> None:
    output = f"{FIRST_LINE} Gres=gpu:tesla_t4:2,gpu:a100:1\n"

    assert gpu.gres_from_slurmd_c(output) == "gpu:tesla_t4:2,gpu:a100:1"


def test_a_gres_outside_slurm_grammar_is_an_error() -> None:
    with pytest.raises(SlurmOpsError, match="invalid Gres"):
        gpu.gres_from_slurmd_c(f"{FIRST_LINE} Gres=gpu:a;b:1\n")


def test_no_driver_no_gpu_is_a_cpu_node(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("slurmd", "-C", stdout=NO_GPU)

    hardware = SlurmdManager(tmp_path).detect_hardware()

    assert "Gres" not in hardware
    assert not [c for c in fake_run.calls if c[0] == "nvidia-smi"]


def test_detected_gpus_become_the_gres(fake_run: FakeRun, tmp_path: Path) -> None:
    load_driver(tmp_path)
    fake_run.on("slurmd", "-C", stdout=TWO_T4)

    hardware = SlurmdManager(tmp_path).detect_hardware()

    assert hardware["Gres"] == "gpu:tesla_t4:2"
    assert hardware["CPUs"] == 8
    assert not [c for c in fake_run.calls if c[0] == "nvidia-smi"]


def test_a_loaded_driver_without_gpus_is_a_driver_failure(
    fake_run: FakeRun, tmp_path: Path
) -> None:
    load_driver(tmp_path)
    fake_run.on("slurmd", "-C", stdout=NO_GPU)
    fake_run.on(
        "nvidia-smi", returncode=9, stdout="Failed to initialize NVML: Driver/library mismatch"
    )

    with pytest.raises(gpu.GpuDriverError) as failure:
        SlurmdManager(tmp_path).detect_hardware()

    assert "NVIDIA driver loaded but Slurm found no GPU" in failure.value.message
    assert "Driver/library mismatch" in failure.value.message


def test_a_missing_nvidia_smi_still_gives_a_reason(fake_run: FakeRun, tmp_path: Path) -> None:
    load_driver(tmp_path)
    fake_run.on("slurmd", "-C", stdout=NO_GPU)
    fake_run.missing("nvidia-smi")

    with pytest.raises(gpu.GpuDriverError, match="nvidia-smi: command 'nvidia-smi' not found"):
        SlurmdManager(tmp_path).detect_hardware()


def test_detection_commands_are_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    load_driver(tmp_path)
    bounds: dict[str, float] = {}

    def timing_out(argv: list[str], **kwargs: object) -> object:
        timeout = kwargs["timeout"]
        assert isinstance(timeout, float)
        bounds[argv[0]] = timeout
        raise host.command_timed_out(argv, timeout)

    monkeypatch.setattr(host, "run", timing_out)

    with pytest.raises(SlurmOpsError) as failure:
        SlurmdManager(tmp_path).detect_hardware()
    assert failure.value.timed_out
    assert "timed out" in gpu.nvidia_smi_report()
    assert 0 < bounds["slurmd"] <= 60
    assert 0 < bounds["nvidia-smi"] <= 30


def test_ubuntu_is_recognised_from_os_release(tmp_path: Path) -> None:
    assert not gpu.is_ubuntu(tmp_path)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text('NAME="Debian"\nID=debian\n')
    assert not gpu.is_ubuntu(tmp_path)
    (tmp_path / "etc/os-release").write_text('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')
    assert gpu.is_ubuntu(tmp_path)


def test_driver_install_uses_ubuntu_drivers(
    fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed: list[list[str]] = []
    monkeypatch.setattr(apt, "install", lambda packages, **_: installed.append(list(packages)))

    gpu.install_nvidia_driver()

    assert installed == [["ubuntu-drivers-common"]]
    assert ["ubuntu-drivers", "install"] in fake_run.calls


def test_reboot_required_follows_the_flag_file(tmp_path: Path) -> None:
    assert not gpu.reboot_required(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run/reboot-required").write_text("")
    assert gpu.reboot_required(tmp_path)
