#!/usr/bin/env python3
"""Charm for slurmctld, the controller of a configless Slurm cluster of dynamic nodes."""

import logging
import os
import socket
from collections.abc import Iterable, Iterator

import cluster
import credentials
import exporter_service
import fence
import ha
import ops
import overrides
import rebuild
import retire
import rotation
import takeover
import toolkit
from applied import AppliedConfig
from config import SlurmctldConfig
from hpc_libs.charm import wake
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.charm.ports import PortRange
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.controller import PortRangeEntry
from hpc_libs.interfaces.cos_agent import SLURM_LOG_FILES, CosAgentProvider, scrape_job
from hpc_libs.interfaces.mount_info import MountInfoProvider
from hpc_libs.interfaces.sackd import SackdRequirer
from hpc_libs.interfaces.slurmctld_peer import (
    ControllerHost,
    ControllerSlot,
    DepartedNode,
    PartitionEntry,
    SlurmctldPeer,
    SlurmctldPeerData,
)
from hpc_libs.interfaces.slurmd import (
    RETIRE_REASON,
    ComputeData,
    ControllerEntry,
    SlurmdRequirer,
    get_or_create_auth_key_secret,
    node_name,
)
from hpc_libs.interfaces.slurmdbd import DbdEntry, SlurmdbdRequirer
from hpc_libs.interfaces.slurmrestd import SlurmrestdRequirer
from hpc_libs.machine import systemd
from hpc_libs.slurm import grammar
from hpc_libs.slurm.base import SLURM_USER, SLURMCTLD_PORT
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager
from primary_watch import PrimaryWatch
from pydantic import ValidationError

logger = logging.getLogger(__name__)

PEER = "slurmctld-peer"
SLURMD = "slurmd"
LOGIN_NODE = "login-node"
SLURMDBD = "slurmdbd"
SLURMRESTD = "slurmrestd"
MOUNT = "mount"
DEFAULT_TOKEN_LIFESPAN = 1800
WAKE_EVENT = "slurmctld-wake"
"""Hook name the background watchers dispatch (`hooks/slurmctld-wake`)."""
PING_TIMEOUT = 30
"""Seconds for `scontrol ping`, which waits for each controller that does not answer."""


class SlurmctldWakeEvent(ops.EventBase):
    """Something slurmctld waited for happened (dispatched by a watcher, `hpc_libs.charm.wake`)."""


class SlurmctldCharmEvents(ops.CharmEvents):
    """The charm's events, with the one its watchers dispatch from the machine."""

    slurmctld_wake = ops.EventSource(SlurmctldWakeEvent)


class SlurmctldCharm(SlurmCharm[SlurmctldConfig]):
    """Operate slurmctld: slurm.conf, the keys, partitions of slurmd apps, accounting, JWT."""

    on = SlurmctldCharmEvents()  # pyright: ignore[reportAssignmentType, reportIncompatibleVariableOverride]

    def __init__(self, framework: ops.Framework) -> None:
        self.slurmctld = SlurmctldManager()
        super().__init__(framework, config_type=SlurmctldConfig, manager=self.slurmctld)
        self.cos_agent = CosAgentProvider(
            self,
            scrape_jobs=[scrape_job("slurm_exporter", exporter_service.PORT)],
            log_files=[SLURM_LOG_FILES],
        )
        self.scontrol = Scontrol()
        self.applied = AppliedConfig(self, self.slurmctld, self.scontrol)
        self.peer = SlurmctldPeer(self, PEER)
        self.slurmd = SlurmdRequirer(self, SLURMD)
        self.login_nodes = SackdRequirer(self, LOGIN_NODE)
        self.accounting = SlurmdbdRequirer(self, SLURMDBD)
        self.rest_api = SlurmrestdRequirer(self, SLURMRESTD)
        self.mount = MountInfoProvider(self, MOUNT)
        self.primary_watch = PrimaryWatch(self.slurmctld.root)
        self.fence = fence.Fence(self.slurmctld.root)
        self.exporter = exporter_service.ExporterService(self.slurmctld.root)
        self.auth_rotation = rotation.AuthKeyRotation(
            self,
            [self.slurmd, self.login_nodes, self.accounting, self.rest_api],
            PEER,
            wake=[self.on[LOGIN_NODE].relation_changed, self.on[SLURMRESTD].relation_changed],
        )
        self.takeover = takeover.TakeoverRepair(self, self.scontrol, slurm_user=SLURM_USER)
        self.rebuild = rebuild.Rebuild(self, self._serving_partitions)
        self._checkpoint: tuple[ops.StatusBase | None] | None = None
        framework.observe(self.on[SLURMD].relation_departed, self._on_slurmd_unit_departed)
        framework.observe(self.on[SLURMDBD].relation_changed, self._on_slurmdbd_changed)
        framework.observe(self.on.resume_action, self._on_resume_action)
        framework.observe(self.on.token_action, self._on_token_action)
        framework.observe(self.on.set_node_state_action, self._on_set_node_state_action)
        framework.observe(self.on.show_current_config_action, self._on_show_current_config)
        framework.observe(self.on.rotate_jwt_key_action, self._on_rotate_jwt_key_action)
        framework.observe(self.on.rotate_auth_key_action, self._on_rotate_auth_key_action)
        framework.observe(self.on.secret_remove, self._on_secret_remove)
        self.reconcile_on(
            self.on.slurmctld_wake,
            self.on[PEER].relation_changed,
            self.on[PEER].relation_departed,
            self.slurmd.on.slurmd_ready,
            self.slurmd.on.slurmd_disconnected,
            self.on[LOGIN_NODE].relation_joined,
            self.accounting.on.slurmdbd_connected,
            self.accounting.on.slurmdbd_ready,
            self.accounting.on.slurmdbd_disconnected,
            self.on[SLURMRESTD].relation_joined,
            self.mount.on.mount_connected,
            self.mount.on.mount_changed,
            self.mount.on.mount_disconnected,
        )

    # Event handlers.

    def _on_slurmd_unit_departed(self, event: ops.RelationDepartedEvent) -> None:
        """Take a leaving compute unit's node out of the cluster, from the controller's side.

        The unit retires its node itself, but its machine may disappear before it can
        (Juju removes the machine with its last unit): the controller drains the node and
        deletes it once no job runs on it, so no node of a removed unit is left behind.
        """
        leaving = event.departing_unit
        if self.unit.is_leader() and leaving is not None and leaving != self.unit:
            name = node_name(leaving.name)
            retire.drain_node(self.scontrol, name, RETIRE_REASON)
            memory = self.peer.read()
            departed = {n.name for n in memory.departed_nodes or [] if n.name} | {name}
            nodes = [DepartedNode(name=n) for n in sorted(departed)]
            self.peer.write(memory.model_copy(update={"departed_nodes": nodes}))
        self.converge()

    def _on_slurmdbd_changed(self, event: ops.RelationChangedEvent) -> None:
        """Stop accounting when slurmdbd withdrew its daemons or sent bad data.

        Usable data fires `slurmdbd_ready`, which reconciles already.
        """
        data = self.accounting.slurmdbd_data(event.relation)
        if data is None or not data.reachable():
            self.converge()

    def _on_token_action(self, event: ops.ActionEvent) -> None:
        """Return a JWT for a user: the one place the charm hands out a credential, on purpose.

        The token goes to the action's result only, never to a log, a databag or a status.
        """
        params = event.params
        try:
            username, lifespan = credentials.token_request(
                params.get("username"), params.get("lifespan", DEFAULT_TOKEN_LIFESPAN)
            )
        except ValueError as e:
            event.fail(f"invalid token request: {e}")
            return
        try:
            token = self.scontrol.token(username, lifespan)
        except SlurmOpsError as e:
            event.fail(f"cannot get a token for {username}: {e.stderr.strip() or e.message}")
            return
        logger.info("token issued for user %s, valid %d s", username, lifespan)
        event.set_results({"username": username, "lifespan": lifespan, "token": token})

    def _on_resume_action(self, event: ops.ActionEvent) -> None:
        nodename = str(event.params["nodename"])
        try:
            grammar.HOSTLIST(nodename)
        except ValueError as e:
            event.fail(f"invalid nodename: {e}")
            return
        try:
            self.scontrol.update_node(nodename, state="resume")
        except SlurmOpsError as e:
            event.fail(f"cannot resume {nodename}: {e.stderr or e.message}")
            return
        event.set_results({"nodename": nodename, "state": "resume"})

    def _on_set_node_state_action(self, event: ops.ActionEvent) -> None:
        """Set nodes' state in Slurm (`toolkit.node_state_request` checks every parameter)."""
        params = event.params
        try:
            request = toolkit.node_state_request(
                params.get("nodes"), params.get("state"), params.get("reason")
            )
        except ValueError as e:
            event.fail(f"invalid set-node-state request: {e}")
            return
        try:
            self.scontrol.update_node(request.nodes, state=request.state, reason=request.reason)
        except SlurmOpsError as e:
            event.fail(f"cannot set {request.nodes} {request.state}: {e.stderr or e.message}")
            return
        logger.info("operator set nodes %s %s", request.nodes, request.state)
        event.set_results({"nodes": request.nodes, "state": request.state})

    def _on_show_current_config(self, event: ops.ActionEvent) -> None:
        """Return the configuration files served to the nodes (no key, no password)."""
        try:
            event.set_results(toolkit.served_config(self.slurmctld.etc_dir))
        except FileNotFoundError as e:
            event.fail(f"slurmctld is not configured yet: {e}")

    def _on_rotate_jwt_key_action(self, event: ops.ActionEvent) -> None:
        """Publish a new JWT key: tokens issued before stop working (leader only)."""
        if not self.unit.is_leader():
            event.fail("run rotate-jwt-key on the leader (slurmctld/leader)")
            return
        secret = credentials.get_or_create_jwt_key_secret(self, self.slurmctld.jwt_key.generate)
        secret.set_content({credentials.JWT_KEY_FIELD: self.slurmctld.jwt_key.generate()})
        if (failure := self.converge()) is not None:
            event.fail(f"new JWT key published; slurmctld did not apply it yet: {failure}")
            return
        event.set_results({"rotated": True})

    def _on_rotate_auth_key_action(self, event: ops.ActionEvent) -> None:
        """Start rotating the cluster's auth key (`rotation`); the daemons carry it on."""
        if not self.unit.is_leader():
            event.fail("run rotate-auth-key on the leader (slurmctld/leader)")
            return
        try:
            secret = get_or_create_auth_key_secret(self, self.slurmctld.key.generate)
            new_kid = self.auth_rotation.begin(secret, self.slurmctld.key.generate())
        except rotation.RotationError as e:
            event.fail(f"cannot rotate the auth key: {e}")
            return
        if (failure := self.converge()) is not None:
            event.fail(f"rotation to {new_kid} started; slurmctld did not apply it yet: {failure}")
            return
        event.set_results(
            {"new-key-id": new_kid, "next": "each daemon loads it; `juju status` shows progress"}
        )

    def _on_secret_remove(self, event: ops.SecretRemoveEvent) -> None:
        """Remove a revision of the keys' secrets that no unit tracks any more.

        Each rotation leaves the former keys in older revisions; Juju says, with this event on
        the leader, once no consumer tracks one of them. The charm reads only the latest.
        """
        if not self.unit.is_leader():
            return  # Only the leader manages the application's secrets.
        try:
            event.remove_revision()
        except ops.ModelError as e:
            logger.warning("cannot remove revision %d of a key secret: %s", event.revision, e)
            return
        what = event.secret.label or event.secret.id
        logger.info("removed revision %d of secret %s: no unit tracks it", event.revision, what)

    # The skeleton's hooks: one reconcile path, statuses from facts.

    def reconcile(self, config: SlurmctldConfig) -> None:
        """Make the controller match the model; a no-op when nothing changed.

        The leader writes the configuration and the integrations' data. With network state
        every other unit runs slurmctld as a backup from the leader's files on the share;
        without it only the leader runs slurmctld.
        """
        if _is_install_hook():
            return  # Install only installs: keys and config wait for the shared filesystem.
        self.open_ports(PortRange.single(SLURMCTLD_PORT))  # Any unit may run it once it leads.
        self.slurmctld.bound_stop_time()
        self._run_exporter(config)
        me = self._share_address()
        if me is None:
            return  # Its host name breaks Slurm's grammar: the status says so.
        if not self._may_configure(config):
            return
        if config.use_network_state:
            hostname, timeout = socket.gethostname(), config.slurmctld_timeout
            self.takeover.check(self.slurmctld, hostname, timeout, self._watch)
        if not self.unit.is_leader():
            self._stand_by(config)
            return
        if config.use_network_state:
            if not self._sees_every_controller():
                self._follow_shared_config()  # Stand by meanwhile, changing nothing.
                return
            ha.move_to_network_state(self.slurmctld)
        memory = self.peer.read()
        auth_key = get_or_create_auth_key_secret(self, self.slurmctld.key.generate)
        key = auth_key.get_content(refresh=True)["key"]
        jwt_secret = credentials.get_or_create_jwt_key_secret(
            self, self.slurmctld.jwt_key.generate
        )
        order, controllers = self._controllers(me, memory)
        if not config.use_network_state:
            controllers = [me]  # The state is on this unit's disk: no other unit can help.
        departed = retire.delete_departed_nodes(
            (n.name for n in memory.departed_nodes or [] if n.name), self.scontrol, self._watch
        )
        known = {p.name: p for p in memory.partitions or [] if p.name}
        integrated = [r.app.name for r in self.model.relations[SLURMD] if r.app is not None]
        partitions = retire.merge_partitions(
            known, self._live_partitions(), integrated, self.scontrol, self._watch
        )
        self.peer.write(
            SlurmctldPeerData(
                partitions=list(partitions.values()),
                departed_nodes=[DepartedNode(name=n) for n in departed],
                controllers=[ControllerSlot(unit=u) for u in order],
            )
        )
        config_digest = self.applied.apply(
            cluster.render_slurm_conf(config, controllers, partitions, self._dbds()),
            cluster.render_cgroup_conf(config),
            key,
            credentials.jwt_key(jwt_secret),
        )
        srun_ports = overrides.srun_port_range(config.slurm_conf_parameters)
        self._publish_controller_data(auth_key, controllers, partitions, config_digest, srun_ports)
        self._share_jwt_key(jwt_secret)
        self.auth_rotation.advance(auth_key, key, backups=config.use_network_state)
        self.rebuild.stop_failed()

    def statuses(self, config: SlurmctldConfig) -> Iterable[ops.StatusBase]:
        """Bad integration data, the daemon's state, and what the controller waits for."""
        yield from self._bad_data()
        if _is_install_hook():
            yield ops.MaintenanceStatus("slurmctld installed; configured once the unit starts")
            return
        if (waiting := self._controller_wait(config)) is not None:
            yield waiting
            return
        if not self.slurmctld.service.is_active():
            reason = systemd.journal_reason(self.slurmctld.daemon) or "see its journal"
            yield ops.BlockedStatus(f"slurmctld is not running: {reason}")
            return
        if self.unit.is_leader():
            memory = self.peer.read()
            if retiring := [p.name for p in memory.partitions or [] if p.retiring and p.name]:
                yield ops.ActiveStatus(f"draining partitions: {', '.join(retiring)}")
            if departed := [n.name for n in memory.departed_nodes or [] if n.name]:
                yield ops.ActiveStatus(f"deleting departed nodes once idle: {', '.join(departed)}")
            if (accounting := self._accounting_status()) is not None:
                yield accounting
            yield from self._default_partition_status(config, memory)
            yield from self.rebuild.statuses()
            key = self.slurmctld.key.get() or ""
            if (rotating := self.auth_rotation.status(key, config.use_network_state)) is not None:
                yield rotating
        yield from self.takeover.statuses()
        yield from self._exporter_status()
        if (states := self._controller_states()) is not None:
            yield ops.ActiveStatus(states)

    def _default_partition_status(
        self, config: SlurmctldConfig, memory: SlurmctldPeerData
    ) -> Iterator[ops.StatusBase]:
        """Say why `default-partition` is not the default partition, when it is set and is not."""
        apps = [r.app.name for r in self.model.relations[SLURMD] if r.app is not None]
        wanted, partitions = config.default_partition, memory.partitions or []
        if status := overrides.default_partition_status(wanted, partitions, apps):
            yield status

    def _bad_data(self) -> Iterator[ops.StatusBase]:
        """Block on data from peers, slurmd or slurmdbd applications the controller cannot use.

        Also on this unit's own host name or address, if Slurm cannot use it as a controller.
        """
        if (own := self._own_host_problem()) is not None:
            yield ops.BlockedStatus(own)
        for problem in self.peer.host_problems():
            yield ops.BlockedStatus(problem)
        for relation in self.model.relations[SLURMD]:
            if problem := self.slurmd.compute_data_problem(relation):
                yield ops.BlockedStatus(problem)
        for app in self._unusable_partitions():
            yield ops.BlockedStatus(f"cannot serve partition of application '{app}'")
        for relation in self.model.relations[SLURMDBD]:
            if problem := self.accounting.slurmdbd_data_problem(relation):
                yield ops.BlockedStatus(problem)

    def _accounting_status(self) -> ops.StatusBase | None:
        """Where accounting goes, or that slurmdbd has not said yet; None without slurmdbd."""
        if self.accounting.relation is None:
            return None
        dbds = self._dbds()
        if not dbds:
            return ops.WaitingStatus("waiting for slurmdbd to publish its address")
        where = f"accounting on slurmdbd {dbds[0].host}:{dbds[0].port_or_default}"
        if len(dbds) > 1:
            where += f", backup {dbds[1].host}"
        return ops.ActiveStatus(where)

    # High availability: the shared filesystem, backups, and each controller's role.

    def _may_configure(self, config: SlurmctldConfig) -> bool:
        """Whether this unit's controller can be configured now; prepare what it needs first.

        Without network state: unless the state already moved to the share (it cannot move
        back). With it: once the checkpoint is a real mount (the leader asks the
        filesystem-client for it); the bridge from slurmctld's primary programs is installed.
        """
        if not config.use_network_state:
            return not self.slurmctld.etc_is_shared()
        self.mount.publish(ha.MOUNT_REQUEST)  # Leader only; written once.
        if self._checkpoint_status() is not None:
            return False
        self.primary_watch.install(self.unit.name, self.charm_dir, WAKE_EVENT)
        grace = fence.grace_seconds(config.slurmctld_timeout)
        self.fence.install(ha.CHECKPOINT, ha.NETWORK_STATE_SAVE_LOCATION, grace, SLURM_USER)
        return self.fence.reason() is None  # Fenced: the watchdog starts slurmctld again.

    def _stand_by(self, config: SlurmctldConfig) -> None:
        """Run a unit besides the leader: a backup on the share, or no controller at all.

        Without network state a second slurmctld would run a second queue of its own (after
        a leader change, the former leader's), so it is stopped.
        """
        if config.use_network_state:
            self._follow_shared_config()
            return
        if (jwt_key := credentials.jwt_key_or_none(self)) is not None:
            self.slurmctld.jwt_key.set(jwt_key)
        if self.slurmctld.service.is_active():
            logger.info("stopping slurmctld: without network state only the leader runs it")
            self.slurmctld.service.stop()

    def _follow_shared_config(self) -> None:
        """Run slurmctld from the leader's files on the share, once they are there."""
        if not ha.shared_config_ready(self.slurmctld, socket.gethostname()):
            logger.info("waiting for the leader's configuration on the shared filesystem")
            return
        if (backup := ha.link_shared_config(self.slurmctld)) is not None:
            logger.info("%s links to the share; its former content is in %s", "/etc/slurm", backup)
        self.applied.follow()
        self.auth_rotation.confirm_standby(self.slurmctld.key.get())

    def _shared_state_status(self) -> ops.StatusBase | None:
        """Why this controller cannot use the shared state: no mount yet, or fenced."""
        if (checkpoint := self._checkpoint_status()) is not None:
            return checkpoint
        if (fenced := self.fence.reason()) is not None:
            return ops.BlockedStatus(f"{ha.FENCED}: {fenced}")
        return None

    def _checkpoint_status(self) -> ops.StatusBase | None:
        """Why the shared filesystem is not usable yet (checked once per dispatch)."""
        if self._checkpoint is None:
            self._checkpoint = (
                ha.mount_status(
                    self.slurmctld,
                    integrated=self.mount.is_joined(),
                    answers=self.mount.answers(),
                ),
            )
        return self._checkpoint[0]

    def _peers_with_address(self) -> int:
        """Count the peer units that shared a valid host name and address."""
        return len(self.peer.hosts())

    def _sees_every_controller(self) -> bool:
        return ha.all_peers_seen(self.app.planned_units(), self._peers_with_address())

    def _controller_wait(self, config: SlurmctldConfig) -> ops.StatusBase | None:
        """Return what keeps this unit's controller from running as it should, if anything."""
        leader = self.unit.is_leader()
        if not config.use_network_state:
            if self.slurmctld.etc_is_shared():
                return ops.BlockedStatus(ha.CANNOT_TURN_OFF)
            return None if leader else ops.BlockedStatus(ha.NEEDS_NETWORK_STATE)
        if (shared_state := self._shared_state_status()) is not None:
            return shared_state
        if leader and not self._sees_every_controller():
            seen, planned = self._peers_with_address() + 1, self.app.planned_units()
            return ops.WaitingStatus(ha.waiting_for_peers(seen, planned))
        if not leader and not ha.shared_config_ready(self.slurmctld, socket.gethostname()):
            return ops.WaitingStatus(ha.WAITING_FOR_LEADER)
        return None

    def _controller_states(self) -> str | None:
        """Each controller's role and state as `scontrol ping` sees them; None if it cannot."""
        try:
            pings = Scontrol(timeout=PING_TIMEOUT).ping()
        except SlurmOpsError as e:
            logger.info("cannot ask the controllers for their state: %s", e.stderr or e.message)
            return None
        return ha.controller_states(pings, socket.gethostname()) or None

    def _run_exporter(self, config: SlurmctldConfig) -> None:
        """Keep the Slurm exporter running on this unit, whatever its role (`exporter_service`)."""
        try:
            self.exporter.install(config.metrics_interval, config.metrics_per_user)
        except (ValueError, SlurmOpsError) as e:
            logger.warning("cannot run the Slurm exporter (the next event retries): %s", e)

    def _exporter_status(self) -> Iterator[ops.StatusBase]:
        if not self.exporter.service.is_active():
            reason = systemd.journal_reason(exporter_service.SERVICE_UNIT) or "see its journal"
            yield ops.BlockedStatus(f"the Slurm exporter is not running: {reason}")

    # Waking up within seconds of what the controller waits for.

    def _watch(self, kind: str, name: str, query: list[str]) -> None:
        """Start a watcher that dispatches `slurmctld-wake` once `query` prints nothing.

        A watcher that cannot start is logged: the next event (update-status at the
        latest) checks again and tries to start it again.
        """
        try:
            unit = wake.watcher_name(f"slurmctld-wake-{kind}", name)
            dispatch = wake.dispatch_command(self.unit.name, self.charm_dir, WAKE_EVENT)
            if wake.wake_when_silent(
                unit, query, dispatch, f"Wake {self.unit.name}: {kind} {name} idle"
            ):
                logger.info("watching %s %s: %s wakes the charm once it is idle", kind, name, unit)
        except (ValueError, SlurmOpsError) as e:
            logger.warning("cannot watch %s %s (the next event checks again): %s", kind, name, e)

    # Partitions published by slurmd applications.

    def _published(self) -> Iterator[tuple[int, str, ComputeData]]:
        """Yield each integrated slurmd application's relation id, name and complete data."""
        for relation in self.model.relations[SLURMD]:
            data = self.slurmd.compute_data(relation)
            if relation.app is not None and data is not None and data.is_complete:
                yield relation.id, relation.app.name, data

    def _live_partitions(self) -> dict[str, PartitionEntry]:
        """Partitions of the slurmd applications integrated now, with usable data."""
        live: dict[str, PartitionEntry] = {}
        for relation_id, app, data in self._published():
            try:
                live[app] = cluster.partition_record(
                    app, data.partition, data.nodeset, relation_id
                )
            except ValueError as e:
                logger.warning("ignoring partition of %s: %s", app, e)
        return live

    def _serving_partitions(self) -> list[str]:
        """Return the partitions of slurmd applications the controller serves (not retiring)."""
        memory = self.peer.read()
        return sorted(p.name for p in memory.partitions or [] if p.name and not p.retiring)

    def _unusable_partitions(self) -> list[str]:
        """List the slurmd applications whose partition data the controller cannot serve."""
        unusable: list[str] = []
        for _, app, data in self._published():
            try:
                cluster.partition_record(app, data.partition, data.nodeset)
            except ValueError:
                unusable.append(app)
        return unusable

    # Accounting and the JWT key.

    def _dbds(self) -> list[DbdEntry]:
        """Return the slurmdbd daemons to account to, primary first; none without usable data."""
        relation = self.accounting.relation
        if relation is None:
            return []
        data = self.accounting.slurmdbd_data(relation)
        return data.reachable() if data is not None else []

    def _share_jwt_key(self, jwt_secret: ops.Secret) -> None:
        """Grant the JWT key to slurmdbd, which verifies tokens too; to no other integration."""
        for relation in self.model.relations[SLURMDBD]:
            self.accounting.share_jwt_key(relation, jwt_secret)

    # Controllers and the auth key.

    def _share_address(self) -> cluster.Controller | None:
        """Share this unit's hostname and address with the other controllers.

        None, sharing nothing, when Slurm's grammar refuses them (`_own_host_problem`).
        """
        try:
            host = self._own_host()
        except ValidationError as e:
            logger.error("this unit cannot be a controller: %s", e.errors()[0]["msg"])
            return None
        self.peer.share_host(host)
        return cluster.Controller(str(host.hostname), str(host.address))

    def _own_host(self) -> ControllerHost:
        """Return this unit's host name and address, checked as peers' (ValidationError)."""
        return ControllerHost(hostname=socket.gethostname(), address=self._bind_address())

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

    def _controllers(
        self, me: cluster.Controller, memory: SlurmctldPeerData
    ) -> tuple[list[str], list[cluster.Controller]]:
        """Return the controller units in join order, and the controllers, primary first.

        The leader keeps the join order in the peer application databag. Until the peer
        relation exists this unit is the only controller.
        """
        present = {self.unit.name: me}
        for unit, host in self.peer.hosts().items():  # Only data Slurm's grammar accepts.
            present[unit] = cluster.Controller(str(host.hostname), str(host.address))
        recorded = [c.unit for c in memory.controllers or [] if c.unit]
        order = cluster.order_controllers(recorded, list(present))
        return order, [present[name] for name in order]

    def _bind_address(self) -> str:
        binding = self.model.get_binding(SLURMD)
        if binding is None or binding.network.bind_address is None:
            raise RuntimeError("no bind address for the slurmd endpoint yet")
        return str(binding.network.bind_address)

    def _publish_controller_data(
        self,
        auth_key: ops.Secret,
        controllers: list[cluster.Controller],
        partitions: dict[str, PartitionEntry],
        config_digest: str,
        srun_ports: tuple[int, int] | None,
    ) -> None:
        """Share the auth key, the controllers and the applied config's digest with every daemon.

        Login nodes, slurmdbd and the REST API get them at once; a slurmd application once
        its partition is in slurm.conf. A new `config_digest` (published only once slurmctld
        accepted the configuration) gives each of them a relation-changed, so a daemon that
        failed to start with the former configuration retries now. Where srun runs (login and
        compute nodes) the units also get `SrunPortRange`, to open it.
        """
        try:
            entries = [
                ControllerEntry(hostname=c.hostname, address=c.address, port=SLURMCTLD_PORT)
                for c in controllers
            ]
        except ValueError as e:
            logger.error("not publishing controllers that break Slurm's grammar: %s", e)
            return
        srun = PortRangeEntry(first=srun_ports[0], last=srun_ports[1]) if srun_ports else None
        for relation in self.model.relations[SLURMD]:
            if relation.app is not None and relation.app.name in partitions:
                self.slurmd.publish_controller_data(
                    relation, auth_key, entries, config_digest, srun
                )
        for relation in self.model.relations[LOGIN_NODE]:
            self.login_nodes.publish_controller_data(
                relation, auth_key, entries, config_digest, srun
            )
        for relation in self.model.relations[SLURMDBD]:
            self.accounting.publish_controller_data(relation, auth_key, entries, config_digest)
        for relation in self.model.relations[SLURMRESTD]:
            self.rest_api.publish_controller_data(relation, auth_key, entries, config_digest)


def _is_install_hook() -> bool:
    """Whether this dispatch is Juju's install hook, which only installs Slurm's packages.

    Keys and configuration come with `start` and later events, once the shared filesystem of
    network state can be there. Juju names the hook in `JUJU_DISPATCH_PATH`.
    """
    return os.environ.get("JUJU_DISPATCH_PATH") == "hooks/install"


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmctldCharm)
