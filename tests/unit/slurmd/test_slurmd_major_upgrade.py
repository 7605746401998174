"""A compute node in a major upgrade: it never upgrades Slurm itself.

Once every controller runs the target, the charm moves the apt pin to it; the rebuild
rollout's RebootProgram (`rebuild-nodes upgrade=true`) then upgrades and reboots the node.
Before that the pin holds Slurm at the running major, so no `apt-get upgrade` can take it.
"""

import dataclasses
from pathlib import Path

import ops
from charm_testing import FakeMachine
from ops import testing
from test_charm_slurmd import auth_secret, databag, installed

FORKY = "deb http://deb.debian.org/debian forky main"
MADISON = """\
    slurmd | 26.05.5-1 | http://deb.debian.org/debian forky/main amd64 Packages
    slurmd | 24.11.5-1 | http://deb.debian.org/debian trixie/main amd64 Packages
"""


def node_in_upgrade(*controller_versions: str) -> testing.State:
    secret = auth_secret()
    controllers = [
        {"hostname": f"ctl-{n}", "address": f"10.0.0.{n + 1}", "version": version}
        for n, version in enumerate(controller_versions)
    ]
    relation = testing.Relation(
        "slurmctld",
        remote_app_name="slurmctld",
        remote_app_data=databag(auth_key_id=secret.id, controllers=controllers),
    )
    return installed(relation, secrets=[secret], config={"slurm-package-source": FORKY})


def pin(root: Path) -> str:
    return (root / "etc/apt/preferences.d/slurm-charms").read_text()


def test_out_of_turn_the_node_waits_for_every_controller(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, tmp_path: Path
):
    machine.responses[("apt-cache", "madison")] = MADISON

    out = ctx.run(ctx.on.config_changed(), node_in_upgrade("26.05.5", "24.11.5"))

    assert out.unit_status == ops.WaitingStatus(
        "slurmctld must run 26.05 first (ctl-1 runs 24.11)"
    )
    assert "Pin: version 24.11.*" in pin(tmp_path)
    assert machine.apt_installs == []


def test_in_turn_the_pin_moves_and_the_rollout_is_left_to_upgrade(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, tmp_path: Path
):
    machine.responses[("apt-cache", "madison")] = MADISON

    out = ctx.run(ctx.on.config_changed(), node_in_upgrade("26.05.5", "26.05.5"))

    assert "Pin: version 26.05.*" in pin(tmp_path)
    assert machine.apt_installs == []
    assert machine.ran("apt-get", "install") == []
    assert out.unit_status == ops.ActiveStatus(
        "Slurm 26.05 pending: slurmctld's rebuild-nodes upgrade=true applies it"
    )


def test_after_the_reboot_the_node_records_the_new_slurm_and_stops_waiting(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, tmp_path: Path
):
    machine.responses[("apt-cache", "madison")] = MADISON
    first = ctx.run(ctx.on.config_changed(), node_in_upgrade("26.05.5"))
    machine.installed.add("slurmd")
    machine.version = "26.05.5-1"  # The RebootProgram upgraded, then the machine rebooted.

    out = ctx.run(ctx.on.start(), first)

    assert out.workload_version == "26.05.5-1"
    assert not str(out.unit_status.message).startswith("Slurm 26.05 pending")


def test_the_archive_as_it_is_asks_nothing_of_apt_until_a_major_is_asked_for(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, tmp_path: Path
):
    """A unit with Slurm preinstalled or no network: its first hook runs no apt-get update,
    nor an apt-cache that rebuilds its cache."""
    machine.responses[("apt-cache", "madison")] = MADISON
    first = ctx.run(ctx.on.install(), installed(config={"slurm-package-source": "archive"}))

    assert machine.ran("apt-cache") == []
    assert machine.ran("apt-get", "update") == []
    assert "Pin: version 24.11.*" in pin(tmp_path)

    ctx.run(
        ctx.on.config_changed(),
        dataclasses.replace(
            first, config={"slurm-package-source": "archive", "slurm-major": "26.05"}
        ),
    )

    assert machine.ran("apt-get", "update") != []
    assert machine.ran("apt-cache", "madison") != []
