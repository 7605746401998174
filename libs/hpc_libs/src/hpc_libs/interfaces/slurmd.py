"""The `slurmd` integration: slurmctld (requirer) <-> slurmd (provider).

The slurmd charm PROVIDES endpoint `slurmctld`; the slurmctld charm REQUIRES endpoint
`slurmd`. Each slurmd application is one partition of dynamic nodes:

* slurmd's leader publishes `ComputeData`: a slurmutils `Partition` and `NodeSet` as dicts.
* slurmctld's leader publishes `ControllerData`: the id of the auth key secret and the
  controllers, primary first. The key itself travels only as a Juju secret owned by the
  slurmctld application and granted to the relation; it never appears in a databag. That
  half is shared with the login nodes' integration (`hpc_libs.interfaces.controller`).

Both sides check the partition and node set against Slurm's grammar
(`hpc_libs.slurm.grammar`), key by key as slurmutils would render them: a value such as
`"60 Nodes=ALL"` never reaches slurm.conf, and the controller can say which application sent
which bad key (`SlurmdRequirer.compute_data_problem`).

The contract between the two charms about a unit's node (its name, the drain reasons each
side sets, the job states that keep a node busy) is `hpc_libs.slurm.naming`, which has no ops
so the autoscaler can share it.
"""

import logging
from collections.abc import Mapping
from typing import Any

import ops

from hpc_libs.interfaces.base import DatabagModel, NodeSetFields, PartitionFields
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

logger = logging.getLogger(__name__)


def named_partition(
    app: str, settings: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Apply the naming rule of a slurmd application's partition; return it and its node set.

    Each slurmd application is one partition named after it: `PartitionName=<app>
    Nodes=<app>`, and the node set `NodeSet=<app> Feature=<app>` holds the dynamic nodes
    that register with the feature `<app>`. Whatever `settings` say, the names are forced,
    so one application can never name another's partition or every node. slurmd publishes
    this; slurmctld applies it again to what it reads.
    """
    partition = {**settings, "partitionname": app, "nodes": [app]}
    return partition, {"nodeset": app, "feature": app}


class ComputeData(DatabagModel):
    """slurmd's application databag: its partition and nodeset as slurmutils dicts.

    Both are validated with slurmutils (`Partition.from_dict`, `NodeSet.from_dict`), so a
    bad value fails construction and reads as "not ready". Both are required: a reader
    serves an application's partition only once both are there. The node set carries
    nothing beyond the naming rule (`named_partition`), which the controller applies to
    both again, so its content is never taken as sent.
    """

    partition: PartitionFields | None = None
    nodeset: NodeSetFields | None = None

    @property
    def is_complete(self) -> bool:
        """Whether both the partition and the nodeset are present."""
        return self.partition is not None and self.nodeset is not None


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
    "named_partition",
]
