"""Atomic file writes with owner, group and mode, and directories no symbolic link redirects.

A file is written to a temporary file in the same directory, given its mode and owner,
flushed, and moved over the target with `os.replace`, so readers never see a partial file
and secrets are never readable by others, not even for a moment.

Root also creates, chmods, chowns and copies directories that a less trusted user can write
(slurm owns `/var/lib/slurm/slurmctld`; Debian makes `/var/lib/slurm` slurm's). A path
operation there follows whatever symbolic link that user planted: `chown` of
`/var/lib/slurm/slurmctld` after `ln -s /etc /var/lib/slurm/slurmctld` gives `/etc` to slurm.
So `make_dir` and `copy_tree` never act on a name: they walk from a trusted directory one
component at a time with `O_NOFOLLOW | O_DIRECTORY` file descriptors (`dir_fd=`), create with
`mkdir(dir_fd=)`/`O_CREAT | O_EXCL`, and change modes and owners with `fchmod`/`fchown` on the
descriptor they opened. A symbolic link on the way is refused with a `SlurmOpsError`.
"""

import contextlib
import errno
import grp
import logging
import os
import pwd
import stat
import tempfile
from collections.abc import Collection, Generator
from dataclasses import dataclass
from pathlib import Path

from hpc_libs.errors import SlurmOpsError

logger = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""Open a directory, never through a symbolic link (ELOOP) or on a non-directory (ENOTDIR)."""
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""Open a file to copy: no link followed, and a FIFO planted in its place does not block."""
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
"""Create a new file: never one that exists, never through a link."""
_CHUNK = 1 << 20


def set_owner(path: Path, owner: str, group: str | None, *, fd: int | None = None) -> None:
    """Give `path` to user `owner` and `group` (default: the owner's primary group).

    With `fd` (an open descriptor of `path`) the open file is changed (`fchown`), whatever the
    name points to by now; without it, `path` itself, never what a symbolic link there points
    to. This is the only place that resolves user and group names; unit tests replace it to
    record owners without needing those users on the test machine.
    """
    try:
        user = pwd.getpwnam(owner)
        gid = user.pw_gid if group is None else grp.getgrnam(group).gr_gid
        if fd is None:
            os.chown(path, user.pw_uid, gid, follow_symlinks=False)
        else:
            os.fchown(fd, user.pw_uid, gid)
    except (KeyError, LookupError, OSError) as e:
        raise SlurmOpsError(f"cannot give {path} to {owner}:{group or ''}: {e}") from e


def _open_dir(name: str, dir_fd: int | None, path: Path) -> int:
    """Open directory `name` (in `dir_fd`) without following a link; `path` names it for errors.

    Raises:
        SlurmOpsError: It is a symbolic link or not a directory, or cannot be opened.

    """
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SlurmOpsError(
                f"{path} is a symbolic link or not a directory: refusing to follow it"
            ) from e
        raise SlurmOpsError(f"cannot open {path}: {e}") from e


@contextlib.contextmanager
def open_dir(path: Path, *, under: Path, create: bool = False) -> Generator[int]:
    """Open directory `path` walking down from the trusted directory `under`; yield its fd.

    `under` (an ancestor of `path`, root's and written by no one else: `/`, or a test's
    temporary root) is opened as it is. Every component below it is opened with
    `O_NOFOLLOW | O_DIRECTORY` relative to its parent's descriptor, so no symbolic link on
    the way is followed, even one planted while the walk runs. With `create`, missing
    directories are made (0755, root's: the caller gives the last one its mode and owner).

    Raises:
        ValueError: `path` is not below `under`, or climbs out of it with `..`.
        SlurmOpsError: A component is a symbolic link or not a directory, or an operation
            failed.

    """
    parts = path.relative_to(under).parts
    if ".." in parts:
        raise ValueError(f"{path} climbs out of {under}")
    try:
        fd = os.open(under, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # Trusted: followed.
    except OSError as e:
        raise SlurmOpsError(f"cannot open {under}: {e}") from e
    try:
        where = under
        for name in parts:
            where = where / name
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as e:
                    raise SlurmOpsError(f"cannot create {where}: {e}") from e
            child = _open_dir(name, fd, where)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


MAX_TREE_DEPTH = 16
"""Deepest directory `untrusted_entry` walks into (a tree from elsewhere may be any depth)."""


@dataclass(frozen=True)
class TrustedOwners:
    """Whose files and directories root trusts in a tree others could have written."""

    files: Collection[int]
    dirs: Collection[int]

    def problem(self, info: os.stat_result, path: Path) -> str | None:
        """Why one entry (its `lstat`) is not to be trusted, or None."""
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            return f"{path} is a symbolic link"
        if stat.S_ISDIR(mode):
            owners, what = self.dirs, "directory"
        elif stat.S_ISREG(mode):
            owners, what = self.files, "file"
        else:
            return f"{path} is not a regular file or directory"
        if info.st_uid not in owners:
            return f"{what} {path} is owned by uid {info.st_uid}"
        if mode & 0o022:
            return f"{what} {path} is writable by group or others ({stat.S_IMODE(mode):04o})"
        return None


def untrusted_entry(path: Path, *, under: Path, owners: TrustedOwners) -> str | None:
    """Describe the first entry of tree `path` that root must not trust, or return None.

    Every entry, `path` included, must be a directory or a regular file of one of `owners`,
    writable by neither group nor others: then no one else can change the tree (or replace a
    name in it by a link) once it is checked. The walk is `open_dir`'s from the trusted
    `under`, each entry looked at without following a link, in name order, no deeper than
    `MAX_TREE_DEPTH`.

    Raises:
        ValueError: `path` is not below `under`.
        SlurmOpsError: `path` or a directory in it is a symbolic link or not a directory (it
            changed during the walk), or cannot be read.

    """
    with open_dir(path, under=under) as fd:
        try:
            return _untrusted(fd, path, owners, 0)
        except OSError as e:
            raise SlurmOpsError(f"cannot read {path}: {e}") from e


def _untrusted(fd: int, path: Path, owners: TrustedOwners, depth: int) -> str | None:
    """`untrusted_entry` for the open directory `fd` and what it holds."""
    if (problem := owners.problem(os.fstat(fd), path)) is not None:
        return problem
    if depth >= MAX_TREE_DEPTH:
        return f"{path} is more than {MAX_TREE_DEPTH} directories deep"
    for name in sorted(os.listdir(fd)):
        where = path / name
        entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(entry.st_mode):
            if (problem := owners.problem(entry, where)) is not None:
                return problem
            continue
        child = _open_dir(name, fd, where)
        try:
            found = _untrusted(child, where, owners, depth + 1)
        finally:
            os.close(child)
        if found is not None:
            return found
    return None


def make_dir(
    path: Path, *, mode: int, owner: str, group: str | None = None, under: Path = Path("/")
) -> None:
    """Create directory `path` if missing, give it `mode`, `owner`, `group`; follow no link.

    The walk is `open_dir`'s (from the trusted `under`); the mode and owner are set on the
    opened descriptor. Missing parents are made 0755 and root's.

    Raises:
        ValueError: `path` is not below `under`.
        SlurmOpsError: A component of `path` is a symbolic link or not a directory, or an
            operation failed (nothing outside `path` is changed).

    """
    with open_dir(path, under=under, create=True) as fd:
        set_owner(path, owner, group, fd=fd)
        try:
            os.fchmod(fd, mode)
        except OSError as e:
            raise SlurmOpsError(f"cannot chmod {path}: {e}") from e


def copy_tree(source: Path, target: Path, *, source_under: Path, target_under: Path) -> None:
    """Copy directory `source` to the new directory `target`, with owners, modes and times.

    `source` is reached from the trusted directory `source_under`, `target`'s parent from
    `target_under`, without following a link (`open_dir`), and so is every entry: a symbolic
    link in the tree is copied as a link, a FIFO, socket or device is skipped. Every file is
    created 0600 and every directory 0700, root's; each gets its source's owner and mode only
    once its content is complete, a directory after its entries, `target` itself last. So no
    key is ever readable by others in the copy, and the owner of a source file (slurm) can
    change nothing in the copy while it is made. Missing parents of `target` are made as
    `open_dir` does.

    Raises:
        ValueError: `source` or `target` is not below its trusted directory.
        SlurmOpsError: A component is a symbolic link or not a directory, `target` exists,
            or an operation failed (a partial `target` may remain; the caller removes it).

    """
    with (
        open_dir(source, under=source_under) as source_fd,
        open_dir(target.parent, under=target_under, create=True) as parent_fd,
    ):
        try:
            os.mkdir(target.name, 0o700, dir_fd=parent_fd)
        except OSError as e:
            raise SlurmOpsError(f"cannot create {target}: {e}") from e
        target_fd = _open_dir(target.name, parent_fd, target)
        try:
            _copy_entries(source_fd, target_fd, source, target)
            _give_stat(target_fd, os.fstat(source_fd), target)
        finally:
            os.close(target_fd)


def _copy_entries(source_fd: int, target_fd: int, source: Path, target: Path) -> None:
    for name in sorted(os.listdir(source_fd)):
        where = source / name
        try:
            info = os.stat(name, dir_fd=source_fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(name, dir_fd=source_fd), name, dir_fd=target_fd)
                os.chown(name, info.st_uid, info.st_gid, dir_fd=target_fd, follow_symlinks=False)
            elif stat.S_ISDIR(info.st_mode):
                _copy_dir(name, source_fd, target_fd, source, target)
            elif stat.S_ISREG(info.st_mode):
                _copy_file(name, source_fd, target_fd, target / name)
            else:
                logger.warning("not copying %s: not a file, directory or link", where)
        except OSError as e:
            raise SlurmOpsError(f"cannot copy {where} to {target / name}: {e}") from e


def _copy_dir(name: str, source_fd: int, target_fd: int, source: Path, target: Path) -> None:
    child_source = _open_dir(name, source_fd, source / name)
    try:
        os.mkdir(name, 0o700, dir_fd=target_fd)
        child_target = _open_dir(name, target_fd, target / name)
        try:
            _copy_entries(child_source, child_target, source / name, target / name)
            _give_stat(child_target, os.fstat(child_source), target / name)
        finally:
            os.close(child_target)
    finally:
        os.close(child_source)


def _copy_file(name: str, source_fd: int, target_fd: int, target: Path) -> None:
    reader = os.open(name, _READ_FLAGS, dir_fd=source_fd)
    try:
        info = os.fstat(reader)
        if not stat.S_ISREG(info.st_mode):  # Swapped since it was listed.
            logger.warning("not copying %s: no longer a regular file", target)
            return
        writer = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=target_fd)
        try:
            while chunk := os.read(reader, _CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(writer, view) :]
            _give_stat(writer, info, target)
        finally:
            os.close(writer)
    finally:
        os.close(reader)


def _give_stat(fd: int, info: os.stat_result, path: Path) -> None:
    """Give the open `fd` the owner, then the mode (a chown clears set-id bits), then times."""
    try:
        os.fchown(fd, info.st_uid, info.st_gid)
        os.fchmod(fd, stat.S_IMODE(info.st_mode))
        os.utime(fd, ns=(info.st_atime_ns, info.st_mtime_ns))
    except OSError as e:
        raise SlurmOpsError(f"cannot give {path} its owner and mode: {e}") from e


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
            set_owner(tmp, owner, group, fd=f.fileno())
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
