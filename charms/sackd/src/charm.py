#!/usr/bin/env python3
"""Charm for sackd: a Slurm login node that authenticates to and reads config from slurmctld."""

import logging

import ops
import pydantic
from config import SackdConfig, describe_error
from hpc_libs.slurm.sackd import SackdManager

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"


class SackdCharm(ops.CharmBase):
    """Install sackd and the Slurm client; report what the login node still needs."""

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self._stored.set_default(installed=False)
        self.sackd = SackdManager()

        framework.observe(self.on.install, self._on_install)
        framework.observe(self.on.upgrade_charm, self._on_install)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)

    def _on_install(self, _: ops.EventBase) -> None:
        """Install the packages (a no-op when present) and record the installed version.

        Failures raise: the hook errors and Juju retries it, as for any transient apt failure.
        """
        config = self._config()
        if config is None:
            return
        self.sackd.install(config.slurm_package_source)
        self._stored.installed = True
        self.unit.set_workload_version(self.sackd.version())

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        try:
            self.load_config(SackdConfig)
        except pydantic.ValidationError as e:
            event.add_status(ops.BlockedStatus(describe_error(e)))
        if not self._stored.installed:
            event.add_status(ops.MaintenanceStatus("installing sackd"))
        if not self.model.relations[SLURMCTLD]:
            event.add_status(ops.BlockedStatus("needs a slurmctld integration"))
        # The controllers and the auth key arrive over the `sackd` interface (a later issue);
        # until then sackd has nothing to start with.
        event.add_status(ops.WaitingStatus("waiting for slurmctld"))

    def _config(self) -> SackdConfig | None:
        """Load the config; None when it is invalid (collect-status reports why)."""
        try:
            return self.load_config(SackdConfig)
        except pydantic.ValidationError as e:
            logger.warning("not acting on invalid config: %s", describe_error(e))
            return None


if __name__ == "__main__":  # pragma: nocover
    ops.main(SackdCharm)
