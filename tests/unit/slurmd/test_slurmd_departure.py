"""Scenarios for a slurmd unit leaving the cluster: the wait happens in its own hook."""

import json

import config
import pytest
from hpc_libs.slurm.naming import RETIRE_REASON
from ops import testing
from test_charm_slurmd import NODE, again, controller_relation, installed, stored

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

DRAIN = ["scontrol", "update", f"nodename={NODE}", "state=drain", f"reason={RETIRE_REASON}"]
DELETE = ["scontrol", "delete", f"nodename={NODE}"]
SHOW_NODE = ("scontrol", "show", "node", NODE, "--json")
REGISTERED = (
    '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "nodes": [{"name": "'
    + NODE
    + '", "state": ["IDLE"]}]}'
)


def show_job(job: int, *, requeue: bool, batch: bool = True) -> str:
    fields = {"job_id": job, "job_state": ["RUNNING"], "requeue": requeue, "batch_flag": batch}
    return json.dumps({"meta": META_24_11, "jobs": [fields]})


def departing(state: testing.State) -> tuple[testing.Relation, testing.State]:
    """The slurmctld relation as this unit's own relation-departed sees it, and the state.

    Scenario names the departing unit after the remote application; naming that "slurmd"
    makes the departing unit this very unit, slurmd/0.
    """
    relation = state.get_relations("slurmctld")[0]
    assert isinstance(relation, testing.Relation)
    leaving = testing.Relation(
        "slurmctld",
        id=relation.id,
        remote_app_name="slurmd",
        remote_app_data=dict(relation.remote_app_data),
        local_app_data=dict(relation.local_app_data),
    )
    return leaving, again(state, relations=[leaving])


def leave(ctx, state: testing.State) -> testing.State:
    relation, state = departing(state)
    return ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), state)


def statuses(ctx) -> list[str]:
    return [status.message for status in ctx.unit_status_history]


@pytest.fixture
def on_node(machine):
    """slurmctld knows the node (drains and deletes work)."""
    machine.responses[SHOW_NODE] = REGISTERED
    return machine


def test_departure_waits_in_the_hook_for_the_jobs_then_deletes_the_node(
    ctx, on_node, processes, clock, enlisted
):
    machine = on_node
    root = processes.proc.parent
    processes.steps(1234, 1235)

    def progress(sleeps: int) -> None:
        if sleeps == 2:
            processes.steps(1234)
        if sleeps == 3:
            processes.steps()

    clock.on_sleep.append(progress)

    out = leave(ctx, enlisted)

    scontrol = machine.ran("scontrol")
    assert scontrol[1] == DRAIN
    assert scontrol[-1] == DELETE
    assert clock.sleeps == [5, 5, 5]
    assert machine.service_calls == [("stop", "slurmd"), ("disable", "slurmd")]
    assert not (root / "etc/slurm/slurm.key").exists()
    assert "leaving: waiting for 2 jobs (1234,1235)" in statuses(ctx)
    assert "leaving: waiting for 1 job (1234)" in statuses(ctx)
    assert out.unit_status == testing.MaintenanceStatus("left the cluster")
    assert stored(out)["left"] is True


def test_retire_timeout_requeues_the_requeueable_jobs_and_cancels_the_rest(
    ctx, on_node, processes, clock, enlisted, *, caplog
):
    machine = on_node
    processes.steps(1234, 1235)
    machine.responses[("scontrol", "show", "job", "1234")] = show_job(1234, requeue=True)
    machine.responses[("scontrol", "show", "job", "1235")] = show_job(1235, requeue=False)

    out = leave(ctx, again(enlisted, config={"retire-timeout": "12"}))

    assert clock.sleeps == [5, 5, 5]  # 15 s >= 12 s: the timeout passed.
    assert machine.ran("scontrol", "requeue") == [["scontrol", "requeue", "1234"]]
    assert machine.ran("scancel") == [["scancel", "1235"]]
    assert machine.ran("scontrol")[-1] == DELETE
    message = "leaving: retire-timeout reached: requeued 1234; cancelled 1235"
    assert message in statuses(ctx)
    assert message in caplog.text
    assert out.unit_status == testing.MaintenanceStatus(
        "left the cluster: requeued 1234; cancelled 1235"
    )


def test_an_interactive_job_is_cancelled_even_if_it_allows_requeue(
    ctx, on_node, processes, clock, enlisted
):
    machine = on_node
    processes.run("slurmstepd: [7.extern]")
    processes.run("slurmstepd: [7.interactive]")
    machine.responses[("scontrol", "show", "job", "7")] = show_job(7, requeue=True, batch=False)

    ctx.run(ctx.on.stop(), again(enlisted, config={"retire-timeout": "0"}))

    assert machine.ran("scontrol", "requeue") == []
    assert machine.ran("scancel") == [["scancel", "7"]]


def test_retire_timeout_zero_does_not_wait(ctx, on_node, processes, clock, enlisted):
    machine = on_node
    processes.steps(1234)
    machine.responses[("scontrol", "show", "job", "1234")] = show_job(1234, requeue=True)

    ctx.run(ctx.on.stop(), again(enlisted, config={"retire-timeout": "0"}))

    assert clock.sleeps == []
    assert machine.ran("scontrol", "requeue") == [["scontrol", "requeue", "1234"]]
    assert machine.ran("scontrol")[-1] == DELETE


def test_the_default_waits_as_long_as_jobs_run(ctx, on_node, processes, clock, enlisted):
    machine = on_node
    processes.steps(1234)
    clock.on_sleep.append(lambda sleeps: processes.steps() if sleeps == 2000 else None)

    ctx.run(ctx.on.stop(), enlisted)

    assert len(clock.sleeps) == 2000  # Almost three hours of polls.
    assert machine.ran("scontrol", "requeue") == []
    assert machine.ran("scancel") == []
    assert machine.ran("scontrol")[-1] == DELETE


def test_failed_requeue_cancels_those_jobs_too(ctx, on_node, processes, clock, enlisted):
    machine = on_node
    processes.steps(1234)
    machine.responses[("scontrol", "show", "job", "1234")] = show_job(1234, requeue=True)
    machine.fail("scontrol", "requeue", stderr="Requested operation is presently disabled")

    out = ctx.run(ctx.on.stop(), again(enlisted, config={"retire-timeout": "0"}))

    assert machine.ran("scancel") == [["scancel", "1234"]]
    assert out.unit_status == testing.MaintenanceStatus("left the cluster: cancelled 1234")


def test_a_step_whose_job_id_cannot_be_read_yet_keeps_the_departure_waiting(
    ctx, on_node, processes, clock, enlisted
):
    processes.run("/usr/sbin/slurmstepd")  # Started; its title is not set yet.
    clock.on_sleep.append(lambda sleeps: processes.steps() if sleeps == 3 else None)

    ctx.run(ctx.on.stop(), enlisted)

    assert clock.sleeps == [5, 5, 5]
    assert "leaving: waiting for running jobs" in statuses(ctx)
    assert DELETE in on_node.ran("scontrol")


def test_processes_it_cannot_list_keep_the_departure_waiting(
    ctx, on_node, processes, clock, enlisted, *, caplog
):
    processes.proc.rename(processes.proc.with_name("proc-hidden"))
    clock.on_sleep.append(
        lambda sleeps: (
            processes.proc.with_name("proc-hidden").rename(processes.proc) if sleeps == 2 else None
        )
    )

    ctx.run(ctx.on.stop(), enlisted)

    assert clock.sleeps == [5, 5]
    assert "cannot tell which jobs run on this machine" in caplog.text
    assert DELETE in on_node.ran("scontrol")


def test_only_roots_slurmstepd_processes_are_jobs(ctx, on_node, processes, clock, enlisted):
    # A user's process named slurmstepd with a step's title, root's processes of other names.
    processes.run("slurmstepd: [99.batch]", uid=1000)
    processes.run("slurmstepd: [98.batch]", name="sleep")
    processes.run("slurmd --systemd -Z", name="slurmd")

    # A bounded wait: were any of them a job, the hook would wait and then evict it.
    out = ctx.run(ctx.on.stop(), again(enlisted, config={"retire-timeout": "60"}))

    assert clock.sleeps == []
    assert on_node.ran("scontrol")[-1] == DELETE
    assert out.unit_status == testing.MaintenanceStatus("left the cluster")


def test_departure_with_the_controller_unreachable_never_fails_the_hook(
    ctx, machine, clock, tmp_path, enlisted
):
    machine.time_out("scontrol", "show")
    machine.time_out("scontrol", "update")
    machine.time_out("scontrol", "delete")

    out = leave(ctx, enlisted)

    assert len(machine.ran(*DELETE)) == 12  # Retried for a minute, then given up.
    assert machine.service_calls == [("stop", "slurmd"), ("disable", "slurmd")]
    assert not (tmp_path / "etc/slurm/slurm.key").exists()
    assert all(timeout == 30 for command, timeout in machine.timeouts if command[0] == "scontrol")
    assert stored(out)["left"] is True


def test_a_failing_stop_of_slurmd_does_not_fail_the_hook(ctx, on_node, clock, tmp_path, enlisted):
    on_node.fail("systemctl", "stop", stderr="Failed to stop slurmd.service")

    ctx.run(ctx.on.remove(), enlisted)

    assert not (tmp_path / "etc/slurm/slurm.key").exists()


def test_later_departure_events_find_the_work_done(ctx, on_node, clock, enlisted):
    out = leave(ctx, enlisted)
    on_node.commands.clear()
    on_node.service_calls.clear()

    for event in (ctx.on.relation_broken(out.get_relations("slurmctld")[0]), ctx.on.stop()):
        out = ctx.run(event, again(out))
    ctx.run(ctx.on.remove(), again(out, relations=[]))

    assert on_node.commands == []
    assert on_node.service_calls == []


def test_a_node_slurmctld_already_deleted_is_not_drained_again(
    ctx, machine, clock, tmp_path, enlisted
):
    machine.responses[SHOW_NODE] = (
        '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, "nodes": []}'
    )

    ctx.run(ctx.on.stop(), enlisted)

    assert machine.ran("scontrol") == [list(SHOW_NODE)]
    assert machine.service_calls == [("stop", "slurmd"), ("disable", "slurmd")]
    assert not (tmp_path / "etc/slurm/slurm.key").exists()


def test_a_running_reregistration_is_stopped_first(ctx, on_node, clock, enlisted):
    on_node.active.add(f"slurmd-reregister-{NODE}")

    ctx.run(ctx.on.stop(), enlisted)

    assert on_node.service_calls[0] == ("stop", f"slurmd-reregister-{NODE}")
    assert on_node.ran("scontrol")[1] == DRAIN


def test_another_unit_departing_is_not_this_units_departure(ctx, machine, enlisted):
    relation = enlisted.get_relations("slurmctld")[0]

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=0, departing_unit=0), enlisted)

    assert machine.ran("scontrol") == []
    assert machine.service_calls == []
    assert stored(out)["left"] is False


def test_a_unit_that_never_enlisted_only_stops_slurmd_and_deletes_the_key(ctx, machine, tmp_path):
    machine.active.add("slurmd")
    key = tmp_path / "etc/slurm/slurm.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"k")
    relation = controller_relation()

    ctx.run(ctx.on.relation_broken(relation), installed(relation))

    assert machine.ran("scontrol") == []
    assert machine.service_calls == [("stop", "slurmd"), ("disable", "slurmd")]
    assert not key.exists()


def test_integrating_again_after_leaving_enlists_afresh(ctx, on_node, clock, enlisted):
    left = ctx.run(ctx.on.stop(), enlisted)
    on_node.commands.clear()
    on_node.service_calls.clear()
    relation = left.get_relations("slurmctld")[0]

    out = ctx.run(ctx.on.relation_created(relation), again(left))

    assert stored(out)["left"] is False
    assert on_node.calls("start") == ["slurmd"]
    assert out.unit_status == testing.ActiveStatus()


@pytest.mark.parametrize("value", ["-1", "1.5", "forever", "4294967296", "10s", "1 0", ""])
def test_invalid_retire_timeout_blocks_naming_the_option(ctx, machine, value):
    out = ctx.run(ctx.on.config_changed(), installed(config={"retire-timeout": value}))

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("invalid config option 'retire-timeout'")


def test_an_invalid_retire_timeout_at_departure_waits_for_the_jobs(
    ctx, on_node, processes, clock, enlisted
):
    processes.steps(1)
    clock.on_sleep.append(lambda sleeps: processes.steps() if sleeps == 3 else None)

    ctx.run(ctx.on.stop(), again(enlisted, config={"retire-timeout": "soon"}))

    assert clock.sleeps == [5, 5, 5]
    assert on_node.ran("scancel") == []


@pytest.mark.parametrize(("value", "seconds"), [("0", 0), ("3600", 3600), ("UNLIMITED", None)])
def test_valid_retire_timeouts(value, seconds):
    assert config.SlurmdConfig(retire_timeout=value).retire_timeout_seconds == seconds


def test_a_leaving_unit_leaves_neither_slurm_key_nor_slurm_jwks(
    ctx, on_node, clock, tmp_path, enlisted
):
    key_set = tmp_path / "etc/slurm/slurm.jwks"  # as an auth key rotation leaves it
    key_set.write_text('{"keys": []}')

    leave(ctx, enlisted)

    assert not (tmp_path / "etc/slurm/slurm.key").exists()
    assert not key_set.exists()
