"""The `slurmd` integration: slurmctld (requirer) <-> slurmd (provider).

The slurmd charm PROVIDES endpoint `slurmctld`; the slurmctld charm REQUIRES endpoint
`slurmd`. Each slurmd application is one partition of dynamic nodes:

* slurmd's leader publishes `ComputeData`: its partition's keys (`PartitionSpec`, the
  operator's `partition-config`) and, for one release more, its node set.
* slurmctld's leader publishes `ControllerData`: the id of the auth key secret and the
  controllers, primary first. The key itself travels only as a Juju secret owned by the
  slurmctld application and granted to the relation; it never appears in a databag. That
  half is shared with the login nodes' integration (`hpc_libs.interfaces.controller`).

Both sides check the partition (and the node set, while it is sent) against Slurm's grammar
(`hpc_libs.slurm.grammar`), key by key as slurmutils would render them: a value such as
`"60 Nodes=ALL"` never reaches slurm.conf, and the controller can say which application sent
which bad key (`SlurmdRequirer.compute_data_problem`). The names are the naming rule's
(`PartitionSpec.named`): the controller never takes them from the data.

`nodeset` leaves the wire in two steps, so that either charm may be upgraded first:

1. (this release) slurmctld no longer requires nor reads `nodeset`: it derives the node set
   from the application's name. slurmd still sends it, because a slurmctld of the previous
   release serves a partition only once both fields are there.
2. (the next release) slurmd stops sending `nodeset`, and `ComputeData` drops the field.
   A reader of this release still validates a `nodeset` that is there, so until then a
   malformed one reads as invalid data, as before.

The partition's names (`partitionname`, `nodes`) are no longer sent either: every reader,
the previous release's included, forces them from the application's name.

The contract between the two charms about a unit's node (its name, the drain reasons each
side sets, the job states that keep a node busy) is `hpc_libs.slurm.naming`, which has no ops
so the autoscaler can share it.
"""

import logging

import ops

from hpc_libs.interfaces.base import DatabagModel, NodeSetFields
from hpc_libs.interfaces.controller import (
    AUTH_KEY_FIELD,
    AUTH_KEY_LABEL,
    ControllerConsumer,
    ControllerData,
    ControllerEntry,
    ControllerPublisher,
    SlurmctldDisconnectedEvent,
    get_or_create_auth_key_secret,
)
from hpc_libs.slurm.partition import PartitionSpec, node_set

logger = logging.getLogger(__name__)


class ComputeData(DatabagModel):
    """slurmd's application databag: its partition's keys, and its node set for one release.

    The partition is validated once as it is read (`PartitionSpec`), so a bad value fails
    construction and reads as "not ready". A reader serves an application's partition once
    the partition is there (`is_complete`); `nodeset` is what a controller of the previous
    release requires, never read here (see the module's two steps).
    """

    partition: PartitionSpec | None = None
    nodeset: NodeSetFields | None = None

    @classmethod
    def published(cls, app: str, spec: PartitionSpec) -> "ComputeData":
        """Return what application `app` publishes: its keys, the node set of its name."""
        return cls(partition=spec, nodeset=node_set(app))

    @property
    def is_complete(self) -> bool:
        """Whether the partition is there (the node set comes from the application's name)."""
        return self.partition is not None


class SlurmdDisconnectedEvent(ops.RelationEvent):
    """A slurmd application left (relation-broken): remove its partition."""


class SlurmdRequirerEvents(ops.ObjectEvents):
    """Events of `SlurmdRequirer`."""

    slurmd_disconnected = ops.EventSource(SlurmdDisconnectedEvent)


class SlurmdProvider(ControllerConsumer):
    """The slurmd charm's side, on its `slurmctld` endpoint."""

    def publish_compute_data(self, data: ComputeData) -> bool:
        """Publish `data` on every relation (leader only); return whether anything changed."""
        changed = False
        for relation in self.relations:
            changed = self.save(data, relation, self.model.app) or changed
        return changed


class SlurmdRequirer(ControllerPublisher):
    """The slurmctld charm's side, on its `slurmd` endpoint (one relation per partition).

    Emits `slurmd_disconnected` when an application leaves; the charm reconciles on the
    relation's own events otherwise.
    """

    on = SlurmdRequirerEvents()  # pyright: ignore[reportIncompatibleMethodOverride, reportAssignmentType]

    def __init__(self, charm: ops.CharmBase, endpoint: str = "slurmd") -> None:
        super().__init__(charm, endpoint)
        events = charm.on[endpoint]
        self.framework.observe(events.relation_broken, self._on_relation_broken)

    def _on_relation_broken(self, event: ops.RelationBrokenEvent) -> None:
        self.on.slurmd_disconnected.emit(event.relation, app=event.app, unit=event.unit)

    def compute_data(self, relation: ops.Relation) -> ComputeData | None:
        """Return the slurmd app's data in `relation`; None if missing or malformed."""
        return self.load(ComputeData, relation, relation.app)

    def compute_data_problem(self, relation: ops.Relation) -> str | None:
        """Say which key of the slurmd app's data is invalid (for status); None if valid."""
        return self.problem(ComputeData, relation, relation.app)


__all__ = [
    "AUTH_KEY_FIELD",
    "AUTH_KEY_LABEL",
    "ComputeData",
    "ControllerData",
    "ControllerEntry",
    "SlurmctldDisconnectedEvent",
    "SlurmdDisconnectedEvent",
    "SlurmdProvider",
    "SlurmdRequirer",
    "get_or_create_auth_key_secret",
]
