"""The accounting database daemon: slurmdbd.conf holds the database password, so 0600 slurm.

slurmdbd checks the tokens the REST API passes on (`AuthAltTypes=auth/jwt`) with the cluster's
JWT key, the same as slurmctld's, in /etc/slurm/jwt_hs256.key (0600 slurm).

Two slurmdbd hosts run active and backup (`DbdHost`, `DbdBackupHost`): both read the same
slurmdbd.conf; the backup connects to the primary at `DbdAddr` and takes control as soon as
that connection fails, and gives it back when the primary answers again (Slurm 24.11). A host
named in neither key cannot run slurmdbd ("This host not configured to run SlurmDBD").

Operators add their own settings with `parse_parameters` (the `slurmdbd-conf-parameters`
option): only the keys in `PARAMETER_RULES`, each value checked by its rule; the keys in
`OWNED_KEYS` are the charm's.
"""

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from slurmutils import ModelError, SlurmdbdConfig, SlurmdbdConfigEditor

from hpc_libs.errors import ConfigError, SlurmOpsError
from hpc_libs.machine import files
from hpc_libs.slurm import grammar
from hpc_libs.slurm.base import JWT_KEY_NAME, ConfigFile, KeyFile, SlurmManager
from hpc_libs.slurm.ports import SLURMDBD_PORT

STORAGE_TYPE = "accounting_storage/mysql"
AUTH_TYPE = "auth/slurm"
AUTH_ALT_TYPES = ["auth/jwt"]
PID_FILE = "/run/slurmdbd/slurmdbd.pid"
LOG_FILE = "/var/log/slurm/slurmdbd.log"
_TCP_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column

OWNED_KEYS = (
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
)
"""slurmdbd.conf keys the charm sets (hosts, ports, authentication, the database connection,
files and the user): `slurmdbd-conf-parameters` refuses them, naming the key."""

Normaliser = Callable[[str], str]
"""Turn an accepted value into the spelling slurmutils reads (Slurm reads either)."""

_TRUE_WORDS = frozenset({"yes", "true", "up", "1"})
_LEVELS = (
    *("quiet", "fatal", "error", "info", "verbose"),
    *("debug", "debug2", "debug3", "debug4", "debug5"),
)
_DEBUG_FLAGS = (
    "AuditRPCs",
    "DB_Archive",
    "DB_Assoc",
    "DB_Event",
    "DB_Job",
    "DB_QOS",
    "DB_Query",
    "DB_Reservation",
    "DB_Resource",
    "DB_Step",
    "DB_TRES",
    "DB_Usage",
    "DB_WCKey",
    "Federation",
    "Network",
    "NetworkRaw",
    "TLS",
)
_PATH_RE = re.compile(r"/[A-Za-z0-9_.+/-]*")
_PURGE_RE = re.compile(r"(?P<count>[0-9]+)(?P<unit>hours?|days?|months?)?", re.IGNORECASE)
_MAX_PURGE = 0xFFFF
"""Slurm keeps a purge age in the low 16 bits (SLURMDB_PURGE_BASE); above, it is garbled."""


def _yes_no(value: str) -> str:
    return "yes" if value.lower() in _TRUE_WORDS else "no"


def _lower(value: str) -> str:
    return value.lower()


def _same(value: str) -> str:
    return value


def _path(value: str) -> None:
    """Check an absolute path of letters, digits and `_.+/-`, with no `..` component."""
    grammar.pattern(_PATH_RE, "an absolute path")(value)
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} holds '..'")


def _purge_age(value: str) -> None:
    """Check a Purge*After age as Slurm reads it: 1 to 65535, then hours, days or months."""
    grammar.token(value)
    match = _PURGE_RE.fullmatch(value)
    if match is None or not value.isascii():
        raise ValueError(f"{value!r} is not a number with an optional hours, days or months unit")
    if not 1 <= int(match["count"]) <= _MAX_PURGE:
        raise ValueError(f"{match['count']} is not between 1 and {_MAX_PURGE}")


def _purge_spelling(value: str) -> str:
    """Spell a purge age with its unit in full: `12` is Slurm's default unit, `12months`.

    slurmutils reads a bare number as an integer, which its schema refuses for these keys.
    """
    match = _PURGE_RE.fullmatch(value)
    if match is None:
        return value
    unit = (match["unit"] or "months").lower()
    return f"{int(match['count'])}{unit if unit.endswith('s') else unit + 's'}"


_YES_NO: tuple[grammar.Validator, Normaliser] = (grammar.yes_no, _yes_no)
_PURGE: tuple[grammar.Validator, Normaliser] = (_purge_age, _purge_spelling)
_SECONDS: tuple[grammar.Validator, Normaliser] = (grammar.UINT16, _same)

PARAMETER_RULES: Mapping[str, tuple[grammar.Validator, Normaliser]] = {
    "AllowNoDefAcct": _YES_NO,
    "AllResourcesAbsolute": _YES_NO,
    "ArchiveDir": (_path, _same),
    "ArchiveEvents": _YES_NO,
    "ArchiveJobs": _YES_NO,
    "ArchiveResvs": _YES_NO,
    "ArchiveScript": (_path, _same),
    "ArchiveSteps": _YES_NO,
    "ArchiveSuspend": _YES_NO,
    "ArchiveTXN": _YES_NO,
    "ArchiveUsage": _YES_NO,
    "CommitDelay": _SECONDS,
    "DebugFlags": (grammar.list_of(grammar.one_of(*_DEBUG_FLAGS)), _lower),
    "DebugLevel": (grammar.one_of(*_LEVELS), _lower),
    "DebugLevelSyslog": (grammar.one_of(*_LEVELS), _lower),
    "DefaultQOS": (grammar.NAME, _same),
    "DisableCoordDBD": _YES_NO,
    "HashPlugin": (grammar.one_of("hash/k12", "hash/sha3"), _lower),
    "LogTimeFormat": (grammar.log_time_format, _lower),
    "MaxQueryTimeRange": (grammar.time_value, _same),
    "MessageTimeout": _SECONDS,
    "Parameters": (grammar.one_of("PreserveCaseUser"), _lower),
    "PrivateData": (
        grammar.list_of(
            grammar.one_of("accounts", "events", "jobs", "reservations", "usage", "users")
        ),
        _lower,
    ),
    "PurgeEventAfter": _PURGE,
    "PurgeJobAfter": _PURGE,
    "PurgeResvAfter": _PURGE,
    "PurgeStepAfter": _PURGE,
    "PurgeSuspendAfter": _PURGE,
    "PurgeTXNAfter": _PURGE,
    "PurgeUsageAfter": _PURGE,
    "TCPTimeout": _SECONDS,
    "TrackSlurmctldDown": _YES_NO,
    "TrackWCKey": _YES_NO,
}
"""The slurmdbd.conf keys operators may set (slurmdbd.conf(5), Slurm 24.11), with the rule each
value obeys and its spelling for slurmutils. Other keys are refused: the charm's (`OWNED_KEYS`)
and those whose values hold `=` (CommunicationParameters), which the token rule forbids."""

_OWNED = {key.lower(): key for key in OWNED_KEYS}
_SUPPORTED = {key.lower(): key for key in PARAMETER_RULES}


def parse_parameters(text: str) -> dict[str, str]:
    """Parse operator `key=value` settings for slurmdbd.conf, separated by blanks or lines.

    Returns the values as slurmutils reads them, under the keys as slurmdbd.conf(5) spells
    them. Keys are matched in any case, as Slurm does. Every value obeys Slurm's token rule
    (no blank, quote, `#`, `=` or backslash), so a setting can never add a line or a key.

    Raises:
        ConfigError: Naming the first bad key: not `key=value`, the charm's own key, an
            unknown key, a key given twice, or a value its rule refuses.

    """
    settings: dict[str, str] = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"{item!r} is not key=value", key=key)
        if (owned := _OWNED.get(key.lower())) is not None:
            raise ConfigError(f"key {owned!r} is set by the charm", key=owned)
        name = _SUPPORTED.get(key.lower())
        if name is None:
            raise ConfigError(f"unknown or unsupported key {key!r}", key=key)
        if name in settings:
            raise ConfigError(f"key {name!r} is given twice", key=name)
        rule, normalise = PARAMETER_RULES[name]
        try:
            rule(value)
        except ValueError as e:
            raise ConfigError(f"invalid {name}: {e}", key=name) from None
        settings[name] = normalise(value)
        _field(name, settings[name])  # What the writer does with it, so it fails here.
    return settings


def _field(name: str, value: str) -> dict[str, object]:
    """One accepted setting as the slurmutils field the writer renders, checked by rendering.

    slurmutils types each key: a value is given as text where its schema takes text (a QOS
    named `5` stays the name `5`, as Slurm reads it), else parsed as slurmdbd.conf text.

    Raises:
        ConfigError: slurmutils refuses the value or would not render it (naming the key).

    """
    key = name.lower()
    try:
        try:
            fields = SlurmdbdConfig.from_dict({key: value}).dict()
        except (ModelError, ValueError):
            fields = SlurmdbdConfig.from_str(f"{name}={value}").dict()
        rendered = str(SlurmdbdConfig.from_dict(fields))
    except (ModelError, ValueError) as e:
        raise ConfigError(f"invalid {name}: {e}", key=name) from None
    if list(fields) != [key] or not rendered.startswith(f"{key}="):
        raise ConfigError(f"invalid {name}: {value!r} would be written as {rendered!r}", key=name)
    return fields


def _parameter_fields(parameters: Mapping[str, str]) -> dict[str, object]:
    """`parse_parameters`'s output as slurmutils fields, checked once more, key by key.

    Raises:
        ConfigError: A key or value is refused (see `parse_parameters`).

    """
    text = " ".join(f"{key}={value}" for key, value in parameters.items())
    fields: dict[str, object] = {}
    for key, value in parse_parameters(text).items():
        fields |= _field(key, value)
    return fields


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
        parameters: Mapping[str, str] | None = None,
    ) -> bool:
        """Write slurmdbd.conf atomically (0600, slurm); return whether it changed.

        slurmdbd accepts JWTs signed with the key in `jwt_key` (`AuthAltTypes=auth/jwt`).
        `parameters` are the operator's settings (`parse_parameters`), checked again here;
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
        extra = {k: v for k, v in _parameter_fields(parameters or {}).items() if k not in owned}
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
