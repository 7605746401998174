#!/usr/bin/env python3
"""Charm for sackd: a Slurm login node that authenticates to and reads config from slurmctld."""

import logging

import ops
from config import SackdConfig
from hpc_libs.charm.config import config_problem, load_valid_config
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.sackd import SackdProvider
from hpc_libs.slurm.sackd import SackdManager

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"


class SackdCharm(ops.CharmBase):
    """Install sackd and the Slurm client, and run sackd against the cluster's controllers."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.sackd = SackdManager()
        self.installer = SlurmInstaller(self, self.sackd)
        self.slurmctld = SackdProvider(self, SLURMCTLD)

        for event in (
            self.on.install,
            self.on.config_changed,
            self.slurmctld.on.slurmctld_ready,
        ):
            framework.observe(event, self._reconcile)
        framework.observe(self.on.upgrade_charm, self._on_upgrade_charm)
        framework.observe(self.slurmctld.on.slurmctld_disconnected, self._on_disconnected)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)

    def _reconcile(self, _: ops.EventBase) -> None:
        """Install, then run sackd with the key and controllers slurmctld shared, if any.

        sackd restarts only when the key or the controllers changed (or it is not running).
        """
        config = load_valid_config(self, SackdConfig)
        if config is None:
            return
        self.installer.ensure_installed(config.slurm_package_source)
        data = self.slurmctld.controller_data
        if data is None or not data.conf_servers():
            return
        try:
            key_changed = self.sackd.key.set(self.slurmctld.auth_key())
        except IntegrationError as e:
            logger.warning("cannot read the auth key yet: %s", e)
            return
        options_changed = self.sackd.set_conf_servers(data.conf_servers())
        if key_changed or options_changed or not self.sackd.service.is_active():
            self.sackd.service.enable()
            self.sackd.service.restart()

    def _on_upgrade_charm(self, event: ops.UpgradeCharmEvent) -> None:
        """Install again (a no-op for packages present; refreshes the version), then reconcile."""
        config = load_valid_config(self, SackdConfig)
        if config is not None:
            self.installer.install(config.slurm_package_source)
        self._reconcile(event)

    def _on_disconnected(self, _: ops.EventBase) -> None:
        """Stop sackd: the login node left the cluster and has no controller to ask."""
        self.sackd.service.disable()
        self.sackd.service.stop()

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        if problem := config_problem(self, SackdConfig):
            event.add_status(ops.BlockedStatus(problem))
        if not self.installer.installed:
            event.add_status(ops.MaintenanceStatus("installing sackd"))
        if not self.model.relations[SLURMCTLD]:
            event.add_status(ops.BlockedStatus("needs a slurmctld integration"))
        if not self.slurmctld.is_ready():
            event.add_status(ops.WaitingStatus("waiting for slurmctld"))
        elif not self.sackd.service.is_active():
            event.add_status(ops.BlockedStatus("sackd is not running; see its journal"))
        event.add_status(ops.ActiveStatus())


if __name__ == "__main__":  # pragma: nocover
    ops.main(SackdCharm)
