"""Scenarios for `hpc_libs.machine.mounts`: mountinfo parsing and the lazy autofs mount."""

import subprocess
from pathlib import Path

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host, mounts
from hpc_libs_fakes import FakeRun

CHECKPOINT = "/var/lib/slurm/checkpoint"

BASE = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "40 22 0:38 / /srv/my\\040share rw,relatime - tmpfs tmpfs rw\n"
)
# What autofs leaves before the first access: only the trigger at the path.
AUTOFS_TRIGGER = (
    "51 22 0:45 / /var/lib/slurm/checkpoint rw,relatime shared:30 - autofs systemd-1 "
    "rw,fd=5,pgrp=1,timeout=0,minproto=5,maxproto=5,direct\n"
)
# After the access: the NFS mount on top of the trigger.
NFS_ON_TOP = (
    "52 51 0:46 / /var/lib/slurm/checkpoint rw,relatime shared:31 - nfs4 "
    "10.0.0.5:/export/slurm rw,vers=4.2,hard,proto=tcp\n"
)


@pytest.fixture
def mountinfo(tmp_path: Path) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text(BASE)
    return path


def test_parse_reads_the_mount_point_field_and_unescapes_it() -> None:
    entries = mounts.parse_mountinfo(BASE + NFS_ON_TOP)

    assert [e.mount_point for e in entries] == ["/", "/proc", "/srv/my share", CHECKPOINT]
    nfs = entries[-1]
    assert (nfs.mount_id, nfs.parent_id, nfs.fstype, nfs.source) == (
        52,
        51,
        "nfs4",
        "10.0.0.5:/export/slurm",
    )


def test_parse_handles_optional_fields_and_skips_garbage() -> None:
    text = "60 22 0:50 / /a rw shared:5 master:2 propagate_from:1 - xfs /dev/x rw\nnonsense\n"

    entries = mounts.parse_mountinfo(text)

    assert [(e.mount_point, e.fstype, e.source) for e in entries] == [("/a", "xfs", "/dev/x")]


@pytest.mark.parametrize(
    ("field", "text"),
    [("a\\040b", "a b"), ("a\\011b\\012c", "a\tb\nc"), ("a\\134b", "a\\b"), ("a\\04", "a\\04")],
)
def test_unescape(field: str, text: str) -> None:
    assert mounts.unescape(field) == text


def test_a_path_with_an_escaped_space_is_found(mountinfo: Path, fake_run: FakeRun) -> None:
    check = mounts.check_mount("/srv/my share", mountinfo=mountinfo)

    assert check.mounted and check.fstype == "tmpfs"
    assert fake_run.calls == [["ls", "-A", "--", "/srv/my share/"]]


def test_a_plain_directory_is_not_a_mount(mountinfo: Path, fake_run: FakeRun) -> None:
    check = mounts.check_mount(CHECKPOINT, mountinfo=mountinfo)

    assert not check.mounted
    assert check.problem == f"{CHECKPOINT} is not a mount point"
    # A prefix of a mount point is no mount either.
    assert not mounts.check_mount("/srv/my", mountinfo=mountinfo).mounted


def test_autofs_mounts_the_filesystem_when_the_path_is_accessed(
    mountinfo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mountinfo.write_text(BASE + AUTOFS_TRIGGER)
    accessed: list[list[str]] = []

    def automount(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        assert kwargs.get("timeout"), "access must be bounded"
        accessed.append(list(argv))
        mountinfo.write_text(BASE + AUTOFS_TRIGGER + NFS_ON_TOP)  # the kernel mounts it now
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(host, "run", automount)

    check = mounts.check_mount(CHECKPOINT, mountinfo=mountinfo)

    assert accessed == [["ls", "-A", "--", f"{CHECKPOINT}/"]]
    assert check.mounted
    assert (check.fstype, check.source) == ("nfs4", "10.0.0.5:/export/slurm")


def test_an_autofs_trigger_alone_is_not_mounted(mountinfo: Path, fake_run: FakeRun) -> None:
    mountinfo.write_text(BASE + AUTOFS_TRIGGER)

    check = mounts.check_mount(CHECKPOINT, mountinfo=mountinfo)

    assert not check.mounted
    assert check.fstype == "autofs"
    assert check.problem == f"{CHECKPOINT} is an autofs trigger not mounted"
    assert len(fake_run.calls) == 1


def test_a_hung_server_is_reported_not_waited_for(
    mountinfo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mountinfo.write_text(BASE + AUTOFS_TRIGGER + NFS_ON_TOP)

    def hang(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        raise host.command_timed_out(list(argv), float(str(kwargs["timeout"])))

    monkeypatch.setattr(host, "run", hang)

    check = mounts.check_mount(CHECKPOINT, mountinfo=mountinfo, timeout=3)

    assert not check.mounted
    assert check.problem == f"cannot access {CHECKPOINT}: timed out"


def test_an_access_error_is_reported(mountinfo: Path, fake_run: FakeRun) -> None:
    mountinfo.write_text(BASE + NFS_ON_TOP)
    fake_run.on(
        "ls",
        returncode=2,
        stderr="ls: cannot open directory '/var/lib/slurm/checkpoint/': Stale file handle\n",
    )

    check = mounts.check_mount(CHECKPOINT, mountinfo=mountinfo)

    assert not check.mounted
    assert check.problem is not None and "Stale file handle" in check.problem


def test_unreadable_mountinfo_is_a_problem_not_a_crash(tmp_path: Path, fake_run: FakeRun) -> None:
    del fake_run
    check = mounts.check_mount(CHECKPOINT, mountinfo=tmp_path / "missing")

    assert not check.mounted and check.problem is not None
    with pytest.raises(SlurmOpsError):
        mounts.mounts_at(CHECKPOINT, tmp_path / "missing")


def test_the_real_mountinfo_of_this_process_parses() -> None:
    entries = mounts.mounts_at("/")
    assert entries, "the root filesystem is a mount"
