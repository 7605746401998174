"""Background wake-ups: the exact command line, names from untrusted input, a real run."""

import subprocess
import time

import pytest
from charm_testing import FakeMachine, systemd_expands
from hpc_libs.charm import wake
from hpc_libs.errors import ServiceError

DISPATCH = [
    "juju-exec",
    "-u",
    "slurmctld/0",
    "JUJU_DISPATCH_PATH=hooks/slurmctld-wake /var/lib/juju/agents/unit-slurmctld-0/charm/dispatch",
]


def test_dispatch_command_is_jujus_own():
    command = wake.dispatch_command(
        "slurmctld/0", "/var/lib/juju/agents/unit-slurmctld-0/charm", "slurmctld-wake"
    )

    assert command == DISPATCH


def test_a_charm_dir_with_shell_syntax_is_quoted():
    [*_, line] = wake.dispatch_command("a/0", "/tmp/x y;rm", "ev")

    assert line == "JUJU_DISPATCH_PATH=hooks/ev '/tmp/x y;rm/dispatch'"


@pytest.mark.parametrize(
    ("unit", "event"),
    [("a/0 -x", "ev"), ("a", "ev"), ("A/0", "ev"), ("a/0", "ev x"), ("a/0", "Ev"), ("a/0", "")],
)
def test_dispatch_refuses_bad_unit_or_event_names(unit, event):
    with pytest.raises(ValueError):
        wake.dispatch_command(unit, "/charm", event)


def test_watch_command_is_exact():
    command = wake.watch_command(["squeue", "-p", "a b"], ["juju-exec", "-u", "x/0", "y z"])

    assert command == [
        "/bin/sh",
        "-c",
        (wake.PROGRAMS_DIR / "wake-watch.sh").read_text(),
        "wake-watch",
        *["21600", "3", "30", "600", "4"],
        *["juju-exec", "-u", "x/0", "y z"],
        *["squeue", "-p", "a b"],
    ]


def test_no_word_of_a_watched_command_reaches_the_shell(tmp_path):
    """Run the real loop with words that would be shell syntax: each arrives as it is."""
    words = ["$(touch injected)", "a;b", "'q'", "*", "--"]
    check = ["sh", "-c", 'printf "%s\\n" "$@" > check', "sh", *words]
    command = wake.watch_command(check, ["true", *words], poll_seconds=0, bound=30)

    subprocess.run(command, cwd=tmp_path, timeout=30, check=True)

    assert (tmp_path / "check").read_text().splitlines() == words
    assert not (tmp_path / "injected").exists()


@pytest.mark.parametrize("subject", ["a b", "a;b", "a/b", "$(x)", "", "a\nb", "a=b"])
def test_watcher_name_refuses_what_is_not_a_slurm_name(subject):
    with pytest.raises(ValueError):
        wake.watcher_name("ctl-wake", subject)


def test_watcher_name_refuses_a_bad_prefix():
    with pytest.raises(ValueError):
        wake.watcher_name("Ctl wake", "a")


def test_watcher_name_is_an_explicit_service():
    assert wake.watcher_name("slurmctld-wake-node", "compute-1") == (
        "slurmctld-wake-node-compute-1.service"
    )


def test_watcher_starts_once_with_a_timeout(machine: FakeMachine):
    started = wake.wake_when_silent("w.service", ["squeue"], DISPATCH, "Wake")

    assert started is True
    [run] = machine.ran("systemd-run")
    assert run[:5] == ["systemd-run", "--unit=w.service", "--collect", "--description=Wake", "--"]
    assert run[5:7] == ["/bin/sh", "-c"]
    assert all(timeout > 0 for _, timeout in machine.timeouts)


def test_a_running_watcher_is_not_started_again(machine: FakeMachine):
    machine.active.add("w.service")

    assert wake.wake_when_silent("w.service", ["squeue"], DISPATCH, "Wake") is False
    assert machine.ran("systemd-run") == []


def test_systemd_run_failure_is_a_service_error(machine: FakeMachine):
    machine.fail("systemd-run", stderr="Unit w.service already exists")

    with pytest.raises(ServiceError):
        wake.wake_when_silent("w.service", ["squeue"], DISPATCH, "Wake")


def test_the_watcher_dispatches_once_the_check_prints_nothing(tmp_path):
    """Run the real shell loop: a check that is busy twice, then silent."""
    counter = tmp_path / "polls"
    check = [
        "sh",
        "-c",
        f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; "
        '[ "$n" -ge 2 ] || echo busy',
    ]
    command = wake.watch_command(check, ["echo", "dispatched"], poll_seconds=0, bound=30)

    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)

    assert result.stdout.splitlines() == ["fact reached; dispatching", "dispatched"]
    assert counter.read_text().strip() == "3"


def test_a_failing_check_is_not_yet_and_the_watcher_gives_up_at_its_bound():
    command = wake.watch_command(["false"], ["echo", "dispatched"], poll_seconds=0, bound=1)

    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)

    assert result.stdout.splitlines() == ["gave up after 1 s"]


def test_the_repeating_watcher_dispatches_on_its_timer_until_its_deadline(tmp_path):
    """Run the real loop: a dispatch every second for about 3 s, a failing one included."""
    count = tmp_path / "dispatches"
    dispatch = ["sh", "-c", f"echo x >> {count}; false"]  # Its hook failed: go on.
    until = int(time.time()) + 3
    command = wake.repeat_command(dispatch, period=1, until=until)

    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)

    assert 2 <= len(count.read_text().splitlines()) <= 4
    assert "dispatch failed: 1" in result.stdout
    assert time.time() >= until


def test_a_repeating_watcher_that_runs_is_left_to_run(machine: FakeMachine):
    """The hooks it dispatches find it running; only a hook after it ended starts it again."""
    machine.active.add("w.service")
    assert wake.wake_every("w.service", DISPATCH, "Wake", period=10, until=100) is False
    assert machine.ran("systemd-run") == []

    machine.active.clear()
    assert wake.wake_every("w.service", DISPATCH, "Wake", period=10, until=100) is True
    [run] = machine.ran("systemd-run")
    assert run[1] == "--unit=w.service"
    argv = [systemd_expands(word) for word in run[run.index("--") + 1 :]]
    assert argv[:3] == ["/bin/sh", "-c", (wake.PROGRAMS_DIR / "wake-repeat.sh").read_text()]
    assert argv[3:] == ["wake-repeat", "10", "100", "600", *DISPATCH]


def test_a_flag_wake_is_level_triggered_and_retried(machine: FakeMachine, tmp_path):
    """The path unit waits for the flag to exist; the service takes it, then dispatches."""
    bridge = wake.PathWake("w", "/run/w/flag", charm="c", change="x", root=tmp_path, flag=True)

    bridge.install("slurmctld/0", "/var/lib/juju/agents/unit-slurmctld-0/charm", "slurmctld-wake")

    path_unit = (tmp_path / "etc/systemd/system/w.path").read_text()
    service = (tmp_path / "etc/systemd/system/w.service").read_text().splitlines()
    assert "PathExists=/run/w/flag" in path_unit.splitlines()
    assert "PathChanged" not in path_unit
    pre, start = (
        service.index("ExecStartPre=/bin/rm -rf --one-file-system -- /run/w/flag"),
        service.index(
            'ExecStart=juju-exec -u slurmctld/0 "JUJU_DISPATCH_PATH=hooks/slurmctld-wake '
            '/var/lib/juju/agents/unit-slurmctld-0/charm/dispatch"'
        ),
    )
    assert pre < start
    assert {"Restart=on-failure", "RestartSec=10"} <= set(service)


def test_a_flag_of_any_kind_is_taken_and_nothing_through_it(tmp_path):
    """Run the service's real ExecStartPre: slurm made a directory (with entries) the flag.

    `rm -f` failed on it, so the service failed at every retry and no wake went through; a
    link inside must not lead the removal anywhere else.
    """
    flag = tmp_path / "run" / "flag"
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "file").write_text("root's")
    (flag / "sub").mkdir(parents=True)
    (flag / "sub" / "entry").write_text("")
    (flag / "link").symlink_to(kept)
    (flag / "sub" / "file-link").symlink_to(kept / "file")
    bridge = wake.PathWake("w", str(flag), charm="c", change="x", root=tmp_path, flag=True)
    service = bridge.service_unit_text(DISPATCH, "slurmctld/0").splitlines()
    [pre] = [line.removeprefix("ExecStartPre=") for line in service if "ExecStartPre=" in line]

    subprocess.run(pre.split(" "), check=True, timeout=30)

    assert not flag.exists()
    assert (kept / "file").read_text() == "root's"


def test_a_repeating_watcher_never_runs_past_its_bound(machine: FakeMachine):
    """A deadline years away (a date slurm wrote) still ends within WATCH_BOUND s."""
    started = int(time.time())

    wake.wake_every("w.service", DISPATCH, "Wake", period=10, until=started + 10 * 365 * 86400)

    [run] = machine.ran("systemd-run")
    argv = [systemd_expands(word) for word in run[run.index("--") + 1 :]]
    until = int(argv[argv.index("wake-repeat") + 2])
    assert started + wake.WATCH_BOUND <= until <= int(time.time()) + wake.WATCH_BOUND
