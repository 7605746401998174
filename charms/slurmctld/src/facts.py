"""The facts of one reconcile: what the components read, gathered once per pass.

The charm gathers them at the start of its reconcile (after the Slurm upgrade step, which
may change the release this unit runs) and hands the same frozen `Facts` to every
component, its statuses included. The peer memory is read here once; what the reconcile
writes to it replaces it in the facts (`Facts.remembering`), so the statuses see what the
leader remembers now without reading the databag again.
"""

import dataclasses
import logging
import socket
from collections.abc import Iterable, Mapping, Sequence

import ops
from config import SlurmctldConfig
from controllers import in_join_order
from hpc_libs.interfaces.slurmctld_peer import (
    ControllerHost,
    ControllerSlot,
    DepartedNode,
    PartitionEntry,
    SlurmctldPeer,
    SlurmctldPeerData,
)
from hpc_libs.interfaces.slurmdbd import DbdEntry
from major_upgrade import upgrade_timeout
from pydantic import ValidationError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Keys:
    """The leader's keys, once it leads: the auth key's secret and content, the JWT secret."""

    auth_secret: ops.Secret
    auth_key: str
    jwt_secret: ops.Secret


@dataclasses.dataclass(frozen=True)
class Facts:
    """One pass's view of the model and of this machine, shared by every component."""

    config: SlurmctldConfig
    unit: str
    """This unit's name (`slurmctld/0`)."""
    leader: bool
    hostname: str
    me: ControllerHost | None
    """This unit as the other hosts reach it; None while it cannot be a controller."""
    host_problem: str | None
    """Why this unit's host name or address cannot be a `SlurmctldHost` (None: it can)."""
    peers: Mapping[str, ControllerHost]
    """The other controller units' hosts, only those Slurm's grammar accepts."""
    memory: SlurmctldPeerData
    """The peer memory: read once, then what this pass wrote to it."""
    dbds: Sequence[DbdEntry]
    """The slurmdbd daemons to account to, primary first."""
    applied_key: str
    """The auth key this unit's slurmctld runs with (empty before the first)."""
    running_timeout: int
    """The SlurmctldTimeout slurmctld runs with: the configured one, or raised for an upgrade."""
    keys: Keys | None = None
    """The leader's keys, from the moment it may write the configuration (None before)."""

    @property
    def served(self) -> dict[str, PartitionEntry]:
        """The partitions the leader serves, by name: the peer memory's, as this pass left it."""
        return self.memory.served()

    @property
    def order(self) -> list[str]:
        """The controller units in join order (the first is the primary)."""
        return self._joined()[0]

    @property
    def controllers(self) -> list[ControllerHost]:
        """Every controller unit, serving or not, primary first (none without `me`)."""
        return self._joined()[1]

    def _joined(self) -> tuple[list[str], list[ControllerHost]]:
        if self.me is None:
            return [], []
        recorded = [c.unit for c in self.memory.controllers or [] if c.unit]
        return in_join_order(self.unit, self.me, self.peers, recorded)

    def remembered(
        self, partitions: Iterable[PartitionEntry], departed: Iterable[str]
    ) -> SlurmctldPeerData:
        """Return the leader's peer memory: what it serves and retires now, the rest kept."""
        now = {
            "partitions": list(partitions),
            "departed_nodes": [DepartedNode(name=n) for n in departed],
            "controllers": [ControllerSlot(unit=u) for u in self.order],
        }
        return self.memory.model_copy(update=now)

    def remembering(self, memory: SlurmctldPeerData) -> "Facts":
        """Return these facts with the peer memory this pass wrote."""
        return dataclasses.replace(self, memory=memory)

    def applying(self, key: str) -> "Facts":
        """Return these facts with the auth key slurmctld now runs with."""
        return dataclasses.replace(self, applied_key=key)

    def with_keys(self, keys: Keys) -> "Facts":
        """Return these facts with the leader's keys."""
        return dataclasses.replace(self, keys=keys)


def gather(
    config: SlurmctldConfig,
    unit: ops.Unit,
    peer: SlurmctldPeer,
    *,
    address: str | None,
    version: str | None,
    dbds: Sequence[DbdEntry],
    applied_key: str,
) -> Facts:
    """Read the facts of a pass: the peer memory once, the hosts, this unit's host.

    `address` is this unit's bind address (None: Juju has given none yet), `version` the
    Slurm release it runs, `applied_key` the auth key its slurmctld runs with.
    """
    memory = peer.read()
    hostname = socket.gethostname()
    me, problem = own_host(hostname, address, version)
    if problem is not None:
        logger.error("this unit cannot be a controller: %s", problem)
    return Facts(
        config=config,
        unit=unit.name,
        leader=unit.is_leader(),
        hostname=hostname,
        me=me,
        host_problem=problem,
        peers=peer.hosts(),
        memory=memory,
        dbds=dbds,
        applied_key=applied_key,
        running_timeout=upgrade_timeout(
            config.slurmctld_timeout, memory.upgrade_slurmctld_timeout
        ),
    )


def own_host(
    hostname: str, address: str | None, version: str | None
) -> tuple[ControllerHost | None, str | None]:
    """Return this unit as a controller, or why Slurm's grammar refuses its host name or address.

    (None, None) while Juju has given no bind address yet: reconcile waits for it.
    """
    if address is None:
        return None, None
    try:
        host = ControllerHost(hostname=hostname, address=address, version=version)
    except ValidationError as e:
        first = e.errors()[0]
        why = str(first["msg"]).removeprefix("Value error, ")
        return None, f"this unit's {first['loc'][0]} cannot be a SlurmctldHost: {why}"
    return host, None
