"""A cluster member's side of its integration with slurmctld: join, run, confirm, leave.

slurmd, sackd, slurmdbd and slurmrestd each join slurmctld, take its key and controllers,
restart their daemon on change and leave. `ClusterMember` holds what they share:

* relation tracking: the charm's reconcile runs on the slurmctld relation's own
  relation-changed; no event is re-emitted for it. `relation` is None after the unit
  departed it, even while its relation-broken is pending; a new integration (relation-created)
  is joined afresh;
* leaving: the charm's `leave` runs on the departing hook (the unit's own relation-departed)
  and on relation-broken (slurmdbd, which leaves from its reconcile, gives none);
* the status ladder while joining (`status`: `integration_status`, then `waiting_status`),
  one wording for all;
* the restart: the daemon is (re)started when the fingerprint of what it runs with (the
  key, the controllers, ...) differs from the one it was last (re)started with, or it is
  down (`run`). The fingerprint is recorded only once the daemon (re)started: what was
  applied, not what was written, so a failed restart is retried by the next event;
* auth key confirmation: once the daemon runs with the key, the unit confirms it to
  slurmctld, whose key rotation waits for every unit (`run`, `confirm_auth_key`).

The facts live in the charm's own StoredState, given to the member: `applied` (the
fingerprint) and `left` (the unit left the cluster and was not integrated again since).
Libraries never set status: `status` and `waiting_status` return it for collect-status.
"""

import logging
from collections.abc import Callable
from typing import Any

import ops

from hpc_libs.charm.base import SlurmCharm
from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.base import DatabagModel
from hpc_libs.interfaces.controller import ControllerConsumer, ControllerData
from hpc_libs.machine.systemd import Service
from hpc_libs.slurm.sackd import SackdManager

logger = logging.getLogger(__name__)

NEEDS_SLURMCTLD = "needs a slurmctld integration"
WAITING_FOR_SLURMCTLD = "waiting for slurmctld"


class ClusterMember(ops.Object):
    """Track the unit's slurmctld relation, run its daemon, say what joining still lacks."""

    def __init__(
        self,
        charm: SlurmCharm[Any],
        slurmctld: ControllerConsumer,
        stored: ops.BoundStoredState,
        leave: Callable[[], None] | None = None,
    ) -> None:
        """Track `slurmctld` with facts in `stored`; with `leave`, call it when the unit departs.

        Without `leave`, the departure is not tracked: the charm leaves from its reconcile.
        """
        super().__init__(charm, "cluster-member")
        self.slurmctld = slurmctld
        self._stored = stored
        self._leave = leave
        stored.set_default(applied="", left=False)
        events = charm.on[slurmctld.endpoint]
        self.framework.observe(events.relation_created, self._on_created)
        charm.reconcile_on(events.relation_changed)
        if leave is not None:
            self.framework.observe(slurmctld.on.slurmctld_disconnected, self._on_disconnected)

    @property
    def relation(self) -> ops.Relation | None:
        """Return the slurmctld relation, unless this unit has left the cluster."""
        return None if self.left else self.slurmctld.relation

    @property
    def left(self) -> bool:
        """Whether the unit left the cluster (and was not integrated again since)."""
        return bool(self._stored.left)

    def depart(self) -> None:
        """Record that the unit left the cluster; its daemon is not configured again.

        The charm that leaves on more than the departing hook (slurmd: stop, remove) calls
        it once it left. Forgets what the daemon was (re)started with.
        """
        self._stored.left = True
        self._stored.applied = ""

    def status(self) -> ops.StatusBase | None:
        """Return what the integration lacks (itself, valid data, the key), or None."""
        return self.integration_status() or self.waiting_status()

    def integration_status(self) -> ops.StatusBase | None:
        """Return blocked while the unit is in no slurmctld relation (or left it), else None."""
        return ops.BlockedStatus(NEEDS_SLURMCTLD) if self.relation is None else None

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

    def run(
        self, service: Service, fingerprint: str, key: str, *, start_when_down: bool = False
    ) -> bool:
        """(Re)start `service` unless it runs with `fingerprint`; confirm `key`; return if it did.

        `fingerprint` digests what the daemon reads at start (its key among it). A daemon
        that is down is started (`start_when_down`) or restarted, a running one restarted
        when the fingerprint changed. A failed (re)start raises `ServiceError` and leaves no
        fingerprint: what runs is not known, so the next event (re)starts again.
        """
        active = service.is_active()
        changed = not active or fingerprint != self._stored.applied
        if changed:
            self._stored.applied = ""
            if not active and start_when_down:
                service.start()
            else:
                service.restart()
            if not active:
                # After the start: the daemon comes up while `enable` runs. A failed
                # enable leaves no fingerprint, so the next event enables again.
                service.enable()
            self._stored.applied = fingerprint
        self.confirm_auth_key(key)
        return changed

    def run_sackd(self, sackd: SackdManager, data: ControllerData | None) -> bool:
        """Run `sackd` with the key and controllers of slurmctld's `data`; return if it could.

        False while `data` is incomplete or the key cannot be read (the charm's statuses
        say which); sackd is then left as it is.
        """
        if data is None or not data.is_complete:
            return False
        try:
            key = self.slurmctld.auth_key()
        except IntegrationError as e:
            logger.warning("not configuring sackd: %s", e)
            return False
        sackd.key.set(key)
        sackd.set_conf_servers(data.conf_servers())
        self.run(sackd.service, sackd.fingerprint(), key)
        return True

    def confirm_auth_key(self, key: str) -> None:
        """Tell slurmctld this unit runs with `key` (no daemon with an older one runs here).

        `run` calls it; call it directly when no daemon of this unit reads the key.
        """
        self.slurmctld.confirm_auth_key(key)

    def _on_created(self, _: ops.RelationCreatedEvent) -> None:
        """Integrated again after leaving: join afresh (observed before any charm handler).

        The member reconciles from relation-changed only: relation-created may come before
        the install hook, which must not install from it.
        """
        if self._stored.left:
            self._stored.left = False
            self._stored.applied = ""

    def _on_disconnected(self, _: ops.RelationEvent) -> None:
        """Leave the cluster; seen once per departing controller unit, then at broken.

        `leave` runs before the departure is recorded, so it can tell the first time.
        """
        if self._leave is not None:
            self._leave()
        self.depart()
