"""Which slurmdbd unit is the primary, which the backup, and which stand idle.

Slurm runs one primary slurmdbd (`DbdHost`) and one backup (`DbdBackupHost`) at most; a host
named in neither cannot start slurmdbd. The units take these roles in join order, which the
leader records in the peer application databag (`hpc_libs.interfaces.slurmdbd_peer`): the
first unit is the primary, the second the backup, any later unit idle. A leader change keeps
the order; a unit leaving moves the next one up.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hpc_libs.interfaces.slurmdbd_peer import DbdHost

Role = Literal["primary", "backup", "idle"]

IDLE_MESSAGE = "slurmdbd supports one backup; this unit is idle"


@dataclass(frozen=True)
class Dbd:
    """A slurmdbd unit that shared where it runs."""

    unit: str
    hostname: str
    address: str
    version: str | None = None
    """The Slurm release it runs, as it shared it (None: not said)."""


@dataclass(frozen=True)
class Roles:
    """The units in join order and the hosts of the primary and backup slurmdbd.

    `missing` lists the units among the first two that have not shared their host name and
    address yet: until they have, slurmdbd.conf cannot be written.
    """

    order: tuple[str, ...]
    primary: Dbd | None
    backup: Dbd | None
    missing: tuple[str, ...]

    def role_of(self, unit: str) -> Role:
        """Return `unit`'s role: the first unit in join order is the primary."""
        position = self.order.index(unit) if unit in self.order else len(self.order)
        return ("primary", "backup")[position] if position < 2 else "idle"

    def idle_message(self) -> str:
        """Say that a unit beyond the backup is idle, and which units are not."""
        roles = (("primary", self.primary), ("backup", self.backup))
        names = [f"{role} {d.hostname}" for role, d in roles if d is not None]
        return f"{IDLE_MESSAGE} ({', '.join(names)})"

    def active(self) -> list[Dbd]:
        """Return the primary and the backup (if any), primary first."""
        return [d for d in (self.primary, self.backup) if d is not None]


def assign(order: Sequence[str], hosts: Mapping[str, DbdHost]) -> Roles:
    """Give the first two units of `order` their roles, with the hosts they shared."""
    found: list[Dbd | None] = []
    missing: list[str] = []
    for unit in order[:2]:
        host = hosts.get(unit)
        if host is None or not host.hostname or not host.address:
            missing.append(unit)
            found.append(None)
        else:
            found.append(Dbd(unit, host.hostname, host.address, host.version))
    found += [None] * (2 - len(found))
    return Roles(tuple(order), found[0], found[1], tuple(missing))
