"""The bridge from SlurmctldPrimaryOnProg (run as slurm) to a charm event (root's juju-exec)."""

from pathlib import Path
from types import ModuleType

import pytest
from charm_testing import FakeMachine
from hpc_libs.charm import wake
from hpc_libs.errors import SlurmOpsError

UNIT = "slurmctld/1"
CHARM_DIR = "/var/lib/juju/agents/unit-slurmctld-1/charm"
EVENT = "slurmctld-wake"


@pytest.fixture
def pw(primary_watch_module: ModuleType) -> ModuleType:
    return primary_watch_module


@pytest.fixture
def watch(pw, tmp_path: Path, machine: FakeMachine):
    """The bridge on the fake machine: nothing here ever runs a real command."""
    del machine
    return pw.PrimaryWatch(root=tmp_path)


def installed(tmp_path: Path, path: str) -> Path:
    return tmp_path / path.lstrip("/")


def test_the_program_only_writes_timestamps_into_the_runtime_directory(pw, watch, tmp_path):
    watch.install(UNIT, CHARM_DIR, EVENT)

    program = installed(tmp_path, pw.PROGRAM)
    assert program.read_text() == (
        "#!/bin/sh\n"
        "# Written by the slurmctld charm (SlurmctldPrimaryOnProg, SlurmctldPrimaryOffProg).\n"
        "# slurmctld runs this as SlurmUser: it dates the change, then raises the flag a\n"
        "# root systemd path unit waits for to wake the charm (slurmctld-charm-primary.path).\n"
        "/usr/bin/date -u +%s > /run/slurmctld-charm/primary-changed\n"
        "exec /usr/bin/date -u +%s > /run/slurmctld-charm/wake\n"
    )
    assert program.stat().st_mode & 0o7777 == 0o755  # Root's, not writable by slurm.
    assert pw.PROGRAM == "/usr/local/libexec/slurmctld-charm/primary-changed"


def test_the_runtime_directory_is_roots_and_only_slurm_may_write_there(pw, watch, tmp_path):
    watch.install(UNIT, CHARM_DIR, EVENT)

    tmpfiles = installed(tmp_path, "/etc/tmpfiles.d/slurmctld-charm.conf")
    assert tmpfiles.read_text().splitlines()[-1] == "d /run/slurmctld-charm 0770 root slurm -"


def test_the_path_unit_starts_the_dispatch_service_while_the_flag_is_raised(pw, watch, tmp_path):
    """Level, not edge: systemd checks `PathExists=` again when the service ends."""
    watch.install(UNIT, CHARM_DIR, EVENT)

    unit = installed(tmp_path, "/etc/systemd/system/slurmctld-charm-primary.path")
    assert unit.read_text() == (
        "# Written by the slurmctld charm.\n"
        "[Unit]\n"
        "Description=Wake the slurmctld charm: its controller's primary role changed\n"
        "\n"
        "[Path]\n"
        "PathExists=/run/slurmctld-charm/wake\n"
        "Unit=slurmctld-charm-primary.service\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def test_the_service_takes_the_flag_then_dispatches_as_root_bounded_and_retried(
    pw, watch, tmp_path
):
    watch.install(UNIT, CHARM_DIR, EVENT)

    service = installed(tmp_path, "/etc/systemd/system/slurmctld-charm-primary.service")
    assert service.read_text() == (
        "# Written by the slurmctld charm.\n"
        "[Unit]\n"
        "Description=Wake slurmctld/1: its controller's primary role changed\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        "TimeoutStartSec=600\n"
        "ExecStartPre=/bin/rm -rf --one-file-system -- /run/slurmctld-charm/wake\n"
        "Restart=on-failure\n"
        "RestartSec=10\n"
        'ExecStart=juju-exec -u slurmctld/1 "JUJU_DISPATCH_PATH=hooks/slurmctld-wake '
        f'{CHARM_DIR}/dispatch"\n'
    )
    assert "User=" not in service.read_text()  # juju-exec needs root.


def test_first_install_creates_the_directory_reloads_and_starts_watching(
    watch, machine: FakeMachine
):
    assert watch.install(UNIT, CHARM_DIR, EVENT) is True

    assert machine.ran("systemd-tmpfiles") == [
        ["systemd-tmpfiles", "--create", "/etc/tmpfiles.d/slurmctld-charm.conf"]
    ]
    assert machine.ran("systemctl", "daemon-reload") == [["systemctl", "daemon-reload"]]
    assert machine.calls("enable") == ["slurmctld-charm-primary.path"]
    assert machine.calls("start") == ["slurmctld-charm-primary.path"]


def test_an_unchanged_bridge_that_watches_touches_nothing(watch, machine: FakeMachine):
    watch.install(UNIT, CHARM_DIR, EVENT)
    machine.commands.clear()
    machine.service_calls.clear()

    assert watch.install(UNIT, CHARM_DIR, EVENT) is False

    assert machine.commands == []
    assert machine.service_calls == []


def test_a_path_unit_that_stopped_watching_is_started_again(watch, machine: FakeMachine):
    watch.install(UNIT, CHARM_DIR, EVENT)
    machine.active.discard("slurmctld-charm-primary.path")
    machine.service_calls.clear()

    watch.install(UNIT, CHARM_DIR, EVENT)

    assert machine.calls("start") == ["slurmctld-charm-primary.path"]


def test_a_failed_daemon_reload_is_an_error_the_next_event_retries(watch, machine: FakeMachine):
    machine.fail("systemctl", "daemon-reload", stderr="Access denied")

    with pytest.raises(SlurmOpsError):
        watch.install(UNIT, CHARM_DIR, EVENT)

    machine.heal()
    machine.service_calls.clear()
    watch.install(UNIT, CHARM_DIR, EVENT)
    assert machine.calls("start") == ["slurmctld-charm-primary.path"]


@pytest.mark.parametrize(
    ("unit", "charm_dir", "event"),
    [
        ("slurmctld/1; rm -rf /", CHARM_DIR, EVENT),
        (UNIT, "/var/lib/juju/$HOME/charm", EVENT),
        (UNIT, '/var/lib/juju/"x"/charm', EVENT),
        (UNIT, "/var/lib/juju/a\nExecStartPost=/bin/sh", EVENT),
        (UNIT, CHARM_DIR, "Wake"),
    ],
)
def test_nothing_systemd_would_interpret_reaches_the_unit_file(
    watch, tmp_path, unit, charm_dir, event
):
    with pytest.raises(ValueError):
        watch.install(unit, charm_dir, event)

    assert not (tmp_path / "etc/systemd/system/slurmctld-charm-primary.service").exists()


def test_exec_line_escapes_what_systemd_would_expand(watch, tmp_path):
    watch.install(UNIT, "/var/lib/juju/100%/charm", EVENT)

    service = (tmp_path / "etc/systemd/system/slurmctld-charm-primary.service").read_text()
    assert "/var/lib/juju/100%%/charm/dispatch" in service  # systemd reads %% as %.
    assert wake.exec_line(["a%b", "c $d"]) == 'a%%b "c $$d"'


def test_exec_line_quotes_a_word_with_spaces_and_refuses_specials(pw):
    assert wake.exec_line(["a", "b c", "d=e"]) == 'a "b c" d=e'
    for word in ("", "a  b", "a\\b", "a;b", "a'b", " a"):
        with pytest.raises(ValueError):
            wake.exec_line([word])
