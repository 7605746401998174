"""Scenarios for a controller unit's removal: hand control over, stop slurmctld, stay stopped.

The unit is slurmctld/3 on host ctl0, network state on (unit 3: Scenario takes a departing
unit 0 for none and names the remote unit instead), first of the shared slurm.conf's
controllers. Its first departure hook (its own relation-departed, or `stop`) stops the
primary watch, hands control over when its slurmctld is in charge (the heartbeat names its
index), stops slurmctld, then the fence watchdog; later hooks start nothing.
"""

import json
import struct

import charm
import pytest
from charm_testing import charm_context
from ops import testing
from test_ha_charm import META_24_11, backup, leader_wrote, peer

pytestmark = pytest.mark.usefixtures("ctl0_primary")

STATE = "var/lib/slurm/checkpoint/slurmctld"
FENCE = "slurmctld-charm-fence.service"
WATCH = "slurmctld-charm-primary.path"
TAKEOVER = ("scontrol", "takeover")


def pings(*up: bool) -> str:
    """`scontrol ping --json` (24.11) for ctl0, ctl9, ctl8 in that order, each UP or not."""
    hosts = ("ctl0", "ctl9", "ctl8")
    return json.dumps(
        {
            "meta": META_24_11,
            "pings": [
                {"hostname": h, "pinged": "UP" if u else "DOWN", "responding": u}
                for h, u in zip(hosts, up, strict=False)
            ],
        }
    )


def beat(tmp_path, index: int) -> None:
    """The heartbeat the controller in charge writes: now, and its index in SlurmctldHost."""
    path = tmp_path / STATE / "heartbeat"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack(">QQ", 1_800_000_000, index))


@pytest.fixture
def ctl0_primary(shared_fs, machine):
    """ctl0 first in the shared slurm.conf, ctl9 and ctl8 its backups; slurmctld runs."""
    leader_wrote(shared_fs, "ctl0(192.0.2.0)", "ctl9(10.0.0.9)", "ctl8(10.0.0.8)")
    machine.active.update({"slurmctld", FENCE, WATCH})


@pytest.fixture
def ctx() -> testing.Context:
    return charm_context("slurmctld", charm.SlurmctldCharm, unit_id=3)


@pytest.fixture(autouse=True)
def departure_module(monkeypatch):
    """The departure module, its wait between looks at the heartbeat made instant."""
    import departure

    monkeypatch.setattr(departure, "sleep", lambda _: None)
    return departure


def leaving(**kwargs) -> tuple[testing.State, testing.PeerRelation]:
    relation = peer((9, "ctl9", "10.0.0.9"), (8, "ctl8", "10.0.0.8"))
    return backup(relation, **kwargs), relation


def order(machine) -> list[str]:
    """What ran, in order: each stop or disable (by unit) and each `scontrol takeover`."""
    ran = []
    for command, _ in machine.timeouts:
        if command[0] == "systemctl" and command[1] in ("stop", "disable"):
            ran.append(f"{command[1]} {command[-1]}")
        elif tuple(command[:2]) == TAKEOVER:
            ran.append(" ".join(command))
    return ran


def test_the_controller_in_charge_hands_over_then_stops_for_good(
    ctx, machine, tmp_path, departure_module, monkeypatch
):
    beat(tmp_path, 0)
    machine.responses[("scontrol", "ping")] = pings(True, False, True)  # ctl9 is down.
    monkeypatch.setattr(departure_module, "sleep", lambda _: beat(tmp_path, 2))
    state, relation = leaving()

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=9, departing_unit=3), state)

    assert order(machine) == [
        f"stop {WATCH}",
        f"disable {WATCH}",
        "scontrol takeover 2",  # The first backup that answers.
        "stop slurmctld",
        "disable slurmctld",
        f"stop {FENCE}",  # Last: it holds the share mounted until slurmctld is stopped.
        f"disable {FENCE}",
    ]
    assert out.unit_status == testing.MaintenanceStatus("leaving: slurmctld stopped on this unit")


def test_a_backup_in_charge_hands_over_to_another_backup_never_to_index_0(
    ctx, machine, tmp_path, shared_fs
):
    """`scontrol takeover` names a backup (1 and up): the primary takes control at its start."""
    leader_wrote(shared_fs, "ctl9(10.0.0.9)", "ctl0(192.0.2.0)", "ctl8(10.0.0.8)")
    beat(tmp_path, 1)  # ctl0, backup1, took over; ctl9 came back and answers.
    machine.responses[("scontrol", "ping")] = pings(True, True, True)
    state, _ = leaving()

    ctx.run(ctx.on.stop(), state)

    assert [c[2] for c in machine.ran(*TAKEOVER)] == ["2"]


def test_a_backup_stops_without_a_takeover(ctx, machine, tmp_path):
    beat(tmp_path, 1)  # ctl9 is in charge.
    state, relation = leaving()

    ctx.run(ctx.on.relation_departed(relation, remote_unit=9, departing_unit=3), state)

    assert machine.ran(*TAKEOVER) == []
    assert ("stop", "slurmctld") in machine.service_calls
    assert "slurmctld" not in machine.active


def test_with_no_other_controller_up_it_stops_without_a_takeover(ctx, machine, tmp_path):
    beat(tmp_path, 0)
    machine.responses[("scontrol", "ping")] = pings(True, False, False)
    state, _ = leaving()

    ctx.run(ctx.on.stop(), state)

    assert machine.ran(*TAKEOVER) == []
    assert ("stop", "slurmctld") in machine.service_calls


def test_a_refused_takeover_still_stops_slurmctld(ctx, machine, tmp_path, caplog):
    beat(tmp_path, 0)
    machine.responses[("scontrol", "ping")] = pings(True, True)
    machine.fail(*TAKEOVER, stderr="slurm_takeover error: Unable to contact slurm controller")
    state, _ = leaving()

    out = ctx.run(ctx.on.stop(), state)

    assert ("stop", "slurmctld") in machine.service_calls
    assert "scontrol takeover 1 failed" in caplog.text
    assert out.unit_status.name == "maintenance"


def test_a_handover_not_seen_in_time_still_stops_slurmctld(
    ctx, machine, tmp_path, departure_module, monkeypatch
):
    beat(tmp_path, 0)
    machine.responses[("scontrol", "ping")] = pings(True, True)
    waits: list[float] = []
    monkeypatch.setattr(departure_module, "sleep", waits.append)
    state, _ = leaving()

    ctx.run(ctx.on.stop(), state)

    assert sum(waits) == departure_module.HANDOVER_S
    assert order(machine)[-4:-2] == ["stop slurmctld", "disable slurmctld"]


def test_another_units_departure_is_no_departure_of_this_one(ctx, machine):
    state, relation = leaving()

    out = ctx.run(ctx.on.relation_departed(relation, remote_unit=9, departing_unit=9), state)

    assert ("stop", "slurmctld") not in machine.service_calls
    assert out.unit_status.name != "maintenance"


def test_once_left_no_later_hook_starts_anything(ctx, machine, tmp_path):
    beat(tmp_path, 1)
    state, relation = leaving()
    left = ctx.run(ctx.on.relation_departed(relation, remote_unit=9, departing_unit=3), state)
    machine.service_calls.clear()

    for event in (ctx.on.update_status(), ctx.on.config_changed(), ctx.on.stop()):
        left = ctx.run(event, left)

    assert machine.service_calls == []
    assert "slurmctld" not in machine.active
    assert left.unit_status == testing.MaintenanceStatus("leaving: slurmctld stopped on this unit")
