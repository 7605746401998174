"""Controller high availability: network state, who may act, and each controller's role.

Slurm's high availability is active-passive: every controller unit runs slurmctld, the first
`SlurmctldHost` serves and the others stand by, and a backup takes over when the primary has
not answered its pings for `SlurmctldTimeout` seconds. A backup can only take over the queue
if it reads the same `StateSaveLocation` as the primary, so HA needs *network state*
(`use-network-state`): a filesystem-client subordinate mounts one shared filesystem at
`/var/lib/slurm/checkpoint` on every controller; the state lives in `<checkpoint>/slurmctld`
and `/etc/slurm` becomes a symlink to `<checkpoint>/etc-slurm`, so every controller reads the
one slurm.conf and the one set of keys the leader writes.

Without network state the state stays on the leader's local disk and the leader is the only
controller: another unit cannot help and says so.
"""

import dataclasses
import logging
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import credentials
import fence
import ops
import primary_watch
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.base import join_order
from hpc_libs.interfaces.mount_info import MountInfo, MountInfoProvider
from hpc_libs.interfaces.slurmctld_peer import ControllerHost, SlurmctldPeer, SlurmctldPeerData
from hpc_libs.machine import mounts
from hpc_libs.slurm.base import SLURM_USER, ConfigFile
from hpc_libs.slurm.scontrol import ControllerPing, Scontrol
from hpc_libs.slurm.slurmctld import (
    CHECKPOINT_DIR,
    NETWORK_STATE_NAME,
    STATE_SAVE_DIR,
    SlurmctldManager,
)
from pydantic import ValidationError
from slurmutils import SlurmConfig, SlurmConfigEditor

if TYPE_CHECKING:  # Imported for types only: these modules import this one.
    from applied import AppliedConfig
    from rotation import AuthKeyRotation
    from takeover import TakeoverRepair

logger = logging.getLogger(__name__)

CHECKPOINT = f"/{CHECKPOINT_DIR}"
"""Where the filesystem-client mounts the shared filesystem, as slurm.conf names paths."""
NETWORK_STATE_SAVE_LOCATION = f"{CHECKPOINT}/{NETWORK_STATE_NAME}"
"""`StateSaveLocation` with network state (`SlurmctldManager.network_state_save_location`)."""
MOUNTINFO = mounts.MOUNTINFO
"""The mount table `check_mount` reads (unit tests point it at a file of their own)."""

PING_TIMEOUT = 30
"""Seconds for `scontrol ping`, which waits for each controller that does not answer."""
LOCAL_STATE_SAVE_LOCATION = f"/{STATE_SAVE_DIR}"
"""`StateSaveLocation` without network state, on this unit's disk (SlurmctldManager makes it)."""

MOUNT_REQUEST = MountInfo(mountpoint=CHECKPOINT, noexec=True, nosuid=True, nodev=True)
"""What the leader asks the filesystem-client for: nothing on the share is ever executed."""

NEEDS_NETWORK_STATE = (
    "high availability needs use-network-state=true and a filesystem-client "
    "integration on 'mount'; this unit stands by"
)
"""Status of a unit besides the leader while state is on the leader's local disk."""
WAITING_FOR_LEADER = (
    "waiting for the leader's slurm.conf (listing this unit) and keys on the shared filesystem"
)
"""Status of a backup until the leader has written the shared configuration for it."""
FENCED = "slurmctld fenced until the shared state is writable again"
"""Status prefix of a controller the fence watchdog stopped (`fence`), before its reason."""
CANNOT_TURN_OFF = (
    "use-network-state cannot be turned off: the queue lives on the shared filesystem; "
    "set it back to true"
)


def mount_status(
    manager: SlurmctldManager, *, integrated: bool, answers: Sequence[bool] = ()
) -> ops.StatusBase | None:
    """Return why the checkpoint is not usable yet (None once a real filesystem is there).

    The mount is checked on this machine (accessed, then looked up in the mount table), not
    taken from the filesystem-client's word (`answers`, its `mounted` values): autofs
    mounts lazily and a `mounted: "true"` can be stale. A `"false"` only explains the wait.
    """
    if not integrated:
        return ops.BlockedStatus(
            f"use-network-state needs a filesystem-client integration on 'mount' ({CHECKPOINT})"
        )
    check = mounts.check_mount(manager.checkpoint_dir, mountinfo=MOUNTINFO)
    if check.mounted:
        return None
    if False in answers:
        return ops.WaitingStatus(
            f"waiting for the filesystem-client to mount {CHECKPOINT} (it reports not mounted)"
        )
    return ops.WaitingStatus(f"waiting for the shared filesystem at {CHECKPOINT}: {check.problem}")


def move_to_network_state(manager: SlurmctldManager) -> bool:
    """Move a controller's state and /etc/slurm to the shared filesystem (leader only).

    For a running controller this is the migration that keeps its queue: slurmctld is
    stopped (its state files must not change during the copy), the local state is copied to
    the network location unless the share holds state already, /etc/slurm is backed up and
    replaced by the symlink (seeding the share with its files), and the caller then starts
    slurmctld with `StateSaveLocation` on the share. Returns whether anything was moved;
    once /etc/slurm links to the share, nothing happens. Idempotent step by step, so a
    failure is retried by the next event without losing the local state.

    Raises:
        SlurmOpsError: slurmctld could not be stopped or a copy failed.

    """
    if manager.etc_is_shared():
        return False
    if manager.service.is_active():
        logger.info("stopping slurmctld to move its state to %s", manager.checkpoint_dir)
        manager.service.stop()
    if manager.copy_state_to_network():
        logger.info("copied the local state to %s", manager.network_state_save_location)
    manager.create_state_save_location(manager.network_state_save_location)
    backup = manager.share_etc()
    if backup is not None:
        logger.info("the former %s is kept in %s", manager.etc_dir, backup)
    return True


def shared_config_ready(manager: SlurmctldManager, hostname: str) -> bool:
    """Whether the leader's configuration on the share is ready for this backup to start.

    The keys are there, and a slurm.conf that points `StateSaveLocation` at the share (one
    seeded from a local /etc/slurm does not, until the leader rewrites it) and lists this
    host as a controller (slurmctld refuses to start on a host `SlurmctldHost` does not
    name; the leader adds a unit once it has seen its address).
    """
    if not manager.shared_files_ready():
        return False
    conf = shared_slurm_conf(manager)
    if conf is None:
        return False
    return (
        conf.state_save_location == NETWORK_STATE_SAVE_LOCATION
        and hostname in controller_hosts(conf)
    )


def shared_slurm_conf(manager: SlurmctldManager) -> SlurmConfig | None:
    """Return the leader's slurm.conf on the share; None while it is missing or unreadable."""
    shared = ConfigFile(
        manager.shared_etc_dir / "slurm.conf",
        SlurmConfigEditor(),
        SlurmConfig,
        yes_no_booleans=True,
    )
    try:
        return shared.load()
    except SlurmOpsError as e:
        logger.info("the shared slurm.conf is not readable yet: %s", e)
        return None


def controller_hosts(conf: SlurmConfig) -> list[str]:
    """Return the hostnames of slurm.conf's `SlurmctldHost` lines, primary first."""
    return [entry.split("(", 1)[0] for entry in conf.slurmctld_host or []]


def unadopted_shared_etc(manager: SlurmctldManager) -> str | None:
    """Why the share's `etc-slurm`, not linked yet, is refused (the leader's fails its hook).

    Nothing in a refused tree is read (`SlurmctldManager.shared_etc_problem`).
    """
    return None if manager.etc_is_shared() else manager.shared_etc_problem()


def link_shared_config(manager: SlurmctldManager) -> Path | None:
    """Make /etc/slurm the symlink to the leader's files on the share (a backup's side).

    Call only once `shared_config_ready`: the share already holds /etc/slurm's content, so
    this unit's own files are only backed up, never copied onto the share.
    """
    return manager.share_etc()


def all_peers_seen(planned_units: int, peers_with_address: int) -> bool:
    """Whether this unit sees every planned controller (itself plus each peer's address).

    A new leader must not rewrite the controllers before it has seen each of them: a
    controller it has not seen yet would be dropped from slurm.conf and from every node's
    `--conf-server`.
    """
    return peers_with_address + 1 >= planned_units


def waiting_for_peers(seen: int, planned: int) -> str:
    """Status of a leader that has not seen every planned controller yet."""
    return f"waiting to see every controller before changing them ({seen} of {planned} seen)"


def role(index: int) -> str:
    """`primary` for the first `SlurmctldHost`, then `backup1`, `backup2`, ..."""
    return "primary" if index == 0 else f"backup{index}"


def controller_states(pings: Sequence[ControllerPing], hostname: str) -> str:
    """Say each controller's role and state, this unit's first: `backup1 - UP (primary - DOWN)`.

    `pings` are in `SlurmctldHost` order, as `scontrol ping --json` lists them. Without an
    entry for `hostname` the whole list is given in order.
    """
    described = [
        (ping.hostname, f"{role(i)} - {'UP' if ping.is_up else 'DOWN'}")
        for i, ping in enumerate(pings)
    ]
    mine = [text for host, text in described if host == hostname]
    others = [text for host, text in described if host != hostname]
    if not mine:
        return ", ".join(others)
    return f"{mine[0]} ({', '.join(others)})" if others else mine[0]


@dataclasses.dataclass(frozen=True)
class Controller:
    """One slurmctld unit as other hosts reach it."""

    hostname: str
    address: str
    version: str | None = None
    """The Slurm release it runs, as it published it (None: not said)."""

    @property
    def slurmctld_host(self) -> str:
        """The `SlurmctldHost` value: hostname plus address, so names need not resolve."""
        return f"{self.hostname}({self.address})"


# Placement: the one choice between state on this unit's disk and state on the share.


@dataclasses.dataclass(frozen=True)
class Machinery:
    """What placement drives on this machine and in the model (built once by the charm)."""

    charm: ops.CharmBase
    manager: SlurmctldManager
    peer: SlurmctldPeer
    mount: MountInfoProvider
    primary_watch: primary_watch.PrimaryWatch
    fence: fence.Fence
    applied: "AppliedConfig"
    auth_rotation: "AuthKeyRotation"
    takeover: "TakeoverRepair"
    wake_event: str
    bind_endpoint: str
    slurm_version: Callable[[], str | None]
    """The Slurm release this unit runs (`24.11.5`), shared with the other controllers."""


class Placement:
    """Where and how this unit's slurmctld runs: what both strategies share.

    `placement` picks `LocalState` or `NetworkState` from `use-network-state`, the one place
    the option is read; everything else asks the strategy.
    """

    network_state = False

    def __init__(self, parts: Machinery, slurmctld_timeout: int, running_timeout: int) -> None:
        self.parts = parts
        self.slurmctld_timeout = slurmctld_timeout
        """The configured SlurmctldTimeout: the fence's grace, half of it, is never longer
        than a backup waits, even while the upgrade raised the one slurmctld runs with."""
        self.running_timeout = running_timeout
        """The SlurmctldTimeout slurmctld runs with (raised during a major upgrade): the
        heartbeat's period is a quarter of it."""
        self._checkpoint: tuple[ops.StatusBase | None] | None = None

    @property
    def _unit(self) -> ops.Unit:
        return self.parts.charm.unit

    # This unit's host: the controller other hosts reach.

    def share_address(self) -> Controller | None:
        """Share this unit's hostname and address with the other controllers.

        None, sharing nothing, when Slurm's grammar refuses them (`own_host_problem`).
        """
        try:
            host = self._own_host()
        except ValidationError as e:
            logger.error("this unit cannot be a controller: %s", e.errors()[0]["msg"])
            return None
        self.parts.peer.share_host(host)
        return Controller(str(host.hostname), str(host.address), host.version)

    def _own_host(self) -> ControllerHost:
        """Return this unit's host name and address, checked as peers' (ValidationError)."""
        return ControllerHost(
            hostname=socket.gethostname(),
            address=self._bind_address(),
            version=self.parts.slurm_version(),
        )

    def _bind_address(self) -> str:
        binding = self.parts.charm.model.get_binding(self.parts.bind_endpoint)
        if binding is None or binding.network.bind_address is None:
            raise RuntimeError(f"no bind address for the {self.parts.bind_endpoint} endpoint yet")
        return str(binding.network.bind_address)

    def _own_host_problem(self) -> str | None:
        """Why this unit's host name or address cannot be a `SlurmctldHost`, if it cannot."""
        try:
            self._own_host()
        except ValidationError as e:
            first = e.errors()[0]
            why = str(first["msg"]).removeprefix("Value error, ")
            return f"this unit's {first['loc'][0]} cannot be a SlurmctldHost: {why}"
        except RuntimeError:
            return None  # No bind address yet: reconcile waits for it.
        return None

    def problems(self) -> Iterator[ops.StatusBase]:
        """Block on this unit's or a peer's host data, if Slurm cannot use it as a controller."""
        if (own := self._own_host_problem()) is not None:
            yield ops.BlockedStatus(own)
        for problem in self.parts.peer.host_problems():
            yield ops.BlockedStatus(problem)

    # The controllers.

    def controllers(
        self, me: Controller, memory: SlurmctldPeerData
    ) -> tuple[list[str], list[Controller]]:
        """Return the controller units in join order, and the controllers, primary first.

        The leader keeps the join order in the peer application databag. Until the peer
        relation exists this unit is the only controller.
        """
        present = {self._unit.name: me}
        for unit, host in self.parts.peer.hosts().items():  # Only data Slurm's grammar accepts.
            present[unit] = Controller(str(host.hostname), str(host.address), host.version)
        recorded = [c.unit for c in memory.controllers or [] if c.unit]
        order = join_order(recorded, list(present))  # The first is the primary controller.
        return order, [present[name] for name in order]

    def role_status(self) -> ops.StatusBase | None:
        """Each controller's role and state as `scontrol ping` sees them; None if it cannot."""
        try:
            pings = Scontrol(timeout=PING_TIMEOUT).ping()
        except SlurmOpsError as e:
            logger.info("cannot ask the controllers for their state: %s", e.stderr or e.message)
            return None
        states = controller_states(pings, socket.gethostname())
        return ops.ActiveStatus(states) if states else None

    # What each strategy decides.

    def prepare(self) -> bool:
        """Whether this unit's controller can be configured now; prepare what it needs first."""
        raise NotImplementedError

    def stand_by(self) -> None:
        """Run a unit besides the leader."""
        raise NotImplementedError

    def lead(self) -> bool:
        """Whether the leader may write the configuration now; prepare the state for it."""
        raise NotImplementedError

    def serving(self, me: Controller, controllers: list[Controller]) -> list[Controller]:
        """Return the controllers slurm.conf lists, primary first."""
        raise NotImplementedError

    def conf_settings(self) -> dict[str, Any]:
        """slurm.conf's keys for where the state lives and what runs on a role change."""
        raise NotImplementedError

    def wait_status(self) -> ops.StatusBase | None:
        """Return what keeps this unit's controller from running as it should, if anything."""
        raise NotImplementedError


class LocalState(Placement):
    """State on the leader's local disk: the leader is the only controller."""

    def prepare(self) -> bool:
        """Unless the state already moved to the share (it cannot move back)."""
        return not self.parts.manager.etc_is_shared()

    def stand_by(self) -> None:
        """Keep the JWT key; stop slurmctld.

        A second slurmctld would run a second queue of its own (after a leader change, the
        former leader's), so it is stopped.
        """
        manager = self.parts.manager
        if (jwt_key := credentials.jwt_key_or_none(self.parts.charm)) is not None:
            manager.jwt_key.set(jwt_key)
        if manager.service.is_active():
            logger.info("stopping slurmctld: without network state only the leader runs it")
            manager.service.stop()

    def lead(self) -> bool:
        """Return True: the state stays where it is."""
        return True

    def serving(self, me: Controller, controllers: list[Controller]) -> list[Controller]:
        """Return this unit alone: the state is on its disk, no other unit can help."""
        return [me]

    def conf_settings(self) -> dict[str, Any]:
        """State on this unit's disk; no primary programs."""
        return {"statesavelocation": LOCAL_STATE_SAVE_LOCATION}

    def wait_status(self) -> ops.StatusBase | None:
        """Blocked once on the share (no way back), or on a unit besides the leader."""
        if self.parts.manager.etc_is_shared():
            return ops.BlockedStatus(CANNOT_TURN_OFF)
        return None if self._unit.is_leader() else ops.BlockedStatus(NEEDS_NETWORK_STATE)


class NetworkState(Placement):
    """State on the shared filesystem: every unit runs slurmctld from the leader's files."""

    network_state = True

    def prepare(self) -> bool:
        """Once the checkpoint is a real mount (the leader asks the filesystem-client for it).

        What a takeover by this unit caused is repaired first, whatever else this hook can do;
        then the bridge from slurmctld's primary programs and the fence watchdog are installed.
        """
        parts = self.parts
        parts.mount.publish(MOUNT_REQUEST)  # Leader only; written once.
        # Even when this hook cannot configure: the wake-up is level-triggered.
        parts.takeover.check(parts.manager, socket.gethostname(), self.running_timeout)
        if self._checkpoint_status() is not None:
            return False
        parts.primary_watch.install(self._unit.name, parts.charm.charm_dir, parts.wake_event)
        grace = fence.grace_seconds(self.slurmctld_timeout)
        parts.fence.install(CHECKPOINT, NETWORK_STATE_SAVE_LOCATION, grace, SLURM_USER)
        return parts.fence.reason() is None  # Fenced: the watchdog starts slurmctld again.

    def stand_by(self) -> None:
        """Run a backup from the leader's files on the share."""
        self._follow_shared_config()

    def lead(self) -> bool:
        """Once the leader sees every controller; the state moves to the share first."""
        if not self._sees_every_controller():
            self._follow_shared_config()  # Stand by meanwhile, changing nothing.
            return False
        move_to_network_state(self.parts.manager)
        return True

    def serving(self, me: Controller, controllers: list[Controller]) -> list[Controller]:
        """Return every controller: each reads the state on the share."""
        return controllers

    def conf_settings(self) -> dict[str, Any]:
        """State on the share; the primary programs wake the charm on a role change."""
        return {
            "statesavelocation": NETWORK_STATE_SAVE_LOCATION,
            "slurmctldprimaryonprog": primary_watch.PROGRAM,
            "slurmctldprimaryoffprog": primary_watch.PROGRAM,
        }

    def wait_status(self) -> ops.StatusBase | None:
        """No mount yet, fenced, peers not all seen (leader) or no shared config (backup)."""
        if (checkpoint := self._checkpoint_status()) is not None:
            return checkpoint
        if (fenced := self.parts.fence.reason()) is not None:
            return ops.BlockedStatus(f"{FENCED}: {fenced}")
        leader = self._unit.is_leader()
        if leader and not self._sees_every_controller():
            seen = len(self.parts.peer.hosts()) + 1
            planned = self.parts.charm.app.planned_units()
            return ops.WaitingStatus(waiting_for_peers(seen, planned))
        if not leader and (problem := unadopted_shared_etc(self.parts.manager)) is not None:
            return ops.BlockedStatus(problem)
        if not leader and not shared_config_ready(self.parts.manager, socket.gethostname()):
            return ops.WaitingStatus(WAITING_FOR_LEADER)
        return None

    def _follow_shared_config(self) -> None:
        """Run slurmctld from the leader's files on the share, once they are there."""
        manager = self.parts.manager
        if not shared_config_ready(manager, socket.gethostname()):
            logger.info("waiting for the leader's configuration on the shared filesystem")
            return
        if (backup := link_shared_config(manager)) is not None:
            logger.info("/etc/slurm links to the share; its former content is in %s", backup)
        if (timeout := self.parts.applied.follow()) is not None:
            self.parts.peer.share_slurmctld_timeout(timeout)
        self.parts.auth_rotation.confirm_standby(manager.key.get())

    def _checkpoint_status(self) -> ops.StatusBase | None:
        """Why the shared filesystem is not usable yet (checked once per dispatch)."""
        if self._checkpoint is None:
            mount = self.parts.mount
            self._checkpoint = (
                mount_status(
                    self.parts.manager, integrated=mount.is_joined(), answers=mount.answers()
                ),
            )
        return self._checkpoint[0]

    def _sees_every_controller(self) -> bool:
        planned = self.parts.charm.app.planned_units()
        return all_peers_seen(planned, len(self.parts.peer.hosts()))


def placement(
    parts: Machinery, *, use_network_state: bool, slurmctld_timeout: int, running_timeout: int
) -> Placement:
    """Choose the strategy: the one place `use-network-state` is read."""
    strategy = NetworkState if use_network_state else LocalState
    return strategy(parts, slurmctld_timeout, running_timeout)
