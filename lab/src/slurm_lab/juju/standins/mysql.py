"""A stand-in for the `mysql` charm (channel 8.0/stable), implemented by the backend itself.

`juju deploy mysql` on the lab (no local charm of that name) deploys it: each unit is a lab
machine running the MariaDB server of the lab's base image, listening on the lab network. Over
its `database` endpoint (interface `mysql_client`) it answers the requirer as the mysql charm
does, in the v0 `data_interfaces` wire format (application databags, plain strings):

* when the requirer's `database` appears (a name of letters, digits and `_`; anything else is
  logged and ignored), the leader creates that database and a user `relation-<id>` with a
  random password, allowed from any host and granted everything on the database;
* it publishes `endpoints` and `read-only-endpoints` (`<unit address>:3306`), `database` and
  `version` (the server's own), and the credentials: as `secret-user`, the URI of a Juju secret
  owned by the stand-in application (`username`, `password`) granted to the relation, when the
  requirer sent `requested-secrets`; else as plain `username` and `password` fields;
* `LabJuju.rotate_mysql_password()` sets a new password on the server and adds a revision to
  the secret: the engine queues secret-changed on the units that read it, as Juju does;
* relation-broken drops the user (the database and its records stay, as with the real charm).

Differences from the real charm: one MariaDB server per unit, no replication (a second unit is
another, empty server), no TLS, no `secret-tls`, no actions.
"""

from __future__ import annotations

import re
import secrets
import string
from typing import ClassVar

from slurm_lab.juju.model import JsonDict, Relation, Secret, SecretRevision, StatusValue, Unit
from slurm_lab.juju.standins.base import Endpoints, StandIn

MYSQL_PORT = 3306
_DATABASE_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
_PASSWORD_ALPHABET = string.ascii_letters + string.digits


def _password() -> str:
    return "".join(secrets.choice(_PASSWORD_ALPHABET) for _ in range(32))


def _quote(text: str) -> str:
    """Return a SQL string literal for a value from [A-Za-z0-9_-] (checked by callers)."""
    return "'" + text + "'"


class MysqlStandIn(StandIn):
    """Hooks of the mysql stand-in, and its password rotation."""

    KIND = "mysql"
    ENDPOINTS: ClassVar[Endpoints] = {"database": ("provider", {"interface": "mysql_client"})}

    # --- hooks -----------------------------------------------------------------------------------

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        kind = event["kind"]
        if kind == "install":
            self._install(unit)
            return
        related = self.event_relation(unit, event)
        if related is None or related[1] != "database" or not self.is_leader(unit):
            return
        rel = related[0]
        if kind == "relation_changed":
            self._provide(unit, rel)
        elif kind == "relation_broken":
            self._sql(unit, f"DROP USER IF EXISTS {_quote(_username(rel))}@'%';")

    def _install(self, unit: Unit) -> None:
        result = self.run(unit, "mysql-setup.sh")
        if result.returncode != 0:
            message = f"mariadb failed: {result.stderr.strip()}"
            self.block(unit, message, log=f"mariadb setup: {result.stderr}")
            return
        unit.workload = StatusValue("active", "Primary")
        self.ctl.log(unit, "INFO", "mariadb running on port 3306")

    def _provide(self, unit: Unit, rel: Relation) -> None:
        requirer = rel.other_app(unit.app)
        request = rel.app_data.get(requirer, {})
        database = request.get("database", "")
        if not database:
            return
        if not _DATABASE_RE.fullmatch(database):
            self.ctl.log(unit, "WARNING", f"ignoring invalid database name {database[:80]!r}")
            return
        user = _username(rel)
        secret = self._user_secret(unit, rel)
        password = secret.latest.content["password"] if secret else _password()
        created = self._sql(
            unit,
            f"CREATE DATABASE IF NOT EXISTS `{database}`;\n"
            f"CREATE USER IF NOT EXISTS {_quote(user)}@'%' IDENTIFIED BY {_quote(password)};\n"
            f"ALTER USER {_quote(user)}@'%' IDENTIFIED BY {_quote(password)};\n"
            f"GRANT ALL PRIVILEGES ON `{database}`.* TO {_quote(user)}@'%';\n",
        )
        if not created:
            return
        endpoint = f"{unit.address}:{MYSQL_PORT}"
        bag = {
            "database": database,
            "endpoints": endpoint,
            "read-only-endpoints": endpoint,
            "version": self._version(unit),
        }
        if "requested-secrets" in request:
            if secret is None:
                secret = self._new_secret(unit, rel, user, password)
            bag["secret-user"] = secret.id
        else:
            bag |= {"username": user, "password": password}
        self.publish_app(unit, rel, bag)

    def _user_secret(self, unit: Unit, rel: Relation) -> Secret | None:
        label = _secret_label(rel)
        return next(
            (
                s
                for s in self.ctl.model.secrets.values()
                if s.owner == unit.app and s.label == label
            ),
            None,
        )

    def _new_secret(self, unit: Unit, rel: Relation, user: str, password: str) -> Secret:
        secret = Secret(
            id=f"secret:{secrets.token_hex(10)}",
            owner=unit.app,
            owner_kind="app",
            revisions=[SecretRevision(1, {"username": user, "password": password})],
            label=_secret_label(rel),
            grants={str(rel.id): [rel.other_app(unit.app)]},
        )
        self.ctl.model.secrets[secret.id] = secret
        return secret

    def _version(self, unit: Unit) -> str:
        result = self.ctl.machine(unit).exec(["mariadb", "-N", "-B", "-e", "SELECT VERSION()"])
        return result.stdout.strip() if result.returncode == 0 else ""

    def _sql(self, unit: Unit, sql: str) -> bool:
        """Run SQL as root through the local socket (statements on stdin); whether it worked."""
        result = self.ctl.machine(unit).exec(["mariadb"], input=sql, timeout=60)
        if result.returncode != 0:
            self.block(unit, f"mariadb: {result.stderr.strip()}")
            return False
        return True

    # --- lab API ---------------------------------------------------------------------------------

    def rotate_password(self, app: str) -> int:
        """Give every relation user of `app` a new password; return how many were rotated.

        The server is changed first, then the secret gets a new revision, and the units that
        read it are queued a secret-changed (as the engine does for charm-owned secrets).
        """
        model = self.ctl.model
        leader = model.units[model.apps[app].leader or ""]
        rotated = 0
        for rel in model.relations_of(app):
            secret = self._user_secret(leader, rel)
            if secret is None:
                continue
            user, password = _username(rel), _password()
            if not self._sql(
                leader, f"ALTER USER {_quote(user)}@'%' IDENTIFIED BY {_quote(password)};"
            ):
                continue
            revision = secret.latest.revision + 1
            secret.revisions.append(
                SecretRevision(revision, {"username": user, "password": password})
            )
            for consumer_unit, consumer in sorted(secret.consumers.items()):
                if consumer.tracked < revision:
                    self.ctl.enqueue(consumer_unit, "secret_changed", secret_id=secret.id)
            self.ctl.log(leader, "INFO", f"new password for {user} (secret revision {revision})")
            rotated += 1
        return rotated


def _username(rel: Relation) -> str:
    return f"relation-{rel.id}"


def _secret_label(rel: Relation) -> str:
    return f"database.{rel.id}.user.secret"


__all__ = ["MysqlStandIn"]
