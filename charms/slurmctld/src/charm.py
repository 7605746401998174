#!/usr/bin/env python3
"""Charm for slurmctld, the controller of a configless Slurm cluster of dynamic nodes."""

import logging
import socket
from collections.abc import Iterator

import cluster
import ops
from config import SlurmctldConfig
from hpc_libs.charm.config import config_problem, load_valid_config
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.sackd import SackdRequirer
from hpc_libs.interfaces.slurmd import (
    RETIRE_REASON,
    ComputeData,
    ControllerEntry,
    SlurmdRequirer,
    get_or_create_auth_key_secret,
    node_name,
)
from hpc_libs.slurm.base import SLURMCTLD_PORT
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager

logger = logging.getLogger(__name__)

PEER = "slurmctld-peer"
SLURMD = "slurmd"
LOGIN_NODE = "login-node"
CONTROLLER_ORDER = "controller-order"


class SlurmctldCharm(ops.CharmBase):
    """Operate slurmctld: slurm.conf, the shared auth key and the partitions of slurmd apps."""

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        # `departed`: nodes of slurmd units that left, deleted once no job runs on them.
        self._stored.set_default(partitions="{}", drained=[], departed=[])
        self.slurmctld = SlurmctldManager()
        self.installer = SlurmInstaller(self, self.slurmctld)
        self.scontrol = Scontrol()
        self.slurmd = SlurmdRequirer(self, SLURMD)
        self.login_nodes = SackdRequirer(self, LOGIN_NODE)

        framework.observe(self.on[SLURMD].relation_departed, self._on_slurmd_unit_departed)
        framework.observe(self.on.resume_action, self._on_resume_action)
        framework.observe(self.on.upgrade_charm, self._on_upgrade_charm)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)
        for event in (
            self.on.install,
            self.on.start,
            self.on.config_changed,
            self.on.upgrade_charm,
            self.on.update_status,
            self.on.leader_elected,
            self.on[PEER].relation_changed,
            self.on[PEER].relation_departed,
            self.slurmd.on.slurmd_ready,
            self.slurmd.on.slurmd_disconnected,
            self.on[LOGIN_NODE].relation_joined,
        ):
            framework.observe(event, self._reconcile)

    # Event handlers.

    def _on_upgrade_charm(self, _: ops.UpgradeCharmEvent) -> None:
        """Refresh the workload version: install again (a no-op for packages present).

        Observed before `_reconcile`, which runs on upgrade-charm too.
        """
        if (config := load_valid_config(self, SlurmctldConfig)) is not None:
            self.installer.install(config.slurm_package_source)

    def _on_slurmd_unit_departed(self, event: ops.RelationDepartedEvent) -> None:
        """Take a leaving compute unit's node out of the cluster, from the controller's side.

        The unit retires its node itself, but its machine may disappear before it can
        (Juju removes the machine with its last unit): the controller drains the node and
        deletes it once no job runs on it, so no node of a removed unit is left behind.
        """
        leaving = event.departing_unit
        if self.unit.is_leader() and leaving is not None and leaving != self.unit:
            name = node_name(leaving.name)
            self._drain_node(name)
            self._stored.departed = sorted({*self._stored.departed, name})
        self._reconcile(event)

    def _on_resume_action(self, event: ops.ActionEvent) -> None:
        nodename = str(event.params["nodename"])
        try:
            self.scontrol.update_node(nodename, state="resume")
        except SlurmOpsError as e:
            event.fail(f"cannot resume {nodename}: {e.stderr or e.message}")
            return
        event.set_results({"nodename": nodename, "state": "resume"})

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        if problem := config_problem(self, SlurmctldConfig):
            event.add_status(ops.BlockedStatus(problem))
        for problem in self._compute_data_problems():
            event.add_status(ops.BlockedStatus(problem))
        for app in self._unusable_partitions():
            event.add_status(ops.BlockedStatus(f"cannot serve partition of application '{app}'"))
        if not self.installer.installed:
            event.add_status(ops.MaintenanceStatus("installing slurmctld"))
        elif not self.unit.is_leader():
            event.add_status(ops.ActiveStatus("standby"))
        elif not self.slurmctld.service.is_active():
            event.add_status(ops.BlockedStatus("slurmctld is not running; see its journal"))
        retiring = [n for n, r in self._partitions().items() if r.retiring]
        if retiring:
            names = ", ".join(retiring)
            event.add_status(ops.ActiveStatus(f"draining partitions: {names}"))
        event.add_status(ops.ActiveStatus())

    # The one reconcile path.

    def _reconcile(self, _: ops.EventBase | None) -> None:
        """Make the controller match the charm's state; a no-op when nothing changed."""
        config = load_valid_config(self, SlurmctldConfig)
        if config is None:
            return
        self.installer.ensure_installed(config.slurm_package_source)
        me = self._share_address()
        if not self.unit.is_leader():
            return
        auth_key = self._auth_key_secret()
        key_changed = self._write_auth_key(auth_key)
        controllers = self._controllers(me)
        self._delete_departed_nodes()
        partitions = self._update_partitions()
        self._apply_slurm_conf(config, controllers, partitions, restart=key_changed)
        self._publish_controller_data(auth_key, controllers, partitions)

    def _apply_slurm_conf(
        self,
        config: SlurmctldConfig,
        controllers: list[cluster.Controller],
        partitions: dict[str, cluster.PartitionRecord],
        *,
        restart: bool,
    ) -> None:
        """Write the configuration and make slurmctld use it as gently as Slurm allows.

        A change `scontrol reconfigure` applies is applied that way; slurmctld restarts only
        when its own identity (`SlurmctldHost`) or the auth key changed.
        """
        hosts_changed = self._slurmctld_hosts_on_disk() != [c.slurmctld_host for c in controllers]
        cgroup_changed = self.slurmctld.cgroup_config.write(cluster.render_cgroup_conf(config))
        conf_changed = self.slurmctld.config.write(
            cluster.render_slurm_conf(config, controllers, partitions)
        )
        # The log directory, like the state directory, must be slurm's (slurmctld runs as it).
        self.slurmctld.create_state_save_location(self.slurmctld.root / cluster.LOG_DIR)
        service = self.slurmctld.service
        if not service.is_active():
            self.slurmctld.create_state_save_location()
            service.enable()
            service.start()
        elif restart or (conf_changed and hosts_changed):
            service.restart()
        elif conf_changed or cgroup_changed:
            self.scontrol.reconfigure()

    def _slurmctld_hosts_on_disk(self) -> list[str] | None:
        """Read the `SlurmctldHost` lines slurmctld runs with; None if slurm.conf is unreadable."""
        try:
            return self.slurmctld.config.load().slurmctld_host
        except SlurmOpsError as e:
            logger.warning("cannot parse the current slurm.conf, rewriting it: %s", e.message)
            return None

    # Nodes of departed slurmd units.

    def _drain_node(self, name: str) -> None:
        try:
            self.scontrol.update_node(name, state="drain", reason=RETIRE_REASON)
        except SlurmOpsError as e:
            logger.info("cannot drain departed node %s: %s", name, e.stderr or e.message)

    def _delete_departed_nodes(self) -> None:
        """Delete the nodes of departed units once no job runs on them (retried by any event)."""
        remaining: list[str] = []
        for name in self._stored.departed:
            try:
                if self.scontrol.show_node(name) is None:
                    continue  # Gone already: the unit retired it.
                if cluster.node_has_jobs(name):
                    remaining.append(name)
                    continue
                self.scontrol.delete_node(name)
                logger.info("deleted node %s of a departed unit", name)
            except SlurmOpsError as e:
                logger.warning("cannot delete node %s yet: %s", name, e.stderr or e.message)
                remaining.append(name)
        self._stored.departed = remaining

    # Partitions published by slurmd applications.

    def _partitions(self) -> dict[str, cluster.PartitionRecord]:
        return cluster.load_partitions(str(self._stored.partitions))

    def _published(self) -> Iterator[tuple[int, str, ComputeData]]:
        """Yield each integrated slurmd application's relation id, name and complete data."""
        for relation in self.model.relations[SLURMD]:
            data = self.slurmd.compute_data(relation)
            if relation.app is not None and data is not None and data.is_complete:
                yield relation.id, relation.app.name, data

    def _live_partitions(self) -> dict[str, cluster.PartitionRecord]:
        """Partitions of the slurmd applications integrated now, with usable data."""
        live: dict[str, cluster.PartitionRecord] = {}
        for relation_id, app, data in self._published():
            try:
                live[app] = cluster.partition_record(
                    app, data.partition, data.nodeset, relation_id
                )
            except ValueError as e:
                logger.warning("ignoring partition of %s: %s", app, e)
        return live

    def _compute_data_problems(self) -> list[str]:
        """Say which slurmd application sent which invalid key (its data reads as not ready)."""
        problems = (self.slurmd.compute_data_problem(r) for r in self.model.relations[SLURMD])
        return [p for p in problems if p is not None]

    def _unusable_partitions(self) -> list[str]:
        """List the slurmd applications whose partition data the controller cannot serve."""
        unusable: list[str] = []
        for _, app, data in self._published():
            try:
                cluster.partition_record(app, data.partition, data.nodeset)
            except ValueError:
                unusable.append(app)
        return unusable

    def _update_partitions(self) -> dict[str, cluster.PartitionRecord]:
        """Merge live partitions with remembered ones and retire those whose app left.

        A partition whose slurmd application left is kept, drained, while jobs still run in
        it; a later reconcile (update-status, any event) removes it once it is idle. The hook
        never waits for jobs.
        """
        partitions = self._partitions()
        live = self._live_partitions()
        drained = set(self._stored.drained)
        for name, record in list(partitions.items()):
            if name in live:
                continue
            if not cluster.partition_has_jobs(name):
                logger.info("partition %s has no jobs left; removing it", name)
                del partitions[name]
                drained.discard(name)
                continue
            partitions[name] = record.model_copy(update={"retiring": True})
            if name not in drained and self._drain_partition(name):
                drained.add(name)
        partitions.update(live)
        drained -= set(live)
        self._stored.partitions = cluster.dump_partitions(partitions)
        self._stored.drained = sorted(drained)
        return partitions

    def _drain_partition(self, name: str) -> bool:
        try:
            self.scontrol.update_partition(name, state="drain")
        except SlurmOpsError as e:
            logger.warning("cannot drain partition %s: %s", name, e.stderr or e.message)
            return False
        logger.info("partition %s drained: its application left while jobs run", name)
        return True

    # Controllers and the auth key.

    def _share_address(self) -> cluster.Controller:
        """Share this unit's hostname and address with the other controllers."""
        me = cluster.Controller(socket.gethostname(), self._bind_address())
        peer = self.model.get_relation(PEER)
        if peer is not None:
            peer.data[self.unit].update({"hostname": me.hostname, "address": me.address})
        return me

    def _controllers(self, me: cluster.Controller) -> list[cluster.Controller]:
        """Return the controllers in join order, primary first (leader only).

        The leader records the order units joined in, in the peer application databag.
        Until the peer relation exists this unit is the only controller.
        """
        peer = self.model.get_relation(PEER)
        if peer is None:
            return [me]
        present = {self.unit.name: me}
        for unit in peer.units:
            data = peer.data[unit]
            if data.get("hostname") and data.get("address"):
                present[unit.name] = cluster.Controller(data["hostname"], data["address"])
        order = cluster.order_controllers(
            cluster.parse_order(peer.data[self.app].get(CONTROLLER_ORDER)), list(present)
        )
        peer.data[self.app][CONTROLLER_ORDER] = cluster.dump_order(order)
        return [present[name] for name in order]

    def _bind_address(self) -> str:
        binding = self.model.get_binding(SLURMD)
        if binding is None or binding.network.bind_address is None:
            raise RuntimeError("no bind address for the slurmd endpoint yet")
        return str(binding.network.bind_address)

    def _auth_key_secret(self) -> ops.Secret:
        """Get the cluster's slurm.key secret (owned by this application), creating it once."""
        return get_or_create_auth_key_secret(self, self.slurmctld.key.generate)

    def _write_auth_key(self, secret: ops.Secret) -> bool:
        """Write slurm.key from the secret; True when the file on disk changed."""
        return self.slurmctld.key.set(secret.get_content(refresh=True)["key"])

    def _publish_controller_data(
        self,
        auth_key: ops.Secret,
        controllers: list[cluster.Controller],
        partitions: dict[str, cluster.PartitionRecord],
    ) -> None:
        """Share the key and the controllers with login nodes and enlisted slurmd applications.

        A slurmd application gets them once its partition is in slurm.conf.
        """
        try:
            entries = [
                ControllerEntry(hostname=c.hostname, address=c.address, port=SLURMCTLD_PORT)
                for c in controllers
            ]
        except ValueError as e:
            logger.error("not publishing controllers that break Slurm's grammar: %s", e)
            return
        for relation in self.model.relations[SLURMD]:
            if relation.app is not None and relation.app.name in partitions:
                self.slurmd.publish_controller_data(relation, auth_key, entries)
        for relation in self.model.relations[LOGIN_NODE]:
            self.login_nodes.publish_controller_data(relation, auth_key, entries)


if __name__ == "__main__":  # pragma: nocover
    ops.main(SlurmctldCharm)
