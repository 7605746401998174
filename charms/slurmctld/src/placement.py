"""Placement: where this unit's slurmctld keeps its state, and what each unit does about it.

The one choice between state on the leader's local disk (`LocalState`: the leader is the
only controller, another unit cannot help and says so) and state on a shared filesystem
(`NetworkState`: every controller unit runs slurmctld from the leader's files, see
`network_state` for the filesystem's side). `Placement` picks the strategy from
`use-network-state`, the one place that option is read.

Its reconcile says what this unit does next (`Turn`): the leader writes the configuration,
a backup follows the leader's files on the share (the charm runs them, `applied.follow`),
or nothing more in this hook.
"""

import dataclasses
import enum
import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import credentials
import fence
import network_state
import ops
import primary_watch
from facts import Facts
from hpc_libs.interfaces.mount_info import MountInfoProvider
from hpc_libs.interfaces.slurmctld_peer import ControllerHost, SlurmctldPeer
from hpc_libs.slurm.base import SLURM_USER
from hpc_libs.slurm.slurmctld import STATE_SAVE_DIR, SlurmctldManager
from network_state import CHECKPOINT, NETWORK_STATE_SAVE_LOCATION

logger = logging.getLogger(__name__)

LOCAL_STATE_SAVE_LOCATION = f"/{STATE_SAVE_DIR}"
"""`StateSaveLocation` without network state, on this unit's disk (SlurmctldManager makes it)."""
NEEDS_NETWORK_STATE = (
    "high availability needs use-network-state=true and a filesystem-client "
    "integration on 'mount'; this unit stands by"
)
"""Status of a unit besides the leader while state is on the leader's local disk."""
FENCED = "slurmctld fenced until the shared state is writable again"
"""Status prefix of a controller the fence watchdog stopped (`fence`), before its reason."""
CANNOT_TURN_OFF = (
    "use-network-state cannot be turned off: the queue lives on the shared filesystem; "
    "set it back to true"
)


class Turn(enum.Enum):
    """What this unit does after placement: lead, follow the leader's files, or stop here."""

    STOP = enum.auto()
    FOLLOW = enum.auto()
    LEAD = enum.auto()


@dataclasses.dataclass(eq=False)
class Strategy:
    """Where the state lives: what both strategies share (the machine and the model)."""

    charm: ops.CharmBase
    manager: SlurmctldManager
    peer: SlurmctldPeer
    mount: MountInfoProvider
    wake_event: str
    network_state: ClassVar[bool] = False

    def prepare(self, facts: Facts) -> bool:
        """Whether this unit's controller can be configured now; prepare what it needs first."""
        raise NotImplementedError

    def stand_by(self, facts: Facts) -> bool:
        """Run a unit that does not write the configuration; whether it follows the leader's."""
        raise NotImplementedError

    def lead(self, facts: Facts) -> bool:
        """Whether the leader may write the configuration now; prepare the state for it."""
        raise NotImplementedError

    def serving(self, facts: Facts) -> list[ControllerHost]:
        """Return the controllers slurm.conf lists, primary first."""
        raise NotImplementedError

    def conf_settings(self) -> dict[str, Any]:
        """slurm.conf's keys for where the state lives and what runs on a role change."""
        raise NotImplementedError

    def wait_status(self, facts: Facts) -> ops.StatusBase | None:
        """Return what keeps this unit's controller from running as it should, if anything."""
        raise NotImplementedError


class LocalState(Strategy):
    """State on the leader's local disk: the leader is the only controller."""

    def prepare(self, facts: Facts) -> bool:
        """Unless the state already moved to the share (it cannot move back)."""
        return not self.manager.etc_is_shared()

    def stand_by(self, facts: Facts) -> bool:
        """Keep the JWT key; stop slurmctld; follow nothing.

        A second slurmctld would run a second queue of its own (after a leader change, the
        former leader's), so it is stopped.
        """
        if (jwt_key := credentials.jwt_key_or_none(self.charm)) is not None:
            self.manager.jwt_key.set(jwt_key)
        if self.manager.service.is_active():
            logger.info("stopping slurmctld: without network state only the leader runs it")
            self.manager.service.stop()
        return False

    def lead(self, facts: Facts) -> bool:
        """Return True: the state stays where it is."""
        return True

    def serving(self, facts: Facts) -> list[ControllerHost]:
        """Return this unit alone: the state is on its disk, no other unit can help."""
        return [facts.me] if facts.me is not None else []

    def conf_settings(self) -> dict[str, Any]:
        """State on this unit's disk; no primary programs."""
        return {"statesavelocation": LOCAL_STATE_SAVE_LOCATION}

    def wait_status(self, facts: Facts) -> ops.StatusBase | None:
        """Blocked once on the share (no way back), or on a unit besides the leader."""
        if self.manager.etc_is_shared():
            return ops.BlockedStatus(CANNOT_TURN_OFF)
        return None if facts.leader else ops.BlockedStatus(NEEDS_NETWORK_STATE)


@dataclasses.dataclass(eq=False)
class NetworkState(Strategy):
    """State on the shared filesystem: every unit runs slurmctld from the leader's files."""

    network_state = True

    def __post_init__(self) -> None:
        self.primary_watch = primary_watch.PrimaryWatch(self.manager.root)
        self.fence = fence.Fence(self.manager.root)
        self._checkpoint: tuple[ops.StatusBase | None] | None = None

    def prepare(self, facts: Facts) -> bool:
        """Once the checkpoint is a real mount (the leader asks the filesystem-client for it).

        Then the bridge from slurmctld's primary programs and the fence watchdog are
        installed. The fence's grace, half the configured SlurmctldTimeout, is never longer
        than a backup waits, even while the upgrade raised the one slurmctld runs with.
        """
        self.mount.publish(network_state.mount_request())  # Leader only; written once.
        if self._checkpoint_status() is not None:
            return False
        self.primary_watch.install(facts.unit, self.charm.charm_dir, self.wake_event)
        grace = fence.grace_seconds(facts.config.slurmctld_timeout)
        self.fence.install(CHECKPOINT, NETWORK_STATE_SAVE_LOCATION, grace, SLURM_USER)
        return self.fence.reason() is None  # Fenced: the watchdog starts slurmctld again.

    def stand_by(self, facts: Facts) -> bool:
        """Link /etc/slurm to the leader's files on the share, once they are there for us."""
        if not network_state.shared_config_ready(self.manager, facts.hostname):
            logger.info("waiting for the leader's configuration on the shared filesystem")
            return False
        if (backup := network_state.link_shared_config(self.manager)) is not None:
            logger.info("/etc/slurm links to the share; its former content is in %s", backup)
        return True

    def lead(self, facts: Facts) -> bool:
        """Once the leader sees every controller (else it stands by, changing nothing).

        The state moves to the share first.
        """
        if not self._sees_every_controller(facts):
            return False
        network_state.move_to_network_state(self.manager)
        return True

    def serving(self, facts: Facts) -> list[ControllerHost]:
        """Return every controller: each reads the state on the share."""
        return facts.controllers

    def conf_settings(self) -> dict[str, Any]:
        """State on the share; the primary programs wake the charm on a role change."""
        return {
            "statesavelocation": NETWORK_STATE_SAVE_LOCATION,
            "slurmctldprimaryonprog": primary_watch.PROGRAM,
            "slurmctldprimaryoffprog": primary_watch.PROGRAM,
        }

    def wait_status(self, facts: Facts) -> ops.StatusBase | None:
        """No mount yet, fenced, peers not all seen (leader) or no shared config (backup)."""
        if (checkpoint := self._checkpoint_status()) is not None:
            return checkpoint
        if (fenced := self.fence.reason()) is not None:
            return ops.BlockedStatus(f"{FENCED}: {fenced}")
        if facts.leader and not self._sees_every_controller(facts):
            seen = len(facts.peers) + 1
            planned = self.charm.app.planned_units()
            return ops.WaitingStatus(network_state.waiting_for_peers(seen, planned))
        manager = self.manager
        if not facts.leader and (problem := network_state.unadopted_shared_etc(manager)):
            return ops.BlockedStatus(problem)
        if not facts.leader and not network_state.shared_config_ready(manager, facts.hostname):
            return ops.WaitingStatus(network_state.WAITING_FOR_LEADER)
        return None

    def _checkpoint_status(self) -> ops.StatusBase | None:
        """Why the shared filesystem is not usable yet (checked once per dispatch)."""
        if self._checkpoint is None:
            self._checkpoint = (
                network_state.mount_status(
                    self.manager, integrated=self.mount.is_joined(), answers=self.mount.answers()
                ),
            )
        return self._checkpoint[0]

    def _sees_every_controller(self, facts: Facts) -> bool:
        planned = self.charm.app.planned_units()
        return network_state.all_peers_seen(planned, len(facts.peers))


class Placement:
    """Where and how this unit's slurmctld runs, for the charm's reconcile and statuses.

    Each strategy is built once per dispatch; the facts' `use-network-state` picks one.
    """

    def __init__(
        self,
        charm: ops.CharmBase,
        manager: SlurmctldManager,
        peer: SlurmctldPeer,
        mount: MountInfoProvider,
        wake_event: str,
    ) -> None:
        self.peer = peer
        parts = (charm, manager, peer, mount, wake_event)
        self._local, self._network = LocalState(*parts), NetworkState(*parts)

    def strategy(self, facts: Facts) -> Strategy:
        """Return the strategy `use-network-state` names: the one place the option is read."""
        return self._network if facts.config.use_network_state else self._local

    def reconcile(self, facts: Facts) -> Turn:
        """Share this unit's host, prepare it, and say what it does next.

        The leader leads once its strategy lets it; any other unit, or a leader that may
        not write yet, stands by.
        """
        if (me := facts.me) is None:
            return Turn.STOP  # Its host name breaks Slurm's grammar: the status says so.
        self.peer.share_host(me)
        strategy = self.strategy(facts)
        if not strategy.prepare(facts):
            return Turn.STOP
        if facts.leader and strategy.lead(facts):
            return Turn.LEAD
        return Turn.FOLLOW if strategy.stand_by(facts) else Turn.STOP

    def problems(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Block on this unit's or a peer's host data, if Slurm cannot use it as a controller."""
        if facts.host_problem is not None:
            yield ops.BlockedStatus(facts.host_problem)
        for problem in self.peer.host_problems():
            yield ops.BlockedStatus(problem)

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Say what keeps this unit's controller from running as it should (the list stops)."""
        if (waiting := self.strategy(facts).wait_status(facts)) is not None:
            yield waiting
