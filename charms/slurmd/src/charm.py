#!/usr/bin/env python3
"""Charm for slurmd: every unit a Slurm dynamic node, every application a partition."""

import json
import logging
from collections.abc import Callable
from typing import Any

import node
import ops
from config import SlurmdConfig, parse_node_parameters, parse_partition_config
from hpc_libs.charm.config import config_problem, load_valid_config
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.errors import ConfigError, IntegrationError, SlurmOpsError
from hpc_libs.interfaces.slurmd import (
    REREGISTER_REASON,
    RETIRE_REASON,
    ComputeData,
    SlurmdProvider,
    node_name,
)
from hpc_libs.machine import systemd
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmd import SlurmdManager

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"


class SlurmdCharm(ops.CharmBase):
    """Operate slurmd as a dynamic node of the cluster slurmctld serves."""

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        # `registered` is the node configuration slurmctld holds for this node (JSON, "" when
        # the node never enlisted); `parameters` the operator's node-config (JSON).
        self._stored.set_default(
            parameters="{}",
            registered="",
            controllers=[],
            initial_state_pending=False,
            retiring=False,
        )
        self.slurmd = SlurmdManager()
        self.installer = SlurmInstaller(self, self.slurmd)
        self.scontrol = Scontrol()
        self.slurmctld = SlurmdProvider(self, SLURMCTLD)
        self.node_name = node_name(self.unit.name)

        framework.observe(self.slurmctld.on.slurmctld_connected, self._on_slurmctld_connected)
        framework.observe(self.slurmctld.on.slurmctld_disconnected, self._on_departure)
        framework.observe(self.on.stop, self._on_departure)
        framework.observe(self.on.remove, self._on_departure)
        framework.observe(self.on.node_config_action, self._on_node_config_action)
        framework.observe(self.on.destroy_jobs_action, self._on_destroy_jobs_action)
        framework.observe(self.on.upgrade_charm, self._on_upgrade_charm)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)
        for event in (
            self.on.install,
            self.on.start,
            self.on.config_changed,
            self.on.upgrade_charm,
            self.on.update_status,
            self.on.leader_elected,
            self.on.secret_changed,
            self.slurmctld.on.slurmctld_ready,
        ):
            framework.observe(event, self._reconcile)

    # Event handlers.

    def _on_upgrade_charm(self, _: ops.UpgradeCharmEvent) -> None:
        """Refresh the workload version: install again (a no-op for packages present).

        Also while the node leaves, when `_reconcile` installs nothing: a unit upgraded from
        a revision that kept `installed` in the charm's own StoredState is then known to be
        installed. Observed before `_reconcile`, which runs on upgrade-charm too.
        """
        if (config := load_valid_config(self, SlurmdConfig)) is not None:
            self.installer.install(config.slurm_package_source)

    def _on_slurmctld_connected(self, event: ops.EventBase) -> None:
        if self._stored.retiring and not self._transient_running(node.retire_unit):
            # Integrated again after leaving: the node was deleted, so enlist afresh.
            self._stored.retiring = False
            self._stored.registered = ""
        self._reconcile(event)

    def _on_departure(self, _: ops.EventBase) -> None:
        """Leave the cluster without killing jobs and without holding the hook.

        The node is drained now; a transient systemd unit waits until no job runs on it,
        deletes it from the cluster and stops slurmd (see `node.retire_command`).
        """
        if self._stored.retiring:
            return
        self._stored.retiring = True
        if not self._stored.registered:
            if self.slurmd.service.is_active():
                self.slurmd.service.stop()
            return
        node.drain(self.scontrol, self.node_name, RETIRE_REASON)
        systemd.run_transient(
            node.retire_unit(self.node_name),
            node.retire_command(self.node_name),
            f"Retire Slurm node {self.node_name} once its jobs end",
        )

    def _on_node_config_action(self, event: ops.ActionEvent) -> None:
        text = event.params.get("parameters")
        reset = bool(event.params.get("reset", False))
        if text is None and not reset:
            event.set_results(self._node_config_report())
            return
        try:
            parameters = parse_node_parameters(text or "")
        except ConfigError as e:
            event.fail(e.message)
            return
        if not reset:
            parameters = {**self._parameters(), **parameters}
        self._stored.parameters = json.dumps(parameters)
        try:
            self._reconcile(event)
        except SlurmOpsError as e:
            event.fail(f"parameters stored, but applying them failed (retried later): {e}")
            return
        event.set_results(self._node_config_report())

    def _on_destroy_jobs_action(self, event: ops.ActionEvent) -> None:
        try:
            jobs = self.scontrol.listjobs(self.node_name)
            self.scontrol.cancel_node_jobs(self.node_name)
        except SlurmOpsError as e:
            event.fail(f"cannot cancel jobs on {self.node_name}: {e}")
            return
        event.set_results(
            {"node": self.node_name, "cancelled": ",".join(map(str, jobs)) or "none"}
        )

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        for status in (*self._config_statuses(), self._node_status()):
            if status is not None:
                event.add_status(status)
        event.add_status(ops.ActiveStatus())

    def _config_statuses(self) -> list[ops.StatusBase]:
        """Blocked statuses naming each bad option or partition-config key."""
        if problem := config_problem(self, SlurmdConfig):
            return [ops.BlockedStatus(problem)]
        config = self.load_config(SlurmdConfig)
        try:
            parse_partition_config(config.partition_config)
        except ConfigError as e:
            return [ops.BlockedStatus(e.message)]
        return []

    def _node_status(self) -> ops.StatusBase | None:
        """Pick the node's status from facts, first matching check wins."""
        stored = self._stored
        checks: list[tuple[Callable[[], bool], ops.StatusBase]] = [
            (lambda: not self.installer.installed, ops.MaintenanceStatus("installing slurmd")),
            (
                lambda: bool(stored.retiring),
                ops.MaintenanceStatus("leaving: node drained until its jobs end"),
            ),
            (
                lambda: self.model.get_relation(SLURMCTLD) is None,
                ops.BlockedStatus("needs an integration with slurmctld"),
            ),
            (lambda: not stored.registered, ops.WaitingStatus("waiting for slurmctld")),
            (
                lambda: self._transient_running(node.reregister_unit),
                ops.MaintenanceStatus("draining to register new configuration"),
            ),
            (
                lambda: not self.slurmd.service.is_active(),
                ops.BlockedStatus("slurmd is not running; see its journal"),
            ),
            (
                lambda: bool(stored.initial_state_pending),
                ops.WaitingStatus("waiting for the node to register"),
            ),
        ]
        return next((status for check, status in checks if check()), None)

    # The one reconcile path.

    def _reconcile(self, _: ops.EventBase | None) -> None:
        """Publish the partition (leader) and make this unit's node match the charm's state."""
        config = load_valid_config(self, SlurmdConfig)
        if config is None:
            return
        if self.unit.is_leader():
            self._publish_partition(config)
        if self._stored.retiring:
            return
        self.installer.ensure_installed(config.slurm_package_source)
        controller = self.slurmctld.controller_data
        if controller is None or not controller.is_complete:
            return
        try:
            key_changed = self.slurmd.key.set(self.slurmctld.auth_key())
        except IntegrationError as e:
            logger.info("controller data not usable yet: %s", e)
            return
        desired = node.desired_conf(
            self.slurmd.detect_hardware(), self.app.name, self._parameters()
        )
        conf_servers = controller.conf_servers()
        self.slurmd.set_start_options(self.node_name, conf_servers, node.conf_string(desired))
        servers_changed = list(self._stored.controllers) != conf_servers
        self._stored.controllers = conf_servers
        self._converge_node(desired, restart=key_changed or servers_changed)
        self._apply_initial_state(config)

    def _converge_node(self, desired: dict[str, Any], *, restart: bool) -> None:
        """Start slurmd, and bring the registered node to the desired configuration.

        slurmd restarts only when its key or controllers changed: a restart never changes a
        registered dynamic node, so node configuration goes the live or the re-registration
        way (see the `node` module).
        """
        service = self.slurmd.service
        was_active = service.is_active()
        if not was_active and not self._transient_running(node.reregister_unit):
            service.enable()
            service.start()
        registered = self._registered()
        if registered is None:
            self._stored.initial_state_pending = True
        elif node.hardware_differs(registered, desired):
            self._reregister()
        else:
            node.update_live_fields(self.scontrol, self.node_name, registered, desired)
        if was_active and restart:
            service.restart()  # Running jobs survive a slurmd restart.
        self._stored.registered = json.dumps(desired)

    def _reregister(self) -> None:
        """Drain the node and let a transient unit re-register it once its jobs end."""
        if self._transient_running(node.reregister_unit):
            return  # It restarts slurmd with the options file as it is by then.
        node.drain(self.scontrol, self.node_name, REREGISTER_REASON)
        systemd.run_transient(
            node.reregister_unit(self.node_name),
            node.reregister_command(self.node_name),
            f"Register Slurm node {self.node_name} again once its jobs end",
        )

    def _apply_initial_state(self, config: SlurmdConfig) -> None:
        """Give a newly enlisted node the configured `default-node-state`."""
        if not self._stored.initial_state_pending:
            return
        if config.default_node_state == "idle":
            self._stored.initial_state_pending = False
            return
        if not node.wait_for_registration(self.scontrol, self.node_name):
            logger.info("node %s not registered yet; setting its state later", self.node_name)
            return
        self.scontrol.update_node(self.node_name, state="down", reason=config.default_node_reason)
        self._stored.initial_state_pending = False

    # Helpers.

    def _publish_partition(self, config: SlurmdConfig) -> None:
        """Publish this application's partition; keep the last valid one on bad config."""
        if self.model.get_relation(SLURMCTLD) is None:
            return
        try:
            settings = parse_partition_config(config.partition_config)
        except ConfigError as e:
            logger.warning("keeping the published partition: %s", e.message)
            return
        name = self.app.name
        partition = {**settings, "partitionname": name, "nodes": [name]}
        self.slurmctld.publish_compute_data(
            ComputeData(partition=partition, nodeset={"nodeset": name, "feature": name})
        )

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

    def _transient_running(self, unit_name: Callable[[str], str]) -> bool:
        return systemd.Service(unit_name(self.node_name)).is_active()


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmdCharm)
