"""The `slurmdbd` integration: slurmctld (requirer, endpoint `slurmdbd`) <-> slurmdbd (provider).

The slurmdbd charm PROVIDES endpoint `slurmctld`; the slurmctld charm REQUIRES endpoint
`slurmdbd`.

* slurmctld's leader publishes what every Slurm daemon of the cluster receives
  (`ControllerData`, `hpc_libs.interfaces.controller`): the id of the auth key secret, granted
  to the relation, and the controllers. slurmdbd needs the key (`AuthType=auth/slurm`: it
  authenticates slurmctld's RPCs with it); the controllers are informative.
* slurmctld's leader also grants the cluster's JWT key secret to the relation and publishes
  its id (`JwtKeyData`, under its own key `jwt_key_id`): slurmdbd verifies the tokens the REST
  API passes on (`AuthAltTypes=auth/jwt`) with the same key as slurmctld. The secret's field
  is `JWT_KEY_FIELD` (`hpc_libs.interfaces.slurmrestd`); the key never enters a databag.
* slurmdbd's leader answers `SlurmdbdData`: `dbds`, the slurmdbd daemons as a list of
  objects (hostname, address, port; the primary first). slurmctld sets
  `AccountingStorageType=accounting_storage/slurmdbd`, `AccountingStorageHost` from the first
  entry's `address` (or `hostname`), `AccountingStoragePort` from its `port` (default 6819),
  and `AccountingStorageBackupHost` from a second entry, if any. The slurmdbd charm sends
  two entries at most, its primary and its backup (`DbdHost`, `DbdBackupHost`), in the join
  order it keeps in its peer relation (`hpc_libs.interfaces.slurmdbd_peer`); an empty list
  withdraws accounting.

Both sides check every entry against Slurm's grammar: an entry that is not a host or IP with a
port in 1-65535 is never published, and a reader sees the databag holding it as "not ready".
"""

import logging

import ops

from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.base import DatabagModel, SecretId, ServiceEntry, read_granted_secret
from hpc_libs.interfaces.controller import ControllerConsumer, ControllerPublisher
from hpc_libs.interfaces.slurmrestd import JWT_KEY_FIELD
from hpc_libs.slurm.ports import SLURMDBD_PORT

logger = logging.getLogger(__name__)

DEFAULT_SLURMDBD_PORT = SLURMDBD_PORT


class DbdEntry(ServiceEntry):
    """One slurmdbd daemon: `address` is what slurmctld connects to, `hostname` its DbdHost."""

    @property
    def host(self) -> str | None:
        """What slurmctld puts in AccountingStorage[Backup]Host: the address, else hostname."""
        return self.address or self.hostname

    @property
    def port_or_default(self) -> int:
        """The port, 6819 if none was given."""
        return self.port or DEFAULT_SLURMDBD_PORT


class SlurmdbdData(DatabagModel):
    """slurmdbd's application databag: its daemons, primary first."""

    dbds: list[DbdEntry] | None = None

    def reachable(self) -> list[DbdEntry]:
        """Return the entries slurmctld can use (those with an address or a hostname)."""
        return [d for d in self.dbds or [] if d.host]


class JwtKeyData(DatabagModel):
    """slurmctld's application databag, beside `ControllerData`: the JWT key secret's id."""

    jwt_key_id: SecretId | None = None


class SlurmdbdDisconnectedEvent(ops.RelationEvent):
    """The slurmdbd application left (relation-broken): back to no accounting."""


class SlurmdbdRequirerEvents(ops.ObjectEvents):
    """Events of `SlurmdbdRequirer`."""

    slurmdbd_disconnected = ops.EventSource(SlurmdbdDisconnectedEvent)


class SlurmdbdProvider(ControllerConsumer):
    """The slurmdbd charm's side, on its `slurmctld` endpoint (one relation at most)."""

    def publish_slurmdbd_data(self, data: SlurmdbdData) -> bool:
        """Publish `data` (leader only, idempotent); return whether the databag changed."""
        relation = self.relation
        if relation is None:
            return False
        return self.save(data, relation, self.model.app)

    def jwt_key(self) -> str:
        """Return the JWT key (base64 text) read from the secret slurmctld granted.

        Raises:
            IntegrationError: No secret id yet (or an invalid one), or the secret cannot be read.

        """
        relation = self.relation
        data = self.load(JwtKeyData, relation, relation.app) if relation is not None else None
        if data is None or not data.jwt_key_id:
            raise IntegrationError("slurmctld has not shared the JWT key yet")
        return read_granted_secret(self.model, data.jwt_key_id, JWT_KEY_FIELD, "JWT key")


class SlurmdbdRequirer(ControllerPublisher):
    """The slurmctld charm's side, on its `slurmdbd` endpoint (limit 1 advised).

    Emits `slurmdbd_disconnected` when slurmdbd leaves; the charm reconciles on the
    relation's own events otherwise.
    """

    on = SlurmdbdRequirerEvents()  # pyright: ignore[reportIncompatibleMethodOverride, reportAssignmentType]

    def __init__(self, charm: ops.CharmBase, endpoint: str = "slurmdbd") -> None:
        super().__init__(charm, endpoint)
        events = charm.on[endpoint]
        self.framework.observe(events.relation_broken, self._on_relation_broken)

    def _on_relation_broken(self, event: ops.RelationBrokenEvent) -> None:
        self.on.slurmdbd_disconnected.emit(event.relation, app=event.app, unit=event.unit)

    def share_jwt_key(self, relation: ops.Relation, secret: ops.Secret) -> bool:
        """Grant the JWT key `secret` to `relation` and publish its id (leader only, idempotent).

        Returns whether the databag changed. The key's content is never written to it.
        """
        if not self.model.unit.is_leader():
            return False
        secret.grant(relation)
        secret_id = secret.id or secret.get_info().id
        return self.save(JwtKeyData(jwt_key_id=secret_id), relation, self.model.app)

    def slurmdbd_data(self, relation: ops.Relation) -> SlurmdbdData | None:
        """Return the slurmdbd app's data in `relation`; None if missing or malformed (logged)."""
        return self.load(SlurmdbdData, relation, relation.app)

    def slurmdbd_data_problem(self, relation: ops.Relation) -> str | None:
        """Say which key of the slurmdbd app's data is invalid (for status); None if valid."""
        return self.problem(SlurmdbdData, relation, relation.app)


__all__ = [
    "DEFAULT_SLURMDBD_PORT",
    "DbdEntry",
    "JwtKeyData",
    "SlurmdbdData",
    "SlurmdbdDisconnectedEvent",
    "SlurmdbdProvider",
    "SlurmdbdRequirer",
]
