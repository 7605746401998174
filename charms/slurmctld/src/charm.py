#!/usr/bin/env python3
"""Charm for slurmctld, the controller of a configless Slurm cluster of dynamic nodes."""

import logging
import os
import socket  # noqa: F401  # Unit tests name the host through `charm.socket`.
from collections.abc import Iterable, Iterator
from typing import Any

import accounting
import cluster
import credentials
import daemons
import exporter_service
import fence
import ha
import major_upgrade
import native_metrics
import ops
import overrides
import partitions
import rebuild
import retire
import rotation
import scaling_view
import takeover
import toolkit
from applied import AppliedConfig
from config import SlurmctldConfig
from hpc_libs.charm.base import SlurmCharm, main
from hpc_libs.charm.ports import PortRange
from hpc_libs.charm.upgrade import Plan, list_backups
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.cos_agent import CosAgentProvider, scrape_job
from hpc_libs.interfaces.mount_info import MountInfoProvider
from hpc_libs.interfaces.sackd import SackdRequirer
from hpc_libs.interfaces.slurmctld_peer import (
    ControllerSlot,
    DepartedNode,
    SlurmctldPeer,
    SlurmctldPeerData,
)
from hpc_libs.interfaces.slurmd import SlurmdRequirer, get_or_create_auth_key_secret
from hpc_libs.interfaces.slurmdbd import SlurmdbdRequirer
from hpc_libs.interfaces.slurmrestd import SlurmrestdRequirer
from hpc_libs.machine import systemd
from hpc_libs.slurm.base import SLURM_USER
from hpc_libs.slurm.naming import RETIRE_REASON, node_name
from hpc_libs.slurm.ports import SLURMCTLD_PORT
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager
from primary_watch import PrimaryWatch

logger = logging.getLogger(__name__)

PEER = "slurmctld-peer"
SLURMD = "slurmd"
LOGIN_NODE = "login-node"
SLURMDBD = "slurmdbd"
SLURMRESTD = "slurmrestd"
MOUNT = "mount"
WAKE_EVENT = "slurmctld-wake"
"""Hook name the background watchers dispatch (`hooks/slurmctld-wake`)."""


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
            scrape_jobs=self._scrape_jobs,
            log_files=[cluster.SLURMCTLD_LOG_FILE],
        )
        self.scontrol = Scontrol()
        self.applied = AppliedConfig(self, self.slurmctld, self.scontrol)
        self.peer = SlurmctldPeer(self, PEER)
        self.slurmd = SlurmdRequirer(self, SLURMD)
        self.login_nodes = SackdRequirer(self, LOGIN_NODE)
        self.slurmdbd = SlurmdbdRequirer(self, SLURMDBD)
        self.rest_api = SlurmrestdRequirer(self, SLURMRESTD)
        self.mount = MountInfoProvider(self, MOUNT)
        self.exporter = exporter_service.ExporterService(self.slurmctld.root)
        self.daemons = daemons.Daemons(self.slurmd, self.login_nodes, self.slurmdbd, self.rest_api)
        self.auth_rotation = rotation.AuthKeyRotation(
            self,
            [self.slurmd, self.login_nodes, self.slurmdbd, self.rest_api],
            PEER,
            wake=[self.on[LOGIN_NODE].relation_changed, self.on[SLURMRESTD].relation_changed],
        )
        self.takeover = takeover.TakeoverRepair(
            self, self.scontrol, slurm_user=SLURM_USER, wake_event=WAKE_EVENT
        )
        self.watch = retire.watcher(self.unit.name, self.charm_dir, WAKE_EVENT)
        self.partitions = partitions.Partitions(self.slurmd)
        self.native_metrics = native_metrics.NativeMetrics(
            self.peer,
            [("login unit", self.login_nodes), ("REST unit", self.rest_api)],
            self.scontrol,
            lambda: self.installer.version,
        )
        self.accounting = accounting.Accounting(self.slurmdbd)
        self.machinery = ha.Machinery(
            charm=self,
            manager=self.slurmctld,
            peer=self.peer,
            mount=self.mount,
            primary_watch=PrimaryWatch(self.slurmctld.root),
            fence=fence.Fence(self.slurmctld.root),
            applied=self.applied,
            auth_rotation=self.auth_rotation,
            takeover=self.takeover,
            wake_event=WAKE_EVENT,
            bind_endpoint=SLURMD,
            slurm_version=self.running_slurm,
        )
        self._placement: ha.Placement | None = None
        self.rebuild = rebuild.Rebuild(self, self.peer, self._serving_partitions)
        framework.observe(self.on[SLURMD].relation_departed, self._on_slurmd_unit_departed)
        framework.observe(self.on.resume_action, self._on_resume_action)
        framework.observe(self.on.token_action, self._on_token_action)
        framework.observe(self.on.set_node_state_action, self._on_set_node_state_action)
        framework.observe(self.on.show_current_config_action, self._on_show_current_config)
        framework.observe(self.on.rotate_jwt_key_action, self._on_rotate_jwt_key_action)
        framework.observe(self.on.rotate_auth_key_action, self._on_rotate_auth_key_action)
        framework.observe(self.on.secret_remove, self._on_secret_remove)
        framework.observe(self.on.list_backups_action, self._on_list_backups_action)
        framework.observe(self.on.scaling_view_action, self._on_scaling_view_action)
        self.reconcile_on(
            self.on.slurmctld_wake,
            self.on[PEER].relation_changed,
            self.on[PEER].relation_departed,
            self.on[SLURMD].relation_changed,
            self.slurmd.on.slurmd_disconnected,
            self.on[LOGIN_NODE].relation_joined,
            self.on[LOGIN_NODE].relation_changed,  # A unit's release (native metrics).
            self.on[SLURMDBD].relation_created,
            self.on[SLURMDBD].relation_changed,
            self.slurmdbd.on.slurmdbd_disconnected,
            self.on[SLURMRESTD].relation_joined,
            self.on[SLURMRESTD].relation_changed,
            self.on[MOUNT].relation_created,
            self.on[MOUNT].relation_changed,
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
            self.peer.write(retire.with_departed(self.peer.read(), name))
        self.converge()

    def _on_token_action(self, event: ops.ActionEvent) -> None:
        toolkit.token(event, self.scontrol)

    def _on_resume_action(self, event: ops.ActionEvent) -> None:
        toolkit.resume(event, self.scontrol)

    def _on_set_node_state_action(self, event: ops.ActionEvent) -> None:
        toolkit.set_node_state(event, self.scontrol)

    def _on_show_current_config(self, event: ops.ActionEvent) -> None:
        toolkit.show_current_config(event, self.slurmctld.etc_dir)

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

    def _on_list_backups_action(self, event: ops.ActionEvent) -> None:
        list_backups(event, self.slurmctld.root)

    def _on_scaling_view_action(self, event: ops.ActionEvent) -> None:
        scaling_view.run(event)

    def _on_secret_remove(self, event: ops.SecretRemoveEvent) -> None:
        if self.unit.is_leader():  # Only the leader manages the application's secrets.
            toolkit.remove_unused_revision(event)

    # The skeleton's hooks: one reconcile path, statuses from facts.

    def reconcile(self, config: SlurmctldConfig) -> None:
        """Make the controller match the model; a no-op when nothing changed.

        In order: ports, the exporter and the cos-agent jobs, placement (where and how
        slurmctld runs: a unit besides the leader stops here), then the leader's work:
        partitions, departed nodes, the rendered files, what the daemons are told, the key
        rotation.
        """
        if _is_install_hook():
            return  # Install only installs: keys and config wait for the shared filesystem.
        self.open_ports(PortRange.single(SLURMCTLD_PORT))  # Any unit may run it once it leads.
        self.slurmctld.bound_stop_time()
        self._run_exporter(config)
        self.cos_agent.publish()  # The Slurm release may have changed (upgrade, first install).
        placement = self._placed(config)
        me = placement.share_address()
        if me is None:
            return  # Its host name breaks Slurm's grammar: the status says so.
        if not placement.prepare():
            return
        if not self.unit.is_leader():
            placement.stand_by()
            return
        if not placement.lead():
            return
        memory = self.peer.read()
        auth_key = get_or_create_auth_key_secret(self, self.slurmctld.key.generate)
        key = auth_key.get_content(refresh=True)["key"]
        jwt_secret = credentials.get_or_create_jwt_key_secret(
            self, self.slurmctld.jwt_key.generate
        )
        order, controllers = placement.controllers(me, memory)
        raised = self._upgrade_slurmctld_timeout(config, controllers)
        controllers = placement.serving(me, controllers)
        departed = retire.delete_departed_nodes(
            retire.departed_names(memory), self.scontrol, self.watch
        )
        served = self.partitions.serve(memory, self.scontrol, self.watch, config.future_nodes)
        remembered = SlurmctldPeerData(
            partitions=list(served.values()),
            departed_nodes=[DepartedNode(name=n) for n in departed],
            controllers=[ControllerSlot(unit=u) for u in order],
            native_metrics=memory.native_metrics,
            upgrade_slurmctld_timeout=memory.upgrade_slurmctld_timeout,
            rollouts=memory.rollouts,
        )
        self.peer.write(remembered)
        native = self.native_metrics.decision(config)
        timeout = major_upgrade.upgrade_timeout(config.slurmctld_timeout, raised)
        config_digest = self.applied.apply(
            cluster.render_slurm_conf(
                config,
                controllers,
                served,
                self.accounting.dbds(),
                placement.conf_settings(),
                native_metrics_on=native.on,
                slurmctld_timeout=timeout,
            ),
            cluster.render_cgroup_conf(config),
            key,
            credentials.jwt_key(jwt_secret),
            standby=controllers[0].hostname != me.hostname,
        )
        self.peer.share_slurmctld_timeout(timeout)
        # Applied: now every controller unit offers the endpoint's jobs, or withdraws them,
        # and the controllers may upgrade with SlurmctldTimeout raised (or it is restored).
        applied = {"native_metrics": native.on, "upgrade_slurmctld_timeout": raised}
        self.peer.write(remembered.model_copy(update=applied))
        self.cos_agent.publish()
        srun_ports = overrides.srun_port_range(config.slurm_conf_parameters)
        self.daemons.publish(auth_key, controllers, served, config_digest, srun_ports)
        self.accounting.share_jwt_key(jwt_secret)
        self.auth_rotation.advance(auth_key, key, backups=placement.network_state)
        self.rebuild.reconcile()

    def statuses(self, config: SlurmctldConfig) -> Iterable[ops.StatusBase]:
        """Each component's word, in a fixed order (see the README's "How this charm is built")."""
        placement = self._placed(config)
        yield from placement.problems()
        yield from self.partitions.problems()
        yield from self.accounting.problems()
        if _is_install_hook():
            yield ops.MaintenanceStatus("slurmctld installed; configured once the unit starts")
            return
        if (waiting := placement.wait_status()) is not None:
            yield waiting
            return
        if not self.slurmctld.service.is_active():
            reason = systemd.journal_reason(self.slurmctld.daemon) or "see its journal"
            yield ops.BlockedStatus(f"slurmctld is not running: {reason}")
            return
        if self.unit.is_leader():
            memory = self.peer.read()
            yield from self.partitions.draining(memory)
            if departed := retire.departed_names(memory):
                yield ops.ActiveStatus(f"deleting departed nodes once idle: {', '.join(departed)}")
            if (held := self.native_metrics.decision(config).held_by) is not None:
                yield ops.ActiveStatus(held)
            if (accounting := self.accounting.status()) is not None:
                yield accounting
            yield from self.partitions.default_status(memory, config.default_partition)
            yield from self.rebuild.statuses()
            key = self.slurmctld.key.get() or ""
            if (rotating := self.auth_rotation.status(key, placement.network_state)) is not None:
                yield rotating
        yield from self.takeover.statuses()
        yield from self._exporter_status()
        if (roles := placement.role_status()) is not None:
            yield roles

    def upgrade_waits_for(self, target: str) -> str | None:
        """Every slurmdbd in use, then the controllers before this one (`major_upgrade`)."""
        return major_upgrade.waits_for(target, self.accounting.dbds(), self.peer, self.unit.name)

    def upgrade_note(self) -> str | None:
        """Say that SlurmctldTimeout is raised while the controllers upgrade."""
        if (raised := self.peer.read().upgrade_slurmctld_timeout) is None:
            return None
        return f"SlurmctldTimeout {raised} s during the upgrade"

    def _upgrade_slurmctld_timeout(
        self, config: SlurmctldConfig, controllers: list[ha.Controller]
    ) -> int | None:
        """Return the SlurmctldTimeout raised for the controllers' turn, or None.

        From every controller unit's version, serving or not (`ha.Placement.controllers`).
        """
        plan = self.major_upgrade.plan(self.installer.version, config.slurm_major)
        versions = [c.version for c in controllers if c.version]
        if not major_upgrade.controllers_turn(plan.target, self.accounting.dbds(), versions):
            return None
        return major_upgrade.upgrade_timeout(
            config.slurmctld_timeout, major_upgrade.UPGRADE_SLURMCTLD_TIMEOUT
        )

    def before_upgrade(self, plan: Plan) -> None:
        """Archive StateSaveLocation before slurmctld converts it (`major_upgrade`)."""
        config = self.valid_config()
        network = config is not None and self._placed(config).network_state
        major_upgrade.archive_state(self.slurmctld, plan, network_state=network)

    def _placed(self, config: SlurmctldConfig) -> ha.Placement:
        """Placement for this dispatch, chosen once (`ha.placement` reads use-network-state)."""
        if self._placement is None:
            self._placement = ha.placement(
                self.machinery,
                use_network_state=config.use_network_state,
                slurmctld_timeout=config.slurmctld_timeout,
                running_timeout=major_upgrade.upgrade_timeout(
                    config.slurmctld_timeout, self.peer.read().upgrade_slurmctld_timeout
                ),
            )
        return self._placement

    def _run_exporter(self, config: SlurmctldConfig) -> None:
        """Keep the Slurm exporter running on this unit, whatever its role (`exporter_service`)."""
        try:
            private = config.slurm_conf_parameters.get("privatedata", [])
            self.exporter.install(config.metrics_interval, config.metrics_per_user, private)
        except (ValueError, SlurmOpsError) as e:
            logger.warning("cannot run the Slurm exporter (the next event retries): %s", e)

    def _scrape_jobs(self) -> list[dict[str, Any]]:
        """Return the exporter's job, and slurmctld's own endpoint's where the leader has it on."""
        jobs = [scrape_job("slurm_exporter", exporter_service.PORT)]
        if (config := self.valid_config()) is not None:
            jobs += native_metrics.scrape_jobs(bool(self.peer.read().native_metrics), config)
        return jobs

    def _exporter_status(self) -> Iterator[ops.StatusBase]:
        if not self.exporter.service.is_active():
            reason = systemd.journal_reason(exporter_service.SERVICE_UNIT) or "see its journal"
            yield ops.BlockedStatus(f"the Slurm exporter is not running: {reason}")

    def _serving_partitions(self) -> list[str]:
        """Return the partitions of slurmd applications the controller serves (not retiring)."""
        return partitions.serving(self.peer.read())


def _is_install_hook() -> bool:
    """Whether this dispatch is Juju's install hook, which only installs Slurm's packages.

    Keys and configuration come with `start` and later events, once the shared filesystem of
    network state can be there. Juju names the hook in `JUJU_DISPATCH_PATH`.
    """
    return os.environ.get("JUJU_DISPATCH_PATH") == "hooks/install"


if __name__ == "__main__":  # pragma: nocover
    main(SlurmctldCharm)
