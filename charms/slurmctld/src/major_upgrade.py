"""slurmctld's turn in a Slurm major upgrade, and the backup it takes first.

Slurm's order: slurmdbd converts the database first; then the primary controller (first in
join order) converts StateSaveLocation, and the backups follow it. The gate itself (the pin,
the offer, the wait status) is `hpc_libs.charm.upgrade`'s; this module says what slurmctld
waits for and what it saves.

SlurmctldTimeout during the controllers' turn: Slurm's upgrade guide asks to raise it while
daemons restart, so a backup does not take over from a primary that is only down for its
package upgrade. A 24.11 backup that took over refuses the upgraded primary's request to take
control back ("Incompatible versions"), so the cluster would run on the old backup until its
own turn. From the moment the controllers' turn comes (every slurmdbd runs the target) until
every controller runs it, the leader renders `UPGRADE_SLURMCTLD_TIMEOUT` (or the configured
value when larger) and remembers it in the peer application databag once applied; a
controller upgrades only after the leader raised it and every other controller said it runs
with it (its unit databag). The leader renders the configured value again afterwards.
"""

import logging
from collections.abc import Iterable, Sequence

from hpc_libs.charm.upgrade import Plan
from hpc_libs.interfaces.slurmctld_peer import SlurmctldPeer
from hpc_libs.interfaces.slurmdbd import DbdEntry
from hpc_libs.slurm import backup, upgrade
from hpc_libs.slurm.slurmctld import SlurmctldManager

logger = logging.getLogger(__name__)

UPGRADE_SLURMCTLD_TIMEOUT = 300
"""SlurmctldTimeout (s) while the controllers upgrade: their package upgrade keeps slurmctld
down for seconds (dpkg's unpack, then the new release converting the state as it starts),
which 5 minutes covers with a wide margin, while a controller that truly died during the
upgrade is still taken over by its backup within minutes."""


def upgrade_timeout(configured: int, raised: int | None) -> int:
    """Return the SlurmctldTimeout to render: `raised` (for the upgrade) if larger."""
    return max(configured, raised or 0)


def controllers_turn(target: str | None, dbds: list[DbdEntry], versions: list[str]) -> bool:
    """Whether the controllers' turn of a major upgrade is on: SlurmctldTimeout stays raised.

    From the moment every slurmdbd runs `target` (the leader's own plan: it still runs an
    older major) until every controller (`versions`, the leader's own included; units that
    said none are left out) runs the newest major among them and `target`.
    """
    majors = [m for m in (upgrade.major_or_none(v) for v in versions) if m is not None]
    newest = target
    for m in majors:
        if newest is None or upgrade.is_newer(m, newest):
            newest = m
    mixed = any(m != newest for m in majors)
    if newest is None or not (mixed or target is not None):
        return False
    dbd_versions = [(d.host or "slurmdbd", d.version) for d in dbds]
    return upgrade.wait_reason(newest, "slurmdbd", dbd_versions) is None


def raised_timeout(
    target: str | None, dbds: Sequence[DbdEntry], versions: Iterable[str | None], configured: int
) -> int | None:
    """Return the SlurmctldTimeout raised for the controllers' turn of `target`, or None.

    `versions` are every controller unit's, serving or not (`Facts.controllers`).
    """
    if not controllers_turn(target, list(dbds), [v for v in versions if v]):
        return None
    return upgrade_timeout(configured, UPGRADE_SLURMCTLD_TIMEOUT)


def waits_for(target: str, dbds: list[DbdEntry], peer: SlurmctldPeer, unit: str) -> str | None:
    """Return what `unit` waits for before it may run `target`: a slurmdbd, then a controller."""
    versions = [(d.host or "slurmdbd", d.version) for d in dbds]
    if (reason := upgrade.wait_reason(target, "slurmdbd", versions)) is not None:
        return reason
    hosts = peer.hosts()
    versions = {name: host.version for name, host in hosts.items()}
    memory = peer.read()
    order = [c.unit for c in memory.controllers or [] if c.unit]
    if reason := upgrade.join_order_wait_reason(target, "slurmctld", order, unit, versions):
        return reason
    older = [n for n, v in versions.items() if n != unit and upgrade.major_or_none(v) != target]
    if not older:
        return None  # No other controller left on the old major: none can take over.
    raised = memory.upgrade_slurmctld_timeout
    if raised is None:
        return "the leader must raise SlurmctldTimeout for the upgrade first"
    timeouts = peer.slurmctld_timeouts()
    # A unit that never said one runs no slurmctld (a standby without network state).
    behind = sorted(n for n, t in timeouts.items() if n != unit and t is not None and t < raised)
    if behind:
        return f"{', '.join(behind)} must run SlurmctldTimeout {raised} s first"
    return None


def archive_state(manager: SlurmctldManager, plan: Plan, *, network_state: bool) -> None:
    """Archive StateSaveLocation (the shared one with network state) before converting it."""
    state = manager.network_state_save_location if network_state else manager.state_save_location
    name = backup.backup_name("slurmctld-state", plan.running, str(plan.target))
    path = backup.archive_state(state, manager.root, name)
    logger.info("StateSaveLocation %s saved to %s before the upgrade", state, path)
