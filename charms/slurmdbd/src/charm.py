#!/usr/bin/env python3
"""Charm for slurmdbd: Slurm's accounting daemon, storing its records in a MySQL database."""

import logging

import ops
import pydantic
from config import SlurmdbdConfig, describe_error
from hpc_libs.slurm.slurmdbd import SlurmdbdManager

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"
DATABASE = "database"


class SlurmdbdCharm(ops.CharmBase):
    """Install slurmdbd; report which integrations the accounting daemon still needs."""

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self._stored.set_default(installed=False)
        self.slurmdbd = SlurmdbdManager()

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
        self.slurmdbd.install(config.slurm_package_source)
        self._stored.installed = True
        self.unit.set_workload_version(self.slurmdbd.version())

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        try:
            self.load_config(SlurmdbdConfig)
        except pydantic.ValidationError as e:
            event.add_status(ops.BlockedStatus(describe_error(e)))
        if not self._stored.installed:
            event.add_status(ops.MaintenanceStatus("installing slurmdbd"))
        if not self.model.relations[DATABASE]:
            event.add_status(ops.BlockedStatus("needs a database integration"))
        if not self.model.relations[SLURMCTLD]:
            event.add_status(ops.BlockedStatus("needs a slurmctld integration"))
        # slurmdbd.conf needs the database credentials (`mysql_client`) and the auth key from
        # slurmctld (`slurmdbd` interface); both arrive in a later issue.
        event.add_status(ops.WaitingStatus("waiting for database credentials and slurmctld"))

    def _config(self) -> SlurmdbdConfig | None:
        """Load the config; None when it is invalid (collect-status reports why)."""
        try:
            return self.load_config(SlurmdbdConfig)
        except pydantic.ValidationError as e:
            logger.warning("not acting on invalid config: %s", describe_error(e))
            return None


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmdbdCharm)
