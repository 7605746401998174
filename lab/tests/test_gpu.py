"""Simulated NVIDIA GPUs: what Slurm 24.11's gpu/nvidia plugin reads, and the driver fault.

The spec and file tests need nothing; the machine test boots one lab machine (root) and
checks Slurm's own detection (`slurmd -C`) sees the GPUs, then the driver failure and its undo.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from slurm_lab import gpu, programs
from slurm_lab.errors import LabError
from slurm_lab.machines import Lab, Machine

needs_lab = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn"),
    reason="the lab needs root, debootstrap and systemd-nspawn",
)


def test_spec_reads_count_and_model() -> None:
    assert gpu.GpuSpec.parse("2") == gpu.GpuSpec(2, gpu.DEFAULT_MODEL)
    spec = gpu.GpuSpec.parse("4:NVIDIA A100-SXM4-40GB")
    assert (spec.count, spec.model) == (4, "NVIDIA A100-SXM4-40GB")
    assert spec.gres == "gpu:nvidia_a100-sxm4-40gb:4"


@pytest.mark.parametrize("text", ["", "x", "0", "17", "2:", "2:bad;model", "2:$(reboot)"])
def test_spec_refuses_bad_values(text: str) -> None:
    if text == "2:":  # An empty model means the default one.
        assert gpu.GpuSpec.parse(text).model == gpu.DEFAULT_MODEL
        return
    with pytest.raises(LabError):
        gpu.GpuSpec.parse(text)


def test_information_file_has_what_the_plugin_parses() -> None:
    text = gpu.information(gpu.GpuSpec(2, "Tesla T4"), 1)
    lines = text.splitlines()
    assert lines[0].startswith("Model:") and lines[0].split(None, 1)[1] == "Tesla T4"
    minor = next(line for line in lines if line.startswith("Device Minor:"))
    assert minor.split(":", 1)[1].strip() == "1"
    assert len(gpu.bus_id(1)) > 4  # The plugin skips directory names of 4 chars or less.


def test_the_boot_unit_runs_the_mount_program_with_the_arguments_simulate_writes() -> None:
    unit = programs.text(gpu.BOOT_UNIT)

    assert f"EnvironmentFile={gpu.BOOT_ENV}\n" in unit
    assert f"ExecStart=/bin/sh {gpu.BOOT_SCRIPT} $GPU_MOUNT\n" in unit  # split at spaces


@pytest.fixture(scope="module")
def machine(lab: Lab) -> Machine:
    return lab.create("gpu-a")


def detected(machine: Machine) -> str:
    return machine.exec(["slurmd", "-C"], timeout=60, check=True).stdout.splitlines()[0]


@needs_lab
@pytest.mark.lab
def test_slurm_detects_the_simulated_gpus_and_the_driver_failure(machine: Machine) -> None:
    assert "Gres=" not in detected(machine)  # No driver: no GPU.
    spec = gpu.GpuSpec(2, "Tesla T4")

    gpu.simulate(machine, spec)
    gpu.simulate(machine, spec)  # Idempotent.

    assert detected(machine).endswith(f" Gres={spec.gres}")
    devices = machine.exec(["stat", "-c", "%t:%T %F", "/dev/nvidia0", "/dev/nvidia1"]).stdout
    assert devices.split("\n")[:2] == [
        "c3:0 character special file",
        "c3:1 character special file",
    ]
    assert machine.exec(["test", "-d", "/proc/driver/nvidia"]).returncode == 0

    gpu.fail_driver(machine)
    assert "Gres=" not in detected(machine)
    assert machine.exec(["test", "-d", "/proc/driver/nvidia"]).returncode == 0

    gpu.restore_driver(machine, spec)
    assert detected(machine).endswith(f" Gres={spec.gres}")


@needs_lab
@pytest.mark.lab
def test_the_gpus_are_back_after_a_power_cycle_as_hardware_is(lab: Lab, machine: Machine) -> None:
    spec = gpu.GpuSpec(2, "Tesla T4")
    gpu.simulate(machine, spec)

    lab.power_off(machine.name)
    booted = lab.power_on(machine.name)

    assert detected(booted).endswith(f" Gres={spec.gres}")
    assert booted.exec(["test", "-c", "/dev/nvidia1"]).returncode == 0
    unit = booted.exec(["systemctl", "is-active", gpu.BOOT_UNIT]).stdout.strip()
    assert unit == "active"


class _NoMachines:
    """Just enough of a Lab for LabJuju to keep its model (no machine is made)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.shared_dir = state_dir / "shared"
        self.charms_dir = state_dir / "charms"

    def machines(self) -> list[Machine]:
        return []


def test_the_lab_gpus_constraint_is_kept_per_application(tmp_path: Path) -> None:
    from slurm_lab.juju import LabJuju

    juju = LabJuju(_NoMachines(tmp_path))  # type: ignore[arg-type]
    juju._set_lab_gpus("gpu", {"lab-gpus": "2:Tesla T4"})
    juju._set_lab_gpus("cpu", {"cores": 2})

    other_process = LabJuju(_NoMachines(tmp_path))  # type: ignore[arg-type]
    assert other_process.lab_gpu_spec("gpu") == gpu.GpuSpec(2, "Tesla T4")
    assert other_process.lab_gpu_spec("cpu") is None
    with pytest.raises(LabError):
        juju._set_lab_gpus("bad", {"lab-gpus": "lots"})
    juju._set_lab_gpus("gpu", None)  # Deployed again without it.
    assert juju.lab_gpu_spec("gpu") is None
