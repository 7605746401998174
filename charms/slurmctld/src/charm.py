#!/usr/bin/env python3
"""Charm for slurmctld, the controller of a configless Slurm cluster of dynamic nodes."""

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import accounting
import actions
import associations
import controllers
import credentials
import departure
import exporter_service
import facts
import lost_jobs
import major_upgrade
import metrics_auth
import native_metrics
import ops
import overrides
import partitions
import placement
import publish
import rebuild
import render
import retire
import rotation
import takeover
from applied import AppliedConfig
from config import SlurmctldConfig
from facts import Facts
from hpc_libs.charm.base import SlurmCharm, main
from hpc_libs.charm.ports import PortRange
from hpc_libs.charm.upgrade import Plan
from hpc_libs.interfaces.cos_agent import CosAgentProvider, scrape_job
from hpc_libs.interfaces.mount_info import MountInfoProvider
from hpc_libs.interfaces.sackd import SackdRequirer
from hpc_libs.interfaces.slurmctld_peer import SlurmctldPeer, SlurmctldPeerData
from hpc_libs.interfaces.slurmd import SlurmdRequirer
from hpc_libs.interfaces.slurmdbd import SlurmdbdRequirer
from hpc_libs.interfaces.slurmrestd import SlurmrestdRequirer
from hpc_libs.slurm.ports import SLURMCTLD_PORT
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager

logger = logging.getLogger(__name__)

PEER = "slurmctld-peer"
SLURMD = "slurmd"
LOGIN_NODE = "login-node"
SLURMDBD = "slurmdbd"
SLURMRESTD = "slurmrestd"
MOUNT = "mount"
WAKE_EVENT = "slurmctld-wake"
"""Hook name the background watchers dispatch (`hooks/slurmctld-wake`)."""
INSTALLED = "slurmctld installed; configured once the unit starts"

StatusStep = tuple[Callable[[Facts], Iterable[ops.StatusBase]], bool]
"""What says its statuses, and whether the list stops once it said one."""


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
            self, scrape_jobs=self._scrape_jobs, log_files=[render.SLURMCTLD_LOG_FILE]
        )
        self.scontrol = Scontrol()
        # First: its observers run before any reconcile of the same departure hook.
        self.departure = departure.Departure(
            self, self.slurmctld, self.scontrol, tuple(self.meta.relations)
        )
        self.applied = AppliedConfig(self, self.slurmctld, self.scontrol)
        self.peer = SlurmctldPeer(self, PEER)
        self.slurmd = SlurmdRequirer(self, SLURMD)
        self.login_nodes = SackdRequirer(self, LOGIN_NODE)
        self.slurmdbd = SlurmdbdRequirer(self, SLURMDBD)
        self.rest_api = SlurmrestdRequirer(self, SLURMRESTD)
        self.mount = MountInfoProvider(self, MOUNT)
        self.exporter = exporter_service.ExporterService(self.slurmctld.root)
        self.daemons = publish.Daemons(self.slurmd, self.login_nodes, self.slurmdbd, self.rest_api)
        self.auth_rotation = rotation.AuthKeyRotation(
            self,
            [self.slurmd, self.login_nodes, self.slurmdbd, self.rest_api],
            PEER,
            wake=[self.on[LOGIN_NODE].relation_changed, self.on[SLURMRESTD].relation_changed],
        )
        self.takeover = takeover.TakeoverRepair(self, self.slurmctld, self.scontrol, WAKE_EVENT)
        self.lost_jobs = lost_jobs.LostJobs(self, self.slurmctld, self.scontrol)
        self.retirement = retire.Retirement(self, SLURMD, self.peer, self.scontrol, WAKE_EVENT)
        self.partitions = partitions.Partitions(self.slurmd, self.scontrol, self.retirement.watch)
        self.native_metrics = native_metrics.NativeMetrics(
            self.peer,
            [("login unit", self.login_nodes), ("REST unit", self.rest_api)],
            self.scontrol,
            lambda: self.installer.version,
        )
        self.metrics_auth = metrics_auth.MetricsAuth(self, self.slurmctld)
        self.accounting = accounting.Accounting(self.slurmdbd)
        self.associations = associations.Associations(self, self.peer)
        self.placement = placement.Placement(
            self, self.slurmctld, self.peer, self.mount, WAKE_EVENT
        )
        self.rebuild = rebuild.Rebuild(self, self.peer, lambda: self.peer.read().serving())
        self.actions = actions.Actions(self, self.slurmctld, self.scontrol, self.auth_rotation)
        self._facts: Facts | None = None
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

    # The skeleton's hooks: one reconcile path, statuses from facts.

    def reconcile(self, config: SlurmctldConfig) -> None:
        """Make the controller match the model; a no-op when nothing changed.

        In order: ports, the exporter and the cos-agent jobs, the takeover check and
        placement (where and how slurmctld runs: a unit besides the leader follows the
        leader's files and stops here), then the leader's work: the keys, departed nodes,
        partitions, the rendered files, what the daemons are told, the accounts document
        (once slurm.conf accounts to slurmdbd), the key rotation, the rolling rebuild.
        """
        if _is_install_hook():
            return  # Install only installs: keys and config wait for the shared filesystem.
        if self.departure.left:
            return  # Its slurmctld stays stopped: the machine goes with the unit.
        facts = self._facts = self._gather(config)
        self.open_ports(PortRange.single(SLURMCTLD_PORT))  # Any unit may run it once it leads.
        self.slurmctld.bound_stop_time()
        self.exporter.reconcile(facts)
        self._publish_telemetry(facts)  # The Slurm release may have changed (an upgrade).
        self.takeover.reconcile(facts)
        self.lost_jobs.reconcile(facts)  # Before placement may restart slurmctld (module doc).
        turn = self.placement.reconcile(facts)
        if turn is placement.Turn.FOLLOW:
            self._follow()
        if turn is not placement.Turn.LEAD:
            return
        keys = credentials.keys(self, self.slurmctld)
        facts = self._facts = facts.with_keys(keys)
        plan = self.major_upgrade.plan(self.installer.version, config.slurm_major)
        versions = (c.version for c in facts.controllers)
        raised = major_upgrade.raised_timeout(
            plan.target, facts.dbds, versions, config.slurmctld_timeout
        )
        departed = self.retirement.reconcile(facts)
        served = self.partitions.reconcile(facts)
        remembered = facts.remembered(served.values(), departed)
        self._remember(remembered)
        facts = facts.remembering(remembered)  # Its `served` are the partitions to render.
        timeout = major_upgrade.upgrade_timeout(config.slurmctld_timeout, raised)
        native = self.native_metrics.reconcile(facts)
        if native.on and native_metrics.private(config):
            # The token check's key and file exist before slurm.conf includes them.
            native = native_metrics.Decision(self.metrics_auth.prepare())
        strategy = self.placement.strategy(facts)
        serving = strategy.serving(facts)
        conf = render.render_slurm_conf(
            config,
            serving,
            facts.served,
            facts.dbds,
            strategy.conf_settings(),
            native_metrics_on=native.on,
            slurmctld_timeout=timeout,
        )
        config_digest = self.applied.apply(
            conf,
            render.render_cgroup_conf(config),
            keys.auth_key,
            credentials.jwt_key(keys.jwt_secret),
            standby=serving[0].hostname != facts.hostname,
        )
        self._facts = self.facts(config).applying(keys.auth_key)
        self.peer.share_slurmctld_timeout(timeout)
        # Applied: now every controller unit offers the endpoint's jobs, or withdraws them,
        # the controllers may upgrade with SlurmctldTimeout raised (or it is restored), and
        # the others follow the files the leader changed (`config_digest` is their event).
        applied = {
            "native_metrics": native.on,
            "upgrade_slurmctld_timeout": raised,
            "config_digest": config_digest,
        }
        self._remember(remembered.model_copy(update=applied))
        self._publish_telemetry(self.facts(config))
        srun_ports = overrides.srun_port_range(config.slurm_conf_parameters)
        self.daemons.publish(keys.auth_secret, serving, facts.served, config_digest, srun_ports)
        self.accounting.reconcile(facts)
        if (applied := self.associations.reconcile(facts)) is not None:
            self._remember(self.facts(config).memory.model_copy(update=applied))
        self.auth_rotation.reconcile(facts)
        if (kept := self.rebuild.reconcile(self.facts(config))) is not None:
            self._remember(kept)

    def statuses(self, config: SlurmctldConfig) -> Iterable[ops.StatusBase]:
        """Each component's word, in the README's order (`_status_order`)."""
        facts = self.facts(config)
        for say, stops in self._status_order():
            said = list(say(facts))
            yield from said
            if stops and said:
                return

    def _status_order(self) -> tuple[StatusStep, ...]:
        """Return the README's numbered statuses ("How this charm is built"), in order."""
        return (
            (lambda _: self.departure.statuses(), True),  # 0. the unit left
            (self.placement.problems, False),  # 1. host data Slurm cannot use
            (self.partitions.problems, False),  # 2. slurmd data
            (self.accounting.problems, False),  # 3. slurmdbd data
            (_installing, True),  # 4. the install hook
            (self.placement.statuses, True),  # 5. placement's wait
            (self.applied.statuses, True),  # 6. slurmctld not running
            (self.retirement.statuses, False),  # 7. the leader's: retiring,
            (self.native_metrics.statuses, False),  # native metrics held,
            (lambda _: self.metrics_auth.statuses(), False),  # or without their token,
            (self.associations.statuses, False),  # the accounts document,
            (self.accounting.statuses, False),  # accounting's target,
            (self.partitions.statuses, False),  # the default partition,
            (self.rebuild.statuses, False),  # the rollouts,
            (self.auth_rotation.statuses, False),  # the key rotation
            (self.takeover.statuses, False),  # 8. the takeover repairs,
            (self.lost_jobs.statuses, False),  # the jobs a takeover lost,
            (self.exporter.statuses, False),  # the exporter,
            (self._roles, False),  # each controller's role
        )

    def upgrade_waits_for(self, target: str) -> str | None:
        """Every slurmdbd in use, then the controllers before this one (`major_upgrade`)."""
        return major_upgrade.waits_for(target, self.accounting.dbds(), self.peer, self.unit.name)

    def upgrade_note(self) -> str | None:
        """Say that SlurmctldTimeout is raised while the controllers upgrade."""
        config = self.valid_config()
        if (
            config is None
            or (raised := self.facts(config).memory.upgrade_slurmctld_timeout) is None
        ):
            return None
        return f"SlurmctldTimeout {raised} s during the upgrade"

    def before_upgrade(self, plan: Plan) -> None:
        """Archive StateSaveLocation before slurmctld converts it (`major_upgrade`)."""
        config = self.valid_config()
        network = config is not None and config.use_network_state
        major_upgrade.archive_state(self.slurmctld, plan, network_state=network)

    # The facts of a pass, and the calls between components.

    def facts(self, config: SlurmctldConfig) -> Facts:
        """Return this pass's facts: those the reconcile gathered, or gathered now."""
        if self._facts is None:
            self._facts = self._gather(config)
        return self._facts

    def _gather(self, config: SlurmctldConfig) -> Facts:
        binding = self.model.get_binding(SLURMD)
        address = binding.network.bind_address if binding is not None else None
        return facts.gather(
            config,
            self.unit,
            self.peer,
            address=address and str(address),
            version=self.running_slurm(),
            dbds=self.accounting.dbds(),
            applied_key=self.slurmctld.key.get() or "",
        )

    def _remember(self, memory: SlurmctldPeerData) -> None:
        """Write the peer memory (leader), and keep it as this pass's facts."""
        self.peer.write(memory)
        if self._facts is not None:
            self._facts = self._facts.remembering(memory)

    def _follow(self) -> None:
        """Run slurmctld as a backup from the leader's files; confirm the key it runs with."""
        if (timeout := self.applied.follow()) is not None:
            self.peer.share_slurmctld_timeout(timeout)
        self.auth_rotation.confirm_standby(self.slurmctld.key.get())

    def _roles(self, facts: Facts) -> Iterator[ops.StatusBase]:
        if (roles := controllers.role_status(facts.hostname)) is not None:
            yield roles

    def _publish_telemetry(self, facts: Facts) -> None:
        """Offer the collector its jobs, with the native ones' token written first (if any)."""
        config = facts.config
        needed = bool(facts.memory.native_metrics) and native_metrics.asked(config)
        self.metrics_auth.reconcile(needed and native_metrics.private(config))
        self.cos_agent.publish()

    def _scrape_jobs(self) -> list[dict[str, Any]]:
        """Return the exporter's job, and slurmctld's own endpoint's where the leader has it on."""
        jobs = [scrape_job("slurm_exporter", exporter_service.PORT)]
        if (config := self.valid_config()) is not None:
            leader_on = bool(self.facts(config).memory.native_metrics)
            jobs += native_metrics.scrape_jobs(leader_on, config)
        return jobs


def _installing(facts: Facts) -> Iterator[ops.StatusBase]:
    """Say that the install hook only installed (keys and config come with `start`)."""
    if _is_install_hook():
        yield ops.MaintenanceStatus(INSTALLED)


def _is_install_hook() -> bool:
    """Whether this dispatch is Juju's install hook, which only installs Slurm's packages.

    Keys and configuration come with `start` and later events, once the shared filesystem of
    network state can be there. Juju names the hook in `JUJU_DISPATCH_PATH`.
    """
    return os.environ.get("JUJU_DISPATCH_PATH") == "hooks/install"


if __name__ == "__main__":  # pragma: nocover
    main(SlurmctldCharm)
