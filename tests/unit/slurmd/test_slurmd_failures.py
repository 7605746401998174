"""Scenarios for failures as statuses, retried by the next event, and untrusted input."""

import json

import pytest
from hpc_libs.errors import SlurmOpsError
from ops import testing
from test_charm_slurmd import (
    NODE,
    again,
    auth_secret,
    controller_relation,
    databag,
    installed,
    options,
    scontrol_changes,
    stored,
)

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

FATAL = "fatal: Hybrid mode is not supported. Mounted cgroups are: 5:cpuset:/"


def test_slurmd_that_cannot_start_shows_slurms_reason_and_is_retried(ctx, machine):
    machine.service_fails("slurmd", FATAL)
    secret = auth_secret()
    relation = controller_relation(secret)

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert out.unit_status == testing.BlockedStatus(f"slurmd cannot start: {FATAL}")
    assert stored(out)["applied"] == ""

    out = ctx.run(ctx.on.update_status(), again(out))
    assert machine.calls("start") == ["slurmd"] * 4  # twice an event (reset-failed)
    assert out.unit_status == testing.BlockedStatus(f"slurmd cannot start: {FATAL}")

    machine.heal()
    out = ctx.run(ctx.on.update_status(), again(out))
    assert machine.calls("start")[-1] == "slurmd"
    assert out.unit_status == testing.ActiveStatus()


def test_slurmd_starts_before_it_is_enabled(ctx, machine):
    """The node registers while `systemctl enable` runs Debian's SysV script (about 1 s)."""
    secret = auth_secret()
    relation = controller_relation(secret)

    ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert machine.service_calls == [("start", "slurmd"), ("enable", "slurmd")]


def test_slurmd_that_could_not_be_enabled_is_enabled_by_the_next_event(ctx, machine):
    machine.service_fails("slurmd", "Failed to enable unit", verbs=("enable",))
    secret = auth_secret()
    relation = controller_relation(secret)

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert machine.calls("start") == ["slurmd"]
    assert stored(out)["applied"] == ""
    machine.heal()

    out = ctx.run(ctx.on.update_status(), again(out))

    assert machine.calls("enable") == ["slurmd", "slurmd"]
    assert stored(out)["applied"] != ""
    ctx.run(ctx.on.update_status(), again(out))
    assert machine.calls("enable") == ["slurmd", "slurmd"]  # Applied: enabled once more only.


def test_slurmd_down_keeps_saying_why_on_events_that_do_not_reconcile(ctx, machine, enlisted):
    machine.active.discard("slurmd")
    machine.journals["slurmd"] = ["slurmd: error: something", FATAL]

    out = ctx.run(ctx.on.action("node-config"), enlisted)

    assert out.unit_status == testing.BlockedStatus(f"slurmd is not running: {FATAL}")


def test_failed_restart_is_retried_though_the_options_file_is_unchanged(
    ctx, machine, tmp_path, enlisted
):
    relation = enlisted.get_relations("slurmctld")[0]
    secret = next(iter(enlisted.secrets))
    moved = controller_relation(secret, controllers=["10.0.0.9"], id=relation.id)
    machine.service_fails("slurmd", FATAL, verbs=("restart",))

    out = ctx.run(ctx.on.relation_changed(moved), again(enlisted, relations=[moved]))

    assert out.unit_status == testing.BlockedStatus(f"slurmd cannot restart: {FATAL}")
    written = options(tmp_path)
    machine.heal()
    machine.active.add("slurmd")  # systemd restarted it on its own, with the old options.

    out = ctx.run(ctx.on.update_status(), again(out))

    assert options(tmp_path) == written
    assert machine.calls("restart") == ["slurmd"] * 3  # the failing event tried twice
    assert out.unit_status == testing.ActiveStatus()

    ctx.run(ctx.on.update_status(), again(out))
    assert machine.calls("restart") == ["slurmd"] * 3  # Applied: no other restart.


def test_hardware_detection_failure_keeps_the_registered_node(ctx, machine, tmp_path, enlisted):
    before = options(tmp_path)
    machine.fail("slurmd", "-C", stderr="slurmd: fatal: cannot read /proc/cpuinfo")

    out = ctx.run(ctx.on.start(), enlisted)

    assert options(tmp_path) == before
    assert scontrol_changes(machine) == []
    assert machine.ran("systemd-run") == []
    assert stored(out)["registered"] == stored(enlisted)["registered"]
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("hardware detection failed, node config kept")
    assert "cannot read /proc/cpuinfo" in out.unit_status.message


@pytest.mark.parametrize(
    ("output", "why"),
    [
        ("NodeName=n CPUs=² RealMemory=900\n", "invalid CPUs: '²' is whitespace"),
        (f"NodeName=n CPUs=2 RealMemory={'9' * 5000}\n", "invalid RealMemory: a value of 5000"),
        ("NodeName=n CPUs=70000 RealMemory=900\n", "invalid CPUs: 70000 is not between"),
        ("NodeName=n CPUs=2 ThreadsPerCore=-1\n", "invalid ThreadsPerCore: '-1' is not"),
    ],
)
def test_garbled_detection_output_is_a_detection_error_and_keeps_the_node(  # noqa: PLR0917
    ctx, machine, tmp_path, enlisted, output, why
):
    before = options(tmp_path)
    machine.responses[("slurmd", "-C")] = output

    out = ctx.run(ctx.on.start(), enlisted)

    assert options(tmp_path) == before
    assert machine.ran("systemd-run") == []
    assert stored(out)["registered"] == stored(enlisted)["registered"]
    assert stored(out)["hardware"] == stored(enlisted)["hardware"]
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith(
        f"hardware detection failed, node config kept: `slurmd -C` printed {why}"
    )


def test_hardware_detection_failure_before_enlisting_does_not_start_slurmd(ctx, machine):
    machine.fail("slurmd", "-C", stderr="slurmd: fatal: cannot read /proc/cpuinfo")
    secret = auth_secret()
    relation = controller_relation(secret)

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert machine.service_calls == []
    assert out.unit_status.name == "blocked"
    assert "cannot read /proc/cpuinfo" in out.unit_status.message


def with_parameters(state: testing.State, **parameters: object) -> testing.State:
    """`state` with node-config parameters stored (as the action stores them)."""
    return again(
        state,
        stored_states={
            *{s for s in state.stored_states if s.owner_path != "SlurmdCharm"},
            testing.StoredState(
                owner_path="SlurmdCharm",
                content={**stored(state), "parameters": json.dumps(parameters)},
            ),
        },
    )


def test_scontrol_timing_out_waits_and_is_retried(ctx, machine, enlisted):
    machine.time_out("scontrol", "update")

    out = ctx.run(ctx.on.update_status(), with_parameters(enlisted, weight=4))

    assert out.unit_status.name == "waiting"
    assert out.unit_status.message.endswith("; retrying")
    machine.heal()
    out = ctx.run(ctx.on.update_status(), again(out))
    assert machine.ran("scontrol", "update")[-1][3] == "weight=4"
    assert out.unit_status == testing.ActiveStatus()


# node-config: validated whole before it is stored.


def test_node_config_checks_the_merge_with_what_was_stored_before(
    ctx, machine, tmp_path, enlisted
):
    """A value stored by an earlier revision that Slurm's grammar refuses fails the action."""
    state = with_parameters(enlisted, tmpdisk=-5)
    before = options(tmp_path)

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("node-config", params={"parameters": "Weight=5"}), state)

    assert "tmpdisk" in failure.value.message.lower()
    assert options(tmp_path) == before
    assert machine.ran("scontrol") == []


def test_node_config_fails_when_the_hardware_was_never_detected_and_cannot_be(ctx, machine):
    machine.fail("slurmd", "-C", stderr="boom")

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("node-config", params={"parameters": "Weight=5"}), installed())

    assert "cannot check the parameters" in failure.value.message
    assert machine.ran("scontrol") == []


def test_node_config_checks_against_the_known_hardware_without_detecting(ctx, machine, enlisted):
    machine.fail("slurmd", "-C", stderr="boom")

    ctx.run(ctx.on.action("node-config", params={"parameters": "Weight=5"}), enlisted)

    assert machine.ran("slurmd", "-C") == []


@pytest.mark.parametrize(
    "parameters",
    [
        "Weight=5 Features=a,b",
        "RealMemory=900 TmpDisk=100",
        "Gres=gpu:a100:2 MemSpecLimit=100",
        "CPUs=65533 Weight=4294967293",
        "NodeAddr=10.0.0.5 CoresPerSocket=1",
    ],
)
def test_a_value_the_action_accepts_never_breaks_a_later_hook(ctx, machine, enlisted, parameters):
    out = ctx.run(ctx.on.action("node-config", params={"parameters": parameters}), enlisted)

    for event in (ctx.on.update_status(), ctx.on.config_changed(), ctx.on.start()):
        out = ctx.run(event, again(out))
        assert out.unit_status.name in ("active", "maintenance"), out.unit_status


@pytest.mark.parametrize(
    "case",
    [
        ("Port=7000", "port"),
        ("NodeName=other", "nodename"),
        ('Features="a b"', "Features"),
        ("Weight=4294967295", "Weight"),
        ("CPUs=-1", "CPUs"),
        ("Features=a#b", "Features"),
    ],
)
def test_node_config_refuses_hostile_values(ctx, machine, tmp_path, enlisted, case):
    parameters, key = case
    before = options(tmp_path)

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("node-config", params={"parameters": parameters}), enlisted)

    assert key.lower() in failure.value.message.lower()
    assert options(tmp_path) == before
    assert machine.ran("scontrol") == []


# partition-config: a bad value blocks every unit and keeps the last partition.


@pytest.mark.parametrize(
    ("partition_config", "key"),
    [
        ("MaxTime=60 Nodes=ALL", "nodes"),
        ('MaxTime="60 Nodes=ALL"', "MaxTime"),
        ("MaxTime=60\nNodes=ALL", "nodes"),
        ("MaxTime=60#Nodes=ALL", "MaxTime"),
        ("MaxTime=-1", "MaxTime"),
        ("MaxNodes=4294967295", "MaxNodes"),
    ],
)
@pytest.mark.parametrize("leader", [True, False])
def test_hostile_partition_config_blocks_and_keeps_the_last_partition(
    ctx, machine, partition_config, key, leader
):
    last = databag(
        partition={"partitionname": "slurmd", "nodes": ["slurmd"], "maxtime": 10},
        nodeset={"nodeset": "slurmd", "feature": "slurmd"},
    )
    relation = testing.Relation("slurmctld", local_app_data=last)
    state = installed(relation, leader=leader, config={"partition-config": partition_config})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status.name == "blocked"
    assert f"'{key}'" in out.unit_status.message or key in out.unit_status.message
    assert out.get_relation(relation.id).local_app_data == last


def test_default_node_state_down_waits_in_the_hook_for_a_slow_registration(ctx, machine, clock):
    show = ("scontrol", "show", "node", NODE, "--json")
    machine.responses[show] = SlurmOpsError("no", stderr="Invalid node name specified")
    registered = json.dumps({"meta": META_24_11, "nodes": [{"name": NODE, "state": ["IDLE"]}]})
    clock.on_sleep.append(
        lambda sleeps: machine.responses.update({show: registered}) if sleeps == 8 else None
    )
    secret = auth_secret()
    relation = controller_relation(secret)
    state = installed(relation, secrets=[secret], config={"default-node-state": "down"})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.ran("scontrol", "update")[0][3] == "state=down"
    assert out.unit_status == testing.ActiveStatus()
