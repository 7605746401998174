#!/usr/bin/env python3
"""Charm for slurmrestd: Slurm's REST API, talking to the controllers slurmctld names."""

from collections.abc import Iterable

import ops
from config import SlurmrestdConfig
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.slurm.slurmrestd import SlurmrestdManager

SLURMCTLD = "slurmctld"


class SlurmrestdCharm(SlurmCharm[SlurmrestdConfig]):
    """Install slurmrestd; report what the REST API still needs."""

    def __init__(self, framework: ops.Framework) -> None:
        self.slurmrestd = SlurmrestdManager()
        super().__init__(framework, config_type=SlurmrestdConfig, manager=self.slurmrestd)

    def reconcile(self, config: SlurmrestdConfig) -> None:
        """Nothing to configure yet: the skeleton installed slurmrestd.

        The auth key, the JWT key and the controllers arrive over the `slurmrestd` interface
        (a later issue); until then slurmrestd has nothing to start with.
        """

    def statuses(self, config: SlurmrestdConfig) -> Iterable[ops.StatusBase]:
        """Block without slurmctld, then wait for the data it brings."""
        if not self.model.relations[SLURMCTLD]:
            yield ops.BlockedStatus("needs a slurmctld integration")
        yield ops.WaitingStatus("waiting for slurmctld")


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmrestdCharm)
