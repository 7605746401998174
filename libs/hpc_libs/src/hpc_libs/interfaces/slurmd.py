"""The `slurmd` integration: slurmctld (requirer) <-> slurmd (provider).

The slurmd charm PROVIDES endpoint `slurmctld`; the slurmctld charm REQUIRES endpoint
`slurmd`. Each slurmd application is one partition of dynamic nodes:

* slurmd's leader publishes `ComputeData`: a slurmutils `Partition` and `NodeSet` as dicts.
* slurmctld's leader publishes `ControllerData`: the id of the auth key secret and the
  controllers, primary first. The key itself travels only as a Juju secret owned by the
  slurmctld application and granted to the relation; it never appears in a databag.
"""

import logging
from collections.abc import Callable
from typing import Any

import ops
from pydantic import field_validator
from slurmutils import ModelError, NodeSet, Partition

from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.base import DatabagModel, Interface
from hpc_libs.slurm import schema_cache

logger = logging.getLogger(__name__)

schema_cache.install()  # ComputeData validates with slurmutils on every databag read.

AUTH_KEY_LABEL = "slurm-auth-key"
"""Label of the slurmctld application's auth key secret."""
AUTH_KEY_FIELD = "key"
"""Field of the secret content holding the key (base64 text, as `KeyFile` uses)."""


class ControllerData(DatabagModel):
    """slurmctld's application databag."""

    auth_key_id: str | None = None
    controllers: list[str] | None = None

    @property
    def is_complete(self) -> bool:
        """Whether the auth key secret id and at least one controller are present."""
        return bool(self.auth_key_id) and bool(self.controllers)


class ComputeData(DatabagModel):
    """slurmd's application databag: its partition and nodeset as slurmutils dicts.

    Both are validated with slurmutils (`Partition.from_dict`, `NodeSet.from_dict`), so a
    bad value fails construction and reads as "not ready".
    """

    partition: dict[str, Any] | None = None
    nodeset: dict[str, Any] | None = None

    @field_validator("partition")
    @classmethod
    def _valid_partition(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _check(Partition, value)
        return value

    @field_validator("nodeset")
    @classmethod
    def _valid_nodeset(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _check(NodeSet, value)
        return value

    @property
    def is_complete(self) -> bool:
        """Whether both the partition and the nodeset are present."""
        return self.partition is not None and self.nodeset is not None

    def partition_model(self) -> Partition | None:
        """Return the partition as a slurmutils model."""
        return None if self.partition is None else Partition.from_dict(self.partition)

    def nodeset_model(self) -> NodeSet | None:
        """Return the nodeset as a slurmutils model."""
        return None if self.nodeset is None else NodeSet.from_dict(self.nodeset)


def _check(model: type[Partition] | type[NodeSet], value: dict[str, Any]) -> None:
    """Raise ValueError (what pydantic expects) if slurmutils rejects `value`."""
    try:
        model.from_dict(value)
    except (ModelError, ValueError, TypeError) as e:
        raise ValueError(f"invalid {model.__name__}: {e}") from e


class SlurmctldConnectedEvent(ops.RelationEvent):
    """A slurmctld application was integrated (relation-created): publish compute data."""


class SlurmctldReadyEvent(ops.RelationEvent):
    """slurmctld published a complete `ControllerData` (auth key secret id and controllers)."""


class SlurmctldDisconnectedEvent(ops.RelationEvent):
    """Fired when this unit leaves the integration (its own relation-departed) or it is broken.

    With several controllers a departing unit sees one relation-departed per controller
    unit, so handlers must be idempotent.
    """


class SlurmdConnectedEvent(ops.RelationEvent):
    """A slurmd application was integrated (relation-created)."""


class SlurmdReadyEvent(ops.RelationEvent):
    """A slurmd application published a complete, valid `ComputeData`."""


class SlurmdDisconnectedEvent(ops.RelationEvent):
    """A slurmd application left (relation-broken): remove its partition."""


class SlurmdProviderEvents(ops.ObjectEvents):
    """Events of `SlurmdProvider`."""

    slurmctld_connected = ops.EventSource(SlurmctldConnectedEvent)
    slurmctld_ready = ops.EventSource(SlurmctldReadyEvent)
    slurmctld_disconnected = ops.EventSource(SlurmctldDisconnectedEvent)


class SlurmdRequirerEvents(ops.ObjectEvents):
    """Events of `SlurmdRequirer`."""

    slurmd_connected = ops.EventSource(SlurmdConnectedEvent)
    slurmd_ready = ops.EventSource(SlurmdReadyEvent)
    slurmd_disconnected = ops.EventSource(SlurmdDisconnectedEvent)


class SlurmdProvider(Interface):
    """The slurmd charm's side, on its `slurmctld` endpoint."""

    on = SlurmdProviderEvents()  # pyright: ignore[reportIncompatibleMethodOverride, reportAssignmentType]

    def __init__(self, charm: ops.CharmBase, endpoint: str = "slurmctld") -> None:
        super().__init__(charm, endpoint)
        events = charm.on[endpoint]
        self.framework.observe(events.relation_created, self._on_relation_created)
        self.framework.observe(events.relation_changed, self._on_relation_changed)
        self.framework.observe(events.relation_departed, self._on_relation_departed)
        self.framework.observe(events.relation_broken, self._on_relation_broken)

    def _on_relation_created(self, event: ops.RelationCreatedEvent) -> None:
        self.on.slurmctld_connected.emit(event.relation, app=event.app, unit=event.unit)

    def _on_relation_changed(self, event: ops.RelationChangedEvent) -> None:
        data = self.controller_data
        if data is not None and data.is_complete:
            self.on.slurmctld_ready.emit(event.relation, app=event.app, unit=event.unit)

    def _on_relation_departed(self, event: ops.RelationDepartedEvent) -> None:
        if event.departing_unit == self.model.unit:
            self.on.slurmctld_disconnected.emit(event.relation, app=event.app, unit=event.unit)

    def _on_relation_broken(self, event: ops.RelationBrokenEvent) -> None:
        self.on.slurmctld_disconnected.emit(event.relation, app=event.app, unit=event.unit)

    @property
    def controller_data(self) -> ControllerData | None:
        """Slurmctld's data; None without a relation or if it is malformed."""
        relation = self.relation
        if relation is None:
            return None
        return self.load(ControllerData, relation, relation.app)

    def is_ready(self) -> bool:
        """Whether slurmctld published the auth key secret id and the controllers."""
        data = self.controller_data
        return data is not None and data.is_complete

    def auth_key(self) -> str:
        """Return the auth key (base64 text) read from the secret slurmctld granted.

        Raises:
            IntegrationError: No secret id yet, or the secret cannot be read.

        """
        data = self.controller_data
        if data is None or not data.auth_key_id:
            raise IntegrationError("slurmctld has not shared the auth key yet")
        try:
            content = self.model.get_secret(id=data.auth_key_id).get_content(refresh=True)
        except (ops.SecretNotFoundError, ops.ModelError) as e:
            raise IntegrationError(f"cannot read the auth key secret: {e}") from e
        key = content.get(AUTH_KEY_FIELD)
        if not key:
            raise IntegrationError(f"the auth key secret has no {AUTH_KEY_FIELD!r} field")
        return key

    def publish_compute_data(self, data: ComputeData) -> bool:
        """Publish `data` on every relation (leader only); return whether anything changed."""
        changed = False
        for relation in self.relations:
            changed = self.save(data, relation, self.model.app) or changed
        return changed


class SlurmdRequirer(Interface):
    """The slurmctld charm's side, on its `slurmd` endpoint (one relation per partition)."""

    on = SlurmdRequirerEvents()  # pyright: ignore[reportIncompatibleMethodOverride, reportAssignmentType]

    def __init__(self, charm: ops.CharmBase, endpoint: str = "slurmd") -> None:
        super().__init__(charm, endpoint)
        events = charm.on[endpoint]
        self.framework.observe(events.relation_created, self._on_relation_created)
        self.framework.observe(events.relation_changed, self._on_relation_changed)
        self.framework.observe(events.relation_broken, self._on_relation_broken)

    def _on_relation_created(self, event: ops.RelationCreatedEvent) -> None:
        self.on.slurmd_connected.emit(event.relation, app=event.app, unit=event.unit)

    def _on_relation_changed(self, event: ops.RelationChangedEvent) -> None:
        data = self.compute_data(event.relation)
        if data is not None and data.is_complete:
            self.on.slurmd_ready.emit(event.relation, app=event.app, unit=event.unit)

    def _on_relation_broken(self, event: ops.RelationBrokenEvent) -> None:
        self.on.slurmd_disconnected.emit(event.relation, app=event.app, unit=event.unit)

    def compute_data(self, relation: ops.Relation) -> ComputeData | None:
        """Return the slurmd app's data in `relation`; None if missing or malformed."""
        return self.load(ComputeData, relation, relation.app)

    def publish_controller_data(
        self, relation: ops.Relation, auth_key: ops.Secret, controllers: list[str]
    ) -> bool:
        """Grant `auth_key` to `relation` and publish its id and `controllers` (leader only).

        Returns whether the databag changed. The key's content is never written to it.
        """
        if not self.model.unit.is_leader():
            return False
        auth_key.grant(relation)
        secret_id = auth_key.id or auth_key.get_info().id
        data = ControllerData(auth_key_id=secret_id, controllers=list(controllers))
        return self.save(data, relation, self.model.app)


def get_or_create_auth_key_secret(charm: ops.CharmBase, generate: Callable[[], str]) -> ops.Secret:
    """Return the slurmctld app's auth key secret, created once with `generate()`.

    Raises:
        IntegrationError: The secret does not exist and this unit is not the leader.

    """
    try:
        return charm.model.get_secret(label=AUTH_KEY_LABEL)
    except ops.SecretNotFoundError:
        if not charm.unit.is_leader():
            raise IntegrationError("the auth key secret does not exist yet") from None
    return charm.app.add_secret({AUTH_KEY_FIELD: generate()}, label=AUTH_KEY_LABEL)
