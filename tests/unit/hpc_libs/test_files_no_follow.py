"""Root's directory operations never follow a link a less trusted user planted (issue 20).

Each test plants symbolic links under a temporary root, points them at an `outside`
directory, runs the operation for real (no seam replaced: the test user is the owner) and
checks that nothing outside changed: not a mode, an owner, a change time or an entry.
"""

import os
import pwd
import stat
from pathlib import Path

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files
from hpc_libs.slurm.slurmctld import SlurmctldManager

ME = pwd.getpwuid(os.getuid()).pw_name
Snapshot = dict[str, tuple[int, int, int, int]]


def snapshot(top: Path) -> Snapshot:
    """Mode, owner, group and change time of `top` and everything in it (links not followed)."""
    taken: Snapshot = {}
    for path in [top, *top.rglob("*")]:
        info = path.lstat()
        taken[str(path)] = (info.st_mode, info.st_uid, info.st_gid, info.st_ctime_ns)
    return taken


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory the operations must never touch: 0711, with a file 0644 in it."""
    victim = tmp_path / "outside"
    victim.mkdir()
    (victim / "passwd").write_text("root:x:0:0\n")
    (victim / "passwd").chmod(0o644)
    victim.chmod(0o711)
    return victim


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The machine's root; its /var/lib/slurm as Debian's package leaves it (slurm's, 0755)."""
    lib = tmp_path / "root/var/lib/slurm"
    lib.mkdir(parents=True)
    return tmp_path / "root"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_make_dir_creates_and_fixes_a_real_directory(root: Path) -> None:
    path = root / "var/lib/slurm/slurmctld"

    files.make_dir(path, mode=0o750, owner=ME, under=root)
    assert path.is_dir() and mode_of(path) == 0o750

    path.chmod(0o777)
    files.make_dir(path, mode=0o750, owner=ME, under=root)
    assert mode_of(path) == 0o750


def test_make_dir_refuses_a_link_at_the_directory_and_touches_nothing_outside(
    root: Path, outside: Path
) -> None:
    before = snapshot(outside)
    state = root / "var/lib/slurm/slurmctld"
    state.symlink_to(outside)  # The slurm user's `ln -s /etc /var/lib/slurm/slurmctld`.

    with pytest.raises(SlurmOpsError, match="symbolic link"):
        files.make_dir(state, mode=0o750, owner=ME, under=root)

    assert snapshot(outside) == before
    assert state.is_symlink()


def test_make_dir_refuses_a_link_on_the_way_and_creates_nothing_outside(
    root: Path, outside: Path
) -> None:
    before = snapshot(outside)
    lib = root / "var/lib/slurm"
    lib.rmdir()
    lib.symlink_to(outside)

    with pytest.raises(SlurmOpsError, match="symbolic link"):
        files.make_dir(lib / "slurmctld", mode=0o750, owner=ME, under=root)

    assert snapshot(outside) == before


def test_make_dir_refuses_a_file_where_a_directory_belongs(root: Path) -> None:
    (root / "var/lib/slurm/slurmctld").write_text("x")

    with pytest.raises(SlurmOpsError, match="not a directory"):
        files.make_dir(root / "var/lib/slurm/slurmctld", mode=0o750, owner=ME, under=root)


def test_a_path_that_climbs_out_of_the_trusted_directory_is_refused(root: Path) -> None:
    with pytest.raises(ValueError, match="climbs out"):
        files.make_dir(root / "var/../../outside", mode=0o750, owner=ME, under=root)


def test_set_owner_of_a_link_changes_the_link_not_its_target(
    tmp_path: Path, outside: Path
) -> None:
    before = snapshot(outside)
    link = tmp_path / "link"
    link.symlink_to(outside / "passwd")

    files.set_owner(link, ME, None)

    assert snapshot(outside) == before


def source_tree(tmp_path: Path, outside: Path) -> Path:
    """/etc/slurm-like tree: a key 0600, a config 0644, a subdirectory, links and a FIFO."""
    source = tmp_path / "root/etc/slurm"
    (source / "plugstack.conf.d").mkdir(parents=True)
    (source / "slurm.key").write_bytes(b"secret")
    (source / "slurm.key").chmod(0o600)
    (source / "slurm.conf").write_text("ClusterName=c\n")
    (source / "slurm.conf").chmod(0o644)
    (source / "plugstack.conf.d/x.conf").write_text("x\n")
    (source / "to-outside").symlink_to(outside)
    (source / "plugstack.conf.d/passwd").symlink_to(outside / "passwd")
    os.mkfifo(source / "fifo")
    return source


def test_copy_tree_copies_links_as_links_and_skips_what_is_not_a_file(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "root"
    source = source_tree(tmp_path, outside)
    before = snapshot(outside)
    target = root / "etc/slurm_backup"

    files.copy_tree(source, target, source_under=root, target_under=root)

    assert (target / "slurm.conf").read_text() == "ClusterName=c\n"
    assert mode_of(target / "slurm.key") == 0o600 and mode_of(target / "slurm.conf") == 0o644
    assert os.readlink(target / "to-outside") == str(outside)
    assert os.readlink(target / "plugstack.conf.d/passwd") == str(outside / "passwd")
    assert not (target / "fifo").exists()  # Skipped, and the copy did not block on it.
    assert mode_of(target) == mode_of(source)
    assert snapshot(outside) == before


def test_copy_tree_writes_every_file_0600_into_a_0700_staging_dir(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    source = source_tree(tmp_path, outside)
    target = root / "etc/slurm_backup"
    seen: list[tuple[int, int]] = []
    write = os.write

    def watched_write(fd: int, data: bytes | memoryview) -> int:
        seen.append((stat.S_IMODE(os.fstat(fd).st_mode), mode_of(target)))
        return write(fd, data)

    monkeypatch.setattr(os, "write", watched_write)

    files.copy_tree(source, target, source_under=root, target_under=root)

    assert seen and set(seen) == {(0o600, 0o700)}  # Keys never 0644, even for a moment.


def test_copy_tree_refuses_a_source_or_target_parent_that_is_a_link(
    tmp_path: Path, outside: Path
) -> None:
    root = tmp_path / "root"
    (root / "var/lib/slurm").mkdir(parents=True)
    state = root / "var/lib/slurm/slurmctld"
    state.symlink_to(outside)
    before = snapshot(outside)

    with pytest.raises(SlurmOpsError, match="symbolic link"):
        files.copy_tree(state, root / "var/lib/copy", source_under=root, target_under=root)
    with pytest.raises(SlurmOpsError, match="symbolic link"):
        files.copy_tree(root / "var/lib", state / "copy", source_under=root, target_under=root)

    assert snapshot(outside) == before


# slurmctld's state directory (the reproducer).


def test_a_planted_state_directory_link_is_refused_and_lib_becomes_roots(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "set_owner", lambda path, owner, group, fd=None: None)
    manager = SlurmctldManager(tmp_path / "root")
    lib = manager.state_save_location.parent
    lib.mkdir(parents=True)
    lib.chmod(0o777)  # Stands for slurm:slurm: slurm writes in it.
    manager.state_save_location.symlink_to(outside)
    before = snapshot(outside)

    with pytest.raises(SlurmOpsError, match="symbolic link"):
        manager.create_state_save_location()

    assert snapshot(outside) == before
    assert mode_of(lib) == 0o755  # From now on only root can plant anything there.


def test_a_planted_network_state_link_is_refused(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "set_owner", lambda path, owner, group, fd=None: None)
    manager = SlurmctldManager(tmp_path / "root")
    manager.checkpoint_dir.mkdir(parents=True)
    manager.network_state_save_location.symlink_to(outside)
    before = snapshot(outside)

    with pytest.raises(SlurmOpsError, match="symbolic link"):
        manager.create_state_save_location(manager.network_state_save_location)
    with pytest.raises(SlurmOpsError, match="symbolic link"):
        manager.copy_state_to_network()

    assert snapshot(outside) == before


# A daemon's log file, read by root (the COS collector) by its name.


@pytest.fixture
def log_dir(root: Path) -> Path:
    """/var/log/slurm as Debian's package leaves it: the daemons' user may write it."""
    path = root / "var/log/slurm"
    path.mkdir(parents=True)
    path.chmod(0o777)
    return path


@pytest.mark.parametrize("planted", ["symlink", "hardlink", "fifo"])
def test_a_log_planted_to_reach_another_file_is_replaced_and_the_file_untouched(
    root: Path, log_dir: Path, outside: Path, planted: str
) -> None:
    log = log_dir / "slurmctld.log"
    if planted == "symlink":
        log.symlink_to(outside / "passwd")
    elif planted == "hardlink":
        log.hardlink_to(outside / "passwd")
    else:
        os.mkfifo(log)
    before = {path: taken[:3] for path, taken in snapshot(outside).items()}

    files.log_file(log, owner=ME, under=root)

    # Mode, owner and group (removing a second name changes the file's change time only).
    assert {path: taken[:3] for path, taken in snapshot(outside).items()} == before
    assert (outside / "passwd").read_text() == "root:x:0:0\n"
    info = log.lstat()
    assert stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_size == 0
    assert mode_of(log) == 0o640
    assert mode_of(log_dir) == 0o755 and log_dir.stat().st_uid == 0


def test_a_real_log_is_kept_and_its_directory_becomes_roots(root: Path, log_dir: Path) -> None:
    log = log_dir / "slurmdbd.log"
    log.write_text("[2026-11-29T00:00:00] slurmdbd version 24.11 started\n")

    files.log_file(log, owner=ME, under=root)

    assert log.read_text() == "[2026-11-29T00:00:00] slurmdbd version 24.11 started\n"
    assert mode_of(log) == 0o640
    assert mode_of(log_dir) == 0o755


def test_a_log_directory_replaced_by_a_link_is_refused(root: Path, outside: Path) -> None:
    (root / "var/log").mkdir(parents=True)
    (root / "var/log/slurm").symlink_to(outside)
    before = snapshot(outside)

    with pytest.raises(SlurmOpsError, match="symbolic link"):
        files.log_file(root / "var/log/slurm/slurmctld.log", owner=ME, under=root)
    assert snapshot(outside) == before
