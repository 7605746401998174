"""The controllers: who they are, in which order, and how `scontrol ping` sees them.

The ground floor of the charm's modules: it imports none of them. Every controller unit is a
`ControllerHost` (its host name, address and Slurm release as the peers share them, checked
against Slurm's grammar; the daemons get each as a `ControllerEntry`); the leader keeps their
join order in the peer application databag, and the first is the primary (`SlurmctldHost`
order). With network state, each controller reads the one slurm.conf the
leader writes on the share (`shared_slurm_conf`).
"""

import logging
from collections.abc import Mapping, Sequence

import ops
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.base import join_order
from hpc_libs.interfaces.slurmctld_peer import ControllerHost
from hpc_libs.slurm.base import ConfigFile
from hpc_libs.slurm.scontrol import ControllerPing, Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager
from slurmutils import SlurmConfig, SlurmConfigEditor

logger = logging.getLogger(__name__)

PING_TIMEOUT = 30
"""Seconds for `scontrol ping`, which waits for each controller that does not answer."""


class SlurmctldComponent(ops.Object):
    """A component that acts on this unit's slurmctld and keeps what it saw in stored state.

    `manager` holds slurmctld's files and service (its `user` is SlurmUser, the name Slurm puts
    on what slurmctld did itself), `scontrol` runs Slurm's commands, `key` names the stored
    state. The applied configuration, the takeover repair and the lost jobs are such.
    """

    def __init__(
        self, charm: ops.CharmBase, key: str, manager: SlurmctldManager, scontrol: Scontrol
    ) -> None:
        super().__init__(charm, key)
        self.manager = manager
        self.scontrol = scontrol


def slurmctld_host(host: ControllerHost) -> str:
    """Return a controller's `SlurmctldHost` value: host name and address (no name lookup)."""
    return f"{host.hostname}({host.address})"


def in_join_order(
    unit: str, me: ControllerHost, peers: Mapping[str, ControllerHost], recorded: Sequence[str]
) -> tuple[list[str], list[ControllerHost]]:
    """Return the controller units in join order, and the controllers, primary first.

    `unit` is this unit (`me`), `peers` the other units' shared hosts, `recorded` the join
    order the leader keeps in the peer application databag.
    """
    present = {unit: me, **peers}  # Only data Slurm's grammar accepts.
    order = join_order(list(recorded), list(present))  # The first is the primary controller.
    return order, [present[name] for name in order]


def shared_slurm_conf(manager: SlurmctldManager) -> SlurmConfig | None:
    """Return the leader's slurm.conf on the share; None while it is missing or unreadable."""
    shared = ConfigFile(
        manager.shared_etc_dir / "slurm.conf",
        SlurmConfigEditor(),
        SlurmConfig,
        yes_no_booleans=True,
    )
    try:
        return shared.load()
    except SlurmOpsError as e:
        logger.info("the shared slurm.conf is not readable yet: %s", e)
        return None


def controller_hosts(conf: SlurmConfig) -> list[str]:
    """Return the hostnames of slurm.conf's `SlurmctldHost` lines, primary first."""
    return [entry.split("(", 1)[0] for entry in conf.slurmctld_host or []]


def role(index: int) -> str:
    """`primary` for the first `SlurmctldHost`, then `backup1`, `backup2`, ..."""
    return "primary" if index == 0 else f"backup{index}"


def controller_states(pings: Sequence[ControllerPing], hostname: str) -> str:
    """Say each controller's role and state, this unit's first: `backup1 - UP (primary - DOWN)`.

    `pings` are in `SlurmctldHost` order, as `scontrol ping --json` lists them. Without an
    entry for `hostname` the whole list is given in order.
    """
    described = [
        (ping.hostname, f"{role(i)} - {'UP' if ping.is_up else 'DOWN'}")
        for i, ping in enumerate(pings)
    ]
    mine = [text for host, text in described if host == hostname]
    others = [text for host, text in described if host != hostname]
    if not mine:
        return ", ".join(others)
    return f"{mine[0]} ({', '.join(others)})" if others else mine[0]


def role_status(hostname: str) -> ops.StatusBase | None:
    """Each controller's role and state as `scontrol ping` sees them; None if it cannot."""
    try:
        pings = Scontrol(timeout=PING_TIMEOUT).ping()
    except SlurmOpsError as e:
        logger.info("cannot ask the controllers for their state: %s", e.stderr or e.message)
        return None
    states = controller_states(pings, hostname)
    return ops.ActiveStatus(states) if states else None
