"""Scenarios: waking within seconds, failures as statuses, the peer memory, untrusted input."""

import base64
import json

import pytest
from charm_testing import already_installed, systemd_expands
from hpc_libs.charm import wake
from ops import testing
from scenario.state import _Event  # The event a dispatch path names.
from test_charm_slurmctld import (
    PEER,
    RECONFIGURE,
    STANDS_BY,
    compute_relation,
    databag,
    later,
    memory,
    running,
    slurm_conf,
    with_new_key,
)

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

BUSY = "RUNNING,COMPLETING,CONFIGURING,SUSPENDED"
CHARM_DIR_HINT = "/dispatch"
FATAL = "slurmctld: fatal: Unable to bind listen port (6817): Address already in use"


def wake_event(ctx):
    """What `juju-exec ... JUJU_DISPATCH_PATH=hooks/slurmctld-wake .../dispatch` runs."""
    del ctx
    return _Event("slurmctld_wake")


def transient_runs(machine) -> list[list[str]]:
    return machine.ran("systemd-run")


def leave_with_jobs(ctx, machine, settled):
    relation = compute_relation()
    state = settled(running(relation))
    machine.responses[("squeue",)] = "42\n"
    return ctx.run(ctx.on.relation_broken(state.get_relation(relation.id)), state)


# Waking within seconds (hpc_libs.charm.wake), not at update-status.


def test_retiring_partition_starts_a_watcher_that_dispatches_slurmctld_wake(ctx, machine, settled):
    leave_with_jobs(ctx, machine, settled)

    [run] = transient_runs(machine)
    assert run[:4] == [
        "systemd-run",
        "--unit=slurmctld-wake-partition-compute.service",
        "--collect",
        "--description=Wake slurmctld/0: partition compute idle",
    ]
    assert run[4:7] == ["--", "/bin/sh", "-c"]
    # hpc_libs' wake-watch program: <bound> <poll> <poll timeout> <dispatch timeout> <words>,
    # then the dispatch command and the query, each word an argument of its own.
    argv = [systemd_expands(word) for word in run[8:]]
    assert argv[:6] == ["wake-watch", "21600", "3", "30", "600", "4"]
    assert argv[6:9] == ["juju-exec", "-u", "slurmctld/0"]
    assert argv[9].startswith("JUJU_DISPATCH_PATH=hooks/slurmctld-wake ")
    query = f"squeue --noheader --format=%i --partition=compute --states={BUSY}"
    assert argv[10:] == query.split()


def test_a_running_watcher_is_not_started_twice(ctx, machine, settled):
    state = leave_with_jobs(ctx, machine, settled)
    machine.commands.clear()
    machine.active.add("slurmctld-wake-partition-compute.service")

    ctx.run(ctx.on.update_status(), later(state))

    assert transient_runs(machine) == []


def test_wake_event_removes_the_partition_once_its_jobs_ended(ctx, machine, settled, tmp_path):
    state = leave_with_jobs(ctx, machine, settled)
    assert memory(state)["partitions"][0]["retiring"] is True
    machine.responses[("squeue",)] = ""
    machine.commands.clear()

    out = ctx.run(wake_event(ctx), later(state))

    assert "compute" not in slurm_conf(tmp_path)
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert memory(out)["partitions"] == []
    assert out.unit_status == testing.ActiveStatus()


def test_a_watcher_that_cannot_start_is_logged_and_retried(ctx, machine, settled):
    machine.fail("systemd-run", stderr="Failed to start transient service unit")
    state = leave_with_jobs(ctx, machine, settled)
    assert state.unit_status == testing.ActiveStatus("draining partitions: compute")
    machine.heal()
    machine.responses[("squeue",)] = "42\n"
    machine.commands.clear()

    ctx.run(ctx.on.update_status(), later(state))

    assert len(transient_runs(machine)) == 1


def test_departed_node_with_jobs_is_watched_and_deleted_on_wake(ctx, machine, settled):
    relation = compute_relation(units=2)
    state = settled(running(relation))
    node = json.dumps(
        {"meta": META_24_11, "nodes": [{"name": "compute-1", "state": ["MIXED", "DRAIN"]}]}
    )
    machine.responses[("scontrol", "show", "node", "compute-1")] = node
    machine.responses[("squeue",)] = "42\n"
    departed = ctx.on.relation_departed(
        state.get_relation(relation.id), remote_unit=1, departing_unit=1
    )

    state = ctx.run(departed, state)

    [run] = transient_runs(machine)
    assert run[1] == "--unit=slurmctld-wake-node-compute-1.service"
    assert "--nodelist=compute-1" in run[8:]  # A word of the query, an argument of its own.
    assert state.unit_status == testing.ActiveStatus(
        "deleting departed nodes once idle: compute-1"
    )
    del machine.responses[("squeue",)]
    out = ctx.run(wake_event(ctx), later(state, state.get_relation(relation.id)))
    assert machine.ran("scontrol", "delete") == [["scontrol", "delete", "nodename=compute-1"]]
    assert memory(out)["departed_nodes"] == []


def test_wake_on_a_non_leader_changes_nothing(ctx, machine, tmp_path):
    state = testing.State(
        leader=False,
        relations=[testing.PeerRelation(PEER)],
        stored_states={already_installed("SlurmctldCharm")},
    )

    out = ctx.run(wake_event(ctx), state)

    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert out.unit_status == STANDS_BY


# Failures are statuses, from facts, and what failed is retried.


def test_slurmctld_that_cannot_start_shows_slurms_reason_until_it_runs(ctx, machine):
    machine.service_fails("slurmctld", FATAL)

    state = ctx.run(ctx.on.config_changed(), running())
    assert state.unit_status == testing.BlockedStatus(
        "slurmctld cannot start: fatal: Unable to bind listen port (6817): Address already in use"
    )

    state = ctx.run(ctx.on.update_status(), later(state))  # Still failing: still said.
    assert "Unable to bind listen port" in state.unit_status.message
    assert machine.calls("start") == ["slurmctld"] * 4  # twice an event (reset-failed)

    machine.heal()
    state = ctx.run(ctx.on.update_status(), later(state))
    assert state.unit_status == testing.ActiveStatus()


def test_slurmctld_down_without_a_failed_start_shows_its_journal_reason(ctx, machine, settled):
    state = settled(running())
    machine.active.discard("slurmctld")
    machine.journals["slurmctld"] = [FATAL]
    machine.service_fails("slurmctld", FATAL)

    out = ctx.run(ctx.on.update_status(), later(state))

    assert out.unit_status.name == "blocked"
    assert "fatal: Unable to bind listen port" in out.unit_status.message


def test_failed_reconfigure_is_retried_although_the_file_is_unchanged(
    ctx, machine, tmp_path, settled
):
    state = settled(running())
    machine.fail(
        *RECONFIGURE, stderr="slurm_reconfigure error: Unable to contact slurm controller"
    )

    state = ctx.run(ctx.on.config_changed(), later(state, config={"max-node-count": 64}))
    assert state.unit_status == testing.BlockedStatus(
        f"command {RECONFIGURE} failed with exit status 1: "
        "slurm_reconfigure error: Unable to contact slurm controller"
    )
    assert "maxnodecount=64" in slurm_conf(tmp_path)

    machine.heal()
    machine.commands.clear()
    state = ctx.run(ctx.on.update_status(), later(state, config={"max-node-count": 64}))
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert state.unit_status == testing.ActiveStatus()

    machine.commands.clear()
    ctx.run(ctx.on.update_status(), later(state, config={"max-node-count": 64}))
    assert machine.ran(*RECONFIGURE) == []  # Applied: not again.


def test_timed_out_reconfigure_waits_and_is_retried(ctx, machine, settled):
    state = settled(running())
    machine.time_out(*RECONFIGURE)

    state = ctx.run(ctx.on.config_changed(), later(state, config={"max-node-count": 64}))
    assert state.unit_status.name == "waiting"

    machine.heal()
    machine.commands.clear()
    ctx.run(ctx.on.update_status(), later(state, config={"max-node-count": 64}))
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]


def test_failed_restart_is_retried_until_it_succeeds(ctx, machine, settled):
    state = settled(running())
    moved = {testing.Network("slurmd", bind_addresses=[_address("10.9.9.9")])}
    machine.service_fails("slurmctld", FATAL, verbs=("restart",))

    state = ctx.run(ctx.on.config_changed(), later(state, networks=moved))
    assert state.unit_status == testing.BlockedStatus(f"slurmctld cannot restart: {FATAL[11:]}")
    machine.heal()
    machine.service_calls.clear()

    ctx.run(ctx.on.update_status(), later(state, networks=moved))
    # Down after the failed restart: started again.
    assert machine.calls("start") == ["slurmctld"]


def test_new_auth_key_restarts_and_is_recorded(ctx, machine, settled, tmp_path):
    new_key = base64.b64encode(b"n" * 1024).decode()
    state = with_new_key(settled(running()), "slurm-auth-key", new_key)

    out = ctx.run(ctx.on.config_changed(), state)
    assert machine.calls("restart") == ["slurmctld"]
    assert (tmp_path / "etc/slurm/slurm.key").read_bytes() == b"n" * 1024
    machine.service_calls.clear()
    ctx.run(ctx.on.update_status(), later(out))
    assert machine.service_calls == []
    assert new_key not in json.dumps(memory(out))


# The controller's memory lives in the peer application databag.


def test_a_new_leader_serves_the_retiring_partition_it_finds_in_the_peer_databag(
    ctx, machine, tmp_path
):
    peer = testing.PeerRelation(
        PEER,
        local_app_data=databag(
            partitions=[
                {
                    "name": "old",
                    "partition": {"partitionname": "old", "nodes": ["old"]},
                    "nodeset": {"nodeset": "old", "feature": "old"},
                    "relation_id": 3,
                    "retiring": True,
                    "drained": True,
                }
            ],
            departed_nodes=[{"name": "old-4"}],
        ),
    )
    machine.responses[("squeue",)] = "7\n"
    machine.responses[("scontrol", "show", "node", "old-4")] = json.dumps(
        {"meta": META_24_11, "nodes": [{"name": "old-4", "state": ["ALLOCATED"]}]}
    )

    out = ctx.run(ctx.on.leader_elected(), running(peer))

    assert "partitionname=old nodes=old state=drain" in slurm_conf(tmp_path).splitlines()
    assert machine.ran("scontrol", "update") == []  # Drained already: not again.
    units = [r[1] for r in transient_runs(machine)]
    assert units == [
        "--unit=slurmctld-wake-node-old-4.service",
        "--unit=slurmctld-wake-partition-old.service",
    ]
    assert out.unit_status == testing.ActiveStatus("draining partitions: old")


@pytest.mark.parametrize("retiring", [True, False])
def test_a_remembered_partition_gets_its_names_forced_again(ctx, machine, tmp_path, retiring):
    kept = {
        "name": "old",
        "partition": {"partitionname": "other", "nodes": ["ALL"], "maxtime": 60},
        "nodeset": {"nodeset": "other", "feature": "gpu", "nodes": ["x-[0-9]"]},
        "relation_id": 3,
        "retiring": retiring,
        "drained": True,
    }
    peer = testing.PeerRelation(PEER, local_app_data=databag(partitions=[kept]))
    relation = testing.Relation("slurmd", remote_app_name="old", id=3) if not retiring else None
    machine.responses[("squeue",)] = "7\n"

    out = ctx.run(ctx.on.leader_elected(), running(peer, *([relation] if relation else [])))

    conf = slurm_conf(tmp_path).splitlines()
    partition = [line for line in conf if line.startswith("partitionname=old")]
    assert len(partition) == 1
    assert partition[0].startswith("partitionname=old nodes=old ")
    assert "maxtime=60" in partition[0]
    assert [line for line in conf if line.startswith("nodeset=")] == ["nodeset=old feature=old"]
    remembered = memory(out)["partitions"][0]
    assert remembered["partition"] == {"maxtime": 60}  # The names are never remembered.
    assert remembered["nodeset"] == {"nodeset": "old", "feature": "old"}


def test_only_the_leader_writes_the_peer_databag(ctx, machine):
    peer = testing.PeerRelation(PEER, local_app_data=databag(departed_nodes=[{"name": "x-1"}]))
    state = testing.State(
        leader=False, relations=[peer], stored_states={already_installed("SlurmctldCharm")}
    )

    out = ctx.run(ctx.on.update_status(), state)

    assert out.get_relation(peer.id).local_app_data == peer.local_app_data


def test_partitions_and_their_order_are_remembered_in_the_peer_databag(ctx, machine):
    older, newer = compute_relation("compute"), compute_relation("debug")

    out = ctx.run(ctx.on.relation_changed(newer), running(older, newer))

    remembered = memory(out)["partitions"]
    assert [(p["name"], p["relation_id"]) for p in remembered] == [
        ("compute", older.id),
        ("debug", newer.id),
    ]
    assert memory(out)["controllers"] == [{"unit": "slurmctld/0"}]


# Untrusted input.


def test_bad_partition_data_blocks_naming_the_app_and_keeps_the_last_valid_partition(
    ctx, machine, tmp_path, settled
):
    relation = compute_relation(maxtime=60)
    state = settled(running(relation))
    hostile = testing.Relation(
        "slurmd",
        id=relation.id,
        remote_app_name="compute",
        remote_app_data=databag(
            partition={"partitionname": "compute", "maxtime": "60 Nodes=ALL"},
            nodeset={"nodeset": "compute", "feature": "compute"},
        ),
        remote_units_data={0: {}},
    )

    out = ctx.run(ctx.on.relation_changed(hostile, remote_unit=0), later(state, hostile))

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("compute sent an invalid partition")
    assert "MaxTime" in out.unit_status.message
    conf = slurm_conf(tmp_path).splitlines()
    assert "partitionname=compute nodes=compute maxtime=60 default=YES" in conf
    assert "ALL" not in slurm_conf(tmp_path)
    assert machine.ran(*RECONFIGURE) == []


@pytest.mark.parametrize(
    ("app", "partition"),
    [
        ("evil", {"partitionname": "evil", "maxtime": "1\nNodeName=x"}),
        ("compute", {"partitionname": "compute", "default": "YES"}),  # Not a JSON boolean.
    ],
    ids=["line-break", "not-slurmutils-type"],
)
def test_bad_partition_data_from_a_new_app_adds_no_partition(
    ctx, machine, tmp_path, app, partition
):
    hostile = testing.Relation(
        "slurmd",
        remote_app_name=app,
        remote_app_data=databag(partition=partition, nodeset={"nodeset": app}),
    )

    out = ctx.run(ctx.on.update_status(), running(hostile))

    assert app not in slurm_conf(tmp_path)
    assert out.unit_status.message.startswith(f"{app} sent an invalid partition")
    assert "auth_key_id" not in out.get_relation(hostile.id).local_app_data


@pytest.mark.parametrize(
    "nodename",
    ["compute-0 state=down", "compute-0\nx", "a;reboot", "compute-[0-1] reason=x", "", "$(id)"],
)
def test_resume_refuses_a_nodename_that_is_not_a_host_list_and_runs_nothing(
    ctx, machine, nodename
):
    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("resume", params={"nodename": nodename}), running())

    assert failure.value.message.startswith("invalid nodename")
    assert machine.ran("scontrol") == []


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max-node-count", 65534),
        ("max-node-count", -1),
        ("max-node-count", 2**40),
        ("cluster-name", "a" * 41),
        ("cluster-name", "x\nClusterName=y"),
        ("cluster-name", "a=b"),
        ("cluster-name", "a#b"),
        ("cluster-name", "Upper"),
        ("cluster-name", ""),
        ("process-isolation", "cgroup "),
        ("process-isolation", "none\n"),
    ],
)
def test_hostile_option_values_block_and_write_nothing(ctx, machine, tmp_path, option, value):
    out = ctx.run(ctx.on.config_changed(), running(config={option: value}))

    assert out.unit_status.name == "blocked"
    assert f"'{option}'" in out.unit_status.message
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert machine.commands == [] or all(c[0] == "dpkg-query" for c in machine.commands)


def test_max_node_count_at_the_largest_slurm_renders_is_accepted(ctx, machine, tmp_path):
    ctx.run(ctx.on.config_changed(), running(config={"max-node-count": 65533}))

    assert "maxnodecount=65533" in slurm_conf(tmp_path).splitlines()


def test_every_command_the_charm_runs_has_a_bounded_timeout(ctx, machine, settled):
    leave_with_jobs(ctx, machine, settled)

    assert machine.timeouts
    assert all(0 < timeout <= 180 for _, timeout in machine.timeouts)


def test_watcher_name_from_an_application_name_is_checked(ctx, machine):
    with pytest.raises(ValueError):
        wake.watcher_name("slurmctld-wake-partition", "a b")


def _address(ip: str) -> testing.BindAddress:
    return testing.BindAddress([testing.Address(ip)])


def test_a_state_directory_planted_as_a_link_blocks_and_touches_nothing(ctx, machine, tmp_path):
    # The slurm user's `ln -s /etc /var/lib/slurm/slurmctld`, then its slurmctld stopped.
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o711)
    (tmp_path / "var/lib/slurm").mkdir(parents=True)
    (tmp_path / "var/lib/slurm/slurmctld").symlink_to(outside)

    state = ctx.run(ctx.on.update_status(), running())

    assert state.unit_status.name == "blocked"
    assert "slurmctld is a symbolic link or not a directory" in state.unit_status.message
    assert (outside.stat().st_mode & 0o7777) == 0o711 and not any(outside.iterdir())
    assert "slurmctld" not in machine.calls("start")


def test_a_change_undone_after_a_failed_reconfigure_is_reconfigured_again(
    ctx, machine, tmp_path, settled
):
    """A reconfigure that timed out had re-executed slurmctld with the new file (forky lab):
    going back to the file applied before must reconfigure again, not match an old record."""
    state = settled(running())
    machine.fail(*RECONFIGURE, stderr="slurm_reconfigure error: Socket timed out on send/recv")
    tuned = {"slurm-conf-parameters": "MaxJobCount=20000"}
    state = ctx.run(ctx.on.config_changed(), later(state, config=tuned))
    assert state.unit_status.name == "blocked"
    machine.heal()
    machine.commands.clear()

    out = ctx.run(ctx.on.config_changed(), later(state, config={}))

    assert "maxjobcount=20000" not in slurm_conf(tmp_path).splitlines()
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert out.unit_status == testing.ActiveStatus()
