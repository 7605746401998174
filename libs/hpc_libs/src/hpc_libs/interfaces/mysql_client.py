"""The `mysql_client` integration, requirer side, as the mysql and mysql-router charms speak it.

Those charms speak the **v0** wire format of Canonical's `data_interfaces` library. Both sides
write their **application** databag, with plain string values (not JSON-encoded, unlike
`hpc_libs.interfaces.base`), except `requested-secrets`, which is a JSON list.

The requirer (this module, the leader) writes:

* `database`: the database to create, for example `slurm_acct_db`;
* `requested-secrets`: `["username", "password", "tls", "tls-ca", "uris"]`, which tells the
  provider that this side reads Juju secrets. No `extra-user-roles`: mysql-router blocks on it.

The provider answers:

* `endpoints`: `host:port[,host:port...]` (the mysql charm: the primary first), or
  `file:///path/mysql.sock` (mysql-router as a subordinate: a unix socket on this machine);
* `read-only-endpoints`, `database`, `version`;
* `secret-user`: the URI of a Juju secret owned by the provider and granted to the relation,
  whose content holds `username` and `password`; a password change is a new revision of it
  (`secret-changed` on this side);
* without secrets support (an old provider): plain `username` and `password` fields.

The provider acts when `database` first appears; "created" is when the credentials first
appear. A later change of `endpoints` is a primary switchover. This module raises no events
for those: every `relation-changed` of the endpoint and every `secret-changed` is a chance for
the charm to compare `MysqlConnection.fingerprint()` with what it applied.

Every value is checked before a charm can use it: hosts and ports with Slurm's grammar
(`hpc_libs.slurm.grammar`), the database and user names as MySQL identifiers, the password as
one slurmdbd.conf token. Problems are described without the offending password.

Why not PyPI's `dpcharmlibs-interfaces`: its requirer (`ResourceRequirerEventHandler`) only
speaks v1. It writes `version: "v1"` and a `requests` list and reads `DataContractV1`
answers; its v0 models exist only so a v1 *provider* can read a v0 requirer. The mysql and
mysql-router charms answer v0 requests only, so a requirer must speak v0 until they move.
"""

import json
import logging
import re
from dataclasses import dataclass, field

import ops

from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.base import Interface
from hpc_libs.slurm import grammar

logger = logging.getLogger(__name__)

REQUESTED_SECRETS = ("username", "password", "tls", "tls-ca", "uris")
"""The secret fields a v0 requirer announces it reads (`requested-secrets`)."""
DEFAULT_MYSQL_PORT = 3306
SOCKET_PREFIX = "file://"

_DATABASE_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
_USERNAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,80}")
_MAX_PASSWORD = 256


@dataclass(frozen=True)
class MysqlEndpoint:
    """One `host:port` the provider publishes (validated)."""

    host: str
    port: int


@dataclass(frozen=True)
class MysqlConnection:
    """What a client needs to connect, validated. `password` is never in `repr`."""

    endpoints: tuple[MysqlEndpoint, ...]
    database: str
    username: str
    password: str = field(repr=False)
    version: str | None = None
    read_only_endpoints: tuple[MysqlEndpoint, ...] = ()

    @property
    def primary(self) -> MysqlEndpoint:
        """The first read/write endpoint (the mysql charm lists the primary)."""
        return self.endpoints[0]


class MysqlClientError(IntegrationError):
    """The provider's data cannot be used; the message never holds the password."""


def parse_endpoints(text: str) -> tuple[MysqlEndpoint, ...]:
    """Parse `host:port[,host:port...]`; `[v6]:port` is accepted too.

    Raises:
        MysqlClientError: A unix socket (`file://...`), or an entry that is not host:port.

    """
    if text.startswith(SOCKET_PREFIX):
        raise MysqlClientError(
            f"the database offers only a unix socket ({text[:200]}), which slurmdbd on this "
            "machine cannot use: integrate with mysql directly, not through mysql-router"
        )
    found: list[MysqlEndpoint] = []
    for entry in text.split(","):
        found.append(_endpoint(entry.strip()))
    return tuple(found)


def _endpoint(entry: str) -> MysqlEndpoint:
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        number = rest.removeprefix(":") if sep and rest.startswith(":") else ""
    else:
        host, sep, number = entry.rpartition(":")
        if not sep:
            host, number = entry, str(DEFAULT_MYSQL_PORT)
    try:
        grammar.host(host)
        grammar.port(number)
    except ValueError as e:
        raise MysqlClientError(f"invalid endpoint {entry[:100]!r}: {e}") from None
    return MysqlEndpoint(host, int(number))


def check_database_name(name: str) -> str:
    """Return `name` if it is a plain MySQL database name (letters, digits, `_`, 1-64)."""
    if not _DATABASE_RE.fullmatch(name):
        raise MysqlClientError(f"invalid database name {name[:100]!r}")
    return name


def check_username(name: str) -> str:
    """Return `name` if it is a plain MySQL user name (one token, 1-80 characters)."""
    if not _USERNAME_RE.fullmatch(name):
        raise MysqlClientError(f"invalid database user name {name[:100]!r}")
    return name


def check_password(password: str) -> str:
    """Return `password` if it can be one slurmdbd.conf token; the error never shows it."""
    if not password or len(password) > _MAX_PASSWORD:
        raise MysqlClientError("the database password is empty or too long")
    try:
        grammar.token(password)
    except ValueError:
        raise MysqlClientError(
            "the database password holds whitespace, a quote, '#', '=' or a backslash, which "
            "slurmdbd.conf cannot hold"
        ) from None
    return password


class MysqlRequirer(Interface):
    """The client side of `mysql_client` (v0) on one endpoint, limit 1.

    The charm calls `request()` from its reconcile (idempotent, leader only) and reads
    `connection()`; `connection_problem()` says why there is no usable connection yet.
    """

    def __init__(self, charm: ops.CharmBase, endpoint: str, database: str) -> None:
        super().__init__(charm, endpoint)
        self.database = check_database_name(database)

    def request(self) -> bool:
        """Ask for the database on the relation (leader only); return whether data changed."""
        relation = self.relation
        if relation is None or not self.model.unit.is_leader():
            return False
        wanted = {
            "database": self.database,
            "requested-secrets": json.dumps(list(REQUESTED_SECRETS)),
        }
        bag = relation.data[self.model.app]
        if all(bag.get(k) == v for k, v in wanted.items()):
            return False
        bag.update(wanted)
        return True

    def connection(self) -> MysqlConnection | None:
        """Return the validated connection data; None while not ready or invalid (logged)."""
        try:
            return self._connection()
        except MysqlClientError as e:
            logger.warning("database %s: %s", self.endpoint, e)
            return None

    def connection_problem(self) -> str | None:
        """Why `connection()` is None, for a status; None if ready or not integrated."""
        try:
            self._connection()
        except MysqlClientError as e:
            return str(e)
        return None

    def _connection(self) -> MysqlConnection | None:
        relation = self.relation
        if relation is None:
            return None
        bag = relation.data[relation.app]
        endpoints_text = bag.get("endpoints", "")
        if not endpoints_text:
            return None
        credentials = self._credentials(relation, bag)
        if credentials is None:
            return None
        username, password = credentials
        read_only = bag.get("read-only-endpoints", "")
        version = bag.get("version") or None
        if version is not None:
            try:
                grammar.free_text(version)
            except ValueError:
                version = None  # only informative
        return MysqlConnection(
            endpoints=parse_endpoints(endpoints_text),
            database=check_database_name(bag.get("database") or self.database),
            username=check_username(username),
            password=check_password(password),
            version=version,
            read_only_endpoints=(
                parse_endpoints(read_only)
                if read_only and not read_only.startswith(SOCKET_PREFIX)
                else ()
            ),
        )

    def _credentials(
        self, relation: ops.Relation, bag: ops.RelationDataContent
    ) -> tuple[str, str] | None:
        """(username, password) from `secret-user`, else the plain fields; None if absent."""
        secret_id = bag.get("secret-user")
        if secret_id:
            try:
                grammar.token(secret_id)
                # The tracked revision: SlurmCharm tracks the newest on secret-changed.
                content = self.model.get_secret(id=secret_id).get_content()
            except ValueError:
                raise MysqlClientError("invalid secret-user id") from None
            except (ops.SecretNotFoundError, ops.ModelError) as e:
                raise MysqlClientError(f"cannot read the database credentials secret: {e}") from e
            username, password = content.get("username"), content.get("password")
            if not username or not password:
                raise MysqlClientError(
                    "the database credentials secret lacks username or password"
                )
            return username, password
        username, password = bag.get("username"), bag.get("password")
        if username and password:
            logger.debug(
                "relation %d: the provider shares credentials without secrets", relation.id
            )
            return username, password
        return None


__all__ = [
    "DEFAULT_MYSQL_PORT",
    "REQUESTED_SECRETS",
    "MysqlClientError",
    "MysqlConnection",
    "MysqlEndpoint",
    "MysqlRequirer",
    "check_database_name",
    "check_password",
    "check_username",
    "parse_endpoints",
]
