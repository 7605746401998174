"""Scenarios for the slurmd charm's node health check: what it installs, what it says."""

import json
from pathlib import Path

import pytest
from ops import testing
from test_charm_slurmd import NODE, again

PROGRAM = "usr/local/sbin/slurmd-charm-health"
SETTINGS = "etc/default/slurmd-charm-health.json"
STATE = "run/slurmd-charm-health.json"


def test_the_program_and_its_settings_are_installed_root_owned(ctx, machine, tmp_path, enlisted):
    config = {
        "health-mounts": "/home /scratch/",
        "health-free-space": "/tmp=10% /scratch=2G",
        "health-time-sync": True,
        "health-max-drain": 25,
    }
    ctx.run(ctx.on.config_changed(), again(enlisted, config=config))

    program = tmp_path / PROGRAM
    assert program.stat().st_mode & 0o7777 == 0o755
    assert program.read_text().startswith("#!/usr/bin/python3 -I\n")
    assert (tmp_path / SETTINGS).stat().st_mode & 0o7777 == 0o644
    assert json.loads((tmp_path / SETTINGS).read_text()) == {
        "node": NODE,
        "partition": "slurmd",
        "mounts": ["/home", "/scratch"],
        "free_space": {"/tmp": "10%", "/scratch": "2048"},
        "time_sync": True,
        "max_drain": 25,
        "writable": ["/var/lib/slurm/slurmd", "/var/log/slurm"],
    }


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("health-mounts", "/home rm -rf"),
        ("health-mounts", "/home/../etc"),
        ("health-mounts", '/a"b'),
        ("health-free-space", "/tmp=10"),
        ("health-free-space", "/tmp=101%"),
        ("health-free-space", "/tmp;=1G"),
        ("health-max-drain", 101),
    ],
)
def test_a_bad_health_option_blocks_naming_it(ctx, machine, enlisted, option, value):
    out = ctx.run(ctx.on.config_changed(), again(enlisted, config={option: value}))

    assert out.unit_status.name == "blocked"
    assert option in out.unit_status.message


def test_the_status_says_unhealthy_naming_the_check_while_the_node_fails_it(
    ctx, machine, tmp_path, enlisted
):
    state = tmp_path / STATE
    state.parent.mkdir(parents=True, exist_ok=True)
    problem = {"check": "mounts", "seen": "/home not mounted"}
    state.write_text(json.dumps({"problems": [problem], "report": "drained"}))

    drained = ctx.run(ctx.on.update_status(), enlisted)
    state.write_text(
        json.dumps({"problems": [problem], "report": "not drained: health-max-drain reached"})
    )
    kept = ctx.run(ctx.on.update_status(), enlisted)
    state.write_text(json.dumps({"problems": [], "report": "healthy again"}))
    healthy = ctx.run(ctx.on.update_status(), enlisted)

    assert drained.unit_status == testing.BlockedStatus("unhealthy: mounts: /home not mounted")
    assert kept.unit_status == testing.BlockedStatus(
        "unhealthy: mounts: /home not mounted (not drained: health-max-drain reached)"
    )
    assert healthy.unit_status == testing.ActiveStatus()


def test_an_unreadable_state_file_is_no_health_status(ctx, machine, tmp_path: Path, enlisted):
    state = tmp_path / STATE
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{not json")

    assert ctx.run(ctx.on.update_status(), enlisted).unit_status == testing.ActiveStatus()
