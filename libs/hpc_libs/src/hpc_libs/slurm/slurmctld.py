"""The Slurm controller daemon: slurm.conf and its companion files, keys, state directory.

Network state (controller high availability): every controller mounts the same shared
filesystem at `/var/lib/slurm/checkpoint`. `StateSaveLocation` lives under it
(`network_state_save_location`) and `/etc/slurm` becomes a symlink to
`<checkpoint>/etc-slurm` (`share_etc`), so every controller reads the same slurm.conf and keys.
Each file is written atomically (a temporary file in the same directory, then a rename), so a
peer never reads half a file, and keys are read from the file on every access (`KeyFile.get`).
"""

import contextlib
import errno
import logging
import os
import pwd
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

from slurmutils import (
    CGroupConfig,
    CGroupConfigEditor,
    GresConfig,
    GresConfigEditor,
    SlurmConfig,
    SlurmConfigEditor,
)

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, systemd
from hpc_libs.slurm.base import JWT_KEY_NAME, ConfigFile, KeyFile, SlurmManager

logger = logging.getLogger(__name__)

LIB_DIR = "var/lib/slurm"
"""State directory and checkpoint: root's here (Debian's package makes it slurm's)."""
CHECKPOINT_DIR = f"{LIB_DIR}/checkpoint"
"""Where the shared filesystem is mounted (relative to the manager's root)."""
SHARED_ETC_NAME = "etc-slurm"
"""The directory under the checkpoint that `/etc/slurm` links to."""
STATE_SAVE_DIR = f"{LIB_DIR}/slurmctld"
"""The default `StateSaveLocation`, on this machine's disk (relative to the manager's root)."""
NETWORK_STATE_NAME = "slurmctld"
"""The `StateSaveLocation` directory under the checkpoint."""
STOP_OVERRIDE_NAME = "charm-stop"
STOP_TIMEOUT = 20
"""Seconds systemd waits for slurmctld to stop before SIGKILL (its own default is 90)."""
RESTART_SECONDS = 10
"""Seconds before systemd starts again a slurmctld that exited with an error."""
STOP_OVERRIDE = f"""# Written by the slurmctld charm.
# A standby backup slurmctld (24.11) sometimes never exits after "BackupController
# terminating"; systemd's default would keep it, and the failover it stands for, away for
# 90 s. A controller saves its state in well under a second; past this, SIGKILL.
# A backup in control that hands control back late (26.05) exits with "Two slurmctld daemons
# are running as primary": started again, it stands by. SIGKILL is the fence's (and the
# OOM killer's): a fenced controller stays down until the fence ends.
[Service]
TimeoutStopSec={STOP_TIMEOUT}
Restart=on-failure
RestartSec={RESTART_SECONDS}
RestartPreventExitStatus=SIGKILL
"""


class SlurmctldManager(SlurmManager):
    """slurmctld: packages, service, slurm.key, jwt_hs256.key and the controller's files.

    Attributes:
        config: /etc/slurm/slurm.conf (0644, slurm), judged by Slurm before each write.
        cgroup_config: /etc/slurm/cgroup.conf.
        gres_config: /etc/slurm/gres.conf.
        jwt_key: /etc/slurm/jwt_hs256.key for `AuthAltTypes=auth/jwt`.
        state_save_location: /var/lib/slurm/slurmctld, the default `StateSaveLocation`.
        checkpoint_dir: /var/lib/slurm/checkpoint, the shared filesystem's mount point.
        network_state_save_location: <checkpoint>/slurmctld, `StateSaveLocation` with
            network state.
        shared_etc_dir: <checkpoint>/etc-slurm, what /etc/slurm links to with network state.

    """

    daemon = "slurmctld"
    packages = ("slurmctld", "slurm-client", "slurm-wlm-jwt-plugin")

    def __init__(self, root: Path = Path("/")) -> None:
        super().__init__(root)
        self.config = ConfigFile(
            self.etc_dir / "slurm.conf",
            SlurmConfigEditor(),
            SlurmConfig,
            yes_no_booleans=True,
            slurm_check="slurm.conf",
        )
        self.cgroup_config = ConfigFile(
            self.etc_dir / "cgroup.conf", CGroupConfigEditor(), CGroupConfig
        )
        self.gres_config = ConfigFile(self.etc_dir / "gres.conf", GresConfigEditor(), GresConfig)
        self.jwt_key = KeyFile(self.etc_dir / JWT_KEY_NAME, size=32, owner=self.user)
        self.state_save_location = root / STATE_SAVE_DIR
        self.checkpoint_dir = root / CHECKPOINT_DIR
        self.network_state_save_location = self.checkpoint_dir / NETWORK_STATE_NAME
        self.shared_etc_dir = self.checkpoint_dir / SHARED_ETC_NAME

    def create_state_save_location(self, path: Path | None = None) -> Path:
        """Create the state directory (default `state_save_location`) owned by slurm, 0750.

        slurm writes in it, so it may have replaced it (or, where `/var/lib/slurm` is still
        slurm's, any directory on the way) by a symbolic link: nothing is followed
        (`files.make_dir`), a link is refused. `/var/lib/slurm` is made root's (0755) first,
        so slurm can no longer swap the state directory for a link at all.

        Raises:
            SlurmOpsError: A component of the path is a symbolic link or not a directory, or
                a file operation failed; nothing outside the state directory is changed.

        """
        target = path or self.state_save_location
        self._own_lib_dir()
        files.make_dir(
            target, mode=0o750, owner=self.user, group=self.group, under=self._trusted(target)
        )
        return target

    def _own_lib_dir(self) -> None:
        """Make `/var/lib/slurm` root's, 0755, so slurm cannot replace what is in it.

        dpkg gives it back to root after each run (`keep_root_after_dpkg`): Slurm's packages
        give it to slurm at every upgrade.
        """
        files.make_dir(self.root / LIB_DIR, mode=0o755, owner="root", under=self.root)
        self.keep_root_after_dpkg(f"/{LIB_DIR}")

    def _trusted(self, path: Path) -> Path:
        """Where a no-follow walk to `path` starts: the checkpoint for a path on the share.

        The checkpoint is a mount point in the root-owned `/var/lib/slurm` (`_own_lib_dir`),
        so no one but root can replace it; everything below it is walked without following
        a link. Any other path is walked from the manager's root. A missing checkpoint (not
        mounted: unit tests) is made, root's.
        """
        if not path.is_relative_to(self.checkpoint_dir):
            return self.root
        try:
            self.checkpoint_dir.mkdir(mode=0o755, exist_ok=True)
        except OSError as e:
            raise SlurmOpsError(f"cannot create {self.checkpoint_dir}: {e}") from e
        return self.checkpoint_dir

    def bound_stop_time(self) -> bool:
        """Install the drop-in bounding a stop and restarting a slurmctld that failed.

        A stop takes `STOP_TIMEOUT` s at most; a slurmctld that exited with an error (not
        SIGKILL) starts again after `RESTART_SECONDS`. Returns whether the drop-in changed.

        Raises:
            SlurmOpsError: The drop-in cannot be written or systemd cannot reload.

        """
        changed = systemd.write_override(
            self.daemon, STOP_OVERRIDE_NAME, STOP_OVERRIDE, root=self.root
        )
        if changed:
            systemd.daemon_reload()
        return changed

    # --- network state -------------------------------------------------------------------

    def etc_is_shared(self) -> bool:
        """Whether /etc/slurm is already the symlink to `shared_etc_dir`."""
        return self.etc_dir.is_symlink() and os.readlink(self.etc_dir) == str(self.shared_etc_dir)

    def shared_files_ready(self) -> bool:
        """Whether the leader has put slurm.conf and slurm.key on the shared filesystem.

        Peers wait for this before they link /etc/slurm and start as backups. A tree not
        written as the charm writes it (`shared_etc_problem`) is never ready: nothing in it
        is read.
        """
        if self.shared_etc_problem() is not None:
            return False
        return all((self.shared_etc_dir / name).is_file() for name in ("slurm.conf", "slurm.key"))

    def shared_etc_problem(self) -> str | None:
        """Why `shared_etc_dir` cannot be adopted as it is; None if it is missing or sound.

        slurmctld serves what is in it to every node (configless) and root writes there, so
        it must be as the charm writes it: directories root's, files root's or SlurmUser's,
        no link, nothing writable by group or others (`files.untrusted_entry`). A tree left
        on the share by something else is refused, naming its first offending entry.
        """
        if not os.path.lexists(self.shared_etc_dir):
            return None
        root = os.geteuid()  # root; the test runner in unit tests
        file_owners = {root}
        with contextlib.suppress(KeyError):  # No slurm user yet: root's files only.
            file_owners.add(pwd.getpwnam(self.user).pw_uid)
        try:
            entry = files.untrusted_entry(
                self.shared_etc_dir,
                under=self._trusted(self.shared_etc_dir),
                owners=files.TrustedOwners(files=file_owners, dirs={root}),
            )
        except SlurmOpsError as e:
            entry = e.message
        if entry is None:
            return None
        return f"refusing to serve {self.shared_etc_dir} configless: {entry}"

    def share_etc(self) -> Path | None:
        """Replace /etc/slurm by a symlink to `shared_etc_dir`; return the backup made, if any.

        A real /etc/slurm is first copied, owners and modes kept, to `/etc/slurm_<UTC
        timestamp>`. If `shared_etc_dir` does not exist yet, it is seeded with /etc/slurm's
        files, published with one rename so a peer never sees it half copied; if it exists (a
        peer or an earlier run made it) it is used once made root's and checked
        (`_adopt_shared_etc`, before any backup) and the local files live on only in the
        backup. Idempotent: once linked, nothing happens. The checkpoint must be
        mounted (`hpc_libs.machine.mounts.check_mount`) before this is called.

        Raises:
            SlurmOpsError: /etc/slurm is neither a directory nor a symlink, an existing
                `shared_etc_dir` is refused, or a file operation failed (nothing is removed
                before its copy exists).

        """
        if self.etc_is_shared():
            return None
        self._own_lib_dir()
        if os.path.lexists(self.shared_etc_dir):
            self._adopt_shared_etc()
        backup: Path | None = None
        try:
            if self.etc_dir.is_symlink():
                logger.warning(
                    "replacing the symlink %s -> %s", self.etc_dir, os.readlink(self.etc_dir)
                )
            elif self.etc_dir.is_dir():
                backup = self._backup_etc()
                if not self.shared_etc_dir.exists():
                    self._publish_copy(self.etc_dir, self.shared_etc_dir)
            elif self.etc_dir.exists():
                raise SlurmOpsError(f"{self.etc_dir} is not a directory")
            files.make_dir(
                self.shared_etc_dir,
                mode=0o755,
                owner="root",
                under=self._trusted(self.shared_etc_dir),
            )
            self._link_etc()
            if backup is not None:
                self._drop_keys(backup)
        except OSError as e:
            raise SlurmOpsError(f"cannot move {self.etc_dir} to {self.shared_etc_dir}: {e}") from e
        return backup

    def _adopt_shared_etc(self) -> None:
        """Make the existing `shared_etc_dir` root's (0755), then check what it holds.

        Its top first, so that no one else can add or swap an entry once it is checked.

        Raises:
            SlurmOpsError: It is a link or not a directory, or `shared_etc_problem` says why
                it is refused (the path and its first offending entry).

        """
        files.make_dir(
            self.shared_etc_dir, mode=0o755, owner="root", under=self._trusted(self.shared_etc_dir)
        )
        if (problem := self.shared_etc_problem()) is not None:
            raise SlurmOpsError(problem)

    def copy_state_to_network(self, source: Path | None = None) -> bool:
        """Copy the local `StateSaveLocation` (default `state_save_location`) to the network one.

        The copy keeps owners and modes and is published with one rename. A non-empty
        `network_state_save_location` is left alone (a peer or an earlier run made it) and
        False returned. Stop slurmctld first: its state files must not change during the copy.

        Raises:
            SlurmOpsError: The copy failed (the local state is never touched), or the network
                location is a symbolic link.

        """
        source = source or self.state_save_location
        target = self.network_state_save_location
        self._own_lib_dir()
        if target.is_symlink():
            raise SlurmOpsError(f"{target} is a symbolic link: refusing to follow it")
        try:
            if target.is_dir() and any(target.iterdir()):
                logger.info("%s already holds state; not copying %s", target, source)
                return False
            if not source.is_dir() or not any(source.iterdir()):
                self.create_state_save_location(target)
                return False
            self._publish_copy(source, target)
        except OSError as e:
            raise SlurmOpsError(f"cannot copy {source} to {target}: {e}") from e
        return True

    def _backup_etc(self) -> Path:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        backup = self.etc_dir.with_name(f"{self.etc_dir.name}_{stamp}")
        files.copy_tree(self.etc_dir, backup, source_under=self.root, target_under=self.root)
        logger.info("backed up %s to %s", self.etc_dir, backup)
        return backup

    def _drop_keys(self, backup: Path) -> None:
        """Delete the key copies from `backup` once the share holds the keys.

        The keys live on as Juju secrets and on the share; a backup left with them would keep
        every superseded key on disk.
        """
        names = [self.key.path.name, self.jwt_key.path.name]
        if self.key.key_set_path is not None:
            names.append(self.key.key_set_path.name)
        for name in names:
            (backup / name).unlink(missing_ok=True)

    def _publish_copy(self, source: Path, target: Path) -> None:
        """Copy `source` next to `target` (`files.copy_tree`), then rename it into place at once.

        The staging copy is 0700 until complete. If `target` appeared meanwhile with content (a
        peer was faster), the copy is dropped.
        """
        staging = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex}")
        try:
            files.copy_tree(
                source,
                staging,
                source_under=self._trusted(source),
                target_under=self._trusted(staging),
            )
        except SlurmOpsError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        try:
            staging.rename(target)
        except OSError:
            if not (target.is_dir() and any(target.iterdir())):
                shutil.rmtree(staging, ignore_errors=True)
                raise
            logger.info("%s appeared meanwhile; keeping it", target)
            shutil.rmtree(staging, ignore_errors=True)

    def _link_etc(self) -> None:
        """Swap /etc/slurm for the symlink; a real directory is moved aside, then removed.

        Where the directory cannot be renamed (EXDEV: overlayfs, as in containers, does not
        rename a directory of a lower layer) it is removed in place instead: its backup
        exists already. A failed swap leaves no temporary link behind.
        """
        parent = self.etc_dir.parent
        parent.mkdir(parents=True, exist_ok=True)
        link = parent / f".{self.etc_dir.name}.link-{uuid.uuid4().hex}"
        os.symlink(self.shared_etc_dir, link)
        aside: Path | None = None
        try:
            if self.etc_dir.is_dir() and not self.etc_dir.is_symlink():
                aside = parent / f".{self.etc_dir.name}.moved-{uuid.uuid4().hex}"
                try:
                    self.etc_dir.rename(aside)
                except OSError as e:
                    if e.errno != errno.EXDEV:
                        raise
                    logger.info("cannot rename %s (%s); removing it in place", self.etc_dir, e)
                    shutil.rmtree(self.etc_dir)
                    aside = None
            os.replace(link, self.etc_dir)
        except OSError:
            link.unlink(missing_ok=True)
            raise
        if aside is not None:
            shutil.rmtree(aside)
        logger.info("%s now links to %s", self.etc_dir, self.shared_etc_dir)
