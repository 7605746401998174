"""Fencing: a controller that cannot write the shared state stops, and starts once it can.

The watchdog itself is a shell script; one scenario runs it for real, against stand-ins for
the machine's commands (`mountpoint`, `setpriv`, `systemctl`), so its timing rules are
executed, not only read.
"""

import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from charm_testing import FakeMachine
from ops import testing
from test_ha_charm import NETWORK, backup, leader_wrote, network_leader, slurmctld_calls

STATE_DIR = "/var/lib/slurm/checkpoint/slurmctld"


@pytest.fixture
def fence(fence_module: ModuleType) -> ModuleType:
    return fence_module


def fenced(tmp_path: Path, reason: str = "2026-11-23T13:00:00Z cannot write x for 6 s") -> None:
    flag = tmp_path / "run/slurmctld-fence/fenced"
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.write_text(reason + "\n")


# The charm's side.


def test_the_grace_is_half_the_slurmctld_timeout_so_the_fence_comes_before_a_takeover(fence):
    assert fence.grace_seconds(12) == 6
    assert fence.grace_seconds(120) == 60
    assert fence.grace_seconds(3) == 2  # Never below 2 s: one slow probe is no fence.


def test_every_controller_of_network_state_runs_the_watchdog(ctx, machine, tmp_path, shared_fs):
    leader_wrote(shared_fs)

    ctx.run(ctx.on.config_changed(), backup())

    service = tmp_path / "etc/systemd/system/slurmctld-charm-fence.service"
    assert (
        "ExecStart=/usr/local/libexec/slurmctld-charm/fence /var/lib/slurm/checkpoint "
        f"{STATE_DIR} 2 slurm"
    ) in service.read_text().splitlines()
    assert "Restart=always" in service.read_text().splitlines()
    program = tmp_path / "usr/local/libexec/slurmctld-charm/fence"
    assert program.stat().st_mode & 0o7777 == 0o755
    assert ("restart", "slurmctld-charm-fence.service") in machine.service_calls


def test_the_watchdog_follows_the_slurmctld_timeout(ctx, machine, tmp_path, shared_fs):
    leader_wrote(shared_fs)
    state = ctx.run(ctx.on.config_changed(), backup())
    machine.service_calls.clear()

    changed = dataclasses.replace(state, config={**NETWORK, "slurmctld-timeout": 30})
    ctx.run(ctx.on.config_changed(), changed)

    service = tmp_path / "etc/systemd/system/slurmctld-charm-fence.service"
    assert f"{STATE_DIR} 15 slurm" in service.read_text()
    assert machine.calls("restart") == ["slurmctld-charm-fence.service"]


def test_an_unchanged_watchdog_is_left_running(ctx, machine, shared_fs):
    leader_wrote(shared_fs)
    state = ctx.run(ctx.on.config_changed(), backup())
    machine.service_calls.clear()

    ctx.run(ctx.on.update_status(), state)

    assert "slurmctld-charm-fence.service" not in machine.calls("restart")


def test_a_fenced_backup_says_why_and_starts_no_slurmctld(ctx, machine, tmp_path, shared_fs):
    leader_wrote(shared_fs)
    fenced(tmp_path)

    out = ctx.run(ctx.on.update_status(), backup())

    assert out.unit_status == testing.BlockedStatus(
        "slurmctld fenced until the shared state is writable again: "
        "2026-11-23T13:00:00Z cannot write x for 6 s"
    )
    assert slurmctld_calls(machine) == []


def test_a_fenced_leader_writes_no_configuration(ctx, machine, tmp_path, shared_fs):
    fenced(tmp_path)

    out = ctx.run(ctx.on.config_changed(), network_leader())

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("slurmctld fenced")
    assert not (shared_fs / "etc-slurm/slurm.conf").exists()
    assert slurmctld_calls(machine) == []


def test_once_unfenced_the_backup_runs_again(ctx, machine, tmp_path, shared_fs):
    leader_wrote(shared_fs)
    fenced(tmp_path)
    state = ctx.run(ctx.on.update_status(), backup())
    (tmp_path / "run/slurmctld-fence/fenced").unlink()  # The watchdog saw a write succeed.

    ctx.run(ctx.on.update_status(), state)

    assert "slurmctld" in machine.calls("start")


def test_without_network_state_there_is_no_watchdog(ctx, machine, tmp_path):
    from test_charm_slurmctld import running

    ctx.run(ctx.on.config_changed(), running())

    assert not (tmp_path / "etc/systemd/system/slurmctld-charm-fence.service").exists()
    assert machine.calls("restart") == []
    assert "slurmctld-charm-fence.service" not in machine.calls("start")


# The watchdog itself, run for real.


WATCHDOG_GRACE = 3


@pytest.fixture
def watchdog(fence: ModuleType, tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Start the watchdog (`grace` s, each probe's write taking `probe_s` more) with stand-in
    commands; return its directory.

    `writable` present: the probe's write succeeds. `systemctl.log`: what it asked systemd.
    `slurmctld.pid`: a process standing in for slurmctld, which the fence must kill.
    """
    work = tmp_path / "fence"
    (work / "bin").mkdir(parents=True)
    (work / "state").mkdir()
    run_dir = work / "run"
    run_dir.mkdir()
    stand_in = subprocess.Popen(["sleep", "300"])
    (work / "slurmctld.pid").write_text(str(stand_in.pid))
    processes: list[subprocess.Popen[str]] = []

    def start(grace: int = WATCHDOG_GRACE, probe_s: float = 0) -> Path:
        commands = {
            "mountpoint": "exit 0",
            # setpriv --reuid=.. --regid=.. --clear-groups <command...>: fails unless writable.
            "setpriv": f'[ -e {work}/writable ] || exit 1; sleep {probe_s}; shift 3; exec "$@"',
            "systemctl": (
                f'echo "$*" >> {work}/systemctl.log; '
                f'[ "$1" = show ] && cat {work}/slurmctld.pid; exit 0'
            ),
        }
        for name, body in commands.items():
            path = work / "bin" / name
            path.write_text(f"#!/bin/sh\n{body}\n")
            path.chmod(0o755)
        program = work / "fence"
        program.write_text(fence.program_text().replace(fence.RUNTIME_DIR, str(run_dir)))
        program.chmod(0o755)
        (work / "writable").touch()
        env = {**os.environ, "PATH": f"{work / 'bin'}:{os.environ['PATH']}"}
        argv = [str(program), str(work), str(work / "state"), str(grace), "nobody"]
        processes.append(
            subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
        return work

    try:
        yield start
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=10)
        stand_in.kill()
        stand_in.wait(timeout=10)


def wait_for(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def stand_in_runs(work: Path) -> bool:
    pid = int((work / "slurmctld.pid").read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of this test stays a zombie until reaped: look at its state.
    state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    return state != "Z"


def test_the_watchdog_kills_slurmctld_without_the_state_and_starts_it_once_back(watchdog, fence):
    work = watchdog()
    flag = work / "run/fenced"
    assert wait_for((work / "state" / f"fence-probe-{os.uname().nodename}").exists, 5)
    time.sleep(WATCHDOG_GRACE + 0.5)  # Writable: longer than the grace, and nothing happens.
    assert not flag.exists()
    assert stand_in_runs(work)

    (work / "writable").unlink()  # The shared state is lost.
    # Never before the grace, counted from the last write that succeeded (`probe-ok`'s
    # mtime, to the millisecond): that write may precede the loss by a probe period or more
    # on a loaded host, so the loss itself is no reference. After the grace, a loaded host
    # only delays the probe: the late side is liveness, not precision.
    assert wait_for(flag.exists, 15)
    last_write = (work / "run/probe-ok").stat().st_mtime
    fenced_after = time.time() - last_write
    assert fenced_after >= WATCHDOG_GRACE
    assert wait_for(lambda: not stand_in_runs(work), 2)
    assert "cannot write" in flag.read_text()
    assert wait_for(lambda: wakes(fence, work) == 1, 2)  # The charm is woken to show the fence.
    assert "start --no-block slurmctld.service" not in systemctl_log(work)

    (work / "writable").touch()  # Back.
    assert wait_for(lambda: not flag.exists(), 4)
    assert wait_for(lambda: wakes(fence, work) == 2, 2)  # And woken again once unfenced.
    assert systemctl_log(work).count("start --no-block slurmctld.service") == 1
    assert not any(work.glob("**/primary-changed"))


def working_in(directory: Path) -> list[int]:
    """The processes whose working directory is `directory` (which keep its mount busy)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(entry / "cwd") == str(directory):
                    found.append(int(entry.name))
    return found


def test_the_watchdog_holds_the_share_busy_until_it_stops(watchdog):
    """A plain unmount of the share fails while a process works in it (module doc)."""
    work = watchdog()
    assert wait_for(lambda: len(working_in(work)) == 1, 5)
    [pin] = working_in(work)
    watchdog_pid = int(Path(f"/proc/{pin}/stat").read_text().rsplit(")", 1)[1].split()[1])

    os.kill(watchdog_pid, signal.SIGTERM)

    assert wait_for(lambda: working_in(work) == [], 5)  # It takes its child with it.


def systemctl_log(work: Path) -> list[str]:
    log = work / "systemctl.log"
    return log.read_text().splitlines() if log.exists() else []


def wakes(fence: ModuleType, work: Path) -> int:
    """How often the watchdog started the charm's wake service."""
    return systemctl_log(work).count(f"start --no-block {fence.WAKE_SERVICE}")


def test_the_watchdog_wakes_the_charm_through_systemd_never_through_slurms_directory(
    fence, primary_watch_module
):
    # /run/slurmctld-charm is the slurm group's: a write there (root's) would follow a link.
    assert primary_watch_module.RUNTIME_DIR not in fence.program_text()
    assert primary_watch_module.PrimaryWatch().wake.service_name == fence.WAKE_SERVICE
    assert f"systemctl start --no-block {fence.WAKE_SERVICE}" in fence.program_text()


def test_a_short_loss_under_the_grace_fences_nothing(watchdog):
    work = watchdog()
    assert wait_for(lambda: any((work / "state").iterdir()), 5)

    (work / "writable").unlink()
    time.sleep(0.8)
    (work / "writable").touch()
    time.sleep(3)

    assert not (work / "run/fenced").exists()
    assert stand_in_runs(work)


def test_probes_that_are_slow_but_succeed_fence_nothing_at_the_shortest_grace(watchdog, fence):
    """A loaded host: each write takes 1.5 s, so the last success is 1.5 s old when the
    watchdog looks (each second), under the 2 s grace of `SlurmctldTimeout` 4: no fence.

    The watchdog starts just after a second begins, so its looks do too and each success
    lands mid-second: counted in whole seconds, 1.5 s read as 2 and the fence came at the
    second look (the spurious backup fence of the stop 49 sweep, 4 s under CI's load)."""
    time.sleep(1 - time.time() % 1)
    work = watchdog(grace=fence.MIN_GRACE, probe_s=1.5)
    time.sleep(8)

    assert not (work / "run/fenced").exists()
    assert stand_in_runs(work)


def test_the_watchdog_is_a_posix_shell_script(fence):
    # dash (Ubuntu's /bin/sh) must accept it: check the syntax with the shell it names.
    result = subprocess.run(
        ["sh", "-n"], input=fence.program_text(), text=True, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert fence.program_text().startswith("#!/bin/sh\n")


def test_a_missing_flag_means_not_fenced(fence, tmp_path, machine: FakeMachine):
    del machine
    assert fence.Fence(tmp_path).reason() is None
    fenced(tmp_path, "2026-11-23T13:00:00Z cannot write y for 7 s")
    assert fence.Fence(tmp_path).reason() == "2026-11-23T13:00:00Z cannot write y for 7 s"
