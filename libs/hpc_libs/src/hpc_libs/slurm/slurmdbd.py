"""The accounting database daemon: slurmdbd.conf holds the database password, so 0600 slurm.

slurmdbd checks the tokens the REST API passes on (`AuthAltTypes=auth/jwt`) with the cluster's
JWT key, the same as slurmctld's, in /etc/slurm/jwt_hs256.key (0600 slurm).

Two slurmdbd hosts run active and backup (`DbdHost`, `DbdBackupHost`): both read the same
slurmdbd.conf; the backup connects to the primary at `DbdAddr` and takes control as soon as
that connection fails, and gives it back when the primary answers again (Slurm 24.11). A host
named in neither key cannot run slurmdbd ("This host not configured to run SlurmDBD").

Operators add their own settings with `parse_parameters` (the `slurmdbd-conf-parameters`
option, read with the `PARAMETERS` policy): only the keys of `grammar.SLURMDBD_CONF`, each
value checked by its rule; the keys the charm sets are refused.
"""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmutils import ModelError, SlurmdbdConfig, SlurmdbdConfigEditor

from hpc_libs.errors import ConfigError, SlurmOpsError
from hpc_libs.machine import files
from hpc_libs.slurm import grammar, parameters
from hpc_libs.slurm.base import JWT_KEY_NAME, ConfigFile, KeyFile, SlurmManager
from hpc_libs.slurm.ports import SLURMDBD_PORT

STORAGE_TYPE = "accounting_storage/mysql"
AUTH_TYPE = "auth/slurm"
AUTH_ALT_TYPES = ["auth/jwt"]
PID_FILE = "/run/slurmdbd/slurmdbd.pid"
LOG_FILE = "/var/log/slurm/slurmdbd.log"
_TCP_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column

_TRUE_WORDS = frozenset({"yes", "true", "up", "1"})


def _yes_no(value: str) -> str:
    return "yes" if value.lower() in _TRUE_WORDS else "no"


def _rules(rule: grammar.Validator) -> list[str]:
    """Return the lower-case slurmdbd.conf keys whose values `rule` checks."""
    return [key.lower() for key, each in grammar.SLURMDBD_CONF.items() if each is rule]


_OWNED_REASON = (
    "is the charm's: it sets the hosts, ports, authentication, database connection, files and user"
)

PARAMETERS = parameters.Policy(
    SlurmdbdConfig,
    owned=parameters.owned_by(
        _OWNED_REASON,
        "AuthAltParameters",
        "AuthAltTypes",
        "AuthInfo",
        "AuthType",
        "DbdAddr",
        "DbdBackupHost",
        "DbdHost",
        "DbdPort",
        "LogFile",
        "PidFile",
        "PluginDir",
        "SlurmUser",
        "StorageBackupHost",
        "StorageHost",
        "StorageLoc",
        "StorageParameters",
        "StoragePass",
        "StoragePort",
        "StorageType",
        "StorageUser",
    ),
    spelling={
        **dict.fromkeys(_rules(grammar.yes_no), _yes_no),
        **dict.fromkeys(_rules(grammar.purge_age), grammar.purge_spelling),
        **dict.fromkeys(
            ("debugflags", "debuglevel", "debuglevelsyslog", "hashplugin", "logtimeformat"),
            str.lower,
        ),
        **dict.fromkeys(("parameters", "privatedata"), str.lower),
    },
    text_values=True,
)
"""`slurmdbd-conf-parameters`: blank-separated, the keys of `grammar.SLURMDBD_CONF` only; the
keys the charm sets are refused. Values are spelled as slurmutils reads them (Slurm reads
either): booleans `yes`/`no`, purge ages with their unit, enumerations in lower case."""


def parse_parameters(text: str) -> dict[str, Any]:
    """Parse operator `key=value` settings for slurmdbd.conf, separated by blanks or lines.

    Returns slurmutils fields (`PARAMETERS`; `hpc_libs.slurm.parameters` says what is checked).

    Raises:
        ConfigError: Naming the first bad key.

    """
    return parameters.parse(PARAMETERS, text)


def _checked(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`parse_parameters`'s fields, rendered and read again with the same checks.

    Raises:
        ConfigError: A key or value is refused (see `parse_parameters`).

    """
    try:
        text = " ".join(str(SlurmdbdConfig.from_dict({k: v})) for k, v in fields.items())
    except (ModelError, ValueError):
        raise ConfigError("slurmutils refused the slurmdbd.conf settings") from None
    return parse_parameters(text)


@dataclass(frozen=True)
class DbdHosts:
    """The slurmdbd hosts: `DbdHost` (the primary), its address, and `DbdBackupHost`."""

    primary: str
    address: str | None = None
    backup: str | None = None

    def check(self) -> None:
        """Raise ConfigError naming the key if a host breaks Slurm's grammar."""
        for key, value, rule in (
            ("DbdHost", self.primary, grammar.hostname),
            ("DbdAddr", self.address, grammar.host),
            ("DbdBackupHost", self.backup, grammar.hostname),
        ):
            try:
                if value is not None:
                    rule(value)
            except ValueError as e:
                raise ConfigError(f"invalid {key}: {e}", key=key) from None


@dataclass(frozen=True)
class StorageSettings:
    """Where slurmdbd keeps its records: a MySQL server, database and account.

    Every value is checked against Slurm's token rule before it reaches slurmdbd.conf
    (`check`). `password` is never in `repr`.
    """

    host: str
    port: int
    database: str
    user: str
    password: str = field(repr=False)

    def check(self) -> None:
        """Raise ConfigError naming the key (never the password) if a value is not a token."""
        for key, value in (
            ("StorageHost", self.host),
            ("StorageLoc", self.database),
            ("StorageUser", self.user),
        ):
            try:
                grammar.token(value)
            except ValueError as e:
                raise ConfigError(f"invalid {key}: {e}", key=key) from None
        try:
            grammar.host(self.host)
            grammar.port(str(self.port))
            grammar.token(self.password)
        except ValueError:
            raise ConfigError("invalid StorageHost, StoragePort or StoragePass") from None


class SlurmdbdManager(SlurmManager):
    """slurmdbd: packages, service, slurm.key, jwt_hs256.key and slurmdbd.conf (0600)."""

    daemon = "slurmdbd"
    packages = ("slurmdbd", "slurm-wlm-jwt-plugin")

    def __init__(self, root: Path = Path("/")) -> None:
        super().__init__(root)
        self.config = ConfigFile(
            self.etc_dir / "slurmdbd.conf",
            SlurmdbdConfigEditor(),
            SlurmdbdConfig,
            mode=0o600,
            slurm_check="slurmdbd.conf",
        )
        self.jwt_key = KeyFile(self.etc_dir / JWT_KEY_NAME, size=32, owner=self.user)

    def write_config(
        self,
        hosts: DbdHosts,
        storage: StorageSettings,
        parameters: Mapping[str, Any] | None = None,
    ) -> bool:
        """Write slurmdbd.conf atomically (0600, slurm); return whether it changed.

        slurmdbd accepts JWTs signed with the key in `jwt_key` (`AuthAltTypes=auth/jwt`).
        `parameters` are the operator's settings (`parse_parameters`'s fields), rendered and
        parsed again here;
        they never replace a key the charm sets. `DbdAddr` is written only with a backup,
        which reaches the primary there.

        Raises:
            ConfigError: A value breaks Slurm's grammar (the message never holds the password).
            SlurmOpsError: The file could not be written.

        """
        hosts.check()
        storage.check()
        owned: dict[str, object] = {"dbdhost": hosts.primary}
        if hosts.backup is not None:
            owned |= {"dbdaddr": hosts.address or hosts.primary, "dbdbackuphost": hosts.backup}
        owned |= {
            "dbdport": SLURMDBD_PORT,
            "slurmuser": self.user,
            "authtype": AUTH_TYPE,
            "authalttypes": list(AUTH_ALT_TYPES),
            "authaltparameters": {"jwt_key": self._machine_path(self.jwt_key.path)},
            "storagetype": STORAGE_TYPE,
            "storagehost": storage.host,
            "storageport": storage.port,
            "storageuser": storage.user,
            "storagepass": storage.password,
            "storageloc": storage.database,
            "pidfile": PID_FILE,
            "logfile": LOG_FILE,
        }
        # The operator's keys come after the charm's and can never replace one of them.
        extra = {k: v for k, v in _checked(parameters or {}).items() if k not in owned}
        try:
            config = SlurmdbdConfig.from_dict(owned | extra)
        except (ModelError, ValueError):
            raise ConfigError("slurmutils refused the slurmdbd.conf settings") from None
        return self.config.write(config)

    def fingerprint(self) -> str:
        """Return a digest of what slurmdbd reads at start: slurmdbd.conf and both keys.

        The charm records it after a successful restart and restarts whenever the files'
        digest differs, so a failed restart is retried. It reveals nothing of their content.
        """
        digest = hashlib.sha256()
        for path in self._files():
            data = files.read_bytes(path)
            digest.update(b"-" if data is None else b"+" + hashlib.sha256(data).digest())
        return digest.hexdigest()

    def serving(self) -> bool:
        """Return whether a socket of this machine listens on slurmdbd's port.

        A backup slurmdbd listens only while it is in control (verified on Slurm 24.11: in
        standby it connects to the primary and refuses connections itself). Read from the
        kernel's socket tables, so no command runs.

        Raises:
            SlurmOpsError: A socket table exists but cannot be read.

        """
        port = f"{SLURMDBD_PORT:04X}"
        for table in ("tcp", "tcp6"):
            data = files.read_bytes(self.root / "proc/net" / table)
            for line in (data or b"").decode(errors="replace").splitlines()[1:]:
                fields = line.split()
                listening = len(fields) > 3 and fields[3] == _TCP_LISTEN
                if listening and fields[1].rpartition(":")[2] == port:
                    return True
        return False

    def remove_files(self) -> bool:
        """Delete slurmdbd.conf, slurm.key, slurm.jwks and jwt_hs256.key; True if one existed.

        Raises:
            SlurmOpsError: A file exists but cannot be deleted.

        """
        removed = self.key.remove_key_set()
        for path in self._files():
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as e:
                raise SlurmOpsError(f"cannot delete {path}: {e}") from e
            removed = True
        return removed

    def _machine_path(self, path: Path) -> str:
        """`path` as slurmdbd sees it: absolute on the machine, without this manager's root."""
        return str(Path("/") / path.relative_to(self.root))

    def _files(self) -> tuple[Path, ...]:
        """Return the files slurmdbd reads at start, which the charm writes and deletes."""
        return (self.config.path, self.key.path, self.jwt_key.path)
