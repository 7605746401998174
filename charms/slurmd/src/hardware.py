"""The hardware a unit's node declares, and the optional NVIDIA driver install.

Detection (`slurmd -C`, which runs Slurm's own GPU detection; see `hpc_libs.slurm.gpu`)
runs only when the charm needs a first answer (install), at start and upgrade-charm, and
when the operator asks (`detect-hardware` action). Never on every event: a failing GPU
driver would otherwise drain and re-register a GPU node without its GPUs.

The last successful detection is kept in the unit's StoredState: it describes this
unit's own machine, so no other unit needs it and a leader change does not concern it.
A failed detection keeps it unchanged and records the error for the status; only a
successful detection that differs changes the node (re-registration, see `node`).
"""

import json
import logging
from pathlib import Path
from typing import Any

from config import SlurmdConfig
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm import gpu
from hpc_libs.slurm.slurmd import SlurmdManager
from ops.framework import BoundStoredState

logger = logging.getLogger(__name__)


class Hardware:
    """The last known hardware of this machine, and the last detection's error."""

    def __init__(self, stored: BoundStoredState, manager: SlurmdManager) -> None:
        self._stored = stored
        self._manager = manager
        self._detected = False
        """Detection already ran in this dispatch (it runs at most once per dispatch)."""

    @property
    def error(self) -> str:
        """Why the last detection failed; '' when it succeeded."""
        return str(self._stored.detection_error)

    def known(self) -> dict[str, Any] | None:
        """Return the last successfully detected hardware (`slurmd -C` keys), if any."""
        text = str(self._stored.hardware)
        return json.loads(text) if text else None

    def detect(self) -> bool:
        """Detect now and keep the result; return whether the known hardware changed.

        A failure (a command error or timeout, a failed GPU driver) changes nothing but
        the recorded error: the node keeps the hardware known before.
        """
        if self._detected:
            return False
        self._detected = True
        try:
            detected = self._manager.detect_hardware()
        except SlurmOpsError as e:
            self._stored.detection_error = e.status_message()
            logger.warning("hardware detection failed; the node keeps its config: %s", e)
            return False
        self._stored.detection_error = ""
        text = json.dumps(detected)
        changed = text != self._stored.hardware
        if changed:
            logger.info("detected hardware: %s", text)
        self._stored.hardware = text
        return changed

    def known_or_detect(self) -> dict[str, Any]:
        """Return the known hardware, detecting it first if it was never detected.

        Raises:
            SlurmOpsError: Never detected, and detection fails now.

        """
        if not self._stored.hardware:
            self.detect()
        known = self.known()
        if known is None:
            raise SlurmOpsError(f"hardware detection failed: {self.error}")
        return known


def install_driver(config: SlurmdConfig, root: Path, stored: BoundStoredState) -> None:
    """Install the recommended NVIDIA driver once, when `nvidia-driver` asks for it (Ubuntu).

    Raises:
        SlurmOpsError: The install failed (retried by the next event).

    """
    if not config.nvidia_driver or stored.driver_installed or not gpu.is_ubuntu(root):
        return
    gpu.install_nvidia_driver()
    stored.driver_installed = True


def driver_problem(config: SlurmdConfig, root: Path, stored: BoundStoredState) -> str | None:
    """Return what keeps the NVIDIA driver the operator asked for from working, if anything."""
    if config.nvidia_driver and not gpu.is_ubuntu(root):
        return "nvidia-driver needs Ubuntu (ubuntu-drivers); this machine is not Ubuntu"
    if stored.driver_installed and gpu.reboot_required(root):
        return "NVIDIA driver installed: reboot the machine to load it"
    return None
