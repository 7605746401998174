"""A cluster member's side of its integration with slurmctld: join, wait, leave.

sackd, slurmrestd and slurmdbd (and slurmd, through its own departure) join slurmctld, take
its key and controllers, restart on change and leave. `ClusterMember` holds what they share:

* which relation the unit is in: none after the unit departed it, even while its
  relation-broken is pending (`relation`, recorded from the departing hook);
* the status ladder while joining (`status`, `waiting_status`), one wording for all;
* leaving: the charm's `leave` runs on the departing hook and on relation-broken (a charm
  that leaves from its reconcile, slurmdbd, gives none: its relation stays tracked as is).

The charm's reconcile runs on every relation event through `SlurmCharm`; no event is
re-emitted for it.
"""

from collections.abc import Callable

import ops

from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.base import DatabagModel
from hpc_libs.interfaces.controller import ControllerConsumer, ControllerData

NEEDS_SLURMCTLD = "needs a slurmctld integration"
WAITING_FOR_SLURMCTLD = "waiting for slurmctld"


class ClusterMember(ops.Object):
    """Track the unit's slurmctld relation and say what joining it still lacks.

    Unit-local fact (`_stored.left_relation`): the id of the relation this unit departed,
    which must not configure the daemon again while its relation-broken is pending.
    """

    _stored = ops.StoredState()

    def __init__(
        self,
        charm: ops.CharmBase,
        slurmctld: ControllerConsumer,
        leave: Callable[[], None] | None = None,
    ) -> None:
        """Track `slurmctld`; with `leave`, call it when the unit departs (else the charm does)."""
        super().__init__(charm, "cluster-member")
        self.slurmctld = slurmctld
        self._leave = leave
        self._stored.set_default(left_relation=-1)
        if leave is not None:
            self.framework.observe(slurmctld.on.slurmctld_disconnected, self._on_disconnected)

    @property
    def relation(self) -> ops.Relation | None:
        """Return the slurmctld relation, unless this unit has departed it."""
        relation = self.slurmctld.relation
        if relation is None or relation.id == self._stored.left_relation:
            return None
        return relation

    def status(self) -> ops.StatusBase | None:
        """Return what the integration lacks (itself, valid data, the key), or None."""
        if self.relation is None:
            return ops.BlockedStatus(NEEDS_SLURMCTLD)
        return self.waiting_status()

    def waiting_status(self, *models: type[DatabagModel]) -> ops.StatusBase | None:
        """Return what slurmctld has not sent yet, valid (its data, `models`, the key), or None.

        None without a relation too: the charm says how it reports that.
        """
        relation = self.relation
        if relation is None:
            return None
        for model in (ControllerData, *models):
            if problem := self.slurmctld.problem(model, relation, relation.app):
                return ops.WaitingStatus(problem)
        if not self.slurmctld.is_ready():
            return ops.WaitingStatus(WAITING_FOR_SLURMCTLD)
        try:
            self.slurmctld.auth_key()
        except IntegrationError as e:
            return ops.WaitingStatus(f"waiting for slurmctld's auth key: {e}")
        return None

    def _on_disconnected(self, event: ops.RelationEvent) -> None:
        """Leave the cluster; seen once per departing controller unit, then at broken."""
        self._stored.left_relation = event.relation.id
        if self._leave is not None:
            self._leave()
