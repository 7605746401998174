"""slurmctld's turn in a Slurm major upgrade, and the backup it takes first.

Slurm's order: slurmdbd converts the database first; then the primary controller (first in
join order) converts StateSaveLocation, and the backups follow it. The gate itself (the pin,
the offer, the wait status) is `hpc_libs.charm.upgrade`'s; this module says what slurmctld
waits for and what it saves.
"""

import logging

from hpc_libs.charm.upgrade import Plan
from hpc_libs.interfaces.slurmctld_peer import SlurmctldPeer
from hpc_libs.interfaces.slurmdbd import DbdEntry
from hpc_libs.slurm import backup, upgrade
from hpc_libs.slurm.slurmctld import SlurmctldManager

logger = logging.getLogger(__name__)


def waits_for(target: str, dbds: list[DbdEntry], peer: SlurmctldPeer, unit: str) -> str | None:
    """Return what `unit` waits for before it may run `target`: a slurmdbd, then a controller."""
    versions = [(d.host or "slurmdbd", d.version) for d in dbds]
    if (reason := upgrade.wait_reason(target, "slurmdbd", versions)) is not None:
        return reason
    versions = {name: host.version for name, host in peer.hosts().items()}
    order = [c.unit for c in peer.read().controllers or [] if c.unit]
    return upgrade.join_order_wait_reason(target, "slurmctld", order, unit, versions)


def archive_state(manager: SlurmctldManager, plan: Plan, *, network_state: bool) -> None:
    """Archive StateSaveLocation (the shared one with network state) before converting it."""
    state = manager.network_state_save_location if network_state else manager.state_save_location
    name = backup.backup_name("slurmctld-state", plan.running, str(plan.target))
    path = backup.archive_state(state, manager.root, name)
    logger.info("StateSaveLocation %s saved to %s before the upgrade", state, path)
