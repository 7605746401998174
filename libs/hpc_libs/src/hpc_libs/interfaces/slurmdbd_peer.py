"""The slurmdbd peer relation (`slurmdbd-peer`): which unit is the primary slurmdbd.

Slurm runs one primary slurmdbd (`DbdHost`) and at most one backup (`DbdBackupHost`), both on
the same database. Which unit is which must survive a leader change, so the order lives in
the peer APPLICATION databag, written by the leader only:

* `dbds`: the slurmdbd units in join order, as objects (`{"unit": "slurmdbd/0"}`), primary
  first, backup second; a unit beyond the second runs no slurmdbd.

Each unit shares in its own UNIT databag where it runs:

* `hostname`: its short host name, which slurmdbd compares with `DbdHost`/`DbdBackupHost`;
* `address`: the address slurmctld and the other slurmdbd reach it at.

Every field is optional and JSON-encoded under its own key (`ops.Relation.save`). Entries that
do not parse or break Slurm's grammar are logged and skipped; the rest is read.
"""

import logging
import re
from collections.abc import Sequence
from typing import Any, cast

import ops
from pydantic import ValidationError, field_validator

from hpc_libs.interfaces.base import DatabagModel, HostEntry, Interface

logger = logging.getLogger(__name__)

PEER_ENDPOINT = "slurmdbd-peer"
_UNIT_NAME_RE = re.compile(r"[a-z][a-z0-9-]*/[0-9]+")


class DbdSlot(DatabagModel):
    """One slurmdbd unit in the join order."""

    unit: str | None = None

    @field_validator("unit")
    @classmethod
    def _valid_unit(cls, value: str | None) -> str | None:
        if value is not None and not _UNIT_NAME_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a unit name")
        return value


class DbdHost(HostEntry):
    """Where one slurmdbd unit runs (its own unit databag)."""


class SlurmdbdPeerData(DatabagModel):
    """The slurmdbd application's peer databag."""

    dbds: list[DbdSlot] | None = None

    @field_validator("dbds", mode="before")
    @classmethod
    def _valid_slots(cls, value: Any) -> Any:
        """Keep the slots that parse; log and skip the others."""
        if not isinstance(value, list):
            return value
        kept: list[DbdSlot] = []
        for item in cast(list[Any], value):
            try:
                kept.append(DbdSlot.model_validate(item))
            except ValidationError as e:
                logger.warning("skipping invalid dbds entry %r: %s", item, e.errors()[0]["msg"])
        return kept

    def order(self) -> list[str]:
        """Return the recorded unit names, primary first (each once)."""
        names = [slot.unit for slot in self.dbds or [] if slot.unit]
        return list(dict.fromkeys(names))


class SlurmdbdPeer(Interface):
    """The slurmdbd units' shared memory, on the peer endpoint."""

    def __init__(self, charm: ops.CharmBase, endpoint: str = PEER_ENDPOINT) -> None:
        super().__init__(charm, endpoint)

    def units(self) -> list[str]:
        """Return the names of this unit and of every peer unit."""
        relation = self.relation
        peers = [unit.name for unit in relation.units] if relation is not None else []
        return [self.model.unit.name, *sorted(peers)]

    def recorded(self) -> SlurmdbdPeerData:
        """Return the application's peer data (empty without a relation, or if unreadable)."""
        relation = self.relation
        data = None if relation is None else self.load(SlurmdbdPeerData, relation, self.model.app)
        return data if data is not None else SlurmdbdPeerData()

    def record(self, order: Sequence[str]) -> bool:
        """Store the join order (leader only, when it changed); return whether it was written."""
        relation = self.relation
        if relation is None:
            return False
        data = SlurmdbdPeerData(dbds=[DbdSlot(unit=name) for name in order])
        return self.save(data, relation, self.model.app)

    def share(self, host: DbdHost) -> bool:
        """Put this unit's host name and address in its peer unit databag, if they changed."""
        relation = self.relation
        if relation is None:
            return False
        if self.load(DbdHost, relation, self.model.unit) == host:
            return False
        relation.save(host, self.model.unit)
        return True

    def hosts(self) -> dict[str, DbdHost]:
        """Return what each peer unit shared (units with unreadable data are left out, logged)."""
        relation = self.relation
        found: dict[str, DbdHost] = {}
        for unit in relation.units if relation is not None else ():
            data = self.load(DbdHost, relation, unit) if relation is not None else None
            if data is not None:
                found[unit.name] = data
        return found


__all__ = [
    "PEER_ENDPOINT",
    "DbdHost",
    "DbdSlot",
    "SlurmdbdPeer",
    "SlurmdbdPeerData",
]
