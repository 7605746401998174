"""Scenarios for hpc_libs.machine: the command seam, files, systemd and apt."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
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


def test_run_announces_only_commands_that_may_take_long(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger=host.__name__)

    host.run(["true"], timeout=host.DEFAULT_TIMEOUT)
    host.run(["true", "long"], timeout=host.DEFAULT_TIMEOUT + 1)

    assert [r.getMessage() for r in caplog.records] == [
        f"running ['true', 'long'] (timeout {host.DEFAULT_TIMEOUT + 1} s)"
    ]


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


# systemd


def test_service_operations_run_systemctl_with_timeouts(fake_run: FakeRun) -> None:
    fake_run.on("systemctl", "is-active", returncode=3)
    service = systemd.Service("slurmd")

    service.enable()
    service.start()
    service.restart()
    service.stop()
    service.disable()
    systemd.daemon_reload()

    assert fake_run.calls == [
        ["systemctl", "enable", "--no-reload", "slurmd"],
        ["systemctl", "start", "slurmd"],
        ["systemctl", "restart", "slurmd"],
        ["systemctl", "stop", "slurmd"],
        ["systemctl", "disable", "slurmd"],
        ["systemctl", "daemon-reload"],
    ]
    sysv_skipped = [env == systemd.SKIP_SYSV for env in fake_run.envs]
    assert sysv_skipped == [True, False, False, False, True, False]
    assert service.is_active() is False


def test_stop_for_good_disables_even_when_the_stop_fails_and_never_raises(
    fake_run: FakeRun, caplog: pytest.LogCaptureFixture
) -> None:
    fake_run.on("systemctl", "stop", returncode=1, stderr="Job for slurmd.service timed out")

    systemd.Service("slurmd").stop_for_good()

    assert fake_run.calls == [["systemctl", "stop", "slurmd"], ["systemctl", "disable", "slurmd"]]
    assert "slurmd: leaving anyway" in caplog.text


@pytest.mark.parametrize(
    ("answer", "returncode", "reloads"),
    [("no\n", 0, False), ("yes\n", 0, True), ("", 1, True)],
    ids=["loaded-afresh", "held-stale", "systemctl-cannot-say"],
)
def test_a_reload_only_for_a_unit_systemd_holds_stale(
    fake_run: FakeRun, answer: str, returncode: int, reloads: bool
) -> None:
    fake_run.on("systemctl", "show", stdout=answer, returncode=returncode)

    systemd.reload_for("slurmd")

    show = ["systemctl", "show", "--property=NeedDaemonReload", "--value", "slurmd"]
    assert fake_run.calls == [show, *([["systemctl", "daemon-reload"]] if reloads else [])]


class Watchdog(systemd.CharmService):
    unit = "watchdog.service"


@pytest.mark.parametrize(
    ("before", "running", "verbs"),
    [
        (None, False, ["daemon-reload", "enable", "start"]),
        ("old", True, ["daemon-reload", "enable", "restart"]),
        ("new", True, ["is-active"]),
        ("new", False, ["is-active", "enable", "start"]),
    ],
    ids=["new-unit-started", "changed-unit-restarted", "unchanged-left-alone", "stopped-started"],
)
def test_a_charm_service_restarts_on_a_change_and_is_started_when_stopped(
    fake_run: FakeRun, tmp_path: Path, before: str | None, running: bool, verbs: list[str]
) -> None:
    watchdog = Watchdog(tmp_path)
    if before is not None:
        watchdog.write_unit(before)
    fake_run.calls.clear()
    fake_run.on("systemctl", "is-active", returncode=0 if running else 3)

    new = not watchdog.unit_exists()
    watchdog.service.keep_running(watchdog.write_unit("new"), new=new)

    assert [argv[1] for argv in fake_run.calls] == verbs
    assert (tmp_path / "etc/systemd/system/watchdog.service").read_text() == "new"


def test_a_service_that_cannot_start_carries_its_journal_reason(fake_run: FakeRun) -> None:
    fake_run.on("systemctl", "start", stderr="Job for slurmd.service failed.", returncode=1)
    fake_run.on(
        "journalctl",
        stdout="slurmd: starting\nslurmd: error: cgroup/v2: no delegation\n"
        "slurmd: fatal: Hybrid mode is not supported\nslurmd: exiting\n",
    )

    with pytest.raises(ServiceError) as caught:
        systemd.Service("slurmd").start()

    assert caught.value.status_message() == (
        "slurmd cannot start: fatal: Hybrid mode is not supported"
    )
    assert fake_run.calls[-1] == [
        "journalctl",
        "-u",
        "slurmd",
        "-n",
        "50",
        "-o",
        "cat",
        "--no-pager",
    ]


def test_a_masked_unit_is_reported_as_masked_not_by_an_older_runs_journal(
    fake_run: FakeRun,
) -> None:
    masked = "Failed to start slurmd.service: Unit slurmd.service is masked."
    fake_run.on("systemctl", "start", stderr=masked, returncode=1)
    fake_run.on("journalctl", stdout="slurmd: error: System GPU detection failed\n")

    with pytest.raises(ServiceError) as caught:
        systemd.Service("slurmd").start()

    assert caught.value.status_message() == ("slurmd cannot start: Unit slurmd.service is masked.")


def test_a_start_refused_for_starting_too_often_is_tried_once_more_after_reset_failed(
    fake_run: FakeRun,
) -> None:
    starts: list[list[str]] = []

    def start(argv: list[str]) -> subprocess.CompletedProcess[str]:
        starts.append(argv)
        refused = "start of the service was attempted too often" if len(starts) == 1 else ""
        return subprocess.CompletedProcess(argv, 1 if refused else 0, "", refused)

    fake_run.on_call("systemctl", "start", answer=start)

    systemd.Service("slurmd").start()

    assert fake_run.calls == [
        ["systemctl", "start", "slurmd"],
        ["systemctl", "reset-failed", "slurmd"],
        ["systemctl", "start", "slurmd"],
    ]


def test_a_daemon_that_cannot_start_is_tried_twice_then_carries_its_reason(
    fake_run: FakeRun,
) -> None:
    fake_run.on("systemctl", "restart", stderr="Job for slurmd.service failed.", returncode=1)
    fake_run.on("journalctl", stdout="slurmd: fatal: Unable to bind listen port\n")

    with pytest.raises(ServiceError) as caught:
        systemd.Service("slurmd").restart()

    assert caught.value.status_message() == (
        "slurmd cannot restart: fatal: Unable to bind listen port"
    )
    assert fake_run.calls[:3] == [
        ["systemctl", "restart", "slurmd"],
        ["systemctl", "reset-failed", "slurmd"],
        ["systemctl", "restart", "slurmd"],
    ]


def test_a_start_that_timed_out_is_not_tried_again(fake_run: FakeRun) -> None:
    def hang(argv: list[str]) -> subprocess.CompletedProcess[str]:
        raise host.command_timed_out(argv, systemd.SERVICE_TIMEOUT)

    fake_run.on_call("systemctl", "start", answer=hang)

    with pytest.raises(ServiceError):
        systemd.Service("slurmd").start()

    assert ["systemctl", "reset-failed", "slurmd"] not in fake_run.calls


def test_without_a_journal_reason_the_service_error_keeps_systemctl_stderr(
    fake_run: FakeRun,
) -> None:
    fake_run.on("systemctl", "restart", stderr="Job for slurmd.service failed.", returncode=1)

    with pytest.raises(ServiceError) as caught:
        systemd.Service("slurmd").restart()

    assert caught.value.command == ["systemctl", "restart", "slurmd"]
    assert "Job for slurmd.service failed" in caught.value.status_message()


def test_journal_reason_falls_back_to_the_last_error_line(fake_run: FakeRun) -> None:
    fake_run.on("journalctl", stdout="error: first\nerror: second\ninfo\n")

    assert systemd.journal_reason("slurmd") == "error: second"


def test_only_the_last_run_of_a_unit_gives_its_reason(fake_run: FakeRun) -> None:
    """A fence's SIGKILL leaves no line: an earlier run's fatal line is not this death's."""
    invocation = "80af1ed9ceb645d4a19124ad2721180f"
    fake_run.on("systemctl", "show", stdout=f"{invocation}\n")
    fake_run.on("journalctl", stdout="slurmctld: Running as primary controller\n")

    assert systemd.journal_reason("slurmctld") is None
    assert fake_run.calls[-1][:2] == ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}"]


def test_an_invocation_id_that_is_not_one_is_never_passed_on(fake_run: FakeRun) -> None:
    fake_run.on("systemctl", "show", stdout="x -u other\n")
    fake_run.on("journalctl", stdout="fatal: boom\n")

    assert systemd.journal_reason("slurmctld") == "fatal: boom"
    assert fake_run.calls[-1][:3] == ["journalctl", "-u", "slurmctld"]


def test_an_unreadable_journal_gives_no_reason(fake_run: FakeRun) -> None:
    fake_run.missing("journalctl")

    assert systemd.journal_reason("slurmd") is None


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


def installed(fake_run: FakeRun, *packages: str) -> None:
    fake_run.dpkg("24.11.5-1", *packages or ("none",))


def test_install_skips_everything_when_installed(fake_run: FakeRun) -> None:
    installed(fake_run, "slurmd", "slurm-client")

    assert apt.install(["slurmd", "slurm-client"]) is False
    assert fake_run.calls == [  # one query for both
        [
            "dpkg-query",
            "--show",
            "--showformat=${Package} ${db:Status-Status} ${Version}\\n",
            "slurmd",
            "slurm-client",
        ]
    ]


def test_install_updates_then_installs_only_missing_packages(fake_run: FakeRun) -> None:
    installed(fake_run, "slurm-client")

    assert apt.install(["slurmd", "slurm-client"]) is True
    assert fake_run.calls[-2:] == [
        ["apt-get", "update", "--error-on=any", "--option=DPkg::Lock::Timeout=120"],
        ["apt-get", "install", "--yes", "--option=DPkg::Lock::Timeout=120", "slurmd"],
    ]


def test_an_update_fails_when_any_source_cannot_be_fetched(fake_run: FakeRun) -> None:
    """Without `--error-on=any`, apt-get update exits 0 on an unreachable source (a warning):
    an upgrade against an unreachable mirror would install nothing and succeed."""
    apt.update()

    [update] = fake_run.calls
    assert update[:2] == ["apt-get", "update"]
    assert "--error-on=any" in update


def test_upgrade_installs_every_package_again(fake_run: FakeRun) -> None:
    installed(fake_run, "slurmd")

    assert apt.install(["slurmd"], upgrade=True) is True
    assert fake_run.calls[-1][-1] == "slurmd"


def test_config_files_state_is_not_installed(fake_run: FakeRun) -> None:
    fake_run.on("dpkg-query", stdout="slurmd config-files 24.11.5-1\n")

    assert apt.installed_version("slurmd") is None


def test_installed_versions_reads_every_line_despite_an_unknown_package(
    fake_run: FakeRun,
) -> None:
    fake_run.dpkg("24.11.5-1", "slurmd", "slurm-client")

    assert apt.installed_versions(["slurmd", "nope", "slurm-client"]) == {
        "slurmd": "24.11.5-1",
        "slurm-client": "24.11.5-1",
    }
    assert apt.missing(["slurmd", "nope", "slurm-client"]) == ["nope"]


def test_install_failure_is_a_package_error(fake_run: FakeRun) -> None:
    installed(fake_run)
    fake_run.on("apt-get", "update", stderr="Temporary failure", returncode=100)

    with pytest.raises(PackageError) as caught:
        apt.install(["slurmd"])

    assert caught.value.stderr == "Temporary failure"
    assert caught.value.returncode == 100


def test_add_ppa_uses_add_apt_repository_without_update(fake_run: FakeRun) -> None:
    apt.add_repository("ppa:ubuntu-hpc/slurm-wlm-24.11")

    assert fake_run.calls == [
        ["add-apt-repository", "--yes", "--no-update", "ppa:ubuntu-hpc/slurm-wlm-24.11"]
    ]


def test_add_ppa_failure_is_a_package_error(fake_run: FakeRun) -> None:
    fake_run.missing("add-apt-repository")

    with pytest.raises(PackageError):
        apt.add_repository("ppa:ubuntu-hpc/slurm-wlm-24.11")
