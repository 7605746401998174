#!/usr/bin/env python3
"""Charm for slurmd: every unit a Slurm dynamic node, every application a partition."""

import hashlib
import json
import logging
import time
from collections.abc import Iterable
from typing import Any

import departure
import hardware
import health
import node
import ops
import reboot
from config import SlurmdConfig, parse_node_parameters, partition_data
from hpc_libs.charm.base import SlurmCharm, main
from hpc_libs.charm.member import WAITING_FOR_SLURMCTLD, ClusterMember
from hpc_libs.charm.ports import PortRange
from hpc_libs.charm.upgrade import controllers_wait_reason
from hpc_libs.errors import ConfigError, IntegrationError, SlurmOpsError
from hpc_libs.interfaces.cos_agent import CosAgentProvider
from hpc_libs.interfaces.slurmd import ControllerData, SlurmdProvider
from hpc_libs.machine import systemd
from hpc_libs.slurm.naming import REREGISTER_REASON, node_name
from hpc_libs.slurm.ports import SLURMD_PORT
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmd import SlurmdManager

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"
REBOOT_WATCH_S = 600
"""How long after `start` (a boot) the reconcile looks for slurmctld's DOWN for that boot."""


class SlurmdCharm(SlurmCharm[SlurmdConfig]):
    """Operate slurmd as a dynamic node of the cluster slurmctld serves."""

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        self.slurmd = SlurmdManager()
        super().__init__(framework, config_type=SlurmdConfig, manager=self.slurmd)
        self.cos_agent = CosAgentProvider(self)
        # `registered`: the node configuration slurmctld holds for this node (JSON, "" when
        # it never enlisted). `parameters`: the operator's parsed node-config (JSON).
        # `departure`: what happened to its jobs when the unit left the cluster (`member`
        # keeps `left` and `applied`, the fingerprint slurmd was last (re)started with).
        # `hardware`: this machine's last successful detection (JSON, with its Gres);
        # `detection_error`: why the last detection failed ("" when it succeeded).
        # `driver_installed`: the charm installed the NVIDIA driver (`nvidia-driver`).
        # `reboot_watch_until`: until when (epoch s) the reconcile looks for slurmctld's DOWN
        # after the machine's last boot (`_on_start_after_boot`); 0 when it does not.
        self._stored.set_default(
            parameters="{}",
            registered="",
            initial_state_pending=False,
            departure="",
            hardware="",
            detection_error="",
            driver_installed=False,
            reboot_watch_until=0.0,
        )
        self._enlisted_before = bool(self._stored.registered)
        """Whether the node had enlisted before this hook (a `start` is then after a boot)."""
        self.scontrol = Scontrol()
        self.slurmctld = SlurmdProvider(self, SLURMCTLD)
        self.member = ClusterMember(self, self.slurmctld, self._stored, self._leave)
        # The leader publishes its partition as soon as integrated (the member joins on changed).
        self.reconcile_on(self.on[SLURMCTLD].relation_created)
        self.node_name = node_name(self.unit.name)
        self.hardware = hardware.Hardware(self._stored, self.slurmd)

        # Detection runs at install (first need), start and upgrade, and on request only.
        framework.observe(self.on.start, self._on_detect_event)
        framework.observe(self.on.upgrade_charm, self._on_detect_event)
        framework.observe(self.on.start, self._on_start_after_boot)
        framework.observe(self.on.detect_hardware_action, self._on_detect_hardware_action)
        framework.observe(self.on.stop, self._on_departure)
        framework.observe(self.on.remove, self._on_departure)
        framework.observe(self.on.node_config_action, self._on_node_config_action)
        framework.observe(self.on.destroy_jobs_action, self._on_destroy_jobs_action)

    # Event handlers.

    def _on_detect_event(self, _: ops.EventBase) -> None:
        """Detect the hardware again; apply it only when it changed (never on a failure).

        Not before slurmd is installed (a unit may wait for its Slurm major's turn): the
        first reconcile after the install detects it.
        """
        if not self.installer.installed:
            return
        if self.hardware.detect() and not self.member.left:
            self.converge()

    def _on_start_after_boot(self, _: ops.StartEvent) -> None:
        """Return the node to service if its machine's boot made slurmctld set it DOWN.

        Juju runs `start` after every boot. slurmctld sets a node whose slurmd registers from a
        boot it did not ask for (a crash, a power cut) DOWN "Node unexpectedly rebooted", which
        no registration ends (ReturnToService=1): the node would stay out of the cluster until
        an operator resumed it. This hook waits for the registration from this boot; until
        slurmctld holds it, each reconcile looks once, for `REBOOT_WATCH_S` (slurmctld may be
        unreachable now). A `scontrol reboot` (the rolling rebuild) is no such boot: Slurm
        returns that node itself, and the watch ends once it registered.
        """
        if not self._enlisted_before or self.member.left:
            return
        self._stored.reboot_watch_until = time.time() + REBOOT_WATCH_S
        self._return_after_reboot(node.REGISTRATION_ATTEMPTS)

    def _on_detect_hardware_action(self, event: ops.ActionEvent) -> None:
        changed = self.hardware.detect()
        if error := self.hardware.error:
            event.fail(f"detection failed, node config kept: {error}")
            return
        failure = self.converge() if changed and not self.member.left else None
        known = self.hardware.known() or {}
        event.set_results(
            {
                "node": self.node_name,
                "gres": str(known.get("Gres", "")) or "none",
                "changed": changed,
                "hardware": " ".join(f"{k}={v}" for k, v in known.items()),
            }
        )
        if failure is not None:
            event.fail(f"detected, but applying it failed (retried later): {failure}")

    def _on_departure(self, _: ops.EventBase) -> None:
        """Leave the cluster when the machine goes (stop, remove), as on the departing hook."""
        self._leave()
        self.member.depart()

    def _leave(self) -> None:
        """Leave the cluster, waiting in this hook for the node's jobs (see `departure`).

        Idempotent: the first departure event does the work, later ones find it left.
        Integrated again later, the unit enlists afresh (the node was deleted).
        """
        if self.member.left:
            return
        config = self.valid_config() or SlurmdConfig()
        leaving = departure.Departure(self.node_name, self.slurmd, self._report_leaving)
        outcome = leaving.leave(
            enlisted=bool(self._stored.registered), timeout=config.retire_timeout_seconds
        )
        self._stored.departure = outcome.summary()
        self._stored.registered = ""
        self._stored.initial_state_pending = False

    def _report_leaving(self, message: str) -> None:
        """Show the departure's progress now: the one status set inside a hook."""
        if self.unit.status.message != message:
            self.unit.status = ops.MaintenanceStatus(message)

    def _on_node_config_action(self, event: ops.ActionEvent) -> None:
        text = event.params.get("parameters")
        reset = bool(event.params.get("reset", False))
        if text is None and not reset:
            event.set_results(self._node_config_report())
            return
        try:
            given = parse_node_parameters(text or "")
            parameters = given if reset else {**self._parameters(), **given}
            node.check_conf(
                node.desired_conf(self.hardware.known_or_detect(), self.app.name, parameters)
            )
        except ConfigError as e:
            event.fail(e.message)
            return
        except SlurmOpsError as e:
            event.fail(f"cannot check the parameters against this machine's hardware: {e}")
            return
        self._stored.parameters = json.dumps(parameters)
        if (failure := self.converge()) is not None:
            event.fail(f"parameters stored, but applying them failed (retried later): {failure}")
            return
        event.set_results(self._node_config_report())

    def _on_destroy_jobs_action(self, event: ops.ActionEvent) -> None:
        try:
            jobs = self.slurmd.running_jobs()
            self.scontrol.cancel_node_jobs(self.node_name)
        except SlurmOpsError as e:
            event.fail(f"cannot cancel jobs on {self.node_name}: {e}")
            return
        if jobs is None:
            cancelled = "every job of the node (a step's id could not be read)"
        else:
            cancelled = ",".join(map(str, jobs)) or "none"
        event.set_results({"node": self.node_name, "cancelled": cancelled})

    # Status, from facts.

    def statuses(self, config: SlurmdConfig) -> Iterable[ops.StatusBase]:
        """Return the node's status, from facts."""
        status = self._node_status(config)
        return [status] if status is not None else []

    def _node_status(self, config: SlurmdConfig) -> ops.StatusBase | None:  # noqa: PLR0911
        """Return the status of the first matching fact."""
        stored = self._stored
        if self.member.left and self.slurmctld.relation is not None:
            return ops.MaintenanceStatus(_left_message(str(stored.departure)))
        if (status := self.member.integration_status()) is not None:
            return status
        if (problem := self._partition_problem(config)) is not None:
            return ops.BlockedStatus(problem)
        if (
            problem := hardware.driver_problem(config, self.slurmd.root, self._stored)
        ) is not None:
            return ops.BlockedStatus(problem)
        if error := self.hardware.error:
            return ops.BlockedStatus(f"hardware detection failed, node config kept: {error}")
        if not stored.registered:  # The member says what slurmctld has not sent yet.
            return self.member.waiting_status() or ops.WaitingStatus(WAITING_FOR_SLURMCTLD)
        if self._reregistering():
            return ops.MaintenanceStatus("draining to register new configuration")
        if not self.slurmd.service.is_active():
            return self._slurmd_down_status()
        if stored.initial_state_pending:
            return ops.WaitingStatus("waiting for the node to register")
        return self._health_status()

    def _health_status(self) -> ops.StatusBase | None:
        """Say `unhealthy: <check>` while the node fails a health check (`health`)."""
        unhealthy = health.unhealthy_message(self.slurmd.root)
        return ops.BlockedStatus(unhealthy) if unhealthy is not None else None

    def _partition_problem(self, config: SlurmdConfig) -> str | None:
        try:
            partition_data(self.app.name, config.partition_config)
        except ConfigError as e:
            return e.message
        return None

    def _slurmd_down_status(self) -> ops.StatusBase:
        reason = systemd.journal_reason(self.slurmd.daemon)
        return ops.BlockedStatus(f"slurmd is not running: {reason or 'see its journal'}")

    # The one reconcile path.

    upgrades_in_charm = False
    """The rebuild rollout's RebootProgram upgrades Slurm (`rebuild-nodes upgrade=true`),
    draining the node first; the charm moves the pin once the controllers run the target."""

    def upgrade_waits_for(self, target: str) -> str | None:
        """Wait until every controller runs `target` (Slurm's order: controllers first)."""
        return controllers_wait_reason(target, self.slurmctld.controller_data)

    def reconcile(self, config: SlurmdConfig) -> None:
        """Publish the partition (leader) and make this unit's node match the charm's state."""
        if self.unit.is_leader():
            self._publish_partition(config)
        if self.member.left:
            return
        controller = self.slurmctld.controller_data
        try:
            self._converge_node(config, controller)
        finally:
            # After slurmd's start, off its path (two hook tools): Juju opens the ports when
            # the hook ends, whatever the order within it; a failure above opens them too.
            srun_ports = controller.srun_ports() if controller else None
            self.open_ports(PortRange.single(SLURMD_PORT), srun_ports)  # srun runs in jobs too

    def _converge_node(self, config: SlurmdConfig, controller: ControllerData | None) -> None:
        """Install the node's programs, then start slurmd and register it once slurmctld can."""
        hardware.install_driver(config, self.slurmd.root, self._stored)
        reboot.install(self.slurmd.root, self.node_name)
        health.install(self.slurmd.root, config, self.node_name, self.app.name)
        if controller is None or not controller.is_complete:
            return
        try:
            key = self.slurmctld.auth_key()
            self.slurmd.key.set(key)
        except (IntegrationError, ConfigError) as e:
            logger.info("controller data not usable yet: %s", e)
            return
        desired = self._desired_conf()
        conf_servers = controller.conf_servers()
        self.slurmd.set_start_options(self.node_name, conf_servers, node.conf_string(desired))
        self._run_slurmd(key, _fingerprint(key, self.node_name, conf_servers))
        self._converge_registration(desired)
        self._apply_initial_state(config)
        self._return_after_reboot(attempts=1)

    def _desired_conf(self) -> dict[str, Any]:
        """Return the last known hardware, feature and parameters.

        Hardware comes from the last successful detection (detected now only if there was
        none yet). A failed detection never drains or re-registers the node: it keeps the
        hardware known before, and the status shows the error. A node that never had its
        hardware detected keeps what it registered with (a unit upgraded from a charm that
        did not store it), or, never enlisted, cannot start: the error is this dispatch's
        failure.
        """
        registered = self._registered()
        try:
            known = self.hardware.known_or_detect()
        except SlurmOpsError:
            if registered is None:
                raise
            return registered
        return node.desired_conf(known, self.app.name, self._parameters())

    def _run_slurmd(self, key: str, fingerprint: str) -> None:
        """Start slurmd, or restart it when its key, controllers or name changed (`member`).

        A restart never changes a registered dynamic node: node configuration goes the live
        or the re-registration way (see `node`). Running jobs survive a slurmd restart.
        """
        if self._reregistering():
            # Its transient unit restarts slurmd with the options file (and key) as it is then.
            self.member.confirm_auth_key(key)
            return
        self.member.run(self.slurmd.service, fingerprint, key, start_when_down=True)
        # Wakes slurmctld (relation-changed) once the node runs a new release, after the
        # rebuild's upgrade: its native metrics wait for every node (it reads the node records).
        self.slurmctld.publish_version(self.running_slurm())

    def _converge_registration(self, desired: dict[str, Any]) -> None:
        """Bring the registered node to the desired configuration."""
        registered = self._registered()
        if registered is None:
            self._stored.initial_state_pending = True
        elif node.hardware_differs(registered, desired):
            self._reregister()
        else:
            node.update_live_fields(self.scontrol, self.node_name, registered, desired)
        self._stored.registered = json.dumps(desired)

    def _reregister(self) -> None:
        """Drain the node and let a transient unit re-register it once its jobs end.

        An operator's DRAIN or DOWN is read first (the drain replaces its reason) and the
        transient unit puts it back after the new registration. When slurmctld cannot say,
        nothing starts: the failure is this dispatch's, and the next event tries again.
        """
        if self._reregistering():
            return  # It restarts slurmd with the options file as it is by then.
        kept = node.operator_state(self.scontrol, self.node_name)
        node.drain(self.scontrol, self.node_name, REREGISTER_REASON)
        systemd.run_transient(
            node.reregister_unit(self.node_name),
            node.reregister_command(self.node_name, kept),
            f"Register Slurm node {self.node_name} again once its jobs end",
        )

    def _apply_initial_state(self, config: SlurmdConfig) -> None:
        """Give a newly enlisted node the configured `default-node-state`, once it registered.

        Either way the node is updated once, which runs slurmctld's scheduler: a dynamic
        node's own registration does not (the node is idle from its creation, so never
        "newly up"), and a job waiting for it would start only at the next backfill cycle
        (`bf_interval`, 30 s by default). An idle node's update names its unit (`Comment=`).
        The hook that started slurmd waits for the registration, looking every
        `node.REGISTRATION_LOOK_S`: it may be the unit's last hook for minutes (a slurmd
        started again once the operator fixed what stopped it), and only update-status would
        look again.
        """
        if not self._stored.initial_state_pending:
            return
        looks = round(node.REGISTRATION_ATTEMPTS / node.REGISTRATION_LOOK_S)
        if not node.wait_for_registration(
            self.scontrol, self.node_name, attempts=looks, interval=node.REGISTRATION_LOOK_S
        ):
            logger.info("node %s not registered yet; setting its state later", self.node_name)
            return
        if config.default_node_state == "idle":
            self.scontrol.update_node(self.node_name, comment=self.unit.name)
        else:
            reason = config.default_node_reason
            self.scontrol.update_node(self.node_name, state="down", reason=reason)
        self._stored.initial_state_pending = False

    def _return_after_reboot(self, attempts: int) -> None:
        """While the watch after a boot lasts, end slurmctld's DOWN for that boot (`node`)."""
        if time.time() >= float(self._stored.reboot_watch_until) or self._reregistering():
            return
        try:
            booted = node.booted_at()
            outcome = node.return_after_reboot(self.scontrol, self.node_name, booted, attempts)
        except (OSError, ValueError, SlurmOpsError) as e:
            logger.warning("cannot return node %s after its boot: %s", self.node_name, e)
            return
        if outcome is not None:  # Resumed, or registered from this boot without that DOWN.
            self._stored.reboot_watch_until = 0.0

    # Helpers.

    def _publish_partition(self, config: SlurmdConfig) -> None:
        """Publish this application's partition; keep the last valid one on bad config."""
        if self.model.get_relation(SLURMCTLD) is None:
            return
        try:
            data = partition_data(self.app.name, config.partition_config)
        except ConfigError as e:
            logger.warning("keeping the published partition: %s", e.message)
            return
        self.slurmctld.publish_compute_data(data)

    def _node_config_report(self) -> dict[str, str]:
        """Describe the node for the node-config action: operator parameters, whole --conf."""
        registered = self._registered()
        return {
            "node": self.node_name,
            "parameters": node.conf_string(self._parameters()),
            "conf": node.conf_string(registered) if registered else "",
        }

    def _parameters(self) -> dict[str, Any]:
        return json.loads(str(self._stored.parameters))

    def _registered(self) -> dict[str, Any] | None:
        return json.loads(str(self._stored.registered)) if self._stored.registered else None

    def _reregistering(self) -> bool:
        return systemd.Service(node.reregister_unit(self.node_name)).is_active()


def _fingerprint(key: str, name: str, conf_servers: list[str]) -> str:
    """Return a digest of what a slurmd restart applies (the key itself is not kept)."""
    return hashlib.sha256("\n".join([key, name, *conf_servers]).encode()).hexdigest()


def _left_message(summary: str) -> str:
    return f"left the cluster: {summary}" if summary else "left the cluster"


if __name__ == "__main__":  # pragma: nocover
    main(SlurmdCharm)
