"""Scenarios for the takeover repair (issue 25): what a backup that took over undoes, and when.

The job and node vectors are what Slurm 24.11.5 printed on the lab after the primary was
SIGKILLed 0.6 s after job 1 started: the new primary relaunched it, slurmd refused
(`Duplicate jobid`), slurmctld drained the node and requeued the job held. Times in the
vectors: the drain and the requeue at 1795619074; here the unit last saw the old primary in
charge at `SEEN` and noticed its own takeover at `NOTICED`.
"""

import copy
import json
import os
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from charm_testing import systemd_expands
from ops import testing
from scenario.state import _Event
from test_ha_charm import backup, leader_wrote

VECTORS = Path(__file__).parents[1] / "hpc_libs" / "vectors" / "slurm-24.11"
SEEN = 1795619000.0
NOTICED = 1795619080.0
RELAUNCH = 1795619074
STATE = "var/lib/slurm/checkpoint/slurmctld"
LOG = "var/log/slurm/slurmctld.log"
RELEASE = ["scontrol", "release", "1"]
RESUME = ["scontrol", "update", "nodename=compute-0", "state=resume"]


def vector(name: str) -> dict[str, Any]:
    return json.loads((VECTORS / name).read_text())


def held_job(**changes: Any) -> dict[str, Any]:
    job = vector("job-launch-failed-requeued-held.json")["jobs"][0]
    return {**copy.deepcopy(job), **changes}


def drained_node(**changes: Any) -> dict[str, Any]:
    node = vector("node-drained-duplicate-jobid.json")["nodes"][0]
    return {**copy.deepcopy(node), **changes}


class Clock:
    """The takeover module's `time`, set by the test."""

    def __init__(self) -> None:
        self.now = SEEN

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(takeover_module, monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(takeover_module, "time", SimpleNamespace(time=fake.time))
    return fake


@pytest.fixture
def share(shared_fs: Path) -> Path:
    """The leader's files on the share: ctl9 is the primary, this unit (ctl0) backup1."""
    leader_wrote(shared_fs)
    return shared_fs


def beat(tmp_path: Path, index: int, at: float) -> None:
    """The heartbeat of controller `index` at `at`, as slurmctld writes it."""
    path = tmp_path / STATE / "heartbeat"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack(">QQ", int(at), index))


def slurm_shows(machine, nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
    machine.responses[("scontrol", "show", "nodes")] = json.dumps({"nodes": nodes})
    machine.responses[("scontrol", "show", "jobs")] = json.dumps({"jobs": jobs})


def repairs(machine) -> list[list[str]]:
    """What the charm changed in Slurm (scontrol release, requeue, update)."""
    return [
        c for c in machine.commands if c[:2] in (["scontrol", "release"], ["scontrol", "requeue"])
    ] + machine.ran("scontrol", "update")


def took_over(ctx, clock: Clock, tmp_path: Path, state: testing.State | None = None):
    """The unit sees the old primary in charge, then (its wake-up) its own heartbeat."""
    state = state or backup()
    beat(tmp_path, 0, SEEN)
    state = ctx.run(ctx.on.update_status(), state)
    clock.now = NOTICED
    beat(tmp_path, 1, NOTICED)
    return ctx.run(_Event("slurmctld_wake"), state)


def test_after_a_takeover_the_held_job_is_released_and_its_node_resumed(
    ctx, machine, tmp_path, share, clock
):
    slurm_shows(machine, [drained_node()], [held_job()])

    out = took_over(ctx, clock, tmp_path)

    assert repairs(machine) == [RELEASE, RESUME]
    assert machine.commands.index(RESUME) < machine.commands.index(RELEASE)  # The node first.
    assert out.unit_status == testing.ActiveStatus(
        "repaired after takeover: resumed compute-0 (Duplicate jobid); "
        "released job 1 (held after a refused launch)"
    )


def test_the_window_keeps_the_charm_awake(ctx, machine, tmp_path, share, clock):
    """One watcher dispatches a look every 10 s until the window closes (180 s after)."""
    slurm_shows(machine, [], [])

    took_over(ctx, clock, tmp_path)

    [run] = [c for c in machine.commands if c[0] == "systemd-run"]
    until = int(NOTICED) + 180
    assert f"--unit=slurmctld-wake-takeover-until-{until}.service" in run
    argv = [systemd_expands(word) for word in run[run.index("--") + 1 :]]
    assert argv[3:6] == ["wake-repeat", "10", str(until)]  # Every 10 s until `until`.
    assert "JUJU_DISPATCH_PATH=hooks/slurmctld-wake" in argv[-1]


def test_a_look_the_watcher_dispatched_leaves_it_running(ctx, machine, tmp_path, share, clock):
    """The watcher runs while its hook does: that hook starts none (it keeps dispatching).

    One-shot watchers (start the next look from the hook) stopped after the first look here:
    the hook found the watcher that dispatched it still running and started no other.
    """
    slurm_shows(machine, [], [])
    state = took_over(ctx, clock, tmp_path)
    [run] = [c for c in machine.commands if c[0] == "systemd-run"]
    machine.active.add(run[1].removeprefix("--unit="))  # systemd runs it; it dispatches.
    clock.now = NOTICED + 10
    beat(tmp_path, 1, clock.now)

    ctx.run(_Event("slurmctld_wake"), state)

    assert len(machine.ran("systemd-run")) == 1
    until = run[run.index("wake-repeat") + 2]
    assert until == str(int(NOTICED) + 180)  # It still dispatches at NOTICED + 20.


def test_a_wake_before_the_new_primarys_first_beat_keeps_looking(
    ctx, machine, tmp_path, share, clock
):
    """slurmctld signalled its takeover but has not beaten yet: the hook looks again later."""
    slurm_shows(machine, [drained_node()], [held_job()])
    beat(tmp_path, 0, SEEN)
    state = ctx.run(ctx.on.update_status(), backup())
    signalled = RELAUNCH - 4
    clock.now = signalled + 1
    signal = tmp_path / "run/slurmctld-charm/primary-changed"
    signal.parent.mkdir(parents=True, exist_ok=True)
    signal.write_text(f"{signalled}\n")
    os.utime(signal, (signalled, signalled))

    state = ctx.run(_Event("slurmctld_wake"), state)  # The old primary's stale beat only.

    [run] = [c for c in machine.commands if c[0] == "systemd-run"]
    assert f"--unit=slurmctld-wake-takeover-until-{signalled + 180}.service" in run
    assert repairs(machine) == []
    clock.now = NOTICED
    beat(tmp_path, 1, NOTICED)
    ctx.run(_Event("slurmctld_wake"), state)  # The watcher's look.
    assert repairs(machine) == [RELEASE, RESUME]


def test_a_hook_that_cannot_configure_still_repairs(ctx, machine, tmp_path, share, clock):
    """The mount check fails in the woken hook (say, it timed out): the repair does not wait."""
    slurm_shows(machine, [drained_node()], [held_job()])
    beat(tmp_path, 0, SEEN)
    state = ctx.run(ctx.on.update_status(), backup())
    (tmp_path / "mountinfo").write_text("22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n")
    clock.now = NOTICED
    beat(tmp_path, 1, NOTICED)

    out = ctx.run(_Event("slurmctld_wake"), state)

    assert repairs(machine) == [RELEASE, RESUME]
    assert out.unit_status.name == "waiting"  # The mount's status comes first.


def test_a_lost_wake_up_is_made_up_by_the_next_update_status(ctx, machine, tmp_path, share, clock):
    """Level-triggered: any later hook compares the heartbeat with what the unit last saw."""
    slurm_shows(machine, [drained_node()], [held_job()])
    beat(tmp_path, 0, SEEN)
    state = ctx.run(ctx.on.update_status(), backup())
    clock.now = NOTICED + 290  # No wake-up reached the charm; update-status, 5 min later.
    beat(tmp_path, 1, clock.now)

    out = ctx.run(ctx.on.update_status(), state)

    assert repairs(machine) == [RELEASE, RESUME]
    assert "released job 1" in out.unit_status.message


def test_a_casualty_seen_later_in_the_window_is_repaired_once(
    ctx, machine, tmp_path, share, clock
):
    slurm_shows(machine, [], [])
    state = took_over(ctx, clock, tmp_path)
    slurm_shows(machine, [drained_node()], [held_job()])
    clock.now = NOTICED + 10
    beat(tmp_path, 1, clock.now)

    state = ctx.run(_Event("slurmctld_wake"), state)
    clock.now = NOTICED + 20
    beat(tmp_path, 1, clock.now)
    ctx.run(_Event("slurmctld_wake"), state)  # Slurm still shows both (say, a slow release).

    assert machine.ran("scontrol", "release") == [RELEASE]
    assert machine.ran("scontrol", "update") == [RESUME]


def test_an_operators_drain_stays(ctx, machine, tmp_path, share, clock):
    node = drained_node(reason="disk swap", reason_set_by_user="root")
    slurm_shows(machine, [node], [held_job()])

    took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "update") == []
    assert machine.ran("scontrol", "release") == [RELEASE]


def test_slurms_words_typed_by_an_operator_stay(ctx, machine, tmp_path, share, clock):
    slurm_shows(machine, [drained_node(reason_set_by_user="root")], [])

    took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "update") == []


def test_a_drain_before_the_takeover_stays(ctx, machine, tmp_path, share, clock):
    earlier = {"set": True, "infinite": False, "number": int(SEEN) - 60}
    slurm_shows(machine, [drained_node(reason_changed_at=earlier)], [])

    took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "update") == []


def test_a_job_an_operator_held_stays_held(ctx, machine, tmp_path, share, clock):
    job = held_job(state_reason="JobHeldAdmin", state_description="")
    slurm_shows(machine, [], [job])

    took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "release") == []


def test_without_a_takeover_this_unit_saw_nothing_is_repaired(
    ctx, machine, tmp_path, share, clock
):
    """A unit that first looks while already in charge did not see who was before it."""
    slurm_shows(machine, [drained_node()], [held_job()])
    clock.now = NOTICED
    beat(tmp_path, 1, NOTICED)

    state = ctx.run(ctx.on.update_status(), backup())
    ctx.run(_Event("slurmctld_wake"), state)

    assert repairs(machine) == []


def test_a_backup_that_never_saw_the_primary_knows_its_takeover_from_slurmctld(
    ctx, machine, tmp_path, share, clock
):
    """Its last hook came before the first heartbeat; slurmctld signalled the takeover."""
    slurm_shows(machine, [drained_node()], [held_job()])
    state = ctx.run(ctx.on.update_status(), backup())  # No heartbeat: nobody in charge.
    signal = tmp_path / "run/slurmctld-charm/primary-changed"
    signal.parent.mkdir(parents=True, exist_ok=True)
    signal.write_text("1795619070\n")
    os.utime(signal, (RELAUNCH - 4, RELAUNCH - 4))
    clock.now = NOTICED
    beat(tmp_path, 1, NOTICED)

    out = ctx.run(_Event("slurmctld_wake"), state)

    assert repairs(machine) == [RELEASE, RESUME]
    assert "released job 1" in out.unit_status.message


def test_a_signal_dated_in_the_future_is_no_signal(ctx, machine, tmp_path, share, clock):
    """SlurmUser dates the file itself: a date years away keeps no watcher dispatching.

    Taken as it is, a watcher woke the charm every 10 s until that date.
    """
    slurm_shows(machine, [drained_node()], [held_job()])
    state = ctx.run(ctx.on.update_status(), backup())  # No heartbeat: nobody in charge.
    signal = tmp_path / "run/slurmctld-charm/primary-changed"
    signal.parent.mkdir(parents=True, exist_ok=True)
    signal.write_text("0\n")
    later = NOTICED + 10 * 365 * 86400
    os.utime(signal, (later, later))
    clock.now = NOTICED

    ctx.run(_Event("slurmctld_wake"), state)

    assert machine.ran("systemd-run") == []
    assert repairs(machine) == []


def test_only_a_regular_signal_file_dates_a_takeover(takeover_module, tmp_path):
    """No link is followed, and a directory or FIFO put at its name is no signal."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    os.utime(elsewhere, (RELAUNCH, RELAUNCH))
    signal = tmp_path / "primary-changed"
    signal.symlink_to(elsewhere)
    assert takeover_module.signalled_at(signal, NOTICED) == 0

    signal.unlink()
    signal.mkdir()
    os.utime(signal, (RELAUNCH, RELAUNCH))
    assert takeover_module.signalled_at(signal, NOTICED) == 0

    signal.rmdir()
    signal.write_text("")
    os.utime(signal, (RELAUNCH, RELAUNCH))
    assert takeover_module.signalled_at(signal, NOTICED) == RELAUNCH


def test_a_signal_before_the_casualties_time_bounds_them(ctx, machine, tmp_path, share, clock):
    """A drain older than the takeover slurmctld signalled stays, as with a seen takeover."""
    slurm_shows(machine, [drained_node()], [held_job()])
    state = ctx.run(ctx.on.update_status(), backup())
    signal = tmp_path / "run/slurmctld-charm/primary-changed"
    signal.parent.mkdir(parents=True, exist_ok=True)
    signal.write_text("0\n")
    os.utime(signal, (RELAUNCH + 1, RELAUNCH + 1))
    clock.now = NOTICED
    beat(tmp_path, 1, NOTICED)

    ctx.run(_Event("slurmctld_wake"), state)

    assert repairs(machine) == []


def test_the_primary_in_charge_all_along_repairs_nothing(ctx, machine, tmp_path, share, clock):
    slurm_shows(machine, [drained_node()], [held_job()])
    beat(tmp_path, 0, SEEN)
    state = ctx.run(ctx.on.update_status(), backup())
    clock.now = NOTICED
    beat(tmp_path, 0, NOTICED)

    ctx.run(ctx.on.update_status(), state)

    assert repairs(machine) == []


def test_a_stale_heartbeat_is_nobodys(ctx, machine, tmp_path, share, clock):
    """The old primary's last beat while the backup takes over changes nothing."""
    slurm_shows(machine, [drained_node()], [held_job()])
    beat(tmp_path, 0, SEEN)
    state = ctx.run(ctx.on.update_status(), backup())
    clock.now = NOTICED - 30
    state = ctx.run(ctx.on.update_status(), state)  # Stale: `since` stays at SEEN.
    clock.now = NOTICED
    beat(tmp_path, 1, NOTICED)

    ctx.run(_Event("slurmctld_wake"), state)

    assert machine.ran("scontrol", "release") == [RELEASE]


def test_a_job_killed_for_a_revoked_credential_is_requeued(ctx, machine, tmp_path, share, clock):
    ended = {"set": True, "infinite": False, "number": RELAUNCH}
    failed = held_job(job_state=["FAILED"], state_description="", end_time=ended)
    slurm_shows(machine, [], [failed])
    log = tmp_path / LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    when = "2026-11-25T15:04:34.040"
    log.write_text(
        "[2026-11-25T15:04:34.003] sched: Allocate JobId=1 NodeList=compute-0\n"
        f"[{when}] Killing non-startable batch JobId=1: Job credential revoked\n"
    )

    out = took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "requeue") == [["scontrol", "requeue", "1"]]
    assert "requeued job 1 (killed: credential revoked)" in out.unit_status.message


def test_a_failed_job_without_that_log_line_stays_failed(ctx, machine, tmp_path, share, clock):
    ended = {"set": True, "infinite": False, "number": RELAUNCH}
    failed = held_job(job_state=["FAILED"], state_description="", end_time=ended)
    slurm_shows(machine, [], [failed])

    took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "requeue") == []


def test_the_repairs_show_until_a_clean_update_status_after_the_window(
    ctx, machine, tmp_path, share, clock
):
    slurm_shows(machine, [drained_node()], [held_job()])
    state = took_over(ctx, clock, tmp_path)
    clock.now = NOTICED + 60
    beat(tmp_path, 1, clock.now)
    slurm_shows(machine, [], [])

    state = ctx.run(ctx.on.update_status(), state)  # Within the window: still shown.
    assert state.unit_status.message.startswith("repaired after takeover: resumed compute-0")

    clock.now = NOTICED + 181
    beat(tmp_path, 1, clock.now)
    state = ctx.run(ctx.on.update_status(), state)
    assert "repaired" not in state.unit_status.message


def test_a_heartbeat_link_or_fifo_is_not_read(takeover_module, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "elsewhere").write_bytes(struct.pack(">QQ", 1, 1))
    (state / "heartbeat").symlink_to(tmp_path / "elsewhere")
    assert takeover_module.read_heartbeat(state) is None

    (state / "heartbeat").unlink()
    os.mkfifo(state / "heartbeat")
    assert takeover_module.read_heartbeat(state) is None  # And it did not block.


def test_a_short_heartbeat_is_not_read(takeover_module, tmp_path):
    (tmp_path / "heartbeat").write_bytes(b"\0" * 8)
    assert takeover_module.read_heartbeat(tmp_path) is None


def test_many_repairs_are_counted_in_the_status(ctx, machine, tmp_path, share, clock):
    jobs = [held_job(job_id=n) for n in range(1, 7)]
    slurm_shows(machine, [drained_node()], jobs)

    out = took_over(ctx, clock, tmp_path)

    assert len(machine.ran("scontrol", "release")) == 6
    assert out.unit_status.message.endswith(
        "released job 3 (held after a refused launch); 3 more (see the unit's log)"
    )
