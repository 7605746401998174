"""NVIDIA GPUs as Slurm itself detects them, and the optional driver install on Ubuntu.

Detection is Slurm's: `slurmd -C` runs every GPU plugin Slurm 24.11 has, including
gpu/nvidia, which needs no NVIDIA library (it reads /proc/driver/nvidia/gpus/<bus>/information,
/sys/bus/pci/drivers/nvidia/<bus>/local_cpulist and names /dev/nvidia<minor>), and prints
`Gres=gpu:<type>:<count>` on its first line. The served gres.conf says `AutoDetect=nvidia`, so
the running slurmd finds the same devices (File=) for the count its `--conf` declares.

Two different facts:

- no GPU driver: /proc/driver/nvidia does not exist. The node has no GPU (`Gres` absent);
- driver failed: the driver is loaded but Slurm found no GPU (a GPU fell off the bus, or its
  /proc entries cannot be read). That is an error (`GpuDriverError`), not "no GPU".

Where nvidia-smi is still run: only after a driver failure, to put the driver's own words in
the error. Slurm's plugin cannot serve there: `slurmd -C` silences its errors and reports the
same output as on a machine without GPUs.
"""

import logging
from pathlib import Path

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import apt, host
from hpc_libs.slurm import grammar

logger = logging.getLogger(__name__)

NVIDIA_DRIVER_DIR = "proc/driver/nvidia"
"""Present while the NVIDIA kernel driver is loaded (relative to the machine's root)."""
NVIDIA_SMI_TIMEOUT = 30.0
DRIVER_INSTALL_TIMEOUT = 1800.0
"""`ubuntu-drivers install` downloads and builds a kernel module: minutes, not seconds."""
REBOOT_REQUIRED_FILE = "run/reboot-required"
DRIVER_TOOLS_PACKAGE = "ubuntu-drivers-common"


class GpuDriverError(SlurmOpsError):
    """The NVIDIA driver is loaded but Slurm's detection found no GPU."""


def gres_from_slurmd_c(output: str) -> str:
    """Return the `Gres=` value of `slurmd -C`'s first line ('' when it has none).

    Raises:
        SlurmOpsError: The value breaks Slurm's Gres grammar.

    """
    lines = output.strip().splitlines()
    for token in lines[0].split() if lines else []:
        key, _, value = token.partition("=")
        if key.lower() == "gres":
            try:
                grammar.GRES(value)
            except ValueError as e:
                raise SlurmOpsError(f"`slurmd -C` reported an invalid Gres {value!r}") from e
            return value
    return ""


def driver_loaded(root: Path) -> bool:
    """Whether the NVIDIA kernel driver is loaded on the machine under `root`."""
    return (root / NVIDIA_DRIVER_DIR).is_dir()


def check_detected(gres: str, root: Path) -> str:
    """Return the detected Gres; an empty one is "no GPU" only when no driver is loaded.

    Raises:
        GpuDriverError: The driver is loaded but Slurm found no GPU.

    """
    if gres or not driver_loaded(root):
        return gres
    raise GpuDriverError(
        f"NVIDIA driver loaded but Slurm found no GPU ({nvidia_smi_report()})",
        command=["slurmd", "-C"],
    )


def nvidia_smi_report() -> str:
    """Return what `nvidia-smi -L` says (its first line), to explain a driver failure."""
    try:
        result = host.run(["nvidia-smi", "-L"], timeout=NVIDIA_SMI_TIMEOUT, check=False)
    except SlurmOpsError as e:
        return f"nvidia-smi: {e.message}"
    text = (result.stderr.strip() or result.stdout.strip()).splitlines()
    first = text[0].strip() if text else "no output"
    return f"nvidia-smi: {first[:200]}"


def is_ubuntu(root: Path) -> bool:
    """Whether the machine under `root` runs Ubuntu (`ID=ubuntu` in os-release)."""
    try:
        text = (root / "etc/os-release").read_text()
    except OSError:
        return False
    return any(line.strip() in ("ID=ubuntu", 'ID="ubuntu"') for line in text.splitlines())


def install_nvidia_driver() -> None:
    """Install the NVIDIA driver Ubuntu recommends for this machine (`ubuntu-drivers`).

    The driver loads at the next boot: see `reboot_required`.

    Raises:
        SlurmOpsError: apt or ubuntu-drivers failed or timed out.

    """
    apt.install([DRIVER_TOOLS_PACKAGE])
    host.run(["ubuntu-drivers", "install"], timeout=DRIVER_INSTALL_TIMEOUT)
    logger.info("installed the recommended NVIDIA driver; it loads after a reboot")


def reboot_required(root: Path) -> bool:
    """Whether the machine asks for a reboot (Ubuntu's /run/reboot-required)."""
    return (root / REBOOT_REQUIRED_FILE).exists()
