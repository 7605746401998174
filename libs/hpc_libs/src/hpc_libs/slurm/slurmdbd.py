"""The accounting database daemon: slurmdbd.conf holds the database password, so 0600 slurm.

slurmdbd checks the tokens the REST API passes on (`AuthAltTypes=auth/jwt`) with the cluster's
JWT key, the same as slurmctld's, in /etc/slurm/jwt_hs256.key (0600 slurm).
"""

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from slurmutils import ModelError, SlurmdbdConfig, SlurmdbdConfigEditor

from hpc_libs.errors import ConfigError, SlurmOpsError
from hpc_libs.machine import files
from hpc_libs.slurm import grammar
from hpc_libs.slurm.base import ConfigFile, KeyFile, SlurmManager

SLURMDBD_PORT = 6819
STORAGE_TYPE = "accounting_storage/mysql"
AUTH_TYPE = "auth/slurm"
AUTH_ALT_TYPES = ["auth/jwt"]
PID_FILE = "/run/slurmdbd/slurmdbd.pid"
LOG_FILE = "/var/log/slurm/slurmdbd.log"


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
            self.etc_dir / "slurmdbd.conf", SlurmdbdConfigEditor(), SlurmdbdConfig, mode=0o600
        )
        self.jwt_key = KeyFile(self.etc_dir / "jwt_hs256.key", size=32, owner=self.user)

    def write_config(self, dbd_host: str, storage: StorageSettings) -> bool:
        """Write slurmdbd.conf atomically (0600, slurm); return whether it changed.

        slurmdbd accepts JWTs signed with the key in `jwt_key` (`AuthAltTypes=auth/jwt`).

        Raises:
            ConfigError: A value breaks Slurm's grammar (the message never holds the password).
            SlurmOpsError: The file could not be written.

        """
        try:
            grammar.hostname(dbd_host)
        except ValueError as e:
            raise ConfigError(f"invalid DbdHost: {e}", key="DbdHost") from None
        storage.check()
        try:
            config = SlurmdbdConfig(
                dbdhost=dbd_host,
                dbdport=SLURMDBD_PORT,
                slurmuser=self.user,
                authtype=AUTH_TYPE,
                authalttypes=list(AUTH_ALT_TYPES),
                authaltparameters={"jwt_key": self._machine_path(self.jwt_key.path)},
                storagetype=STORAGE_TYPE,
                storagehost=storage.host,
                storageport=storage.port,
                storageuser=storage.user,
                storagepass=storage.password,
                storageloc=storage.database,
                pidfile=PID_FILE,
                logfile=LOG_FILE,
            )
        except ModelError:
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

    def remove_files(self) -> bool:
        """Delete slurmdbd.conf, slurm.key and jwt_hs256.key; return whether one existed.

        Raises:
            SlurmOpsError: A file exists but cannot be deleted.

        """
        removed = False
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

    def set_start_options(self, options: str = "") -> bool:
        """Write `SLURMDBD_OPTIONS`; return whether /etc/default/slurmdbd changed."""
        return self.options.write({self.options_variable: options})
