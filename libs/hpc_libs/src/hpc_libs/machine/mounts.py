"""Whether a path is a real mount, for a filesystem mounted lazily by autofs or hung on NFS.

`Path.is_mount` is not enough: the filesystem-client charm mounts through an autofs direct
map, so until something opens the directory `/proc/self/mountinfo` shows only an `autofs`
trigger at the path, and `os.stat` run in the charm's own process can hang for ever on a dead
NFS server. `check_mount` therefore first lists the directory with `ls` through `host.run`,
bounded by a timeout (opening a directory triggers the automount, `stat` alone does not), and
then reads mountinfo: the path is mounted when an entry other than `autofs` sits at it.
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host

logger = logging.getLogger(__name__)

MOUNTINFO = Path("/proc/self/mountinfo")
ACCESS_TIMEOUT = 15.0
"""Seconds to let the first access mount the filesystem (or to give up on a hung server)."""
AUTOFS = "autofs"


@dataclass(frozen=True)
class MountEntry:
    """One line of `/proc/<pid>/mountinfo` (see proc_pid_mountinfo(5)); paths unescaped."""

    mount_id: int
    parent_id: int
    root: str
    mount_point: str
    options: str
    fstype: str
    source: str


@dataclass(frozen=True)
class MountCheck:
    """What `check_mount` found: `problem` says why the path is not usable (None: mounted)."""

    path: str
    fstype: str | None = None
    source: str | None = None
    problem: str | None = None

    @property
    def mounted(self) -> bool:
        """Whether a real filesystem (not only an autofs trigger) is mounted at the path."""
        return self.problem is None


def unescape(field: str) -> str:
    r"""Undo mountinfo's octal escapes: `\040` space, `\011` tab, `\012` newline, `\134` `\`."""
    out: list[str] = []
    i = 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse mountinfo text; malformed lines are logged and skipped.

    A line is `id parent major:minor root mount-point options [optional fields...] - fstype
    source super-options`; the optional fields end at the lone `-`.
    """
    entries: list[MountEntry] = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            separator = fields.index("-", 6)
            entries.append(
                MountEntry(
                    mount_id=int(fields[0]),
                    parent_id=int(fields[1]),
                    root=unescape(fields[3]),
                    mount_point=unescape(fields[4]),
                    options=fields[5],
                    fstype=fields[separator + 1],
                    source=unescape(fields[separator + 2]),
                )
            )
        except (ValueError, IndexError):
            if line.strip():
                logger.warning("skipping unreadable mountinfo line %r", line)
    return entries


def mounts_at(path: str, mountinfo: Path = MOUNTINFO) -> list[MountEntry]:
    """Return the entries at `path` (absolute, without symlinks), in mountinfo order.

    Raises:
        SlurmOpsError: mountinfo cannot be read.

    """
    try:
        text = mountinfo.read_text(errors="surrogateescape")
    except OSError as e:
        raise SlurmOpsError(f"cannot read {mountinfo}: {e}") from e
    wanted = path.rstrip("/") or "/"
    return [entry for entry in parse_mountinfo(text) if entry.mount_point == wanted]


def access(path: str, *, timeout: float = ACCESS_TIMEOUT) -> str | None:
    """Open the directory `path` in a child process (triggers autofs); None or why it failed.

    The child is killed after `timeout` seconds, so a hung NFS server cannot hang the hook.
    """
    try:
        result = host.run(["ls", "-A", "--", f"{path.rstrip('/')}/"], timeout=timeout, check=False)
    except SlurmOpsError as e:
        return f"cannot access {path}: {'timed out' if e.timed_out else e}"
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        return lines[-1] if lines else f"cannot access {path}"
    return None


def check_mount(
    path: str | Path, *, mountinfo: Path = MOUNTINFO, timeout: float = ACCESS_TIMEOUT
) -> MountCheck:
    """Access `path`, then tell whether a real filesystem is mounted there.

    `path` is absolute and canonical (no symlink in it), as mountinfo lists mount points.
    """
    where = str(path)
    if failure := access(where, timeout=timeout):
        return MountCheck(where, problem=failure)
    try:
        entries = mounts_at(where, mountinfo)
    except SlurmOpsError as e:
        return MountCheck(where, problem=e.message)
    real = [entry for entry in entries if entry.fstype != AUTOFS]
    if real:
        return MountCheck(where, fstype=real[-1].fstype, source=real[-1].source)
    if entries:
        return MountCheck(
            where, fstype=AUTOFS, problem=f"{where} is an autofs trigger not mounted"
        )
    return MountCheck(where, problem=f"{where} is not a mount point")
