"""Simulated NVIDIA GPUs on a lab machine, found by Slurm 24.11's own gpu/nvidia plugin.

The plugin (`AutoDetect=nvidia`, src/plugins/gpu/nvidia/gpu_nvidia.c) loads no NVIDIA
library. For every entry of /proc/driver/nvidia/gpus whose name is longer than 4 characters
(a PCI bus id) it reads:

- /proc/driver/nvidia/gpus/<bus>/information: the `Model:` line (the Gres type, lower case
  with `_` for spaces) and the `Device Minor:` line (the device file `/dev/nvidia<minor>`);
- /sys/bus/pci/drivers/nvidia/<bus>/local_cpulist: the GPU's CPU affinity. The plugin does
  not check that fopen succeeded: a missing file crashes slurmd.

Slurm only names `/dev/nvidia<minor>` (in `CUDA_VISIBLE_DEVICES` order and device cgroups); it
does not open it.

How a lab machine presents them: the files live in the machine's own filesystem under
`STATE_DIR`, and the host bind-mounts them over /proc/driver and /sys/bus/pci/drivers in the
container's mount namespace (`nsenter --all`, as every machine command runs). The host's
capabilities apply there, so mounting over the container's procfs and read-only sysfs works
where the container's own root could not, and `mknod /dev/nvidia<N>` is not subject to the
container's device policy. The nodes are character devices 195:<N> (the NVIDIA major): a
process in the machine cannot open them (no driver), which no Slurm code path tries.
Binding a copy over all of /proc/driver and /sys/bus/pci/drivers hides the host's other
entries there from the machine; nothing in a lab machine reads them.

A power cycle (`Lab.power_on`) drops the mounts and the /dev nodes, as it would not drop real
GPUs: `simulate` also installs `slurm-lab-gpu.service` in the machine, which makes them again
at every boot before slurmd starts (on these hosts the container's own root may do both; the
lab test power-cycles a machine to prove it).

Driver failure (`fail_driver`): the driver is loaded (/proc/driver/nvidia exists) but lists
no GPU, as after "GPU has fallen off the bus": `slurmd -C` then reports no Gres on a machine
whose driver is present, which the slurmd charm reports as a failed driver. `restore_driver`
lists the GPUs again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from slurm_lab import programs
from slurm_lab.errors import LabError

if TYPE_CHECKING:
    from slurm_lab.machines import Machine

STATE_DIR = "/var/lib/slurm-lab-gpu"
"""Where, inside the machine, the simulated driver files are kept."""
NVIDIA_MAJOR = 195
MAX_GPUS = 16
DEFAULT_MODEL = "Tesla T4"
_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,62}$")


@dataclass(frozen=True)
class GpuSpec:
    """How many GPUs of which model a lab machine simulates."""

    count: int
    model: str = DEFAULT_MODEL

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_GPUS:
            raise LabError(f"lab GPUs: count must be 1..{MAX_GPUS}, not {self.count}")
        if not _MODEL_RE.match(self.model):
            raise LabError(f"lab GPUs: bad model {self.model!r} (letters, digits, ' ._-')")

    @property
    def gres_type(self) -> str:
        """The Gres type Slurm derives from the model (`Tesla T4` -> `tesla_t4`)."""
        return _underscorify(self.model)

    @property
    def gres(self) -> str:
        """The node's `Gres=` as Slurm reports it (`gpu:tesla_t4:2`)."""
        return f"gpu:{self.gres_type}:{self.count}"

    @classmethod
    def parse(cls, text: str) -> GpuSpec:
        """Read `N` or `N:<model>` (the CLI flag and the lab constraint's value)."""
        count, _, model = text.partition(":")
        if not count.strip().isdigit():
            raise LabError(f"lab GPUs: expected N or N:<model>, got {text!r}")
        return cls(int(count), model.strip() or DEFAULT_MODEL)


def _underscorify(model: str) -> str:
    """Slurm's gpu_common_underscorify_tolower: spaces to `_`, lower case."""
    return model.replace(" ", "_").lower()


def bus_id(index: int) -> str:
    """Return a PCI bus id for the index-th GPU (the plugin skips names of 4 chars or less)."""
    return f"0000:{index + 0x10:02x}:00.0"


def information(spec: GpuSpec, index: int) -> str:
    """Return the driver's /proc information file of one GPU, in the driver's own layout."""
    return (
        f"Model: \t\t {spec.model}\n"
        "IRQ:   \t\t 0\n"
        f"GPU UUID: \t GPU-00000000-0000-0000-0000-{index:012d}\n"
        "Video BIOS: \t 00.00.00.00.00\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 47 bits\n"
        "DMA Mask: \t 0x7fffffffffff\n"
        f"Bus Location: \t {bus_id(index)}\n"
        f"Device Minor: \t {index}\n"
        "GPU Excluded:\t No\n"
    )


def _list_argv(spec: GpuSpec) -> list[str]:
    """Return the argv that (re)writes the GPU list under STATE_DIR (the mounts show it)."""
    gpus = [part for i in range(spec.count) for part in (bus_id(i), information(spec, i))]
    return programs.sh("gpu-list.sh", STATE_DIR, *gpus)


def _mount_args(spec: GpuSpec) -> list[str]:
    """Return gpu-mount.sh's arguments: the files' dir, the NVIDIA major, the GPU count."""
    return [STATE_DIR, str(NVIDIA_MAJOR), str(spec.count)]


BOOT_SCRIPT = f"{STATE_DIR}/boot.sh"
BOOT_ENV = f"{STATE_DIR}/boot.env"
BOOT_UNIT = "slurm-lab-gpu.service"
"""The machine's unit that puts the GPUs back at every boot, before slurmd: it runs
BOOT_SCRIPT (`gpu-mount.sh`) with the arguments in BOOT_ENV.

Real GPUs are there at every boot; the bind mounts and /dev nodes of the simulation are not
(a power cycle drops both), so the machine's own systemd makes them again."""


def simulate(machine: Machine, spec: GpuSpec) -> None:
    """Make the machine have `spec.count` NVIDIA GPUs of `spec.model`, now and at each boot."""
    _run(machine, _list_argv(spec))
    _run(machine, programs.sh("gpu-mount.sh", *_mount_args(spec)))
    machine.write_file(BOOT_SCRIPT, programs.text("gpu-mount.sh"), 0o755)
    machine.write_file(BOOT_ENV, f"GPU_MOUNT={' '.join(_mount_args(spec))}\n", 0o644)
    machine.write_file(f"/etc/systemd/system/{BOOT_UNIT}", programs.text(BOOT_UNIT), 0o644)
    _run(machine, ["systemctl", "daemon-reload"])
    _run(machine, ["systemctl", "enable", BOOT_UNIT])


def fail_driver(machine: Machine) -> None:
    """Fault: the NVIDIA driver stays loaded but lists no GPU (they fell off the bus)."""
    _run(machine, programs.sh("gpu-fail.sh", STATE_DIR))


def restore_driver(machine: Machine, spec: GpuSpec) -> None:
    """Undo `fail_driver`: the driver lists the machine's GPUs again."""
    _run(machine, _list_argv(spec))


def _run(machine: Machine, argv: list[str]) -> None:
    machine.exec(argv, timeout=60, check=True)
