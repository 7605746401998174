#!/usr/bin/env python3
"""Charm for slurmrestd: Slurm's REST API, talking to the controllers slurmctld names."""

import logging

import ops
import pydantic
from config import SlurmrestdConfig, describe_error
from hpc_libs.slurm.slurmrestd import SlurmrestdManager

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"


class SlurmrestdCharm(ops.CharmBase):
    """Install slurmrestd; report what the REST API still needs."""

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self._stored.set_default(installed=False)
        self.slurmrestd = SlurmrestdManager()

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
        self.slurmrestd.install(config.slurm_package_source)
        self._stored.installed = True
        self.unit.set_workload_version(self.slurmrestd.version())

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        try:
            self.load_config(SlurmrestdConfig)
        except pydantic.ValidationError as e:
            event.add_status(ops.BlockedStatus(describe_error(e)))
        if not self._stored.installed:
            event.add_status(ops.MaintenanceStatus("installing slurmrestd"))
        if not self.model.relations[SLURMCTLD]:
            event.add_status(ops.BlockedStatus("needs a slurmctld integration"))
        # The auth key, the JWT key and the controllers arrive over the `slurmrestd` interface
        # (a later issue); until then slurmrestd has nothing to start with.
        event.add_status(ops.WaitingStatus("waiting for slurmctld"))

    def _config(self) -> SlurmrestdConfig | None:
        """Load the config; None when it is invalid (collect-status reports why)."""
        try:
            return self.load_config(SlurmrestdConfig)
        except pydantic.ValidationError as e:
            logger.warning("not acting on invalid config: %s", describe_error(e))
            return None


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmrestdCharm)
