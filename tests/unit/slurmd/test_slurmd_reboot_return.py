"""A node slurmctld set DOWN for its machine's boot returns at the `start` after that boot.

slurmctld sets a node whose slurmd registers from a boot it did not ask for (a crash, a power
cut) DOWN "Node unexpectedly rebooted", which no registration ends under ReturnToService=1 (the
chaos soak, seed 1129: compute-1 stayed DOWN after a power cycle). The charm resumes that DOWN
alone: slurmctld's own, from this boot; an operator's state stays.
"""

import json

import node
import pytest
from test_charm_slurmd import (
    META_24_11,
    NODE,
    SHOW_NODE,
    auth_secret,
    controller_relation,
    installed,
    scontrol_changes,
    stored,
)

BOOT = 1_795_000_000
"""When this machine booted (`node.booted_at`, patched)."""
EARLIER_BOOT = BOOT - 3600
RESUME = ["scontrol", "update", f"nodename={NODE}", "state=resume"]


def shown(state: list[str], reason: str = "", by: str = "slurm", boot: int = BOOT) -> str:
    """`scontrol show node --json` for this unit's node, registered from the boot at `boot`."""
    record = {
        "name": NODE,
        "state": state,
        "reason": reason,
        "reason_set_by_user": by,
        "boot_time": {"set": True, "infinite": False, "number": boot},
    }
    return json.dumps({"meta": META_24_11, "nodes": [record]})


DOWN_FOR_ITS_BOOT = shown(["DOWN", "DYNAMIC_NORM"], node.REBOOTED_REASON)


@pytest.fixture(autouse=True)
def booted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "booted_at", lambda: float(BOOT))


def test_a_node_down_for_its_machines_boot_is_resumed_at_the_start_after_it(
    ctx, machine, enlisted
):
    machine.responses[SHOW_NODE] = DOWN_FOR_ITS_BOOT

    out = ctx.run(ctx.on.start(), enlisted)

    assert scontrol_changes(machine) == [RESUME]
    assert stored(out)["reboot_watch_until"] == 0


def test_the_start_waits_for_the_registration_from_this_boot(ctx, machine, enlisted, clock):
    machine.responses[SHOW_NODE] = shown(["IDLE", "DYNAMIC_NORM"], boot=EARLIER_BOOT)

    def registers_after_three_seconds(sleeps: int) -> None:
        if sleeps == 3:
            machine.responses[SHOW_NODE] = DOWN_FOR_ITS_BOOT

    clock.on_sleep.append(registers_after_three_seconds)

    ctx.run(ctx.on.start(), enlisted)

    assert clock.sleeps == [1, 1, 1]
    assert scontrol_changes(machine) == [RESUME]


@pytest.mark.parametrize(
    "node_shown",
    [
        # An operator's DOWN, in slurmctld's own words but not by slurmctld.
        shown(["DOWN", "DYNAMIC_NORM"], node.REBOOTED_REASON, by="root"),
        shown(["DOWN", "DYNAMIC_NORM"], "bad DIMM", by="root"),
        shown(["IDLE", "DRAIN", "DYNAMIC_NORM"], "disk swap", by="root"),
        # Registered from this boot and serving (a `scontrol reboot`, or ReturnToService=2).
        shown(["IDLE", "DYNAMIC_NORM"]),
    ],
    ids=["operator-down-in-slurms-words", "operator-down", "operator-drain", "serving"],
)
def test_any_other_state_after_the_boot_is_left_and_the_watch_ends(
    ctx, machine, enlisted, node_shown
):
    machine.responses[SHOW_NODE] = node_shown

    out = ctx.run(ctx.on.start(), enlisted)

    assert scontrol_changes(machine) == []
    assert stored(out)["reboot_watch_until"] == 0


def test_a_registration_after_the_start_hook_is_resumed_by_a_later_event(ctx, machine, enlisted):
    # Through the start hook slurmctld still holds the node's registration from before.
    machine.responses[SHOW_NODE] = shown(
        ["DOWN", "DYNAMIC_NORM"], "Not responding", boot=EARLIER_BOOT
    )
    after_start = ctx.run(ctx.on.start(), enlisted)
    assert scontrol_changes(machine) == []
    assert stored(after_start)["reboot_watch_until"] > BOOT

    machine.responses[SHOW_NODE] = DOWN_FOR_ITS_BOOT
    out = ctx.run(ctx.on.update_status(), after_start)

    assert scontrol_changes(machine) == [RESUME]
    assert stored(out)["reboot_watch_until"] == 0


def test_a_start_before_the_node_enlisted_reads_no_node_for_the_boot(ctx, machine):
    """The enlistment looks once (for its default state, `test_charm_slurmd`); the watch after
    a boot reads nothing more."""
    secret = auth_secret()

    ctx.run(ctx.on.start(), installed(controller_relation(secret), secrets=[secret]))

    assert [tuple(c) for c in machine.ran("scontrol", "show")] == [SHOW_NODE]
    assert scontrol_changes(machine) == [
        ["scontrol", "update", "nodename=slurmd-0", "comment=slurmd/0"]
    ]


def test_events_outside_the_watch_read_no_node(ctx, machine, enlisted):
    machine.responses[SHOW_NODE] = DOWN_FOR_ITS_BOOT

    ctx.run(ctx.on.update_status(), enlisted)

    assert machine.ran("scontrol") == []
