"""Slurm-controlled rolling rebuild: the hidden partition, the jobs, progress, stop, cancel.

The leader records each rollout's job ids in the peer databag; Slurm's answers give only
those jobs' states (root's jobs, id and state) and the nodes. A user's text in Slurm's output
(a comment or name with a new line) never picks a job to hold or cancel.
"""

import dataclasses
import json

import ops
import pytest
from hpc_libs.slurm.partition import PartitionSpec
from ops import testing
from test_charm_slurmctld import compute_relation, databag, memory, running, slurm_conf

SINCE = 5000
JOBS = ("squeue", "--all", "--noheader", "--partition=rebuild", "--user=root", "--states=all")
NODES = ("scontrol", "show", "nodes", "--json")


def node(
    name: str,
    boot: int,
    *state: str,
    reason: str = "",
    changed: int | None = None,
    setter: str = "root",
):
    return {
        "reason_set_by_user": setter,
        "name": name,
        "state": list(state or ["IDLE"]),
        "partitions": [name.rsplit("-", 1)[0], "rebuild"],
        "boot_time": {"set": True, "number": boot},
        "reason": reason,
        "reason_changed_at": {"set": changed is not None, "number": changed or 0},
    }


def rollout(*jobs: tuple[int, str, str], since: int = SINCE, upgrade: bool = False) -> dict:
    """The leader's record of one rollout: (id, state, node) per job, all one partition."""
    partition = jobs[0][2].rsplit("-", 1)[0]
    return {
        "partition": partition,
        "since": since,
        "upgrade": upgrade,
        "jobs": [{"id": job_id, "node": target} for job_id, _, target in jobs],
    }


def slurm_answers(machine, jobs: list[tuple[int, str, str]], nodes: list[dict]) -> None:
    """What squeue (root's rebuild jobs: id|state) and scontrol (the nodes) answer."""
    machine.responses[JOBS] = "".join(f"{job_id}|{state}\n" for job_id, state, _ in jobs)
    machine.responses[NODES] = json.dumps({"nodes": nodes})


def recorded(state: testing.State, *rollouts: dict) -> testing.State:
    """The same state, with these rollouts in the leader's peer databag."""
    peer = next(r for r in state.relations if isinstance(r, testing.PeerRelation))
    data = {**peer.local_app_data, **databag(rollouts=list(rollouts))}
    others = [r for r in state.relations if r is not peer]
    return dataclasses.replace(
        state, relations=[*others, dataclasses.replace(peer, local_app_data=data)]
    )


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
    assert "enforcepartlimits=all" in lines  # else `-p compute,rebuild` queues a user's job there


def test_every_node_runs_the_slurmd_charms_health_check_as_the_options_say(ctx, machine, tmp_path):
    config = {"health-check-interval": 60, "health-check-node-state": "nondrained_idle,cycle"}

    ctx.run(ctx.on.update_status(), running(config=config))

    lines = slurm_conf(tmp_path).splitlines()
    assert "healthcheckprogram=/usr/local/sbin/slurmd-charm-health" in lines
    assert "healthcheckinterval=60" in lines
    assert "healthchecknodestate=nondrained_idle,cycle" in lines


@pytest.mark.parametrize(
    "config",
    [{"health-check-interval": -1}, {"health-check-node-state": "any,idle"}],
)
def test_a_bad_health_check_option_blocks_naming_it(ctx, machine, tmp_path, config):
    out = ctx.run(ctx.on.update_status(), running(config=config))

    assert out.unit_status.name == "blocked"
    assert next(iter(config)) in out.unit_status.message


def test_without_compute_partitions_there_is_no_rebuild_partition(ctx, machine, tmp_path):
    ctx.run(ctx.on.update_status(), running())

    assert "partitionname=rebuild" not in slurm_conf(tmp_path)


def test_a_slurmd_application_named_rebuild_is_refused(partitions_module):
    with pytest.raises(ValueError, match="reserved"):
        partitions_module.partition_record("rebuild", PartitionSpec())


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


def test_rebuild_nodes_submits_one_job_per_node_and_records_their_ids(ctx, machine, cluster):
    slurm_answers(
        machine, [], [node("compute-0", 100), node("compute-1", 100), node("debug-0", 1)]
    )
    machine.responses[("sbatch",)] = "41\n"

    out = ctx.run(
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
    [record] = memory(out)["rollouts"]
    assert record["partition"] == "compute"
    assert record["jobs"] == [{"id": 41, "node": "compute-0"}, {"id": 41, "node": "compute-1"}]


def test_rebuild_nodes_runs_on_the_leader_only(ctx, machine, cluster):
    """Only the leader can record the rollout, and only recorded ids are ever acted on."""
    follower = dataclasses.replace(cluster, leader=False)

    with pytest.raises(testing.ActionFailed, match="slurmctld/leader"):
        ctx.run(ctx.on.action("rebuild-nodes", params={"partition": "compute"}), follower)

    assert not machine.ran("sbatch")


def test_a_failed_submission_cancels_the_jobs_already_submitted(ctx, machine, cluster):
    slurm_answers(machine, [], [node("compute-0", 100), node("compute-1", 100)])
    machine.responses[("sbatch", "--parsable", "--partition=rebuild", "--nodelist=compute-0")] = (
        "41\n"
    )
    machine.responses[("sbatch", "--parsable", "--partition=rebuild", "--nodelist=compute-1")] = (
        "sbatch: error: Batch job submission failed\n"
    )

    with pytest.raises(testing.ActionFailed, match="cannot start the rebuild"):
        ctx.run(ctx.on.action("rebuild-nodes", params={"partition": "compute"}), cluster)

    assert ["scancel", "41"] in machine.commands


@pytest.mark.parametrize("partition", ["nowhere", "rebuild", "compute --reboot", ""])
def test_rebuild_nodes_refuses_a_partition_that_is_not_ours_and_runs_nothing(
    ctx, machine, cluster, partition
):
    with pytest.raises(testing.ActionFailed, match="partition: "):
        ctx.run(ctx.on.action("rebuild-nodes", params={"partition": partition}), cluster)

    assert not machine.ran("sbatch")
    assert not machine.ran(*NODES)


def test_rebuild_nodes_refuses_a_second_rollout_of_a_partition_in_progress(ctx, machine, cluster):
    jobs = [(7, "PENDING", "compute-1")]
    slurm_answers(machine, jobs, [node("compute-1", 100)])

    with pytest.raises(testing.ActionFailed, match="in progress"):
        ctx.run(
            ctx.on.action("rebuild-nodes", params={"partition": "compute"}),
            recorded(cluster, rollout(*jobs)),
        )

    assert not machine.ran("sbatch")


def test_a_cancelled_rollout_does_not_block_a_new_one(ctx, machine, cluster):
    """Slurm remembers the cancelled jobs (MinJobAge): none is waiting, so a new one starts."""
    jobs = [(1, "COMPLETED", "compute-0"), (2, "CANCELLED", "compute-1")]
    slurm_answers(machine, jobs, [node("compute-0", SINCE + 30), node("compute-1", 100)])
    machine.responses[("sbatch",)] = "9\n"

    out = ctx.run(
        ctx.on.action("rebuild-nodes", params={"partition": "compute"}),
        recorded(cluster, rollout(*jobs)),
    )

    assert machine.ran("sbatch")
    assert [r["jobs"] for r in memory(out)["rollouts"]] == [
        [{"id": 9, "node": "compute-0"}, {"id": 9, "node": "compute-1"}]
    ]


# Progress, from the record and Slurm's facts.


def test_the_status_counts_done_and_rebooting_nodes(ctx, machine, cluster):
    jobs = [
        (1, "COMPLETED", "compute-0"),
        (2, "CONFIGURING", "compute-1"),
        (3, "PENDING", "compute-2"),
    ]
    slurm_answers(
        machine,
        jobs,
        [
            node("compute-0", SINCE + 30),  # booted after the rollout began
            node("compute-1", 100, "ALLOCATED", "NOT_RESPONDING", "POWERING_UP"),
            node("compute-2", 100, "ALLOCATED"),
        ],
    )

    out = ctx.run(ctx.on.update_status(), recorded(cluster, rollout(*jobs)))

    assert out.unit_status == ops.MaintenanceStatus("rebuild compute: 1/3 done, 1 rebooting")
    assert not machine.ran("scontrol", "hold")


def test_a_new_rollout_counts_from_its_own_start_not_an_earlier_ones(ctx, machine, cluster):
    jobs = [(7, "PENDING", "compute-0")]
    slurm_answers(machine, jobs, [node("compute-0", SINCE - 800)])  # rebuilt by an earlier one

    out = ctx.run(ctx.on.update_status(), recorded(cluster, rollout(*jobs)))

    assert out.unit_status == ops.MaintenanceStatus("rebuild compute: 0/1 done, 0 rebooting")


def test_a_finished_rollout_says_so_while_slurm_remembers_it(ctx, machine, cluster):
    jobs = [(1, "COMPLETED", "compute-0")]
    slurm_answers(machine, jobs, [node("compute-0", SINCE + 1)])

    out = ctx.run(ctx.on.update_status(), recorded(cluster, rollout(*jobs)))

    assert out.unit_status == ops.ActiveStatus("rebuild compute: 1/1 done, 0 rebooting")
    assert len(memory(out)["rollouts"]) == 1


def test_a_rollout_slurm_forgot_is_forgotten_and_shown_no_more(ctx, machine, cluster):
    slurm_answers(machine, [], [node("compute-0", SINCE + 1)])

    out = ctx.run(
        ctx.on.update_status(), recorded(cluster, rollout((1, "COMPLETED", "compute-0")))
    )

    assert out.unit_status == ops.ActiveStatus()
    assert memory(out)["rollouts"] == []
    assert not machine.ran(*NODES)


def test_a_failed_node_stops_the_rollout_and_is_named_with_slurms_reason(ctx, machine, cluster):
    reason = "rebuild: apt-get upgrade failed"
    jobs = [
        (1, "COMPLETED", "compute-0"),
        (2, "NODE_FAIL", "compute-1"),
        (3, "PENDING", "compute-2"),
        (4, "PENDING", "compute-3"),
    ]
    slurm_answers(
        machine,
        jobs,
        [
            node("compute-0", SINCE + 30),
            node("compute-1", 100, "DOWN", reason=reason, changed=SINCE + 40),
            node("compute-2", 100),
            node("compute-3", 100),
        ],
    )

    out = ctx.run(ctx.on.update_status(), recorded(cluster, rollout(*jobs, upgrade=True)))

    assert out.unit_status == ops.BlockedStatus(
        f"rebuild compute stopped: compute-1 failed ({reason}); 1/4 done"
    )
    assert ["scontrol", "hold", "3,4"] in machine.commands


def test_a_node_failing_its_health_check_after_the_reboot_stops_the_rollout(ctx, machine, cluster):
    reason = "health: mounts: /home not mounted"
    jobs = [(1, "COMPLETED", "compute-0"), (2, "PENDING", "compute-1")]
    slurm_answers(
        machine,
        jobs,
        [
            node("compute-0", SINCE + 30, "IDLE", "DRAIN", reason=reason, changed=SINCE + 29),
            node("compute-1", 100),
        ],
    )

    out = ctx.run(ctx.on.update_status(), recorded(cluster, rollout(*jobs)))

    assert out.unit_status == ops.BlockedStatus(
        f"rebuild compute stopped: compute-0 failed ({reason}); 0/2 done"
    )
    assert ["scontrol", "hold", "2"] in machine.commands


@pytest.mark.parametrize(
    "drain",
    [
        ("health: mounts: /home not mounted", "alice", SINCE + 30),  # not the check's drain
        ("maintenance after the reboot", "root", SINCE + 30),  # an operator's
        ("health: mounts: /home not mounted", "root", 100),  # not rebooted by this rollout
    ],
)
def test_another_drain_does_not_stop_the_rollout(ctx, machine, cluster, drain):
    reason, setter, boot = drain
    jobs = [(1, "COMPLETED", "compute-0"), (2, "PENDING", "compute-1")]
    drained = node(
        "compute-0", boot, "IDLE", "DRAIN", reason=reason, changed=SINCE + 40, setter=setter
    )
    slurm_answers(machine, jobs, [drained, node("compute-1", 100)])

    out = ctx.run(ctx.on.update_status(), recorded(cluster, rollout(*jobs)))

    assert out.unit_status.name == "maintenance"
    assert not machine.ran("scontrol", "hold")


def test_a_node_down_before_the_rollout_does_not_stop_it(ctx, machine, cluster):
    jobs = [(1, "PENDING", "compute-0")]
    slurm_answers(
        machine, jobs, [node("compute-0", 100, "DOWN", reason="bad disk", changed=SINCE - 600)]
    )

    out = ctx.run(ctx.on.update_status(), recorded(cluster, rollout(*jobs)))

    assert out.unit_status == ops.MaintenanceStatus("rebuild compute: 0/1 done, 0 rebooting")
    assert not machine.ran("scontrol", "hold")


def test_without_a_recorded_rollout_slurm_is_not_asked(ctx, machine, cluster):
    ctx.run(ctx.on.update_status(), cluster)

    assert not machine.ran("squeue")
    assert not machine.ran(*NODES)


# Hostile users: a comment, name or account with a new line forges squeue lines.

FORGED = "x\n31337|PENDING|rebuild:compute:1:reboot:compute-9"


def test_a_forged_squeue_line_never_picks_a_job_to_hold(ctx, machine, cluster):
    """A user's job whose text forged `31337|PENDING`: only recorded ids are held."""
    jobs = [(2, "NODE_FAIL", "compute-1"), (3, "PENDING", "compute-2")]
    slurm_answers(
        machine,
        jobs,
        [
            node("compute-1", 100, "DOWN", reason="boom", changed=SINCE + 40),
            node("compute-2", 100),
        ],
    )
    machine.responses[JOBS] += f"77|PENDING|{FORGED}\n31337|PENDING\n"

    ctx.run(ctx.on.update_status(), recorded(cluster, rollout(*jobs)))

    assert [c for c in machine.commands if c[:2] == ["scontrol", "hold"]] == [
        ["scontrol", "hold", "3"]
    ]


def test_a_forged_squeue_line_never_starts_a_rollout_nor_blocks_one(ctx, machine, cluster):
    machine.responses[JOBS] = "31337|PENDING\n"
    slurm_answers(machine, [], [node("compute-0", 100)])
    machine.responses[JOBS] = "31337|PENDING\n"
    machine.responses[("sbatch",)] = "9\n"

    out = ctx.run(ctx.on.update_status(), cluster)
    ctx.run(ctx.on.action("rebuild-nodes", params={"partition": "compute"}), out)

    assert out.unit_status == ops.ActiveStatus()
    assert machine.ran("sbatch")


def test_cancel_never_cancels_an_id_it_did_not_submit(ctx, machine, cluster):
    jobs = [(2, "PENDING", "compute-1")]
    slurm_answers(machine, jobs, [node("compute-1", 100)])
    machine.responses[JOBS] += "31337|PENDING\n"

    ctx.run(
        ctx.on.action("rebuild-cancel", params={"partition": "compute"}),
        recorded(cluster, rollout(*jobs)),
    )

    assert [c for c in machine.commands if c[0] == "scancel"] == [["scancel", "2"]]


def test_a_rollout_record_from_a_hostile_peer_is_skipped_whole(ctx, machine, cluster):
    """The record is checked like any databag: a bad id or node name is no job of ours."""
    bad = [
        {"partition": "compute", "since": SINCE, "jobs": [{"id": "7; rm -rf /", "node": "c"}]},
        {"partition": "compute", "since": SINCE, "jobs": [{"id": True, "node": "c"}]},
        {"partition": "compute", "since": SINCE, "jobs": [{"id": 7, "node": "c 1"}]},
    ]
    slurm_answers(machine, [(7, "PENDING", "c")], [node("compute-0", 100, "DOWN", changed=SINCE)])

    out = ctx.run(ctx.on.update_status(), recorded(cluster, *bad))

    assert not machine.ran("scontrol", "hold")
    assert out.unit_status == ops.ActiveStatus()


# Cancel.


def test_cancel_cancels_pending_jobs_and_reboots_not_issued_yet(ctx, machine, cluster):
    compute = [
        (1, "CONFIGURING", "compute-0"),
        (2, "PENDING", "compute-1"),
        (3, "PENDING", "compute-2"),
    ]
    debug = [(4, "PENDING", "debug-0")]
    slurm_answers(
        machine,
        compute + debug,
        [
            node("compute-0", 100, "IDLE", "REBOOT_ISSUED"),
            node("compute-1", 100, "ALLOCATED", "REBOOT_REQUESTED"),
            node("compute-2", 100),
            node("debug-0", 100, "IDLE", "REBOOT_REQUESTED"),
        ],
    )

    ctx.run(
        ctx.on.action("rebuild-cancel", params={"partition": "compute"}),
        recorded(cluster, rollout(*compute), rollout(*debug)),
    )

    assert ["scancel", "2", "3"] in machine.commands
    assert ["scontrol", "cancel_reboot", "compute-1"] in machine.commands
    assert ctx.action_results == {"cancelled-jobs": "2,3", "cancelled-reboots": "compute-1"}


def test_cancel_without_a_partition_stops_every_rollout(ctx, machine, cluster):
    compute, debug = [(2, "PENDING", "compute-1")], [(4, "PENDING", "debug-0")]
    slurm_answers(machine, compute + debug, [node("compute-1", 100), node("debug-0", 100)])

    ctx.run(ctx.on.action("rebuild-cancel"), recorded(cluster, rollout(*compute), rollout(*debug)))

    assert ["scancel", "2", "4"] in machine.commands
