"""Installing a Slurm daemon's packages from its charm, and remembering that it did."""

import ops

from hpc_libs.machine import apt
from hpc_libs.slurm.base import SlurmManager
from hpc_libs.slurm.upgrade import DebSource


class SlurmInstaller(ops.Object):
    """Install `manager`'s packages; record that they are installed, and their version.

    `SlurmCharm` drives it: `install` on install and upgrade-charm (refreshing the workload
    version), and before every reconcile while not `installed`. `install` raises
    `PackageError` on failure; the skeleton turns that into a status. This component sets no
    status.
    """

    _stored = ops.StoredState()

    def __init__(self, charm: ops.CharmBase, manager: SlurmManager) -> None:
        super().__init__(charm, "installer")
        self._manager = manager
        self._stored.set_default(installed=False, version="")

    @property
    def installed(self) -> bool:
        """Whether the packages have been installed (once set, kept across upgrades)."""
        return bool(self._stored.installed)

    @property
    def version(self) -> str:
        """The daemon's package version recorded at the last install ("" if not recorded)."""
        return str(self._stored.version)

    def install(self, source: str | DebSource, *, upgrade: bool = False) -> None:
        """Install the packages from `source`; with `upgrade`, also upgrade those present."""
        self._manager.install(source, upgrade=upgrade)
        self._stored.installed = True
        self.record_version(self._manager.version())

    def record_version(self, version: str) -> None:
        """Record `version` as the installed one, and show it as the workload version."""
        self._stored.version = version
        self.model.unit.set_workload_version(version)

    def refresh_version(self) -> None:
        """Record the version dpkg reports now; keep the recorded one if dpkg has none.

        After an upgrade outside the charm (slurmd's RebootProgram, then a reboot).
        """
        version = apt.installed_version(self._manager.daemon) if self.installed else None
        if version and version != self.version:
            self.record_version(version)
