#!/usr/bin/env python3
"""Charm for slurmrestd: Slurm's REST API, talking to the controllers slurmctld names."""

import ops
from config import SlurmrestdConfig
from hpc_libs.charm.config import config_problem, load_valid_config
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.slurm.slurmrestd import SlurmrestdManager

SLURMCTLD = "slurmctld"


class SlurmrestdCharm(ops.CharmBase):
    """Install slurmrestd; report what the REST API still needs."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmrestd = SlurmrestdManager()
        self.installer = SlurmInstaller(self, self.slurmrestd)

        framework.observe(self.on.install, self._on_install)
        framework.observe(self.on.upgrade_charm, self._on_install)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)

    def _on_install(self, _: ops.EventBase) -> None:
        """Install the packages; upgrade-charm installs again (a no-op when present)."""
        config = load_valid_config(self, SlurmrestdConfig)
        if config is not None:
            self.installer.install(config.slurm_package_source)

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        if problem := config_problem(self, SlurmrestdConfig):
            event.add_status(ops.BlockedStatus(problem))
        if not self.installer.installed:
            event.add_status(ops.MaintenanceStatus("installing slurmrestd"))
        if not self.model.relations[SLURMCTLD]:
            event.add_status(ops.BlockedStatus("needs a slurmctld integration"))
        # The auth key, the JWT key and the controllers arrive over the `slurmrestd` interface
        # (a later issue); until then slurmrestd has nothing to start with.
        event.add_status(ops.WaitingStatus("waiting for slurmctld"))


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmrestdCharm)
