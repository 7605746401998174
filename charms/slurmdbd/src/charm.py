#!/usr/bin/env python3
"""Charm for slurmdbd: Slurm's accounting daemon, storing its records in a MySQL database."""

import base64
import binascii
import logging
import socket
from collections.abc import Iterable

import ops
from config import SlurmdbdConfig
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.errors import IntegrationError, SlurmOpsError
from hpc_libs.interfaces.controller import ControllerData
from hpc_libs.interfaces.mysql_client import MysqlConnection, MysqlRequirer
from hpc_libs.interfaces.slurmdbd import DbdEntry, JwtKeyData, SlurmdbdData, SlurmdbdProvider
from hpc_libs.machine.systemd import journal_reason
from hpc_libs.slurm.slurmdbd import SLURMDBD_PORT, SlurmdbdManager, StorageSettings

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"
DATABASE = "database"
DATABASE_NAME = "slurm_acct_db"


class SlurmdbdCharm(SlurmCharm[SlurmdbdConfig]):
    """Run slurmdbd against the database the `database` integration grants, for slurmctld.

    Unit-local fact (`_stored.applied`): the fingerprint of slurmdbd.conf, slurm.key and
    jwt_hs256.key that slurmdbd was last restarted with. slurmdbd is restarted whenever the
    files differ from it (a new JWT key too) or it is not running, so a failed restart is
    retried by the next event.
    """

    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        self.slurmdbd = SlurmdbdManager()
        super().__init__(framework, config_type=SlurmdbdConfig, manager=self.slurmdbd)
        self._stored.set_default(applied="")
        self.database = MysqlRequirer(self, DATABASE, DATABASE_NAME)
        self.slurmctld = SlurmdbdProvider(self, SLURMCTLD)
        database = self.on[DATABASE]
        self.reconcile_on(
            database.relation_changed,
            database.relation_broken,
            self.slurmctld.on.slurmctld_ready,
            self.slurmctld.on.slurmctld_disconnected,
        )

    def reconcile(self, config: SlurmdbdConfig) -> None:
        """Ask for the database; write slurmdbd.conf and both keys; (re)start; publish.

        Without either integration slurmdbd is stopped and its files (the password, the
        key) deleted. With both but incomplete or invalid data, a running slurmdbd is left
        alone: `statuses` says what is missing.
        """
        self.unit.set_ports(SLURMDBD_PORT)
        self.database.request()
        if not self.database.is_joined() or not self.slurmctld.is_joined():
            self._stand_down()
            return
        connection = self.database.connection()
        keys = self._keys_or_none()
        if connection is None or keys is None:
            return
        auth_key, jwt_key = keys
        self.slurmdbd.key.set(auth_key)
        self.slurmdbd.jwt_key.set(jwt_key)
        self.slurmdbd.write_config(_short_hostname(), _storage(connection))
        wanted = self.slurmdbd.fingerprint()
        if wanted != self._stored.applied or not self.slurmdbd.service.is_active():
            self._stored.applied = ""
            self.slurmdbd.service.enable()
            self.slurmdbd.service.restart()  # ServiceError: blocked with slurmdbd's reason
            self._stored.applied = wanted
            logger.info("slurmdbd started with the database at %s", connection.primary.host)
        self._publish(running=True)

    def statuses(self, config: SlurmdbdConfig) -> Iterable[ops.StatusBase]:
        """Say what is missing: integrations, valid data, the key, a running slurmdbd."""
        if not self.database.is_joined():
            yield ops.BlockedStatus("needs a database integration")
        if not self.slurmctld.is_joined():
            yield ops.BlockedStatus("needs a slurmctld integration")
        if problem := self.database.connection_problem():
            yield ops.BlockedStatus(f"database: {problem}")
            return
        connection = self.database.connection()
        if self.database.is_joined() and connection is None:
            yield ops.WaitingStatus("waiting for database credentials")
        if (slurmctld := self._slurmctld_waiting()) is not None:
            yield slurmctld
            return
        if connection is None or not self.slurmctld.is_joined():
            return
        if self.failure is None and not self.slurmdbd.service.is_active():
            reason = journal_reason(self.slurmdbd.daemon)
            yield ops.BlockedStatus(
                f"slurmdbd is not running: {reason}" if reason else "slurmdbd is not running"
            )
            return
        primary = connection.primary
        yield ops.ActiveStatus(f"accounting in {connection.database} on {primary.host}")

    def _slurmctld_waiting(self) -> ops.StatusBase | None:
        relation = self.slurmctld.relation
        if relation is None:
            return None
        for model in (ControllerData, JwtKeyData):
            if problem := self.slurmctld.problem(model, relation, relation.app):
                return ops.WaitingStatus(problem)
        if not self.slurmctld.is_ready():
            return ops.WaitingStatus("waiting for slurmctld")
        try:
            _base64(self.slurmctld.auth_key(), "auth key")
        except IntegrationError as e:
            return ops.WaitingStatus(f"waiting for slurmctld's auth key: {e}")
        try:
            _base64(self.slurmctld.jwt_key(), "JWT key")
        except IntegrationError as e:
            return ops.WaitingStatus(f"waiting for slurmctld's JWT key: {e}")
        return None

    def _keys_or_none(self) -> tuple[str, str] | None:
        """Return the auth key and the JWT key slurmctld granted (base64 text), or None."""
        if not self.slurmctld.is_ready():
            return None
        try:
            return (
                _base64(self.slurmctld.auth_key(), "auth key"),
                _base64(self.slurmctld.jwt_key(), "JWT key"),
            )
        except IntegrationError as e:
            logger.warning("not configuring slurmdbd: %s", e)
            return None

    def _publish(self, *, running: bool) -> None:
        """Tell slurmctld where this slurmdbd listens, once it runs (leader only)."""
        if not running:
            self.slurmctld.publish_slurmdbd_data(SlurmdbdData(dbds=[]))
            return
        binding = self.model.get_binding(SLURMCTLD)
        address = binding.network.ingress_address if binding is not None else None
        entry = DbdEntry(
            hostname=_short_hostname(),
            address=str(address) if address is not None else None,
            port=SLURMDBD_PORT,
        )
        self.slurmctld.publish_slurmdbd_data(SlurmdbdData(dbds=[entry]))

    def _stand_down(self) -> None:
        """Stop slurmdbd and delete its files, trying every step even if one fails."""
        self._stored.applied = ""
        self._publish(running=False)
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


def _base64(key: str, name: str) -> str:
    """Return `key` if it is base64 text.

    Raises:
        IntegrationError: It is not (the message names the key, never its content).

    """
    try:
        base64.b64decode(key, validate=True)
    except binascii.Error:
        raise IntegrationError(f"the {name} secret does not hold base64 text") from None
    return key


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
    ops.main(SlurmdbdCharm)
