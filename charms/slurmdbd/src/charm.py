#!/usr/bin/env python3
"""Charm for slurmdbd: Slurm's accounting daemon, storing its records in a MySQL database."""

import logging
import socket
from collections.abc import Iterable
from typing import Any

import ops
import roles
from config import SlurmdbdConfig
from hpc_libs.charm.base import SlurmCharm, main
from hpc_libs.charm.member import NEEDS_SLURMCTLD, ClusterMember
from hpc_libs.charm.ports import PortRange
from hpc_libs.charm.upgrade import Plan, list_backups
from hpc_libs.errors import ConfigError, IntegrationError, SlurmOpsError
from hpc_libs.interfaces.base import join_order
from hpc_libs.interfaces.cos_agent import CosAgentProvider
from hpc_libs.interfaces.mysql_client import MysqlConnection, MysqlRequirer
from hpc_libs.interfaces.slurmdbd import DbdEntry, JwtKeyData, SlurmdbdData, SlurmdbdProvider
from hpc_libs.interfaces.slurmdbd_peer import DbdHost, SlurmdbdPeer
from hpc_libs.machine.systemd import journal_reason
from hpc_libs.slurm import backup, upgrade
from hpc_libs.slurm.ports import SLURMDBD_PORT
from hpc_libs.slurm.slurmdbd import (
    LOG_FILE,
    DbdHosts,
    SlurmdbdManager,
    StorageSettings,
)

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"
DATABASE = "database"
PEER = "slurmdbd-peer"
DATABASE_NAME = "slurm_acct_db"
PARAMETERS_OPTION = "slurmdbd-conf-parameters"


class SlurmdbdCharm(SlurmCharm[SlurmdbdConfig]):
    """Run slurmdbd against the database the `database` integration grants, for slurmctld.

    `member` restarts slurmdbd whenever the fingerprint of slurmdbd.conf, slurm.key and
    jwt_hs256.key differs from the one it was last restarted with (a new JWT key too) or it
    is not running, so a failed restart is retried by the next event; it confirms the key.

    Two units run active and backup: every unit writes the same slurmdbd.conf, naming the
    first unit in join order (kept by the leader in the peer application databag) `DbdHost`
    and the second `DbdBackupHost`; a third unit runs no slurmdbd (see `roles`). The leader
    publishes both to slurmctld, primary first.
    """

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        self.slurmdbd = SlurmdbdManager()
        super().__init__(framework, config_type=SlurmdbdConfig, manager=self.slurmdbd)
        self.cos_agent = CosAgentProvider(self, log_files=[LOG_FILE])
        self.database = MysqlRequirer(self, DATABASE, DATABASE_NAME)
        self.slurmctld = SlurmdbdProvider(self, SLURMCTLD)
        self.member = ClusterMember(self, self.slurmctld, self._stored)  # leaves in reconcile
        self.peer = SlurmdbdPeer(self, PEER)
        database = self.on[DATABASE]
        self.reconcile_on(
            database.relation_changed,
            database.relation_broken,
            self.slurmctld.on.slurmctld_disconnected,
            self.on[PEER].relation_changed,
        )
        self._leaving = False
        framework.observe(self.on[PEER].relation_departed, self._on_peer_departed)
        framework.observe(self.on.list_backups_action, self._on_list_backups_action)

    def _on_list_backups_action(self, event: ops.ActionEvent) -> None:
        list_backups(event, self.slurmdbd.root)

    def _on_peer_departed(self, event: ops.RelationDepartedEvent) -> None:
        """Let the next unit move up when one leaves; stop slurmdbd if this unit leaves.

        A departing unit sees no peers any more: left running, it would become a second
        primary until its machine goes.
        """
        departing = event.departing_unit
        self._leaving = departing is not None and departing.name == self.unit.name
        self.converge()

    def reconcile(self, config: SlurmdbdConfig) -> None:
        """Ask for the database; write slurmdbd.conf and both keys; (re)start; publish.

        Without either integration slurmdbd is stopped and its files (the password, the
        key) deleted. With both but incomplete or invalid data (invalid operator parameters
        too), a running slurmdbd is left alone: `statuses` says what is missing. A unit
        beyond the backup stops slurmdbd and deletes its files.
        """
        self.open_ports(PortRange.single(SLURMDBD_PORT))
        self.database.request()
        if self._leaving:
            self._stop_and_remove_files()  # The other units take over without this one.
            return
        self.peer.share(self._my_host())
        dbds = self._roles()
        if self.unit.is_leader():
            self.peer.record(dbds.order)
        if not self.database.is_joined() or not self.slurmctld.is_joined():
            self._stand_down()
            return
        connection = self.database.connection()
        keys = self._keys_or_none()
        parameters = self._parameters_or_none(config)
        if connection is None or keys is None or parameters is None or dbds.missing:
            return
        if dbds.role_of(self.unit.name) == "idle":
            self._stop_and_remove_files()
            self.member.confirm_auth_key(keys[0])  # runs no daemon with an older key
            self._publish(dbds.active())
            return
        auth_key, jwt_key = keys
        self.slurmdbd.key.set(auth_key)
        self.slurmdbd.jwt_key.set(jwt_key)
        self.slurmdbd.write_config(_hosts(dbds), _storage(connection), parameters)
        self.slurmdbd.own_log_file(LOG_FILE)  # Root's directory: COS reads it by its name.
        # ServiceError: blocked with slurmdbd's reason.
        if self.member.run(self.slurmdbd.service, self.slurmdbd.fingerprint(), auth_key):
            logger.info(
                "slurmdbd (%s) started with the database at %s",
                dbds.role_of(self.unit.name),
                connection.primary.host,
            )
        self._publish(dbds.active())

    def upgrade_waits_for(self, target: str) -> str | None:
        """Wait for the units before this one in join order: the primary converts first."""
        dbds = self._roles()
        hosts = {**self.peer.hosts(), self.unit.name: self._my_host()}
        versions = {unit: host.version for unit, host in hosts.items()}
        return upgrade.join_order_wait_reason(
            target, "slurmdbd", dbds.order, self.unit.name, versions
        )

    def before_upgrade(self, plan: Plan) -> None:
        """Dump the database through slurmdbd's account before the primary converts it.

        The backup unit upgrades once the primary converted the database: nothing to save.
        """
        if self._roles().role_of(self.unit.name) != "primary":
            return
        connection = self.database.connection()
        if connection is None:
            raise SlurmOpsError("cannot back up the database before upgrading: no credentials")
        name = backup.backup_name(connection.database, plan.running, str(plan.target))
        path = backup.dump_database(
            self.slurmdbd.root,
            name,
            host_name=connection.primary.host,
            port=connection.primary.port,
            user=connection.username,
            password=connection.password,
            database=connection.database,
        )
        logger.info("database %s saved to %s before the upgrade", connection.database, path)

    def statuses(self, config: SlurmdbdConfig) -> Iterable[ops.StatusBase]:
        """Say what is missing: integrations, valid data, the key, a running slurmdbd.

        Active says which slurmdbd this unit runs when there is a backup: the primary, or
        the backup, standing by or in control (it listens only while in control).
        """
        if problem := _parameters_problem(config):
            yield ops.BlockedStatus(problem)
        if not self.database.is_joined():
            yield ops.BlockedStatus("needs a database integration")
        if not self.slurmctld.is_joined():
            yield ops.BlockedStatus(NEEDS_SLURMCTLD)
        if problem := self.database.connection_problem():
            yield ops.BlockedStatus(f"database: {problem}")
            return
        connection = self.database.connection()
        if self.database.is_joined() and connection is None:
            yield ops.WaitingStatus("waiting for database credentials")
        if (slurmctld := self._slurmctld_waiting()) is not None:
            yield slurmctld
            return
        if connection is not None and self.slurmctld.is_joined():
            yield self._slurmdbd_status(connection)

    def _slurmdbd_status(self, connection: MysqlConnection) -> ops.StatusBase:
        """Return the unit's own status: its role, and whether its slurmdbd runs."""
        if self._leaving:
            return ops.MaintenanceStatus("leaving: slurmdbd stopped")
        dbds = self._roles()
        if dbds.missing:
            return ops.WaitingStatus(f"waiting for {', '.join(dbds.missing)} to share its host")
        role = dbds.role_of(self.unit.name)
        if role == "idle":
            return ops.BlockedStatus(dbds.idle_message())
        if self.failure is None and not self.slurmdbd.service.is_active():
            reason = journal_reason(self.slurmdbd.daemon)
            return ops.BlockedStatus(
                f"slurmdbd is not running: {reason}" if reason else "slurmdbd is not running"
            )
        where = f"accounting in {connection.database} on {connection.primary.host}"
        return ops.ActiveStatus(self._role_text(dbds, role) + where)

    def _role_text(self, dbds: roles.Roles, role: roles.Role) -> str:
        """Say which slurmdbd this unit is, when there are two; nothing for a lone one."""
        primary, backup = dbds.primary, dbds.backup
        if primary is None or backup is None:
            return ""
        if role == "primary":
            return f"primary slurmdbd, backup {backup.hostname}; "
        if self.slurmdbd.serving():
            return f"backup slurmdbd in control: primary {primary.hostname} does not answer; "
        return f"backup slurmdbd for {primary.hostname}, standing by; "

    def _slurmctld_waiting(self) -> ops.StatusBase | None:
        if (waiting := self.member.waiting_status(JwtKeyData)) is not None:
            return waiting
        if self.slurmctld.relation is None:
            return None
        try:
            self.slurmctld.jwt_key()
        except IntegrationError as e:
            return ops.WaitingStatus(f"waiting for slurmctld's JWT key: {e}")
        return None

    def _keys_or_none(self) -> tuple[str, str] | None:
        """Return the auth key and the JWT key slurmctld granted (base64 text), or None."""
        if not self.slurmctld.is_ready():
            return None
        try:
            return (
                self.slurmctld.auth_key(),
                self.slurmctld.jwt_key(),
            )
        except IntegrationError as e:
            logger.warning("not configuring slurmdbd: %s", e)
            return None

    def _parameters_or_none(self, config: SlurmdbdConfig) -> dict[str, Any] | None:
        """Return the operator's slurmdbd.conf settings, or None (logged) if one is invalid."""
        try:
            return config.slurmdbd_conf_parameters.get()
        except ConfigError as e:
            logger.warning("keeping slurmdbd.conf as it is: %s: %s", PARAMETERS_OPTION, e)
            return None

    def _my_host(self) -> DbdHost:
        """Where this unit runs: its short host name, and its address on `slurmctld`."""
        binding = self.model.get_binding(SLURMCTLD)
        address = binding.network.ingress_address if binding is not None else None
        return DbdHost(
            hostname=_short_hostname(),
            address=str(address) if address is not None else None,
            version=self.running_slurm(),
        )

    def _roles(self) -> roles.Roles:
        """Return the units in join order (recorded order, newcomers last), with their hosts."""
        order = join_order(self.peer.recorded().order(), self.peer.units())
        return roles.assign(order, {**self.peer.hosts(), self.unit.name: self._my_host()})

    def _publish(self, dbds: list[roles.Dbd]) -> None:
        """Tell slurmctld where the slurmdbd daemons listen, primary first (leader only)."""
        entries = [
            DbdEntry(hostname=d.hostname, address=d.address, port=SLURMDBD_PORT, version=d.version)
            for d in dbds
        ]
        self.slurmctld.publish_slurmdbd_data(SlurmdbdData(dbds=entries))

    def _stand_down(self) -> None:
        """Withdraw from slurmctld, stop slurmdbd and delete its files."""
        self._publish([])
        self._stop_and_remove_files()

    def _stop_and_remove_files(self) -> None:
        """Stop slurmdbd and delete its files, trying every step even if one fails."""
        self._stored.applied = ""
        steps = (self.slurmdbd.service.stop, self.slurmdbd.service.disable)
        manager = self.slurmdbd
        present = (manager.config, manager.key, manager.jwt_key)
        if manager.service.is_active() or any(f.exists() for f in present):
            for step in (*steps, self.slurmdbd.remove_files):
                try:
                    step()
                except SlurmOpsError as e:
                    logger.warning("stopping slurmdbd: %s (the next event tries again)", e)
                    self.failure = self.failure or e


def _parameters_problem(config: SlurmdbdConfig) -> str | None:
    """Say which operator setting is refused, naming the option and the key; None if valid."""
    try:
        config.slurmdbd_conf_parameters.get()
    except ConfigError as e:
        return f"{PARAMETERS_OPTION}: {e.message}"
    return None


def _hosts(dbds: roles.Roles) -> DbdHosts:
    """slurmdbd.conf's hosts: the primary (`DbdHost`, `DbdAddr`) and the backup, if any."""
    primary = dbds.primary
    if primary is None:
        raise RuntimeError("no primary slurmdbd: the caller checks `missing` first")
    backup = dbds.backup.hostname if dbds.backup is not None else None
    return DbdHosts(primary=primary.hostname, address=primary.address, backup=backup)


def _short_hostname() -> str:
    """Return the host name without its domain: slurmdbd checks DbdHost against it."""
    return socket.gethostname().split(".")[0]


def _storage(connection: MysqlConnection) -> StorageSettings:
    primary = connection.primary
    return StorageSettings(
        host=primary.host,
        port=primary.port,
        database=connection.database,
        user=connection.username,
        password=connection.password,
    )


if __name__ == "__main__":  # pragma: nocover
    main(SlurmdbdCharm)
