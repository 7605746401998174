"""A login node in a major upgrade: it waits for the controllers, then upgrades sackd.

The operator names a source with Slurm 26.05 (`slurm-package-source`); the machine's apt
offers 24.11 and 26.05 (`apt-cache madison`). Each scenario fires one event on a unit that
runs 24.11 and checks the pin, the packages and the status.
"""

from pathlib import Path

import ops
from charm_testing import FakeMachine
from ops import testing
from test_sackd_login_node import ready_state

FORKY = "deb http://deb.debian.org/debian forky main"
MADISON = """\
     sackd | 26.05.5-1 | http://deb.debian.org/debian forky/main amd64 Packages
     sackd | 24.11.5-1 | http://deb.debian.org/debian trixie/main amd64 Packages
"""


def upgrading(controller_version: str, **config: str) -> tuple[testing.State, testing.Relation]:
    """A running login node whose controller runs `controller_version`; the source named."""
    state, relation = ready_state(
        [{"hostname": "ctl-0", "address": "10.0.0.1", "port": 6817, "version": controller_version}]
    )
    options = {"slurm-package-source": FORKY, **config}
    return testing.State(
        config=options,
        relations=state.relations,
        secrets=state.secrets,
        stored_states=state.stored_states,
    ), relation


def pin(root: Path) -> str:
    return (root / "etc/apt/preferences.d/slurm-charms").read_text()


def test_out_of_turn_the_login_node_waits_for_the_controllers_and_holds_slurm(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    machine.responses[("apt-cache", "madison")] = MADISON
    state, _ = upgrading("24.11.5")

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == ops.WaitingStatus(
        "slurmctld must run 26.05 first (ctl-0 runs 24.11)"
    )
    assert machine.apt_installs == []
    assert machine.ran("apt-get", "install") == []
    assert "Pin: version 24.11.*" in pin(sackd_root)
    sources = (sackd_root / "etc/apt/sources.list.d/slurm-charms.list").read_text()
    assert sources == FORKY + "\n"


def test_once_every_controller_runs_the_target_sackd_upgrades(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    machine.responses[("apt-cache", "madison")] = MADISON
    machine.active.add("sackd")
    state, _ = upgrading("26.05.5")

    out = ctx.run(ctx.on.config_changed(), state)

    assert "Pin: version 26.05.*" in pin(sackd_root)
    assert machine.apt_installs == [["sackd", "slurm-client"]]
    assert machine.ran("apt-get", "install", "--yes", "--download-only")
    assert machine.calls("stop")[0] == "sackd"
    assert "sackd" in machine.active
    assert not isinstance(out.unit_status, ops.WaitingStatus)


def test_a_major_the_source_does_not_offer_blocks_naming_the_option(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    machine.responses[("apt-cache", "madison")] = MADISON
    state, _ = upgrading("26.05.5", **{"slurm-major": "25.11"})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == ops.BlockedStatus(
        "slurm-major 25.11 is not offered by slurm-package-source (it offers 24.11, 26.05)"
    )
    assert machine.apt_installs == []


def test_an_unsafe_source_blocks_and_nothing_reaches_apt(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, _ = upgrading("26.05.5", **{"slurm-package-source": FORKY + "\ndeb http://evil/ x y"})

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == ops.BlockedStatus(
        "invalid config option 'slurm-package-source': a deb source holds a new line, #, "
        "quote, $, ` or backslash"
    )
    assert machine.ran("apt-get") == []
    assert not (sackd_root / "etc/apt/sources.list.d/slurm-charms.list").exists()
