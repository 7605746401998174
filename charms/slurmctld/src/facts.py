"""The facts of one reconcile: what the components read, gathered once per pass.

The charm gathers them at the start of its reconcile (after the Slurm upgrade step, which
may change the release this unit runs) and hands the same frozen `Facts` to every
component, its statuses included. The peer memory is read here once; what the reconcile
writes to it replaces it in the facts (`Facts.remembering`), so the statuses see what the
leader remembers now without reading the databag again.
"""

import dataclasses
from collections.abc import Mapping, Sequence

from config import SlurmctldConfig
from controllers import Controller, in_join_order
from hpc_libs.interfaces.slurmctld_peer import ControllerHost, SlurmctldPeerData
from hpc_libs.interfaces.slurmdbd import DbdEntry
from pydantic import ValidationError


@dataclasses.dataclass(frozen=True)
class Facts:
    """One pass's view of the model and of this machine, shared by every component."""

    config: SlurmctldConfig
    unit: str
    """This unit's name (`slurmctld/0`)."""
    leader: bool
    hostname: str
    me: Controller | None
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

    @property
    def order(self) -> list[str]:
        """The controller units in join order (the first is the primary)."""
        return self._joined()[0]

    @property
    def controllers(self) -> list[Controller]:
        """Every controller unit, serving or not, primary first (none without `me`)."""
        return self._joined()[1]

    def _joined(self) -> tuple[list[str], list[Controller]]:
        if self.me is None:
            return [], []
        recorded = [c.unit for c in self.memory.controllers or [] if c.unit]
        return in_join_order(self.unit, self.me, self.peers, recorded)

    @property
    def serving(self) -> list[str]:
        """The partitions of slurmd applications the controller serves (not retiring)."""
        return sorted(p.name for p in self.memory.partitions or [] if p.name and not p.retiring)

    @property
    def departed(self) -> list[str]:
        """The nodes of departed units the leader deletes once idle."""
        return [n.name for n in self.memory.departed_nodes or [] if n.name]

    def remembering(self, memory: SlurmctldPeerData) -> "Facts":
        """Return these facts with the peer memory this pass wrote."""
        return dataclasses.replace(self, memory=memory)

    def applying(self, key: str) -> "Facts":
        """Return these facts with the auth key slurmctld now runs with."""
        return dataclasses.replace(self, applied_key=key)


def own_host(
    hostname: str, address: str | None, version: str | None
) -> tuple[Controller | None, str | None]:
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
    return Controller.of(host), None
