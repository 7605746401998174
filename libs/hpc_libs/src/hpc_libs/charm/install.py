"""Installing a Slurm daemon's packages from its charm, and remembering that it did."""

import ops

from hpc_libs.slurm.base import PackageSource, SlurmManager


class SlurmInstaller(ops.Object):
    """Install `manager`'s packages, record that they are installed, and the workload version.

    The charm calls `install` from its install and upgrade-charm handlers, or
    `ensure_installed` from a reconcile path that runs on every event. Either raises on
    failure (`PackageError`): the hook errors and Juju retries it, as for any transient apt
    failure. The charm decides its status from `installed`; this component sets none.
    """

    _stored = ops.StoredState()

    def __init__(self, charm: ops.CharmBase, manager: SlurmManager) -> None:
        super().__init__(charm, "installer")
        self._manager = manager
        self._stored.set_default(installed=False)

    @property
    def installed(self) -> bool:
        """Whether the packages have been installed (once set, kept across upgrades)."""
        return bool(self._stored.installed)

    def install(self, source: PackageSource) -> None:
        """Install the packages from `source`; packages already present are left alone."""
        self._manager.install(source)
        self._stored.installed = True
        self.model.unit.set_workload_version(self._manager.version())

    def ensure_installed(self, source: PackageSource) -> None:
        """Install once: do nothing when `installed` (no package queries on every event)."""
        if not self.installed:
            self.install(source)
