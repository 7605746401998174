"""The soak's pure parts (tests/soak): the schedule a seed draws, and the invariants' checks."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "soak"))

import history
import jubilant
import plan
from history import FaultRecord, JobSeen, Run, Submission


def test_the_same_seed_draws_the_same_schedule_and_jobs():
    first = plan.draw_schedule(7, 20)
    again = plan.draw_schedule(7, 20)
    other = plan.draw_schedule(8, 20)

    assert first == again
    assert first != other
    assert all(plan.WARM_UP_S < f.at_s < 20 * 60 for f in first)
    assert [f.at_s for f in first] == sorted(f.at_s for f in first)
    jobs = plan.JobStream(7, ("root", "soak"), ("compute", "scaled"))
    same = plan.JobStream(7, ("root", "soak"), ("compute", "scaled"))
    assert [jobs.next() for _ in range(50)] == [same.next() for _ in range(50)]


def test_a_long_schedule_draws_every_fault_kind_and_aims_at_the_controller_in_charge():
    faults = [f for seed in range(5) for f in plan.draw_schedule(seed, 120)]

    assert {f.kind for f in faults} == set(plan.KINDS)
    assert any(f.pick < 0 and f.app == "slurmctld" for f in faults)
    assert all(f.hold_s >= 15 for f in faults if f.kind in plan.HARD)


def sub(job_id: str, at: float, **shape: object) -> Submission:
    return Submission(job_id, at, dict(shape))


def seen(state: str, *nodes: str, restarts: int = 0) -> JobSeen:
    return JobSeen(state, restarts, set(nodes), 0.0)


def ends(
    final: dict[str, JobSeen],
    sacct: dict[str, str],
    reported: set[str],
    faults: list[FaultRecord],
) -> history.Ends:
    return history.Ends(final, final, sacct, reported, faults, 900.0)


KILL = FaultRecord("kill", "slurmctld/0", 100.0, controller_in_charge=True)


def test_a_job_lost_in_silence_fails_the_run_and_a_reported_one_in_the_window_does_not():
    subs = [sub("1", 50.0), sub("2", 97.0), sub("3", 98.0), sub("4", 60.0)]
    final = {"1": seen("COMPLETED")}

    tally, violations = history.classify(subs, ends(final, {}, {"2", "4"}, [KILL]))

    assert (tally.completed, tally.lost_reported, tally.lost_unreported) == (1, 2, 1)
    assert [v.invariant for v in violations] == [
        "lost in silence",  # job 3: submitted 2 s before the kill, not reported
        "a job saved before any controller fault was lost",  # job 4: 40 s before
    ]
    assert "job 3" in violations[0].evidence and "job 4" in violations[1].evidence


def test_an_end_other_than_completed_is_excused_only_by_a_fault_of_its_node_or_its_own_exit():
    power = FaultRecord("power", "compute/1", 200.0, nodes=["compute-1"])
    subs = [sub("1", 150.0), sub("2", 150.0), sub("3", 150.0, exit_code=3), sub("4", 150.0)]
    final = {
        "1": seen("NODE_FAIL", "compute-1"),
        "2": seen("NODE_FAIL", "compute-0"),
        "3": seen("FAILED", "compute-0"),
        "4": seen("RUNNING", "compute-0"),
    }

    tally, violations = history.classify(subs, ends(final, {}, set(), [power]))

    assert (tally.ended_by_node_fault, tally.failed_own_exit, tally.unfinished) == (1, 1, 1)
    assert [v.evidence.split(" ")[1] for v in violations] == ["2", "4"]


def test_a_node_failure_is_excused_for_a_job_whose_script_ended_just_before_the_primary_died():
    # seed 74: job 2's end reached the primary 3 s before its network was cut, and was in no
    # save; the new primary then ends such a job as a node failure (or requeues it)
    subs = [sub(j, 10.0) for j in ("1", "2", "3", "4", "5")]
    final = {j: seen("NODE_FAIL", "compute-0") for j in ("1", "2", "3", "4", "5")}
    runs = [
        Run("1", 0, "compute-0", 20.0, 97.0),  # ended 3 s before the kill
        Run("2", 0, "compute-0", 20.0, 90.0),  # 10 s before: saved
        Run("3", 0, "compute-0", 20.0, 97.0),  # its last run (after a requeue) never ended
        Run("3", 1, "compute-0", 98.0, None),
        Run("4", 0, "compute-0", 20.0, 101.0),  # after the kill
        Run("5", 0, "compute-0", 20.0, 150.0),  # 2 s before a kill of a backup, not in charge
    ]
    backup_killed = FaultRecord("kill", "slurmctld/1", 152.0)

    tally, violations = history.classify(
        subs, history.Ends(final, final, {}, set(), [KILL, backup_killed], 900.0, runs)
    )

    assert tally.end_lost_by_controller_fault == 1
    assert [v.evidence.split(" ")[1] for v in violations] == ["2", "3", "4", "5"]


def test_a_job_the_controller_forgot_is_judged_by_its_end_in_accounting():
    subs = [sub("5", 10.0), sub("6", 10.0)]
    sacct = {"5": "COMPLETED", "6": "PENDING"}  # 6: accounting has no end for it

    tally, violations = history.classify(subs, ends({}, sacct, {"6"}, []))

    assert (tally.completed, tally.lost_reported) == (1, 1)
    assert [v.invariant for v in violations] == [
        "a job saved before any controller fault was lost"
    ]


def test_two_runs_of_one_id_at_once_are_a_violation_one_after_the_other_is_not():
    runs = [
        Run("7", 0, "compute-0", 10.0, None, last_alive=40.0),
        Run("7", 1, "compute-1", 30.0, 50.0),
        Run("8", 0, "compute-0", 10.0, 20.0),
        Run("8", 1, "compute-1", 25.0, 50.0),
    ]

    violations = history.overlapping_runs(runs)

    assert [v.evidence.split(":")[0] for v in violations] == ["job 7"]


def test_sacct_must_agree_on_finished_jobs_and_its_output_is_read_by_field_count():
    sacct = history.parse_sacct("1|COMPLETED\n2|CANCELLED by 0\n3|x|y\nname\n4|FAILED")
    final = {"1": seen("COMPLETED"), "2": seen("COMPLETED"), "4": seen("RUNNING")}

    assert sacct == {"1": "COMPLETED", "2": "CANCELLED", "4": "FAILED"}
    violations = history.sacct_disagreements(final, sacct, 0.0)
    assert [v.evidence for v in violations] == ["job 2: slurmctld COMPLETED, sacct CANCELLED"]


def test_a_secret_is_found_in_any_text_and_never_quoted_in_the_evidence():
    secret = "c2VjcmV0LWtleS1tYXRlcmlhbC0xMjM0NTY="
    texts = {"debug-log": f"x {secret} y", "status": "fine", "relation 3": "short"}

    violations = history.secret_leaks(texts, [secret, "short"], 0.0)

    assert [v.evidence for v in violations] == [
        f"secret #0 ({len(secret)} characters) in debug-log"
    ]
    assert secret not in repr(violations)


def test_node_lists_expand_the_charms_names():
    assert history.expand_nodes("compute-[0-1,3],scaled-2") == [
        "compute-0",
        "compute-1",
        "compute-3",
        "scaled-2",
    ]
    assert history.expand_nodes("") == []


def status_of(apps: dict[str, tuple[str, list[str]]]) -> jubilant.Status:
    """A `juju status` document: each application's status and its units' workload statuses."""

    def doc(current: str) -> dict[str, str]:
        return {"current": current, "message": "", "since": ""}

    return jubilant.Status._from_dict(  # pyright: ignore[reportPrivateUsage]
        {
            "model": {
                "name": "m",
                "type": "iaas",
                "controller": "c",
                "cloud": "c",
                "version": "3.6.14",
                "model-status": doc("available"),
            },
            "machines": {},
            "applications": {
                app: {
                    "charm": f"local:{app}-0",
                    "charm-origin": "local",
                    "charm-name": app,
                    "charm-rev": 0,
                    "exposed": False,
                    "application-status": doc(current),
                    "units": {
                        f"{app}/{n}": {"workload-status": doc(unit), "juju-status": doc("idle")}
                        for n, unit in enumerate(units)
                    },
                }
                for app, (current, units) in apps.items()
            },
            "controller": {"timestamp": ""},
        }
    )


def test_an_application_scaled_to_zero_does_not_hold_the_deploy_wait_and_an_inactive_unit_does():
    # seed 1, --small: the deploy waited for `scaled` (no unit, status unknown) for ever
    scaled_to_zero = {"slurmctld": ("active", ["active"]), "scaled": ("unknown", [])}
    waiting_unit = {"slurmctld": ("waiting", ["active", "waiting"]), "scaled": ("unknown", [])}

    assert history.deployed_and_active(status_of(scaled_to_zero))
    assert not history.deployed_and_active(status_of(waiting_unit))
    assert not history.deployed_and_active(status_of({"scaled": ("unknown", [])}))


def test_the_workloads_user_is_made_on_every_controller_too_and_on_units_added_later():
    # seed 1, --small: slurmctld could not resolve `soak` (fetch_identity() failed) and held
    # every job of theirs (JobHeldAdmin)
    units = {
        "slurmctld": ["slurmctld/0", "slurmctld/2"],
        "login": ["login/0"],
        "compute": ["compute/0"],
        "scaled": ["scaled/3"],
        "slurmdbd": ["slurmdbd/0"],
    }
    machines = {
        "slurmctld/0": "m0",
        "slurmctld/2": "m7",
        "login/0": "m2",
        "compute/0": "m3",
        "scaled/3": "m9",
        "slurmdbd/0": "m4",
    }

    assert plan.user_machines(units, machines.__getitem__) == ["m0", "m7", "m2", "m3", "m9"]


def test_a_job_that_ended_before_the_autoscaler_removed_its_node_is_no_violation():
    # seed 1129: job 61 ended FAILED when scaled/1's slurmd was killed (691 s); the autoscaler
    # removed the idle node 12 minutes later.
    submissions = [sub("61", 600.0), sub("62", 601.0)]
    seen = {
        "61": JobSeen("FAILED", 0, {"scaled-1"}, 700.0, ended=692.0),
        "62": JobSeen("CANCELLED", 0, {"scaled-1"}, 1420.0, ended=1414.0),
    }

    found = history.autoscaler_removed_busy(submissions, seen, seen, {"scaled-1": 1413.0})

    assert [v.evidence for v in found] == ["job 62 on ['scaled-1'] ended CANCELLED"]


def test_squeue_gives_the_end_of_an_ended_job_and_none_for_a_live_one():
    document = {
        "jobs": [
            {"job_id": 1, "job_state": ["FAILED"], "end_time": {"set": True, "number": 692}},
            {"job_id": 2, "job_state": ["RUNNING"], "end_time": {"set": True, "number": 999}},
        ]
    }

    seen = history.parse_squeue_json(document, 700.0)

    assert (seen["1"].ended, seen["2"].ended) == (692.0, None)


def test_a_job_failing_by_its_own_exit_on_a_node_removed_later_is_no_autoscaler_violation():
    # seed 1, --small: 4 jobs exited 3 on scaled-1, which the autoscaler removed once idle
    submissions = [sub("85", 10.0, exit_code=3), sub("86", 11.0, exit_code=0)]
    seen = {
        "85": JobSeen("FAILED", 0, {"scaled-1"}, 40.0),
        "86": JobSeen("NODE_FAIL", 0, {"scaled-1"}, 40.0),
        "87": JobSeen("COMPLETED", 0, {"scaled-1"}, 40.0),
    }

    found = history.autoscaler_removed_busy(submissions, seen, seen, {"scaled-1": 90.0})

    assert [(v.evidence, v.at) for v in found] == [
        ("job 86 on ['scaled-1'] ended NODE_FAIL", 90.0)
    ]


def test_only_a_killed_hook_or_a_power_cut_still_open_on_its_machine_excuses_a_failed_hook():
    # seed 1131: a unit in error for 130 s after a power cut; which one was never recorded
    machines = {"slurmctld/0": "m0", "fs/0": "m0", "slurmdbd/1": "m4", "compute/0": "m3"}
    power = FaultRecord("power", "slurmctld/0", 100.0)
    kill = FaultRecord("kill", "compute/0", 110.0)
    hook_kill = FaultRecord("hook-kill", "slurmdbd/1", 120.0)
    open_faults = [power, kill, hook_kill]

    def cause(unit: str, faults: list[FaultRecord]) -> str:
        return history.hook_failure_cause(unit, faults, machines.get)

    assert cause("fs/0", open_faults) == "power slurmctld/0"  # a subordinate on that machine
    assert cause("slurmdbd/1", open_faults) == "hook-kill slurmdbd/1"
    assert cause("compute/0", open_faults) == ""  # a daemon's SIGKILL fails no hook
    assert cause("fs/0", [kill, hook_kill]) == ""  # the power fault converged
    assert cause("slurmctld/9", open_faults) == ""  # a removed unit


def test_every_hook_failure_in_the_labs_log_is_found_with_what_the_hook_printed():
    log = [
        "unit-slurmctld-1: 2026-11-30T03:50:15 WARNING takeover repair: resumed compute-0",
        'unit-filesystem-client-0: 2026-11-30T03:50:16 ERROR hook "stop" failed:',
        "Traceback (most recent call last):",
        "RuntimeError: boom",
        'unit-compute-0: 2026-11-30T03:51:02 ERROR hook "config-changed" lost: its process died',
        'unit-compute-0: 2026-11-30T03:51:07 INFO retrying "config-changed"',
    ]

    found = history.hook_failures(log)

    assert [(f.unit, f.hook, f.stamp) for f in found] == [
        ("filesystem-client/0", "stop", "2026-11-30T03:50:16"),
        ("compute/0", "config-changed", "2026-11-30T03:51:02"),
    ]
    assert found[0].text.endswith("RuntimeError: boom")
    assert found[1].text.endswith("its process died")
