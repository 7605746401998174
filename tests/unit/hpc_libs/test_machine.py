"""Scenarios for hpc_libs.machine: the command seam, files, systemd and apt."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from charmlibs import apt as charmlibs_apt
from charmlibs import systemd as sd
from hpc_libs.errors import HpcLibsError, PackageError, ServiceError, SlurmOpsError
from hpc_libs.machine import apt, files, host, systemd
from hpc_libs_fakes import FakeRun


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o7777


# host.run: the real seam, run against real commands.


def test_run_returns_stdout() -> None:
    result = host.run([sys.executable, "-c", "print('hello')"])

    assert result.stdout == "hello\n"
    assert result.returncode == 0


def test_run_failure_carries_command_returncode_and_stderr() -> None:
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"]

    with pytest.raises(SlurmOpsError) as caught:
        host.run(argv)

    assert caught.value.command == argv
    assert caught.value.returncode == 3
    assert caught.value.stderr == "boom"
    assert isinstance(caught.value.__cause__, subprocess.CalledProcessError)
    assert "boom" in str(caught.value)


def test_run_without_check_returns_the_failure() -> None:
    result = host.run([sys.executable, "-c", "raise SystemExit(2)"], check=False)

    assert result.returncode == 2


def test_run_timeout_is_a_slurm_ops_error() -> None:
    with pytest.raises(SlurmOpsError) as caught:
        host.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)

    assert "timed out" in caught.value.message
    assert caught.value.returncode is None


def test_run_missing_binary_is_a_slurm_ops_error() -> None:
    with pytest.raises(SlurmOpsError) as caught:
        host.run(["/nonexistent/slurm-binary", "-C"])

    assert caught.value.command == ["/nonexistent/slurm-binary", "-C"]
    assert isinstance(caught.value, HpcLibsError)


def test_run_passes_input() -> None:
    result = host.run(
        [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], input="ab"
    )

    assert result.stdout == "AB\n"


# files


def test_write_atomic_sets_content_mode_and_owner(
    tmp_path: Path, owners: dict[str, tuple[str, str | None]]
) -> None:
    target = tmp_path / "etc/slurm/slurm.key"

    files.write_atomic(target, b"\x00secret", mode=0o600, owner="slurm", group="slurm")

    assert target.read_bytes() == b"\x00secret"
    assert mode_of(target) == 0o600
    assert owners == {"slurm.key": ("slurm", "slurm")}
    assert os.listdir(target.parent) == ["slurm.key"]  # no temporary file left behind


def test_write_atomic_really_chowns_to_an_existing_user(tmp_path: Path) -> None:
    target = tmp_path / "file.conf"

    files.write_atomic(target, "x=1\n", mode=0o640, owner="root")

    assert target.stat().st_uid == 0
    assert target.stat().st_gid == 0
    assert mode_of(target) == 0o640


def test_write_atomic_unknown_owner_fails_and_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "file.conf"
    target.write_text("old")

    with pytest.raises(SlurmOpsError):
        files.write_atomic(target, "new", mode=0o644, owner="no-such-user-hpc")

    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["file.conf"]


def test_write_if_changed_reports_changes_only(
    tmp_path: Path, owners: dict[str, tuple[str, str | None]]
) -> None:
    target = tmp_path / "a.conf"

    assert files.write_if_changed(target, "a=1\n", mode=0o644) is True
    assert files.write_if_changed(target, "a=1\n", mode=0o644) is False
    assert files.write_if_changed(target, "a=2\n", mode=0o644) is True
    assert files.write_if_changed(target, "a=2\n", mode=0o600) is True
    assert mode_of(target) == 0o600
    assert target.read_text() == "a=2\n"


def test_backup_copies_to_a_timestamped_name(tmp_path: Path) -> None:
    target = tmp_path / "slurm.conf"
    target.write_text("ClusterName=a\n")
    target.chmod(0o640)

    copy = files.backup(target)

    assert copy is not None
    assert copy.name.startswith("slurm.conf_")
    assert copy.read_text() == "ClusterName=a\n"
    assert mode_of(copy) == 0o640
    assert target.exists()


def test_backup_of_missing_file_is_none(tmp_path: Path) -> None:
    assert files.backup(tmp_path / "absent") is None


# systemd


@pytest.fixture
def systemctl(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[str, ...]]]:
    """Replace charmlibs.systemd's operations by a recorder."""
    calls: list[tuple[str, tuple[str, ...]]] = []
    for name in (
        "service_start",
        "service_stop",
        "service_restart",
        "service_enable",
        "service_disable",
        "daemon_reload",
    ):

        def record(*args: str, _name: str = name) -> bool:
            calls.append((_name, args))
            return True

        monkeypatch.setattr(sd, name, record)
    monkeypatch.setattr(sd, "service_running", lambda name: name == "slurmd")
    return calls


def test_service_operations_go_through_charmlibs(
    systemctl: list[tuple[str, tuple[str, ...]]],
) -> None:
    service = systemd.Service("slurmd")

    service.enable()
    service.start()
    service.restart()
    service.stop()
    service.disable()
    systemd.daemon_reload()

    assert systemctl == [
        ("service_enable", ("slurmd",)),
        ("service_start", ("slurmd",)),
        ("service_restart", ("slurmd",)),
        ("service_stop", ("slurmd",)),
        ("service_disable", ("slurmd",)),
        ("daemon_reload", ()),
    ]
    assert service.is_active() is True
    assert systemd.Service("slurmctld").is_active() is False


def test_service_failure_is_a_service_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: str) -> bool:
        raise sd.SystemdError("stderr: Job for slurmd.service failed")

    monkeypatch.setattr(sd, "service_start", fail)

    with pytest.raises(ServiceError) as caught:
        systemd.Service("slurmd").start()

    assert caught.value.command == ["systemctl", "start", "slurmd"]
    assert "Job for slurmd.service failed" in caught.value.stderr


def test_write_override_creates_a_drop_in_once(tmp_path: Path) -> None:
    content = "[Service]\nLimitNOFILE=1024\n"

    assert systemd.write_override("slurmd", "10-limits", content, root=tmp_path) is True
    assert systemd.write_override("slurmd", "10-limits", content, root=tmp_path) is False

    drop_in = tmp_path / "etc/systemd/system/slurmd.service.d/10-limits.conf"
    assert drop_in.read_text() == content
    assert mode_of(drop_in) == 0o644


def test_run_transient_uses_systemd_run(fake_run: FakeRun) -> None:
    systemd.run_transient("slurmd-drain", ["/usr/bin/waiter", "--node", "n-1"], "wait for jobs")

    assert fake_run.calls == [
        [
            "systemd-run",
            "--unit=slurmd-drain",
            "--collect",
            "--description=wait for jobs",
            "--",
            "/usr/bin/waiter",
            "--node",
            "n-1",
        ]
    ]


def test_run_transient_failure_is_a_service_error(fake_run: FakeRun) -> None:
    fake_run.on("systemd-run", stderr="Unit slurmd-drain.service already exists.", returncode=1)

    with pytest.raises(ServiceError) as caught:
        systemd.run_transient("slurmd-drain", ["/bin/true"], "x")

    assert "already exists" in caught.value.stderr


# apt


@pytest.fixture
def apt_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(charmlibs_apt, "update", lambda: calls.append(("update", None)))

    def add_package(names: list[str]) -> list[charmlibs_apt.DebianPackage]:
        calls.append(("add_package", names))
        return []

    monkeypatch.setattr(charmlibs_apt, "add_package", add_package)
    return calls


def installed(fake_run: FakeRun, *packages: str) -> None:
    fake_run.on("dpkg-query", stdout="", returncode=1)
    for package in packages:
        fake_run.on(
            "dpkg-query",
            "--show",
            "--showformat=${db:Status-Status} ${Version}",
            package,
            stdout="installed 24.11.5-1",
        )


def test_install_skips_everything_when_installed(
    fake_run: FakeRun, apt_calls: list[tuple[str, object]]
) -> None:
    installed(fake_run, "slurmd", "slurm-client")

    assert apt.install(["slurmd", "slurm-client"]) is False
    assert apt_calls == []


def test_install_updates_then_installs_only_missing_packages(
    fake_run: FakeRun, apt_calls: list[tuple[str, object]]
) -> None:
    installed(fake_run, "slurm-client")

    assert apt.install(["slurmd", "slurm-client"]) is True
    assert apt_calls == [("update", None), ("add_package", ["slurmd"])]


def test_config_files_state_is_not_installed(
    fake_run: FakeRun, apt_calls: list[tuple[str, object]]
) -> None:
    fake_run.on("dpkg-query", stdout="config-files 24.11.5-1")

    assert apt.installed_version("slurmd") is None


def test_install_failure_is_a_package_error(
    fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed(fake_run)

    def update() -> None:
        raise subprocess.CalledProcessError(100, ["apt-get", "update"], b"", b"Temporary failure")

    monkeypatch.setattr(charmlibs_apt, "update", update)

    with pytest.raises(PackageError) as caught:
        apt.install(["slurmd"])

    assert caught.value.stderr == "Temporary failure"
    assert caught.value.returncode == 100


def test_missing_package_is_a_package_error(
    fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch, apt_calls: list[tuple[str, object]]
) -> None:
    installed(fake_run)

    def add_package(names: list[str]) -> None:
        raise charmlibs_apt.PackageError("Failed to install packages: slurmd")

    monkeypatch.setattr(charmlibs_apt, "add_package", add_package)

    with pytest.raises(PackageError) as caught:
        apt.install(["slurmd"])

    assert "slurmd" in caught.value.stderr


def test_add_ppa_uses_add_apt_repository_without_update(fake_run: FakeRun) -> None:
    apt.add_repository("ppa:ubuntu-hpc/slurm-wlm-24.11")

    assert fake_run.calls == [
        ["add-apt-repository", "--yes", "--no-update", "ppa:ubuntu-hpc/slurm-wlm-24.11"]
    ]


def test_add_ppa_failure_is_a_package_error(fake_run: FakeRun) -> None:
    fake_run.missing("add-apt-repository")

    with pytest.raises(PackageError):
        apt.add_repository("ppa:ubuntu-hpc/slurm-wlm-24.11")
