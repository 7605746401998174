"""A compute node in a major upgrade: it never upgrades Slurm itself.

Once every controller runs the target, the charm moves the apt pin to it; the rebuild
rollout's RebootProgram (`rebuild-nodes upgrade=true`) then upgrades and reboots the node.
Before that the pin holds Slurm at the running major, so no `apt-get upgrade` can take it.
"""

import dataclasses
from pathlib import Path

import ops
import pytest
from charm_testing import FakeMachine
from hpc_libs.machine import apt
from ops import testing
from test_charm_slurmd import auth_secret, databag, installed

FORKY = "deb http://deb.debian.org/debian forky main"
PACKAGES = ["slurmd", "slurm-client", "dbus"]
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


# A unit added during an upgrade (`juju add-unit slurmd`), or deployed with the option set:
# it installs the newest major the controllers allow, pinned, never one newer than theirs.


@pytest.fixture
def pins_at_install(
    machine: FakeMachine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> list[str]:
    """The apt pin as each package installation found it ("" without one)."""
    seen: list[str] = []

    def install(packages, *, upgrade=False, refresh=True):
        path = tmp_path / "etc/apt/preferences.d/slurm-charms"
        seen.append(path.read_text() if path.exists() else "")
        return machine.apt_install(packages, upgrade=upgrade, refresh=refresh)

    monkeypatch.setattr(apt, "install", install)
    return seen


def new_unit(*controller_versions: str) -> testing.State:
    """A unit not installed yet, the option naming forky; controllers if versions are given."""
    relations, secrets = [], []
    if controller_versions:
        installed_state = node_in_upgrade(*controller_versions)
        relations, secrets = list(installed_state.relations), list(installed_state.secrets)
    return testing.State(
        leader=True,
        relations=relations,
        secrets=secrets,
        config={"slurm-package-source": FORKY},
    )


def test_a_new_unit_before_any_controller_is_known_installs_nothing_and_waits(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    machine.responses[("apt-cache", "madison")] = MADISON

    out = ctx.run(ctx.on.install(), new_unit())

    assert machine.apt_installs == []
    assert out.unit_status == ops.WaitingStatus(
        "slurmd not installed: slurmctld must run 26.05 first (no controller known yet)"
    )


@pytest.mark.parametrize(
    ("controller_versions", "major"),
    [
        (("24.11.5",), "24.11"),  # the controllers run the old major
        (("26.05.5", "24.11.5"), "24.11"),  # midway: the major every controller runs
        (("26.05.5", "26.05.5"), "26.05"),  # the controllers run the new major
    ],
)
def test_a_new_unit_installs_the_major_every_controller_runs_pinned_before_apt(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    pins_at_install: list[str],
    controller_versions: tuple[str, ...],
    major: str,
):
    machine.responses[("apt-cache", "madison")] = MADISON

    ctx.run(ctx.on.install(), new_unit(*controller_versions))

    [pinned] = pins_at_install
    assert f"Pin: version {major}.*" in pinned  # before apt ran
    assert machine.apt_installs == [PACKAGES]


def test_a_waiting_new_unit_installs_once_the_controllers_say_their_slurm(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    pins_at_install: list[str],
):
    machine.responses[("apt-cache", "madison")] = MADISON
    waiting = ctx.run(ctx.on.install(), new_unit())
    later = new_unit("24.11.5")
    later = testing.State(
        leader=True,
        relations=later.relations,
        secrets=later.secrets,
        config=dict(later.config),
        stored_states=waiting.stored_states,
    )

    out = ctx.run(ctx.on.relation_changed(next(iter(later.relations))), later)

    [pinned] = pins_at_install
    assert "Pin: version 24.11.*" in pinned  # before apt ran
    assert machine.apt_installs == [PACKAGES]
    assert len(machine.ran("apt-cache", "madison")) == 1  # the offer was read once
    assert not str(out.unit_status.message).startswith("slurmd not installed")


def test_the_default_source_installs_as_before_without_reading_the_offer(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, tmp_path: Path
):
    machine.responses[("apt-cache", "show")] = "Package: slurmd\nVersion: 24.11.5-1\n"

    ctx.run(ctx.on.install(), testing.State(leader=True))

    assert machine.apt_installs == [PACKAGES]
    assert machine.ran("apt-cache", "madison") == []
    assert not (tmp_path / "etc/apt/preferences.d/slurm-charms").exists()


def test_a_waiting_new_unit_does_not_detect_hardware_without_slurmd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    machine.responses[("apt-cache", "madison")] = MADISON
    waiting = ctx.run(ctx.on.install(), new_unit())

    out = ctx.run(ctx.on.start(), waiting)

    assert machine.ran("slurmd", "-C") == []
    assert out.unit_status == waiting.unit_status


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
