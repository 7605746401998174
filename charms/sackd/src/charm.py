#!/usr/bin/env python3
"""Charm for sackd: a Slurm login node that authenticates to and reads config from slurmctld."""

import logging
from collections.abc import Iterable

import ops
from config import SackdConfig
from hpc_libs.charm.base import SlurmCharm, main
from hpc_libs.charm.member import ClusterMember
from hpc_libs.charm.ports import PortRange
from hpc_libs.charm.upgrade import controllers_wait_reason
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.cos_agent import CosAgentProvider
from hpc_libs.interfaces.sackd import SackdProvider
from hpc_libs.machine.systemd import journal_reason
from hpc_libs.slurm.ports import SLURMD_PORT
from hpc_libs.slurm.sackd import SackdManager

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"


class SackdCharm(SlurmCharm[SackdConfig]):
    """Run sackd against the cluster's controllers while integrated with slurmctld.

    `member` tracks the relation, restarts sackd when its key or controllers changed (its
    fingerprint is kept in `_stored`), confirms the key and leaves on departure.
    """

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        self.sackd = SackdManager()
        super().__init__(framework, config_type=SackdConfig, manager=self.sackd)
        self.cos_agent = CosAgentProvider(self)
        self.slurmctld = SackdProvider(self, SLURMCTLD)
        self.member = ClusterMember(self, self.slurmctld, self._stored, self._leave)

    def upgrade_waits_for(self, target: str) -> str | None:
        """Wait until every controller runs `target` (Slurm's order: controllers first)."""
        return controllers_wait_reason(target, self.slurmctld.controller_data)

    def reconcile(self, config: SackdConfig) -> None:
        """Write the key and controllers slurmctld shares and (re)start sackd if needed.

        Once sackd runs, tell slurmctld its Slurm release: slurmctld writes slurm.conf keys
        an older sackd refuses only once every login unit runs a release that knows them.

        Without a slurmctld integration, make sure the unit holds no key and runs no sackd.
        """
        if self.member.relation is None:
            if self.sackd.key.exists() or self.sackd.service.is_active():
                self._leave()
            self.open_ports()
            return
        data = self.slurmctld.controller_data
        self.open_ports(PortRange.single(SLURMD_PORT), data.srun_ports() if data else None)
        if self.member.run_sackd(self.sackd, data):  # else `statuses` says what is missing
            self.slurmctld.publish_version(self.running_slurm())  # sackd runs it now.

    def statuses(self, config: SackdConfig) -> Iterable[ops.StatusBase]:
        """Report what the login node lacks: integration, valid data, key, a running sackd.

        A failure captured in this dispatch (the skeleton shows it) already says why sackd
        is not running; otherwise its journal's last fatal line does.
        """
        if (status := self.member.status()) is not None:
            yield status
            return
        if self.failure is None and not self.sackd.service.is_active():
            reason = journal_reason(self.sackd.daemon)
            yield ops.BlockedStatus(
                f"sackd is not running: {reason}" if reason else "sackd is not running"
            )

    def _leave(self) -> None:
        """Stop and disable sackd and delete slurm.key, trying every step even if one fails."""
        for step in (self.sackd.service.stop, self.sackd.service.disable, self.sackd.remove_key):
            try:
                step()
            except SlurmOpsError as e:
                logger.warning("leaving the cluster: %s (the next event tries again)", e)
                self.failure = self.failure or e


if __name__ == "__main__":  # pragma: nocover
    main(SackdCharm)
