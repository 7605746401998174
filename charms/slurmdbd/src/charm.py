#!/usr/bin/env python3
"""Charm for slurmdbd: Slurm's accounting daemon, storing its records in a MySQL database."""

import ops
from config import SlurmdbdConfig
from hpc_libs.charm.config import config_problem, load_valid_config
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.slurm.slurmdbd import SlurmdbdManager

SLURMCTLD = "slurmctld"
DATABASE = "database"


class SlurmdbdCharm(ops.CharmBase):
    """Install slurmdbd; report which integrations the accounting daemon still needs."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmdbd = SlurmdbdManager()
        self.installer = SlurmInstaller(self, self.slurmdbd)

        framework.observe(self.on.install, self._on_install)
        framework.observe(self.on.upgrade_charm, self._on_install)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)

    def _on_install(self, _: ops.EventBase) -> None:
        """Install the packages; upgrade-charm installs again (a no-op when present)."""
        config = load_valid_config(self, SlurmdbdConfig)
        if config is not None:
            self.installer.install(config.slurm_package_source)

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        if problem := config_problem(self, SlurmdbdConfig):
            event.add_status(ops.BlockedStatus(problem))
        if not self.installer.installed:
            event.add_status(ops.MaintenanceStatus("installing slurmdbd"))
        if not self.model.relations[DATABASE]:
            event.add_status(ops.BlockedStatus("needs a database integration"))
        if not self.model.relations[SLURMCTLD]:
            event.add_status(ops.BlockedStatus("needs a slurmctld integration"))
        # slurmdbd.conf needs the database credentials (`mysql_client`) and the auth key from
        # slurmctld (`slurmdbd` interface); both arrive in a later issue.
        event.add_status(ops.WaitingStatus("waiting for database credentials and slurmctld"))


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmdbdCharm)
