"""Leaving: a removed controller unit hands control over and stops its slurmctld itself.

Juju destroys a removed unit's machine after its `remove` hook, by the provider's means: a
slurmctld still running then dies as in a power cut, and a controller in charge loses what
it had not saved yet (slurmctld saves its state at most every 5 s: jobs it accepted, started
or ended meanwhile). Before this module the charm even restarted slurmctld in its own
departure hooks, and stopped nothing (soak seed 1129: two jobs ended TIMEOUT after the
primary's unit was removed and its machine killed).

So the first hook that says this unit leaves (a relation-departed naming it the departing
unit, `stop` or `remove`) does, in order, each step bounded and its failure logged, never
raised (the machine goes anyway):

1. stop and disable the primary watch (a role change would dispatch a hook);
2. if this unit's slurmctld is in charge of network state (the heartbeat in the shared
   `StateSaveLocation` names its index) and another controller answers `scontrol ping`:
   `scontrol takeover <its index>`. That controller asks this one for control; this one
   saves its state and stands by, and the other serves at once instead of after
   `SlurmctldTimeout`. The hook waits up to `HANDOVER_S` for the heartbeat to name it;
3. stop and disable slurmctld (SIGTERM: a controller still in charge saves its state, and a
   backup takes over after `SlurmctldTimeout`);
4. stop and disable the fence watchdog, last: while it runs it keeps the share mounted
   (`fence`), and a fenced controller's watchdog starts slurmctld once the share is back,
   so slurmctld is stopped again if it did meanwhile.

The unit then has left (its stored state): later hooks change nothing, so no reconcile
starts slurmctld again on a machine about to go. Its filesystem-client subordinate leaves
on its own agent, maybe before this unit's first departure hook: its unmount fails while
the fence watchdog holds the share busy, so the handover reads the whole state.
"""

import logging
import socket
import time
from collections.abc import Callable

import fence
import ops
import primary_watch
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine.systemd import Service
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager
from takeover import controller_index, read_heartbeat

logger = logging.getLogger(__name__)

HANDOVER_S = 30
"""Seconds the departing controller in charge waits for another to take control."""
POLL_S = 1.0
LEFT = "leaving: slurmctld stopped on this unit"

sleep: Callable[[float], None] = time.sleep
"""The wait between looks at the heartbeat (unit tests replace it)."""


class Departure(ops.Object):
    """Hand control over and stop slurmctld when this unit leaves (module doc)."""

    _stored = ops.StoredState()

    def __init__(
        self,
        charm: ops.CharmBase,
        manager: SlurmctldManager,
        scontrol: Scontrol,
        endpoints: tuple[str, ...],
    ) -> None:
        """Watch the departure hooks of `endpoints` (observed before the charm's reconcile)."""
        super().__init__(charm, "departure")
        self.manager = manager
        self.scontrol = scontrol
        self._stored.set_default(left=False)
        for endpoint in endpoints:
            self.framework.observe(charm.on[endpoint].relation_departed, self._on_departed)
        self.framework.observe(charm.on.stop, self._on_leaving)
        self.framework.observe(charm.on.remove, self._on_leaving)

    @property
    def left(self) -> bool:
        """Whether this unit has left: its slurmctld is stopped for good."""
        return bool(self._stored.left)

    def statuses(self) -> list[ops.StatusBase]:
        """Say that the unit left (the list of statuses stops there)."""
        return [ops.MaintenanceStatus(LEFT)] if self.left else []

    def _on_departed(self, event: ops.RelationDepartedEvent) -> None:
        if event.departing_unit == self.model.unit:
            self._leave()

    def _on_leaving(self, _: ops.EventBase) -> None:
        self._leave()

    def _leave(self) -> None:
        if self.left:
            return
        Service(f"{primary_watch.WAKE_NAME}.path").stop_for_good()
        self._hand_over()
        self.manager.service.stop_for_good()
        Service(fence.SERVICE_UNIT).stop_for_good()
        if self.manager.service.is_active():  # The watchdog started it: the share came back.
            self.manager.service.stop_for_good()
        self._stored.left = True
        logger.info("this unit leaves: slurmctld stopped and disabled")

    def _hand_over(self) -> None:
        """Give control to another controller if this one is in charge (module doc, step 2)."""
        state = self.manager.network_state_save_location
        mine = controller_index(self.manager, socket.gethostname())
        beat = read_heartbeat(state)
        if mine is None or beat is None or beat.index != mine:
            return
        try:
            pings = self.scontrol.ping()
        except SlurmOpsError as e:
            logger.warning("cannot hand control over, no ping: %s", e)
            return
        others = [i for i, p in enumerate(pings) if i not in (0, mine) and p.is_up]
        if not others:
            logger.warning("no other controller answers: slurmctld stops without a handover")
            return
        try:
            self.scontrol.takeover(others[0])
        except SlurmOpsError as e:
            logger.warning("scontrol takeover %d failed: %s", others[0], e)
            return
        for _ in range(int(HANDOVER_S / POLL_S)):
            beat = read_heartbeat(state)
            if beat is not None and beat.index != mine:
                logger.info("controller %d took control from this unit", beat.index)
                return
            sleep(POLL_S)
        logger.warning("no other controller in charge after %d s; stopping anyway", HANDOVER_S)
