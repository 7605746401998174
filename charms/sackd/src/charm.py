#!/usr/bin/env python3
"""Charm for sackd: a Slurm login node that authenticates to and reads config from slurmctld."""

import ops
from config import SackdConfig
from hpc_libs.charm.config import config_problem, load_valid_config
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.slurm.sackd import SackdManager

SLURMCTLD = "slurmctld"


class SackdCharm(ops.CharmBase):
    """Install sackd and the Slurm client; report what the login node still needs."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.sackd = SackdManager()
        self.installer = SlurmInstaller(self, self.sackd)

        framework.observe(self.on.install, self._on_install)
        framework.observe(self.on.upgrade_charm, self._on_install)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)

    def _on_install(self, _: ops.EventBase) -> None:
        """Install the packages; upgrade-charm installs again (a no-op when present)."""
        config = load_valid_config(self, SackdConfig)
        if config is not None:
            self.installer.install(config.slurm_package_source)

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        if problem := config_problem(self, SackdConfig):
            event.add_status(ops.BlockedStatus(problem))
        if not self.installer.installed:
            event.add_status(ops.MaintenanceStatus("installing sackd"))
        if not self.model.relations[SLURMCTLD]:
            event.add_status(ops.BlockedStatus("needs a slurmctld integration"))
        # The controllers and the auth key arrive over the `sackd` interface (a later issue);
        # until then sackd has nothing to start with.
        event.add_status(ops.WaitingStatus("waiting for slurmctld"))


if __name__ == "__main__":  # pragma: nocover
    ops.main(SackdCharm)
