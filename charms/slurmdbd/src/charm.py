#!/usr/bin/env python3
"""Charm for slurmdbd: Slurm's accounting daemon, storing its records in a MySQL database."""

from collections.abc import Iterable

import ops
from config import SlurmdbdConfig
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.slurm.slurmdbd import SlurmdbdManager

SLURMCTLD = "slurmctld"
DATABASE = "database"


class SlurmdbdCharm(SlurmCharm[SlurmdbdConfig]):
    """Install slurmdbd; report which integrations the accounting daemon still needs."""

    def __init__(self, framework: ops.Framework) -> None:
        self.slurmdbd = SlurmdbdManager()
        super().__init__(framework, config_type=SlurmdbdConfig, manager=self.slurmdbd)

    def reconcile(self, config: SlurmdbdConfig) -> None:
        """Nothing to configure yet: the skeleton installed slurmdbd.

        slurmdbd.conf needs the database credentials (`mysql_client`) and the auth key from
        slurmctld (`slurmdbd` interface); both arrive in a later issue.
        """

    def statuses(self, config: SlurmdbdConfig) -> Iterable[ops.StatusBase]:
        """Block on each missing integration, then wait for the data they bring."""
        if not self.model.relations[DATABASE]:
            yield ops.BlockedStatus("needs a database integration")
        if not self.model.relations[SLURMCTLD]:
            yield ops.BlockedStatus("needs a slurmctld integration")
        yield ops.WaitingStatus("waiting for database credentials and slurmctld")


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmdbdCharm)
