"""Installing a Slurm daemon's packages from its charm, and remembering that it did."""

import ops

from hpc_libs.slurm.base import PackageSource, SlurmManager


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

    def install(self, source: PackageSource, *, upgrade: bool = False) -> None:
        """Install the packages from `source`; with `upgrade`, also upgrade those present."""
        self._manager.install(source, upgrade=upgrade)
        version = self._manager.version()
        self._stored.installed = True
        self._stored.version = version
        self.model.unit.set_workload_version(version)
