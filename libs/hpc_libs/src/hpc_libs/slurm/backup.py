"""Backups taken before a Slurm major upgrade: slurmctld's StateSaveLocation, slurmdbd's database.

Slurm's upgrade guide asks for both before slurmctld or slurmdbd runs a new major: the new
daemon converts the state files and the database in place, and neither converts back. A
backup is kept in `BACKUP_DIR` (root's, 0700) until the operator removes it; each file is
root's and 0600, created with `O_EXCL | O_NOFOLLOW` so no planted link or file is written
through. `list_backups` answers the charms' `list-backups` action.

- StateSaveLocation (slurm's directory) is archived with `tar`, which stores a symbolic link
  as a link and never follows one below the directory; the directory itself is refused when
  it is a link.
- The database is dumped with `mysqldump` through the account slurmdbd uses (the
  `database` integration's), its password in a 0600 defaults file beside the dump, deleted
  afterwards; the dump is one consistent transaction (`--single-transaction`, InnoDB).
"""

import contextlib
import os
import stat
import time
from collections.abc import Generator
from pathlib import Path

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import apt, files, host

BACKUP_DIR = Path("var/backups/slurm-charms")
"""Where backups are kept, relative to the manager's root."""
ARCHIVE_TIMEOUT = 1800.0
"""Seconds for archiving StateSaveLocation or dumping the database (large sites)."""
MYSQL_CLIENT = "default-mysql-client"
"""The package with `mysqldump` (MySQL's or MariaDB's, whichever the release defaults to)."""
MYSQL_CLIENTS = (MYSQL_CLIENT, "mariadb-client", "mysql-client")
"""Packages that ship `mysqldump`: with one installed, nothing is installed."""


def backup_dir(root: Path) -> Path:
    """Create the backup directory (root's, 0700) if missing; return it.

    Raises:
        SlurmOpsError: A component is a link or the directory cannot be made.

    """
    path = root / BACKUP_DIR
    files.make_dir(path, mode=0o700, owner="root", group="root", under=root)
    return path


def list_backups(root: Path) -> list[Path]:
    """Return the backups kept (regular files of the backup directory), oldest first."""
    path = root / BACKUP_DIR
    try:
        entries = [p for p in path.iterdir() if stat.S_ISREG(p.lstat().st_mode)]
    except FileNotFoundError:
        return []
    return sorted(entries, key=lambda p: (p.lstat().st_mtime, p.name))


def backup_name(what: str, from_major: str, to_major: str) -> str:
    """`<what>-<from>-to-<to>-<UTC time>`: what was saved, and before which upgrade."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{what}-{from_major}-to-{to_major}-{stamp}"


@contextlib.contextmanager
def _new_file(path: Path) -> Generator[None]:
    """Create `path` empty (0600, root's, never through a link); remove it if the block fails."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        raise SlurmOpsError(f"cannot create the backup {path}: {e}") from e
    os.close(fd)
    try:
        yield
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def archive_state(state_dir: Path, root: Path, name: str) -> Path:
    """Archive StateSaveLocation `state_dir` to `<backup dir>/<name>.tar.gz`; return its path.

    Raises:
        SlurmOpsError: `state_dir` is a link or not a directory, or tar failed (no partial
            archive is left).

    """
    try:
        mode = state_dir.lstat().st_mode
    except OSError as e:
        raise SlurmOpsError(f"cannot back up {state_dir}: {e}") from e
    if not stat.S_ISDIR(mode):
        raise SlurmOpsError(f"cannot back up {state_dir}: not a directory (a link is refused)")
    target = backup_dir(root) / f"{name}.tar.gz"
    with _new_file(target):
        host.run(
            [
                "tar",
                "--create",
                "--gzip",
                "--file",
                str(target),
                "--directory",
                str(state_dir.parent),
                "--",
                state_dir.name,
            ],
            timeout=ARCHIVE_TIMEOUT,
        )
    return target


def dump_database(
    root: Path, name: str, *, host_name: str, port: int, user: str, password: str, database: str
) -> Path:
    """Dump `database` through the account `user` to `<backup dir>/<name>.sql`; return its path.

    Installs the MySQL client first unless a package with `mysqldump` is installed.

    Raises:
        SlurmOpsError: The client cannot be installed, or the dump failed (no partial dump
            is left).

    """
    if all(apt.installed_version(p) is None for p in MYSQL_CLIENTS):
        apt.install([MYSQL_CLIENT])
    directory = backup_dir(root)
    target = directory / f"{name}.sql"
    credentials = directory / f".{name}.cnf"
    with _new_file(target):
        files.write_atomic(
            credentials,
            f"[client]\nuser={_option(user)}\npassword={_option(password)}\n",
            mode=0o600,
            owner="root",
            group="root",
        )
        try:
            host.run(
                [
                    "mysqldump",
                    f"--defaults-extra-file={credentials}",
                    "--single-transaction",
                    "--routines",
                    f"--host={host_name}",
                    f"--port={port}",
                    f"--result-file={target}",
                    "--",
                    database,
                ],
                timeout=ARCHIVE_TIMEOUT,
            )
        finally:
            credentials.unlink(missing_ok=True)
    return target


def _option(value: str) -> str:
    """Quote a value for a MySQL option file, quoted; new lines cannot be carried."""
    if "\n" in value or "\r" in value:
        raise SlurmOpsError("a database credential holds a new line")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
