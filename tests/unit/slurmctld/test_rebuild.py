"""Slurm-controlled rolling rebuild: the hidden partition, the jobs, progress, stop, cancel."""

import json

import ops
import pytest
from ops import testing
from test_charm_slurmctld import compute_relation, running, slurm_conf

SINCE = 5000
JOBS = ("squeue", "--all", "--noheader", "--partition=rebuild")
NODES = ("scontrol", "show", "nodes", "--json")


def node(name: str, boot: int, *state: str, reason: str = "", changed: int | None = None):
    return {
        "name": name,
        "state": list(state or ["IDLE"]),
        "partitions": [name.rsplit("-", 1)[0], "rebuild"],
        "boot_time": {"set": True, "number": boot},
        "reason": reason,
        "reason_changed_at": {"set": changed is not None, "number": changed or 0},
    }


def job(job_id: int, state: str, target: str, mode: str = "reboot", since: int = SINCE) -> str:
    return f"{job_id}|{state}|rebuild:{target.rsplit('-', 1)[0]}:{since}:{mode}:{target}"


def slurm_answers(machine, jobs: list[str], nodes: list[dict]) -> None:
    machine.responses[JOBS] = "\n".join(jobs) + "\n"
    machine.responses[NODES] = json.dumps({"nodes": nodes})


@pytest.fixture
def cluster(settled):
    """A leader serving partitions compute and debug, slurmctld running, nothing recorded."""
    return settled(running(compute_relation("compute"), compute_relation("debug")))


# The hidden partition and the reboot settings, rendered by the charm.


def test_the_rebuild_partition_covers_every_node_set_hidden_root_only_and_never_default(
    ctx, machine, tmp_path
):
    compute, debug = compute_relation("compute"), compute_relation("debug")

    ctx.run(
        ctx.on.relation_changed(debug), running(compute, debug, config={"reboot-timeout": 900})
    )

    lines = slurm_conf(tmp_path).splitlines()
    assert (
        "partitionname=rebuild nodes=compute,debug default=NO hidden=YES rootonly=YES "
        "disablerootjobs=NO priorityjobfactor=65533 oversubscribe=exclusive preemptmode=off "
        "maxtime=10 state=up"
    ) in lines
    assert [line for line in lines if "default=YES" in line] == [
        "partitionname=compute nodes=compute default=YES"
    ]
    assert 'rebootprogram="/usr/local/sbin/slurmd-charm-reboot"' in lines
    assert "resumetimeout=900" in lines
    assert "priorityweightpartition=100000" in lines  # else PriorityJobFactor counts for nothing


def test_without_compute_partitions_there_is_no_rebuild_partition(ctx, machine, tmp_path):
    ctx.run(ctx.on.update_status(), running())

    assert "partitionname=rebuild" not in slurm_conf(tmp_path)


def test_a_slurmd_application_named_rebuild_is_refused(partitions_module):
    with pytest.raises(ValueError, match="reserved"):
        partitions_module.partition_record("rebuild", {"partitionname": "rebuild"}, {})


# The jobs: one per node, spread over max-unavailable singleton names.


def test_max_unavailable_spreads_the_nodes_over_that_many_singleton_names(rebuild_module):
    nodes = [f"compute-{i}" for i in range(5)]

    commands = rebuild_module.submissions("compute", nodes, 2, True, SINCE)

    names = [next(a for a in c if a.startswith("--job-name=")) for c in commands]
    assert names == [f"--job-name=rebuild-compute-{i % 2}" for i in range(5)]
    for target, command in zip(nodes, commands, strict=True):
        assert {"--reboot", "--dependency=singleton", "--partition=rebuild", "--exclusive"} <= set(
            command
        )
        assert f"--nodelist={target}" in command
        assert f"--comment=rebuild:compute:{SINCE}:upgrade:{target}" in command


def test_one_node_at_a_time_by_default_and_never_more_names_than_nodes(rebuild_module):
    one = rebuild_module.submissions("compute", ["compute-0", "compute-1"], 1, False, SINCE)
    many = rebuild_module.submissions("compute", ["compute-0", "compute-1"], 8, False, SINCE)

    assert {a for c in one for a in c if a.startswith("--job-name=")} == {
        "--job-name=rebuild-compute-0"
    }
    assert len({a for c in many for a in c if a.startswith("--job-name=")}) == 2


def test_rebuild_nodes_submits_one_job_per_node_of_the_partition(ctx, machine, cluster):
    slurm_answers(
        machine, [], [node("compute-0", 100), node("compute-1", 100), node("debug-0", 1)]
    )
    machine.responses[("sbatch",)] = "41\n"

    ctx.run(
        ctx.on.action("rebuild-nodes", params={"partition": "compute", "max-unavailable": 1}),
        cluster,
    )

    sbatch = [c for c in machine.commands if c[0] == "sbatch"]
    assert [next(a for a in c if a.startswith("--nodelist=")) for c in sbatch] == [
        "--nodelist=compute-0",
        "--nodelist=compute-1",
    ]
    assert ctx.action_results is not None
    assert ctx.action_results["jobs"] == "41,41"


@pytest.mark.parametrize("partition", ["nowhere", "rebuild", "compute --reboot", ""])
def test_rebuild_nodes_refuses_a_partition_that_is_not_ours_and_runs_nothing(
    ctx, machine, cluster, partition
):
    with pytest.raises(testing.ActionFailed, match="partition: "):
        ctx.run(ctx.on.action("rebuild-nodes", params={"partition": partition}), cluster)

    assert not machine.ran("sbatch")
    assert not machine.ran(*NODES)


def test_rebuild_nodes_refuses_a_second_rollout_of_a_partition_in_progress(ctx, machine, cluster):
    slurm_answers(machine, [job(7, "PENDING", "compute-1")], [node("compute-1", 100)])

    with pytest.raises(testing.ActionFailed, match="in progress"):
        ctx.run(ctx.on.action("rebuild-nodes", params={"partition": "compute"}), cluster)

    assert not machine.ran("sbatch")


def test_a_cancelled_rollout_does_not_block_a_new_one(ctx, machine, cluster):
    """Slurm remembers the cancelled jobs (MinJobAge): none is waiting, so a new one starts."""
    slurm_answers(
        machine,
        [job(1, "COMPLETED", "compute-0"), job(2, "CANCELLED", "compute-1")],
        [node("compute-0", SINCE + 30), node("compute-1", 100)],
    )
    machine.responses[("sbatch",)] = "9\n"

    out = ctx.run(ctx.on.action("rebuild-nodes", params={"partition": "compute"}), cluster)

    assert machine.ran("sbatch")
    assert out.unit_status == ops.ActiveStatus("rebuild compute cancelled: 1/2 done")


# Progress, from Slurm's facts.


def test_the_status_counts_done_and_rebooting_nodes(ctx, machine, cluster):
    slurm_answers(
        machine,
        [
            job(1, "COMPLETED", "compute-0"),
            job(2, "CONFIGURING", "compute-1"),
            job(3, "PENDING", "compute-2"),
        ],
        [
            node("compute-0", SINCE + 30),  # booted after the rollout began
            node("compute-1", 100, "ALLOCATED", "NOT_RESPONDING", "POWERING_UP"),
            node("compute-2", 100, "ALLOCATED"),
        ],
    )

    out = ctx.run(ctx.on.update_status(), cluster)

    assert out.unit_status == ops.MaintenanceStatus("rebuild compute: 1/3 done, 1 rebooting")
    assert not machine.ran("scontrol", "hold")


def test_a_new_rollout_counts_from_its_own_start_not_an_earlier_ones(ctx, machine, cluster):
    slurm_answers(
        machine,
        [
            job(1, "COMPLETED", "compute-0", since=SINCE - 900),  # the earlier rollout
            job(7, "PENDING", "compute-0"),
        ],
        [node("compute-0", SINCE - 800)],  # rebuilt by the earlier rollout only
    )

    out = ctx.run(ctx.on.update_status(), cluster)

    assert out.unit_status == ops.MaintenanceStatus("rebuild compute: 0/1 done, 0 rebooting")


def test_a_finished_rollout_says_so_while_slurm_remembers_it(ctx, machine, cluster):
    slurm_answers(machine, [job(1, "COMPLETED", "compute-0")], [node("compute-0", SINCE + 1)])

    out = ctx.run(ctx.on.update_status(), cluster)

    assert out.unit_status == ops.ActiveStatus("rebuild compute: 1/1 done, 0 rebooting")


def test_a_failed_node_stops_the_rollout_and_is_named_with_slurms_reason(ctx, machine, cluster):
    reason = "rebuild: apt-get upgrade failed"
    slurm_answers(
        machine,
        [
            job(1, "COMPLETED", "compute-0"),
            job(2, "NODE_FAIL", "compute-1", "upgrade"),
            job(3, "PENDING", "compute-2", "upgrade"),
            job(4, "PENDING", "compute-3", "upgrade"),
        ],
        [
            node("compute-0", SINCE + 30),
            node("compute-1", 100, "DOWN", reason=reason, changed=SINCE + 40),
            node("compute-2", 100),
            node("compute-3", 100),
        ],
    )

    out = ctx.run(ctx.on.update_status(), cluster)

    assert out.unit_status == ops.BlockedStatus(
        f"rebuild compute stopped: compute-1 failed ({reason}); 1/4 done"
    )
    assert ["scontrol", "hold", "3,4"] in machine.commands


def test_a_node_down_before_the_rollout_does_not_stop_it(ctx, machine, cluster):
    slurm_answers(
        machine,
        [job(1, "PENDING", "compute-0")],
        [node("compute-0", 100, "DOWN", reason="bad disk", changed=SINCE - 600)],
    )

    out = ctx.run(ctx.on.update_status(), cluster)

    assert out.unit_status == ops.MaintenanceStatus("rebuild compute: 0/1 done, 0 rebooting")
    assert not machine.ran("scontrol", "hold")


def test_without_rebuild_jobs_nothing_but_the_job_list_is_read(ctx, machine, cluster):
    machine.responses[JOBS] = ""

    ctx.run(ctx.on.update_status(), cluster)

    assert not machine.ran(*NODES)


# Cancel.


def test_cancel_cancels_pending_jobs_and_reboots_not_issued_yet(ctx, machine, cluster):
    slurm_answers(
        machine,
        [
            job(1, "CONFIGURING", "compute-0"),
            job(2, "PENDING", "compute-1"),
            job(3, "PENDING", "compute-2"),
            job(4, "PENDING", "debug-0"),
        ],
        [
            node("compute-0", 100, "IDLE", "REBOOT_ISSUED"),
            node("compute-1", 100, "ALLOCATED", "REBOOT_REQUESTED"),
            node("compute-2", 100),
            node("debug-0", 100, "IDLE", "REBOOT_REQUESTED"),
        ],
    )

    ctx.run(ctx.on.action("rebuild-cancel", params={"partition": "compute"}), cluster)

    assert ["scancel", "2", "3"] in machine.commands
    assert ["scontrol", "cancel_reboot", "compute-1"] in machine.commands
    assert ctx.action_results == {"cancelled-jobs": "2,3", "cancelled-reboots": "compute-1"}


def test_cancel_without_a_partition_stops_every_rollout(ctx, machine, cluster):
    slurm_answers(
        machine,
        [job(2, "PENDING", "compute-1"), job(4, "PENDING", "debug-0")],
        [node("compute-1", 100), node("debug-0", 100)],
    )

    ctx.run(ctx.on.action("rebuild-cancel"), cluster)

    assert ["scancel", "2", "4"] in machine.commands
