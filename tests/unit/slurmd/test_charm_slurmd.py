"""Scenarios for the slurmd charm: build a State, fire one event, check state and commands."""

import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from charm_testing import SLURM_VERSION, FakeMachine, already_installed
from hpc_libs.errors import SlurmOpsError
from ops import testing

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

KEY = base64.b64encode(b"k" * 1024).decode()
NODE = "slurmd-0"
CONTROLLERS = ["10.0.0.1", "10.0.0.2"]
SHOW_NODE = ("scontrol", "show", "node", NODE, "--json")
REGISTERED = json.dumps({"meta": META_24_11, "nodes": [{"name": NODE, "state": ["IDLE"]}]})


def scontrol_changes(machine) -> list[list[str]]:
    """The scontrol commands that ran and change something: every one but `show` (a read)."""
    return [command for command in machine.ran("scontrol") if command[1:2] != ["show"]]


def databag(**fields: object) -> dict[str, str]:
    """A databag as ops.Relation.save writes it: every field JSON-encoded."""
    return {name: json.dumps(value) for name, value in fields.items()}


def auth_secret() -> testing.Secret:
    return testing.Secret(tracked_content={"key": KEY})


def controller_relation(secret: testing.Secret | None = None, controllers=CONTROLLERS, **kw):
    data = {}
    if secret is not None:
        data = databag(auth_key_id=secret.id, controllers=[{"address": c} for c in controllers])
    return testing.Relation("slurmctld", remote_app_name="slurmctld", remote_app_data=data, **kw)


def installed(*relations, secrets=(), leader=True, config=None, **stored) -> testing.State:
    return testing.State(
        leader=leader,
        relations=list(relations),
        secrets=list(secrets),
        config=config or {},
        stored_states={
            already_installed("SlurmdCharm"),
            testing.StoredState(owner_path="SlurmdCharm", content=stored),
        },
    )


def options(tmp_path: Path) -> dict[str, str]:
    text = (tmp_path / "etc/default/slurmd").read_text()
    lines = [line for line in text.splitlines() if "=" in line and not line.startswith("#")]
    return {k: v.strip('"') for k, v in (line.split("=", 1) for line in lines)}


def stored(state: testing.State) -> dict[str, Any]:
    """The charm's own StoredState content."""
    return dict(next(s for s in state.stored_states if s.owner_path == "SlurmdCharm").content)


def again(state: testing.State, **changes) -> testing.State:
    """The same state with some fields replaced (the output of one run as the next input)."""
    fields = {
        "leader": state.leader,
        "relations": list(state.relations),
        "secrets": list(state.secrets),
        "config": dict(state.config),
        "stored_states": state.stored_states,
    }
    return testing.State(**(fields | changes))


# Install and partition publication.


def test_install_from_ppa(ctx, machine):
    out = ctx.run(ctx.on.install(), testing.State())

    assert {"slurmd", "slurm-client", "dbus"} <= machine.installed
    assert machine.ran("add-apt-repository")
    assert out.unit_status == testing.BlockedStatus("needs a slurmctld integration")


def test_upgrade_installs_dbus_on_a_node_whose_image_lacks_it(ctx, machine, enlisted):
    # Under cgroup v2 slurmd asks systemd over the system bus for slurmstepd's scope: without
    # dbus it does not start (seen on a lab VM). Debian's images have it, some Ubuntu images
    # do not; a node deployed before this gets it with the charm's upgrade.
    machine.installed.update({"slurmd", "slurm-client"})

    ctx.run(ctx.on.upgrade_charm(), again(enlisted))

    assert "dbus" in machine.installed


def test_install_from_archive_adds_no_repository(ctx, machine):
    ctx.run(ctx.on.install(), testing.State(config={"slurm-package-source": "archive"}))

    assert machine.ran("add-apt-repository") == []


def test_upgrade_refreshes_the_workload_version_of_packages_present(ctx, machine, enlisted):
    machine.installed.update({"slurmd", "slurm-client", "dbus"})

    out = ctx.run(ctx.on.upgrade_charm(), again(enlisted))

    assert out.workload_version == SLURM_VERSION
    assert machine.apt_installs == []
    assert machine.ran("add-apt-repository") == []


def test_leader_publishes_partition_when_slurmctld_connects(ctx, machine):
    relation = controller_relation()
    state = installed(relation, config={"partition-config": "MaxTime=60 Default=YES"})

    out = ctx.run(ctx.on.relation_created(relation), state)

    data = out.get_relation(relation.id).local_app_data
    # The operator's keys only: every slurmctld, this release's and the previous one's, names
    # the partition after the application. The node set is sent for the previous one.
    assert json.loads(data["partition"]) == {"maxtime": 60, "default": True}
    assert json.loads(data["nodeset"]) == {"nodeset": "slurmd", "feature": "slurmd"}
    assert out.unit_status == testing.WaitingStatus("waiting for slurmctld")


def test_partition_config_change_republishes_without_touching_the_node(ctx, machine, enlisted):
    state = again(enlisted, config={"partition-config": "MaxTime=30"})

    out = ctx.run(ctx.on.config_changed(), state)

    relation = out.get_relations("slurmctld")[0]
    partition = json.loads(relation.local_app_data["partition"])
    assert partition["maxtime"] == 30
    assert machine.service_calls == []
    assert machine.ran("scontrol") == []


def test_non_leader_does_not_publish(ctx, machine):
    relation = controller_relation()

    out = ctx.run(ctx.on.relation_created(relation), installed(relation, leader=False))

    assert out.get_relation(relation.id).local_app_data == {}


@pytest.mark.parametrize(
    ("partition_config", "message"),
    [
        ("Foo=1", "partition-config: unknown key Foo"),
        (
            "MaxTime=60 Default=maybe",
            "partition-config: invalid Default: 'maybe' is not one of YES, NO, TRUE, FALSE, "
            "UP, DOWN, 1, 0",
        ),
        ("MaxTime", "partition-config: 'MaxTime' is not key=value"),
        (
            "Nodes=other",
            "partition-config: Nodes is the charm's: it names the partition and its nodes "
            "after the application",
        ),
    ],
)
def test_bad_partition_config_blocks_naming_the_key_and_keeps_the_last_partition(
    ctx, machine, partition_config, message
):
    last = databag(
        partition={"partitionname": "slurmd", "nodes": ["slurmd"], "maxtime": 10},
        nodeset={"nodeset": "slurmd", "feature": "slurmd"},
    )
    relation = testing.Relation("slurmctld", local_app_data=last)
    state = installed(relation, config={"partition-config": partition_config})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == testing.BlockedStatus(message)
    assert out.get_relation(relation.id).local_app_data == last


def test_invalid_default_node_state_blocks_naming_the_option(ctx, machine):
    out = ctx.run(ctx.on.config_changed(), installed(config={"default-node-state": "drain"}))

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("invalid config option 'default-node-state'")


# Enlistment.


def test_slurmctld_ready_enlists_the_node(ctx, machine, tmp_path):
    secret = auth_secret()
    relation = controller_relation(secret)

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    key = tmp_path / "etc/slurm/slurm.key"
    assert key.read_bytes() == b"k" * 1024
    assert key.stat().st_mode & 0o777 == 0o600
    assert options(tmp_path) == {
        "SLURMD_OPTIONS": f"-N {NODE} --conf-server 10.0.0.1:6817,10.0.0.2:6817",
        "SLURMD_CONF": (
            "cpus=2 boards=1 socketsperboard=1 corespersocket=2 threadspercore=1 "
            "realmemory=1000 features=slurmd"
        ),
    }
    override = tmp_path / "etc/systemd/system/slurmd.service.d"
    assert "-Z" in next(override.iterdir()).read_text()
    assert machine.calls("start") == ["slurmd"]
    assert machine.calls("restart") == []
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert out.unit_status == testing.ActiveStatus()


def test_a_running_slurmd_tells_slurmctld_its_release_after_a_new_one_starts(ctx, machine):
    """The unit's release wakes slurmctld (relation-changed) after the rebuild's upgrade: its
    native metrics wait until every node runs 25.11 (it reads Slurm's node records)."""
    secret = auth_secret()
    relation = controller_relation(secret)
    state = installed(relation, secrets=[secret])
    state = dataclasses.replace(
        state, stored_states={already_installed("SlurmdCharm", version="26.05.5-1")}
    )

    out = ctx.run(ctx.on.relation_changed(relation), state)

    mine = out.get_relation(relation.id).local_unit_data
    assert json.loads(mine["version"]) == "26.05.5"


def test_nothing_changed_means_no_restart(ctx, machine, enlisted):
    ctx.run(ctx.on.relation_changed(enlisted.get_relations("slurmctld")[0]), enlisted)

    assert machine.service_calls == []
    assert machine.ran("scontrol") == []
    assert machine.ran("systemd-run") == []


def test_new_controller_list_restarts_slurmd(ctx, machine, tmp_path, enlisted):
    relation = enlisted.get_relations("slurmctld")[0]
    secret = next(iter(enlisted.secrets))
    moved = controller_relation(secret, controllers=["10.0.0.9"], id=relation.id)
    state = again(enlisted, relations=[moved])

    ctx.run(ctx.on.relation_changed(moved), state)

    assert "--conf-server 10.0.0.9:6817" in options(tmp_path)["SLURMD_OPTIONS"]
    assert machine.calls("restart") == ["slurmd"]


def test_controller_data_without_a_readable_secret_waits(ctx, machine, tmp_path):
    relation = controller_relation(auth_secret())  # The secret was never granted.

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation))

    assert machine.service_calls == []
    # The member's ladder, as on every cluster member: what is missing, in slurmctld's words.
    assert out.unit_status.name == "waiting"
    assert out.unit_status.message.startswith("waiting for slurmctld's auth key: ")


def test_default_node_state_down_is_applied_after_registration(ctx, machine):
    machine.responses[SHOW_NODE] = REGISTERED
    secret = auth_secret()
    relation = controller_relation(secret)
    config = {"default-node-state": "down", "default-node-reason": "burn-in first"}

    out = ctx.run(
        ctx.on.relation_changed(relation), installed(relation, secrets=[secret], config=config)
    )

    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", f"nodename={NODE}", "state=down", "reason=burn-in first"]
    ]
    assert out.unit_status == testing.ActiveStatus()


def test_default_node_state_waits_for_a_slow_registration(ctx, machine):
    machine.responses[SHOW_NODE] = SlurmOpsError("no", stderr="Invalid node name specified")
    secret = auth_secret()
    relation = controller_relation(secret)
    state = installed(relation, secrets=[secret], config={"default-node-state": "down"})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.ran("scontrol", "update") == []
    assert out.unit_status == testing.WaitingStatus("waiting for the node to register")

    machine.responses[SHOW_NODE] = REGISTERED
    out = ctx.run(ctx.on.update_status(), again(out))

    assert machine.ran("scontrol", "update")[0][3] == "state=down"
    assert out.unit_status == testing.ActiveStatus()


def test_a_new_idle_node_is_updated_once_registered_so_slurm_schedules_at_once(
    ctx, machine, clock
):
    """A dynamic node's own registration does not run slurmctld's scheduler: one update of
    the node does, so a job waiting for it (scale from zero) does not wait for backfill. The
    hook that started slurmd waits for the registration, looking every quarter second: it may
    be the unit's last hook for minutes (CI42: a slurmd started again once the operator fixed
    what stopped it stayed "waiting for the node to register")."""
    machine.responses[SHOW_NODE] = SlurmOpsError("no", stderr="Invalid node name specified")

    def registers(sleeps: int) -> None:
        if sleeps == 2:
            machine.responses[SHOW_NODE] = REGISTERED

    clock.on_sleep.append(registers)
    secret = auth_secret()
    relation = controller_relation(secret)

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert len(machine.ran(*SHOW_NODE)) == 3
    assert clock.sleeps == [0.25, 0.25]
    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", f"nodename={NODE}", "comment=slurmd/0"]
    ]
    assert out.unit_status == testing.ActiveStatus()


def test_a_node_that_never_registers_is_updated_by_a_later_hook(ctx, machine, clock):
    machine.responses[SHOW_NODE] = SlurmOpsError("no", stderr="Invalid node name specified")
    secret = auth_secret()
    relation = controller_relation(secret)

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert sum(clock.sleeps) == pytest.approx(30 - 0.25)  # REGISTRATION_ATTEMPTS s in all.
    assert machine.ran("scontrol", "update") == []
    assert out.unit_status == testing.WaitingStatus("waiting for the node to register")
    machine.responses[SHOW_NODE] = REGISTERED

    out = ctx.run(ctx.on.update_status(), again(out))

    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", f"nodename={NODE}", "comment=slurmd/0"]
    ]
    assert out.unit_status == testing.ActiveStatus()


def test_default_node_state_never_touches_an_enlisted_node(ctx, machine, enlisted):
    state = again(enlisted, config={"default-node-state": "down"})

    ctx.run(ctx.on.config_changed(), state)

    assert machine.ran("scontrol") == []


def test_hardware_is_detected_again_on_start(ctx, machine, tmp_path, enlisted):
    machine.responses[("slurmd", "-C")] = "CPUs=2 RealMemory=2000\n"

    out = ctx.run(ctx.on.start(), enlisted)

    assert "realmemory=2000" in options(tmp_path)["SLURMD_CONF"]
    assert machine.ran("systemd-run")[0][1] == f"--unit=slurmd-reregister-{NODE}"
    assert machine.ran("scontrol", "delete") == []
    assert json.loads(stored(out)["registered"])["realmemory"] == 2000


# The node-config action.


def node_updates(machine: FakeMachine) -> list[list[str]]:
    """The words of each `scontrol update nodename=<this node> ...` that ran, after the name."""
    updates = machine.ran("scontrol", "update")
    assert all(argv[:3] == ["scontrol", "update", f"nodename={NODE}"] for argv in updates)
    return [argv[3:] for argv in updates]


def test_node_config_live_fields_update_the_running_node(ctx, machine, tmp_path, enlisted):
    action = ctx.on.action("node-config", params={"parameters": "Weight=5 Features=fast"})

    ctx.run(action, enlisted)

    assert node_updates(machine) == [
        ["weight=5", "availablefeatures=slurmd,fast", "activefeatures=slurmd,fast"]
    ]
    assert machine.service_calls == []
    assert machine.ran("systemd-run") == []
    assert options(tmp_path)["SLURMD_CONF"].endswith("weight=5 features=slurmd,fast")
    assert ctx.action_results == {
        "node": NODE,
        "parameters": "weight=5 features=fast",
        "conf": options(tmp_path)["SLURMD_CONF"],
    }


def test_node_config_hardware_fields_drain_and_reregister_without_killing_jobs(
    ctx, machine, tmp_path, enlisted
):
    action = ctx.on.action("node-config", params={"parameters": "RealMemory=900"})

    ctx.run(action, enlisted)

    assert node_updates(machine) == [
        ["state=drain", "reason=juju: applying new node configuration"]
    ]
    (transient,) = machine.ran("systemd-run")
    assert transient[1:3] == [f"--unit=slurmd-reregister-{NODE}", "--collect"]
    assert transient[-1] == NODE  # An argument of its own; no state to restore.
    script = transient[transient.index("-c") + 1]
    delete = script.index('scontrol delete nodename="$$node"')
    assert script.index("until no_jobs") < delete
    assert delete < script.index("systemctl restart slurmd")
    assert machine.ran("scontrol", "delete") == []
    assert machine.service_calls == []
    assert "realmemory=900" in options(tmp_path)["SLURMD_CONF"]


def test_node_config_while_reregistering_does_not_start_a_second_transient(ctx, machine, enlisted):
    machine.active.add(f"slurmd-reregister-{NODE}")

    out = ctx.run(ctx.on.action("node-config", params={"parameters": "CPUs=1"}), enlisted)

    assert machine.ran("systemd-run") == []
    assert out.unit_status == testing.MaintenanceStatus("draining to register new configuration")


@pytest.mark.parametrize(
    "bad",
    [("Bogus=1", "Bogus"), ("CPUs=many", "CPUs"), ("State=down", "State"), ("Weight", "Weight")],
)
def test_node_config_invalid_input_fails_and_changes_nothing(
    ctx, machine, tmp_path, enlisted, bad
):
    parameters, key = bad
    before = options(tmp_path)

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("node-config", params={"parameters": parameters}), enlisted)

    assert failure.value.message.startswith("node-config: ")
    assert key in failure.value.message
    assert options(tmp_path) == before
    assert machine.commands == []
    assert machine.service_calls == []


def test_node_config_without_parameters_reports_the_effective_config(ctx, machine, enlisted):
    state = again(enlisted)
    state = testing.State(
        leader=True,
        relations=list(enlisted.relations),
        secrets=list(enlisted.secrets),
        stored_states={
            already_installed("SlurmdCharm"),
            testing.StoredState(
                owner_path="SlurmdCharm",
                content={**stored(enlisted), "parameters": json.dumps({"weight": 3})},
            ),
        },
    )

    ctx.run(ctx.on.action("node-config"), state)

    assert ctx.action_results is not None
    assert ctx.action_results["parameters"] == "weight=3"
    assert ctx.action_results["conf"].startswith("cpus=2 boards=1")
    assert machine.commands == []


def test_node_config_merges_and_reset_replaces(ctx, machine, tmp_path, enlisted):
    out = ctx.run(ctx.on.action("node-config", params={"parameters": "Weight=5"}), enlisted)
    out = ctx.run(ctx.on.action("node-config", params={"parameters": "Features=ssd"}), out)
    assert json.loads(stored(out)["parameters"]) == {"weight": 5, "features": ["ssd"]}
    machine.commands.clear()

    out = ctx.run(ctx.on.action("node-config", params={"reset": True}), out)

    assert json.loads(stored(out)["parameters"]) == {}
    assert node_updates(machine) == [
        ["weight=1", "availablefeatures=slurmd", "activefeatures=slurmd"]
    ]
    assert options(tmp_path)["SLURMD_CONF"].endswith("realmemory=1000 features=slurmd")


def test_node_config_before_enlistment_is_stored_for_later(ctx, machine, tmp_path):
    action = ctx.on.action("node-config", params={"parameters": "Weight=9"})

    out = ctx.run(action, installed(controller_relation()))

    assert json.loads(stored(out)["parameters"]) == {"weight": 9}
    assert machine.ran("scontrol") == []
    assert machine.service_calls == []


# destroy-jobs.


def test_destroy_jobs_cancels_the_jobs_on_this_node(ctx, machine, processes, enlisted):
    processes.steps(8, 7)
    processes.run("slurmstepd: [7.extern]")

    ctx.run(ctx.on.action("destroy-jobs"), enlisted)

    assert machine.ran("scancel") == [["scancel", f"--nodelist={NODE}"]]
    assert ctx.action_results == {"node": NODE, "cancelled": "7,8"}


def test_destroy_jobs_with_a_step_it_cannot_name_says_every_job(ctx, machine, processes, enlisted):
    processes.run("/usr/sbin/slurmstepd")

    ctx.run(ctx.on.action("destroy-jobs"), enlisted)

    assert machine.ran("scancel") == [["scancel", f"--nodelist={NODE}"]]
    assert ctx.action_results["cancelled"].startswith("every job of the node")


def test_destroy_jobs_failure_fails_the_action(ctx, machine, enlisted):
    machine.responses[("scancel",)] = SlurmOpsError("scancel", stderr="Access denied")

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("destroy-jobs"), enlisted)

    assert "Access denied" in failure.value.message


def test_node_config_that_cannot_be_applied_now_fails_but_is_kept(ctx, machine, enlisted):
    machine.responses[("scontrol", "update")] = SlurmOpsError("update", stderr="unreachable")

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("node-config", params={"parameters": "Weight=4"}), enlisted)

    assert "retried later" in failure.value.message
    assert "unreachable" in failure.value.message
