"""A login node joins the cluster: slurmctld shares the key and controllers, sackd runs.

Each scenario starts from an installed unit, fires one event (or a short sequence, each run
on the state the previous one left) and checks the machine and the unit's status.
"""

import base64
import json
from pathlib import Path

import ops
import pytest
from charm_testing import FakeMachine, already_installed, retried_once_mended
from ops import testing

KEY = base64.b64encode(b"k" * 1024).decode()
NEW_KEY = base64.b64encode(b"n" * 1024).decode()
FATAL = "sackd: fatal: Unable to contact slurmctld at 10.0.0.1:6817"


def key_path(root: Path) -> Path:
    return root / "etc/slurm/slurm.key"


def options_path(root: Path) -> Path:
    return root / "etc/default/sackd"


def slurmctld(
    secret: testing.Secret | None,
    controllers: list[object],
    *,
    relation_id: int | None = None,
) -> testing.Relation:
    """slurmctld's relation: entries are `host[:port]` strings, or raw objects as given."""
    entries = [
        {"address": c.split(":")[0], "port": int(c.split(":")[1]) if ":" in c else 6817}
        if isinstance(c, str)
        else c
        for c in controllers
    ]
    data = {"controllers": json.dumps(entries)}
    if secret is not None:
        data["auth_key_id"] = json.dumps(secret.id)
    if relation_id is None:
        return testing.Relation("slurmctld", remote_app_name="slurmctld", remote_app_data=data)
    return testing.Relation(
        "slurmctld", id=relation_id, remote_app_name="slurmctld", remote_app_data=data
    )


def ready_state(controllers: list[object]) -> tuple[testing.State, testing.Relation]:
    secret = testing.Secret(tracked_content={"key": KEY})
    relation = slurmctld(secret, controllers)
    state = testing.State(
        config={"slurm-package-source": "archive"},
        relations={relation},
        secrets={secret},
        stored_states={already_installed("SackdCharm")},
    )
    return state, relation


def joined(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, controllers: list[object]
) -> tuple[testing.State, testing.Relation]:
    """A unit that already runs sackd against `controllers` (service calls cleared)."""
    state, relation = ready_state(controllers)
    out = ctx.run(ctx.on.relation_changed(relation), state)
    assert out.unit_status == ops.ActiveStatus()
    machine.service_calls.clear()
    confirmed = out.get_relation(relation.id)  # it now holds the unit's key confirmation
    assert isinstance(confirmed, testing.Relation)
    return out, confirmed


def with_new_revision(state: testing.State, key: str) -> tuple[testing.State, testing.Secret]:
    """`state` once slurmctld published `key` as a new revision of its auth key secret."""
    secret = next(iter(state.secrets))
    rotated = testing.Secret(
        id=secret.id, tracked_content={"key": KEY}, latest_content={"key": key}
    )
    later = testing.State(
        config=dict(state.config),
        relations=state.relations,
        secrets={rotated},
        stored_states=state.stored_states,
    )
    return later, rotated


def with_relation(state: testing.State, relation: testing.Relation) -> testing.State:
    return testing.State(
        config=dict(state.config),
        relations={relation},
        secrets=state.secrets,
        stored_states=state.stored_states,
    )


# Joining the cluster.


def test_slurmctld_ready_writes_key_and_controllers_and_starts_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = ready_state(["10.0.0.1", "10.0.0.2"])

    out = ctx.run(ctx.on.relation_changed(relation), state)

    key = key_path(sackd_root)
    assert key.read_bytes() == b"k" * 1024
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    options = options_path(sackd_root).read_text()
    assert 'SACKD_OPTIONS="--conf-server 10.0.0.1:6817,10.0.0.2:6817"' in options
    assert machine.calls("enable") == ["sackd"]
    assert machine.calls("restart") == ["sackd"]
    assert out.unit_status == ops.ActiveStatus()
    assert KEY not in json.dumps(dict(out.get_relation(relation.id).local_unit_data))
    assert KEY not in json.dumps(dict(out.get_relation(relation.id).local_app_data))


def test_unchanged_data_does_not_restart_a_running_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])

    out = ctx.run(ctx.on.relation_changed(relation), state)
    out = ctx.run(ctx.on.update_status(), out)

    assert machine.calls("restart") == []
    assert out.unit_status == ops.ActiveStatus()


def test_a_new_controller_list_restarts_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    changed = slurmctld(
        next(iter(state.secrets)), ["10.0.0.1", "10.0.0.2:7817"], relation_id=relation.id
    )

    ctx.run(ctx.on.relation_changed(changed), with_relation(state, changed))

    assert machine.calls("restart") == ["sackd"]
    assert "10.0.0.1:6817,10.0.0.2:7817" in options_path(sackd_root).read_text()


def test_a_rotated_auth_key_is_written_and_restarts_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, _ = joined(ctx, machine, ["10.0.0.1"])
    state, rotated = with_new_revision(state, NEW_KEY)

    out = ctx.run(ctx.on.secret_changed(rotated), state)

    assert key_path(sackd_root).read_bytes() == b"n" * 1024
    assert machine.calls("restart") == ["sackd"]
    assert out.unit_status == ops.ActiveStatus()


def test_an_ipv6_controller_is_bracketed(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = ready_state([{"address": "fd00::1", "port": 6817}])

    ctx.run(ctx.on.relation_changed(relation), state)

    assert "--conf-server [fd00::1]:6817" in options_path(sackd_root).read_text()


# Waiting for slurmctld, and refusing what it sends when it is invalid.


def test_controllers_without_a_key_wait_and_start_nothing(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    relation = slurmctld(None, ["10.0.0.1"])
    state = testing.State(relations={relation}, stored_states={already_installed("SackdCharm")})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.service_calls == []
    assert not key_path(sackd_root).exists()
    assert out.unit_status == ops.WaitingStatus("waiting for slurmctld")


def test_a_fresh_integration_without_data_waits(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")
    state = testing.State(relations={relation}, stored_states={already_installed("SackdCharm")})

    out = ctx.run(ctx.on.relation_created(relation), state)

    assert machine.service_calls == []
    assert out.unit_status == ops.WaitingStatus("waiting for slurmctld")


def test_a_key_secret_that_cannot_be_read_waits_and_starts_nothing(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    not_granted = testing.Secret(tracked_content={"key": KEY})
    relation = slurmctld(not_granted, ["10.0.0.1"])
    state = testing.State(relations={relation}, stored_states={already_installed("SackdCharm")})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.service_calls == []
    assert not key_path(sackd_root).exists()
    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert out.unit_status.message.startswith("waiting for slurmctld's auth key: ")


@pytest.mark.parametrize(
    "content, why",
    [
        ({"key": "not base64!"}, "does not hold base64 text"),
        ({"other": KEY}, "no 'key' field"),
        # Found by the fuzz suite: b64decode raises a plain ValueError for non-ASCII text.
        ({"key": "²"}, "does not hold base64 text"),
    ],
    ids=["not-base64", "no-key-field", "not-ascii"],
)
def test_a_key_secret_with_bad_content_waits_and_writes_nothing(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    sackd_root: Path,
    content: dict[str, str],
    why: str,
):
    secret = testing.Secret(tracked_content=content)
    relation = slurmctld(secret, ["10.0.0.1"])
    state = testing.State(
        relations={relation}, secrets={secret}, stored_states={already_installed("SackdCharm")}
    )

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.service_calls == []
    assert not key_path(sackd_root).exists()
    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert why in out.unit_status.message
    assert "not base64!" not in out.unit_status.message


HOSTILE_CONTROLLERS = {
    "argument": ({"address": "ctl --foo"}, "controllers.0.address"),
    "list": ({"address": "a,b"}, "controllers.0.address"),
    "newline": ({"address": "ctl\nSlurmctldHost=evil"}, "controllers.0.address"),
    "port-too-big": ({"address": "10.0.0.1", "port": 70000}, "controllers.0.port"),
    "port-zero": ({"address": "10.0.0.1", "port": 0}, "controllers.0.port"),
    "hostname": ({"hostname": "ctl 0", "address": "10.0.0.1"}, "controllers.0.hostname"),
}


@pytest.mark.parametrize(
    "entry, field", HOSTILE_CONTROLLERS.values(), ids=list(HOSTILE_CONTROLLERS)
)
def test_invalid_controller_data_waits_naming_the_sender_and_field(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    sackd_root: Path,
    entry: dict[str, object],
    field: str,
):
    state, relation = ready_state([entry])

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.service_calls == []
    assert not key_path(sackd_root).exists()
    assert not options_path(sackd_root).exists()
    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert out.unit_status.message.startswith(f"slurmctld sent an invalid {field}: ")


def test_invalid_data_after_valid_data_keeps_sackd_on_the_last_valid_controllers(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    options = options_path(sackd_root).read_text()
    hostile = slurmctld(
        next(iter(state.secrets)), [{"address": "ctl --foo"}], relation_id=relation.id
    )

    out = ctx.run(ctx.on.relation_changed(hostile), with_relation(state, hostile))
    out = ctx.run(ctx.on.update_status(), out)

    assert options_path(sackd_root).read_text() == options
    assert machine.service_calls == []
    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert "slurmctld sent an invalid controllers.0.address" in out.unit_status.message


# sackd that fails: its own reason in the status, and retried.


def test_a_failed_restart_blocks_with_sackds_reason_and_the_next_event_retries_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = ready_state(["10.0.0.1"])
    machine.service_fails("sackd", FATAL)

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == ops.BlockedStatus(
        "sackd cannot restart: fatal: Unable to contact slurmctld at 10.0.0.1:6817"
    )
    out = retried_once_mended(ctx, machine, out, "sackd")

    assert out.unit_status == ops.ActiveStatus()


def test_a_failed_restart_is_retried_even_if_sackd_came_back_with_the_old_files(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    """The files did not change since the failed restart, and sackd runs: it still restarts,
    because what runs is not known to be what was written (tracked: what was applied)."""
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    changed = slurmctld(next(iter(state.secrets)), ["10.0.0.2"], relation_id=relation.id)
    machine.service_fails("sackd", FATAL)
    out = ctx.run(ctx.on.relation_changed(changed), with_relation(state, changed))
    assert isinstance(out.unit_status, ops.BlockedStatus)
    machine.active.add("sackd")  # e.g. systemd's Restart= brought back the old sackd

    out = retried_once_mended(ctx, machine, out, "sackd")

    assert out.unit_status == ops.ActiveStatus()


def test_a_restart_that_times_out_waits_and_is_retried(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = ready_state(["10.0.0.1"])
    machine.time_out("systemctl", "restart")

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert "timed out" in out.unit_status.message
    machine.heal()
    out = ctx.run(ctx.on.update_status(), out)
    assert out.unit_status == ops.ActiveStatus()


def test_a_sackd_that_stopped_is_restarted_by_the_next_event(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, _ = joined(ctx, machine, ["10.0.0.1"])
    machine.active.clear()

    out = ctx.run(ctx.on.update_status(), state)

    assert machine.calls("restart") == ["sackd"]
    assert out.unit_status == ops.ActiveStatus()


def test_a_sackd_that_stopped_shows_its_journal_reason_between_reconciles(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    machine.active.clear()
    machine.journals["sackd"] = ["sackd: started", FATAL]

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=1), state)

    assert machine.service_calls == []
    assert out.unit_status == ops.BlockedStatus(
        "sackd is not running: fatal: Unable to contact slurmctld at 10.0.0.1:6817"
    )


def test_every_command_has_a_timeout(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = ready_state(["10.0.0.1"])

    ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.timeouts
    assert all(timeout > 0 for _, timeout in machine.timeouts)


# Leaving the cluster: sackd stopped and disabled, slurm.key deleted, never an error.


def own_departure(relation: testing.Relation) -> testing.Relation:
    """The relation as this unit's own relation-departed sees it.

    Scenario names the departing unit `<remote app>/<n>`, so the remote app is given this
    charm's name for the departing unit to be this unit (sackd/0).
    """
    return testing.Relation(
        "slurmctld",
        id=relation.id,
        remote_app_name="sackd",
        remote_app_data=dict(relation.remote_app_data),
    )


def test_its_own_relation_departed_stops_sackd_and_deletes_the_key(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    departing = own_departure(relation)

    out = ctx.run(
        ctx.on.relation_departed(departing, remote_unit=0, departing_unit=0),
        with_relation(state, departing),
    )

    assert machine.calls("stop") == ["sackd"]
    assert machine.calls("disable") == ["sackd"]
    assert not key_path(sackd_root).exists()
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_its_own_departure_deletes_the_key_set_of_a_rotation_too(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    key_set = key_path(sackd_root).with_name("slurm.jwks")  # as an auth key rotation leaves it
    key_set.write_text('{"keys": []}')
    departing = own_departure(relation)

    ctx.run(
        ctx.on.relation_departed(departing, remote_unit=0, departing_unit=0),
        with_relation(state, departing),
    )

    assert not key_path(sackd_root).exists()
    assert not key_set.exists()


def test_after_departing_no_event_configures_sackd_again(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    departing = own_departure(relation)
    out = ctx.run(
        ctx.on.relation_departed(departing, remote_unit=0, departing_unit=0),
        with_relation(state, departing),
    )
    machine.service_calls.clear()

    out = ctx.run(ctx.on.update_status(), with_relation(out, relation))

    assert machine.service_calls == []
    assert not key_path(sackd_root).exists()
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_another_units_departure_changes_nothing(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=1, departing_unit=1), state)

    assert machine.service_calls == []
    assert key_path(sackd_root).exists()
    assert out.unit_status == ops.ActiveStatus()


def test_relation_broken_stops_sackd_and_deletes_the_key(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])

    out = ctx.run(ctx.on.relation_broken(relation), state)

    assert machine.calls("stop") == ["sackd"]
    assert machine.calls("disable") == ["sackd"]
    assert not key_path(sackd_root).exists()
    assert "sackd" not in machine.active
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_a_second_disconnect_succeeds(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    departing = own_departure(relation)
    out = ctx.run(
        ctx.on.relation_departed(departing, remote_unit=0, departing_unit=0),
        with_relation(state, departing),
    )

    out = ctx.run(ctx.on.relation_broken(relation), with_relation(out, relation))
    out = ctx.run(ctx.on.relation_broken(relation), with_relation(out, relation))

    assert not key_path(sackd_root).exists()
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_a_failed_stop_while_leaving_still_deletes_the_key_and_is_retried(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    machine.fail("systemctl", "stop", stderr="Failed to stop sackd.service: Access denied")

    out = ctx.run(ctx.on.relation_broken(relation), state)

    assert not key_path(sackd_root).exists()
    assert machine.calls("disable") == ["sackd"]
    assert out.unit_status == ops.BlockedStatus(
        "systemctl stop sackd failed: Failed to stop sackd.service: Access denied"
    )
    machine.heal()
    machine.service_calls.clear()

    out = ctx.run(ctx.on.update_status(), testing.State(stored_states=out.stored_states))

    assert machine.calls("stop") == ["sackd"]
    assert "sackd" not in machine.active
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_a_key_that_cannot_be_deleted_is_a_status_not_a_hook_error(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    key = key_path(sackd_root)
    key.unlink()
    key.mkdir()  # unlink() refuses a directory: stands in for any OSError

    out = ctx.run(ctx.on.relation_broken(relation), state)

    assert machine.calls("stop") == ["sackd"]
    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert out.unit_status.message.startswith(f"cannot delete {key}")


def test_a_key_left_on_a_machine_without_integration_is_deleted_by_the_next_event(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    key = key_path(sackd_root)
    key.parent.mkdir(parents=True)
    key.write_bytes(b"k" * 1024)

    out = ctx.run(
        ctx.on.update_status(), testing.State(stored_states={already_installed("SackdCharm")})
    )

    assert not key.exists()
    assert machine.calls("stop") == ["sackd"]
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_a_unit_never_integrated_touches_no_service(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    out = ctx.run(
        ctx.on.update_status(), testing.State(stored_states={already_installed("SackdCharm")})
    )

    assert machine.service_calls == []
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")
