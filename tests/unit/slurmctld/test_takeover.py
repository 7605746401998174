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

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

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


def number(value: dict[str, Any]) -> int:
    """A data_parser number (`{"set": true, "number": 5}`) as squeue prints it (0 unset)."""
    return value["number"] if value.get("set", True) else 0


def squeue_prints(job: dict[str, Any]) -> str | None:
    """The line `JOBS_QUERY` prints for `job`, None if its state filter leaves it out.

    squeue's `--states=PENDING,FAILED,COMPLETING`: the plain state, or the COMPLETING flag;
    its State column names a flag before the base state; times in Unix seconds (`N/A`: 0).
    """
    states = job["job_state"]
    if not (states in (["PENDING"], ["FAILED"]) or "COMPLETING" in states):
        return None
    state = "COMPLETING" if "COMPLETING" in states else states[0]
    times = [number(job[f]) or "N/A" for f in ("submit_time", "start_time", "end_time")]
    code = job["exit_code"]
    signal = number(code["signal"]["id"])
    exit_code = f"{0 if signal else number(code['return_code'])}:{signal}"
    fields = [job["job_id"], state, *times, job["restart_cnt"], int(job["requeue"])]
    return "|".join(str(f) for f in [*fields, int(job["batch_flag"]), exit_code])


def sinfo_prints(node: dict[str, Any]) -> str | None:
    """The line `NODES_QUERY` prints for `node`, None unless it is drained or draining."""
    if "DRAIN" not in node["state"]:
        return None
    return f"{node['name']}|{number(node['reason_changed_at']) or 'Unknown'}"


BUSY_QUERY = ("sinfo", "--all", "--noheader", "--Node", "--states=allocated,mixed")


def sinfo_prints_busy(node: dict[str, Any]) -> str | None:
    """The line `BUSY_NODES_QUERY` prints for `node`, None unless it is allocated or mixed:
    its name and its state with every flag, lower case, `+`-joined."""
    base, *flags = node["state"]
    if base not in ("ALLOCATED", "MIXED"):
        return None
    return f"{node['name']}|{'+'.join(s.lower() for s in [base, *flags])}"


def busy_node(name: str, *flags: str, base: str = "MIXED") -> dict[str, Any]:
    return drained_node(name=name, state=[base, *flags])


def slurm_shows(machine, nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
    """Slurm holds these records: the narrow queries list them, `scontrol show` gives each.

    The charm's whole-cluster reads of old (`scontrol show jobs|nodes --json`) answer too, so
    a test of the narrow reads also fails on a charm that still reads everything.
    """
    machine.responses[("scontrol", "show", "nodes")] = json.dumps(
        {"meta": META_24_11, "nodes": nodes}
    )
    machine.responses[("scontrol", "show", "jobs")] = json.dumps(
        {"meta": META_24_11, "jobs": jobs}
    )
    for node in nodes:
        key = ("scontrol", "show", "node", node["name"])
        machine.responses[key] = json.dumps({"meta": META_24_11, "nodes": [node]})
    for job in jobs:
        key = ("scontrol", "show", "job", str(job["job_id"]))
        machine.responses[key] = json.dumps({"meta": META_24_11, "jobs": [job]})
    machine.responses[BUSY_QUERY] = "".join(
        f"{line}\n" for node in nodes if (line := sinfo_prints_busy(node)) is not None
    )
    machine.responses[("sinfo",)] = "".join(
        f"{line}\n" for node in nodes if (line := sinfo_prints(node)) is not None
    )
    machine.responses[("squeue",)] = "".join(
        f"{line}\n" for job in jobs if (line := squeue_prints(job)) is not None
    )


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


def test_after_a_takeover_the_nodes_running_jobs_register_again_once(
    ctx, machine, tmp_path, share, clock
):
    """Soak seed 74: a job whose end the old primary was told and never saved ran on in the
    new primary's records until its time limit (TIMEOUT); a registration ends it there."""
    slurm_shows(
        machine,
        [
            busy_node("compute-0", "DYNAMIC_NORM"),
            busy_node("compute-1", "DYNAMIC_NORM", base="ALLOCATED"),
            busy_node("compute-2", "COMPLETING", "DYNAMIC_NORM"),
            {**busy_node("compute-3", "DRAIN", "DYNAMIC_NORM"), "reason": "disk"},  # an operator's
            busy_node("compute-4", "NOT_RESPONDING", "DYNAMIC_NORM"),
            busy_node("compute-5", "DYNAMIC_NORM", base="IDLE"),
        ],
        [],
    )

    state = took_over(ctx, clock, tmp_path)
    for look in (10, 20, 30, 40):  # the recheck's looks
        if look == 30:  # before: too soon, Slurm would purge nothing
            assert machine.ran("scontrol", "update") == []
        clock.now = NOTICED + look
        beat(tmp_path, 1, clock.now)
        state = ctx.run(_Event("slurmctld_wake"), state)

    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", "nodename=compute-0,compute-1,compute-2", "state=undrain"]
    ]


def test_a_registration_slurm_refused_is_asked_again_at_the_next_look(
    ctx, machine, tmp_path, share, clock
):
    slurm_shows(machine, [busy_node("compute-0", "DYNAMIC_NORM")], [])
    machine.fail("scontrol", "update", returncode=1, stderr="slurm_update error: busy")

    state = took_over(ctx, clock, tmp_path)
    clock.now = NOTICED + 30
    beat(tmp_path, 1, clock.now)
    state = ctx.run(_Event("slurmctld_wake"), state)
    assert state.unit_status.message.startswith("cannot repair after takeover yet: ")
    machine._failures.clear()  # pyright: ignore[reportPrivateUsage]
    clock.now = NOTICED + 40
    beat(tmp_path, 1, clock.now)
    ctx.run(_Event("slurmctld_wake"), state)

    assert len(machine.ran("scontrol", "update")) == 2


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


def at(epoch: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": epoch}


def killed_job(**changes: Any) -> dict[str, Any]:
    """Job 1 as slurmctld leaves it after `Killing non-startable batch JobId=1` (agent.c).

    `job_complete(..., _wif_status())`: status 256, so FAILED with `NonZeroExitCode` and exit
    code 1:0, ended at once; the new primary started it at RELAUNCH.
    """
    exit_code = {
        "status": ["ERROR"],
        "return_code": at(1),
        "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""},
    }
    record = held_job(
        job_state=["FAILED"],
        state_reason="NonZeroExitCode",
        state_description="",
        restart_cnt=0,
        submit_time=at(RELAUNCH - 30),
        start_time=at(RELAUNCH),
        end_time=at(RELAUNCH),
        exit_code=exit_code,
    )
    return {**record, **changes}


def test_a_job_killed_for_a_refused_launch_is_requeued(ctx, machine, tmp_path, share, clock):
    slurm_shows(machine, [], [killed_job()])

    out = took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "requeue") == [["scontrol", "requeue", "1"]]
    assert "requeued job 1 (killed: launch refused)" in out.unit_status.message


def test_a_job_killed_in_the_second_the_takeover_began_is_requeued(
    ctx, machine, tmp_path, share, clock
):
    """Slurm's record times are whole seconds: a kill at 0.93 s into the second the other
    controller was last seen reads as that second, not before it (seen in CI: a node's
    registration with the new primary killed the job, in the second its takeover began)."""
    clock.now = SEEN + 0.6
    same_second = at(int(SEEN))
    slurm_shows(machine, [], [killed_job(start_time=same_second, end_time=same_second)])

    took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "requeue") == [["scontrol", "requeue", "1"]]


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"start_time": at(RELAUNCH - 60)}, id="it ran a minute: its own exit 1"),
        pytest.param({"state_reason": "RaisedSignal"}, id="another reason"),
        pytest.param({"requeue": False}, id="not requeueable"),
        pytest.param({"job_state": ["COMPLETED"]}, id="completed"),
        pytest.param({"start_time": at(int(SEEN) - 10), "end_time": at(int(SEEN) - 5)}, id="old"),
    ],
)
@pytest.mark.usefixtures("share")
def test_a_job_that_ended_otherwise_stays_ended(
    ctx, machine, tmp_path, clock, changes: dict[str, Any]
):
    slurm_shows(machine, [], [killed_job(**changes)])

    took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "requeue") == []


@pytest.mark.parametrize("newline", ["\n", "\r", "\u2028", "\x85"])
@pytest.mark.usefixtures("share")
def test_a_line_forged_into_slurmctlds_log_requeues_nothing(
    ctx, machine, tmp_path, clock, newline: str
):
    """A user's invalid partition string, logged verbatim, carries slurmctld's words.

    Job 77 is another user's job that completed after the takeover; the log says nothing true
    about it, and its record shows no refused launch.
    """
    done = held_job(
        job_id=77, job_state=["COMPLETED"], state_description="", end_time=at(RELAUNCH)
    )
    slurm_shows(machine, [], [done])
    log = tmp_path / LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    forged = (
        "[2026-11-25T15:04:34.040] Killing non-startable batch JobId=77: Job credential revoked"
    )
    log.write_text(
        "[2026-11-25T15:04:34.003] _valid_job_part: invalid partition specified: "
        f"x{newline}{forged}\n{forged}\n"
    )

    took_over(ctx, clock, tmp_path)

    assert machine.ran("scontrol", "requeue") == []


def test_a_log_line_with_an_impossible_date_or_a_huge_id_is_no_hook_error(
    ctx, machine, tmp_path, share, clock
):
    """What once raised ValueError in every hook, and lost the hook's repairs, is ignored."""
    slurm_shows(machine, [drained_node()], [held_job()])
    log = tmp_path / LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    huge = "9" * 5000
    log.write_text(
        "[2026-13-45T99:99:99] Killing non-startable batch JobId=1: Job credential revoked\n"
        f"[2026-11-25T15:04:34] Killing non-startable batch JobId={huge}: Job credential revoked\n"
    )

    out = took_over(ctx, clock, tmp_path)

    assert repairs(machine) == [RELEASE, RESUME]
    assert "released job 1" in out.unit_status.message


def test_an_error_in_a_look_is_a_status_and_the_repairs_before_it_are_saved(
    ctx, machine, tmp_path, share, clock
):
    """The check is the component's boundary: whatever it raises is a status, not a hook error.

    The node was resumed before reading job 1 failed; the hook's state keeps that, so the next
    look does not resume it again.
    """
    slurm_shows(machine, [drained_node()], [held_job()])
    machine.responses[("scontrol", "show", "job", "1")] = ValueError("bad record")
    machine.responses[("scontrol", "show", "jobs")] = ValueError("bad record")

    state = took_over(ctx, clock, tmp_path)

    assert state.unit_status == testing.WaitingStatus(
        "cannot repair after takeover yet: ValueError: bad record"
    )
    assert machine.ran("scontrol", "update") == [RESUME]
    slurm_shows(machine, [drained_node()], [held_job()])
    clock.now = NOTICED + 10
    beat(tmp_path, 1, clock.now)
    out = ctx.run(_Event("slurmctld_wake"), state)
    assert machine.ran("scontrol", "update") == [RESUME]  # Once.
    assert machine.ran("scontrol", "release") == [RELEASE]
    assert out.unit_status.message.startswith("repaired after takeover: resumed compute-0")


@pytest.mark.usefixtures("share")
def test_each_look_lists_only_drained_nodes_and_pending_or_ended_jobs(
    ctx, machine, tmp_path, clock
):
    """Two narrow text queries, then the record of each candidate: never every job as JSON.

    20,000 jobs were 101 MB of `scontrol show jobs --json` (328 MB peak) on the controller
    that had just taken over; squeue's and sinfo's fields here are ids, states, counts, times.
    """
    slurm_shows(machine, [drained_node()], [held_job()])

    took_over(ctx, clock, tmp_path)

    fields = "JobId:|,State:|,SubmitTime:|,StartTime:|,EndTime:|,RestartCnt:|,Requeue:|"
    assert machine.ran("squeue") == [
        [
            "squeue",
            "--all",
            "--noheader",
            "--states=PENDING,FAILED,COMPLETING",
            f"--Format={fields},BatchFlag:|,exit_code:0",
        ]
    ]
    assert machine.ran("sinfo") == [
        [
            "sinfo",
            "--all",
            "--noheader",
            "--Node",
            "--states=drain",
            "--Format=NodeList:|,TimeStamp:0",
        ]
    ]
    shown = [
        c for c in machine.ran("scontrol", "show") if c[2] in ("jobs", "nodes", "job", "node")
    ]
    assert shown == [
        ["scontrol", "show", "node", "compute-0", "--json"],
        ["scontrol", "show", "job", "1", "--json"],
    ]


def test_a_look_that_cannot_run_says_cannot_repair(ctx, machine, tmp_path, share, clock):
    """squeue past its timeout on a busy new primary: the status says the repair did not look."""
    slurm_shows(machine, [drained_node()], [held_job()])
    for command in (("squeue",), ("sinfo",), ("scontrol", "show", "jobs")):
        machine.time_out(*command)
    machine.time_out("scontrol", "show", "nodes")

    out = took_over(ctx, clock, tmp_path)

    assert repairs(machine) == []
    assert out.unit_status.name == "waiting"
    assert out.unit_status.message.startswith("cannot repair after takeover yet: ")


@pytest.mark.usefixtures("share")
def test_looks_stop_after_the_cap_and_a_last_failure_stays_in_the_status(
    ctx, machine, tmp_path, clock, takeover_module
):
    """A controller that never answers is asked `MAX_LOOKS` times, then the status says so."""
    slurm_shows(machine, [], [])
    machine.time_out("squeue")
    machine.time_out("sinfo")
    state = took_over(ctx, clock, tmp_path)
    for look in range(1, 15):
        clock.now = NOTICED + 10 * look
        beat(tmp_path, 1, clock.now)
        state = ctx.run(_Event("slurmctld_wake"), state)

    assert len(machine.ran("sinfo")) == takeover_module.MAX_LOOKS
    assert state.unit_status.name == "blocked"
    assert state.unit_status.message.startswith("cannot repair after takeover: ")


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


def test_a_candidate_its_record_rejects_is_read_once_per_takeover(
    ctx, machine, tmp_path, share, clock
):
    """An operator's drain is listed at every look; its record is read at the first only."""
    node = drained_node(reason="disk swap", reason_set_by_user="root")
    slurm_shows(machine, [node], [])
    state = took_over(ctx, clock, tmp_path)
    clock.now = NOTICED + 10
    beat(tmp_path, 1, clock.now)

    ctx.run(_Event("slurmctld_wake"), state)

    assert len(machine.ran("sinfo", "--all", "--noheader", "--Node", "--states=drain")) == 2
    assert len(machine.ran("scontrol", "show", "node", "compute-0")) == 1
    assert machine.ran("scontrol", "update") == []


@pytest.mark.parametrize("line_break", ["\r", "\u2028", "\x85", "\x0b"])
def test_a_record_broken_by_another_line_break_names_no_candidate(takeover_module, line_break):
    """Only "\n" ends squeue's and sinfo's records (`str.splitlines` would split here too)."""
    failed = f"2|FAILED|{RELAUNCH - 30}|{RELAUNCH}|{RELAUNCH}|0|1|1|1:0"
    drained = f"compute-0|{RELAUNCH}"

    assert takeover_module.job_candidates(f"{failed}\n", SEEN) == [2]
    assert takeover_module.job_candidates(f"x{line_break}{failed}\n", SEEN) == []
    assert takeover_module.node_candidates(f"{drained}\n", SEEN) == ["compute-0"]
    assert takeover_module.node_candidates(f"x{line_break}{drained}\n", SEEN) == []


@pytest.mark.parametrize(
    ("index", "field"),
    [
        *[(0, f) for f in ("9" * 5000, "4294967296", "²", "-1", "0x10")],
        *[(i, f) for i in (2, 3, 4) for f in ("9" * 5000, "2026-13-45T99:99:99", "9" * 14, "²")],
    ],
)
def test_a_huge_number_or_an_impossible_time_makes_a_line_no_record(
    takeover_module, index: int, field: str
):
    fields = f"2|FAILED|{RELAUNCH - 30}|{RELAUNCH}|{RELAUNCH}|0|1|1|1:0".split("|")
    fields[index] = field

    assert takeover_module.job_candidates("|".join(fields) + "\n", SEEN) == []


def test_a_look_that_failed_is_no_status_once_another_controller_is_in_charge(
    ctx, machine, tmp_path, share, clock
):
    """Soak seed 74 in CI: a look failed while the old primary took control back; the unit
    looked no more and said `cannot repair after takeover` until the next update-status."""
    slurm_shows(machine, [], [])
    machine.time_out("sinfo")
    state = took_over(ctx, clock, tmp_path)
    assert state.unit_status.message.startswith("cannot repair after takeover yet: ")

    clock.now = NOTICED + 10
    beat(tmp_path, 0, clock.now)  # the old primary is back in charge
    state = ctx.run(_Event("slurmctld_wake"), state)

    assert not state.unit_status.message.startswith("cannot repair")
