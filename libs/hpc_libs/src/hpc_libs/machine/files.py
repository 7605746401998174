"""Atomic file writes with owner, group and mode.

A file is written to a temporary file in the same directory, given its mode and owner,
flushed, and moved over the target with `os.replace`, so readers never see a partial file
and secrets are never readable by others, not even for a moment.
"""

import contextlib
import os
import pwd
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hpc_libs.errors import SlurmOpsError


def set_owner(path: Path, owner: str, group: str | None) -> None:
    """Give `path` to user `owner` and `group` (default: the owner's primary group).

    This is the only place that resolves user and group names; unit tests replace it to
    record owners without needing those users on the test machine.
    """
    try:
        gid = pwd.getpwnam(owner).pw_gid if group is None else group
        shutil.chown(path, owner, gid)
    except (KeyError, LookupError, OSError) as e:
        raise SlurmOpsError(f"cannot give {path} to {owner}:{group or ''}: {e}") from e


def write_atomic(
    path: Path,
    content: str | bytes,
    *,
    mode: int,
    owner: str = "root",
    group: str | None = None,
) -> None:
    """Replace `path` with `content` atomically, with the given mode and owner.

    Missing parent directories are created (mode 0755, owned by root).

    Raises:
        SlurmOpsError: The file could not be written or given to its owner.

    """
    data = content.encode() if isinstance(content, str) else content
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as e:
        raise SlurmOpsError(f"cannot write {path}: {e}") from e
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        set_owner(tmp, owner, group)
        os.replace(tmp, path)
    except OSError as e:
        raise SlurmOpsError(f"cannot write {path}: {e}") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_if_changed(
    path: Path,
    content: str | bytes,
    *,
    mode: int,
    owner: str = "root",
    group: str | None = None,
) -> bool:
    """Write `path` atomically only if its content or mode differs; return whether it did.

    Callers use the result to decide whether a service must be reconfigured or restarted.
    """
    data = content.encode() if isinstance(content, str) else content
    if read_bytes(path) == data and (path.stat().st_mode & 0o7777) == mode:
        return False
    write_atomic(path, data, mode=mode, owner=owner, group=group)
    return True


def read_bytes(path: Path) -> bytes | None:
    """Return the content of `path`, or None if it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SlurmOpsError(f"cannot read {path}: {e}") from e


def backup(path: Path) -> Path | None:
    """Copy `path` to `<path>_<UTC timestamp>` keeping its mode; None if `path` is missing."""
    if not path.exists():
        return None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}_{stamp}")
    try:
        shutil.copy2(path, target)
    except OSError as e:
        raise SlurmOpsError(f"cannot back up {path}: {e}") from e
    return target
