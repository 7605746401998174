"""The Slurm exporter's service: every controller unit runs it, with the charm's options."""

import dataclasses
import sys
from pathlib import Path

import hpc_libs
import prometheus_client
import slurm_exporter
from charm_testing import FakeMachine
from ops import testing
from test_charm_slurmctld import running
from test_ha_charm import backup, network_leader

UNIT = "etc/systemd/system/slurmctld-charm-exporter.service"


def _exec_start(tmp_path: Path) -> str:
    lines = (tmp_path / UNIT).read_text().splitlines()
    return next(line for line in lines if line.startswith("ExecStart="))


def test_the_leader_runs_the_exporter_from_the_charms_python(ctx, exporter: FakeMachine, tmp_path):
    ctx.run(ctx.on.config_changed(), network_leader())

    assert _exec_start(tmp_path) == (
        f"ExecStart={sys.executable} -m slurm_exporter --address 127.0.0.1 "
        "--port 9341 --interval 30"
    )
    text = (tmp_path / UNIT).read_text()
    assert "Restart=always" in text.splitlines()
    pythonpath = next(line for line in text.splitlines() if line.startswith("Environment="))
    for module in (slurm_exporter, hpc_libs, prometheus_client):  # The charm's own copies.
        assert any(
            Path(str(module.__file__)).is_relative_to(p) for p in pythonpath[23:].split(":")
        )
    assert exporter.calls("start") == ["slurmctld-charm-exporter.service"]


def test_a_backup_runs_the_exporter_too(ctx, exporter: FakeMachine, tmp_path):
    """HA: each unit exports its own role; the exporter decides what else, not the charm."""
    ctx.run(ctx.on.config_changed(), backup())

    assert "--interval 30" in _exec_start(tmp_path)
    assert "slurmctld-charm-exporter.service" in exporter.active


def test_new_options_restart_the_exporter_with_them(ctx, exporter: FakeMachine, tmp_path):
    state = ctx.run(ctx.on.config_changed(), network_leader())
    exporter.service_calls.clear()

    config = {"use-network-state": True, "metrics-interval": 60, "metrics-per-user": True}
    ctx.run(ctx.on.config_changed(), dataclasses.replace(state, config=config))

    assert _exec_start(tmp_path).endswith("--interval 60 --per-user")
    assert exporter.calls("restart") == ["slurmctld-charm-exporter.service"]


def test_an_unchanged_exporter_is_left_running(ctx, exporter: FakeMachine):
    state = ctx.run(ctx.on.config_changed(), network_leader())
    exporter.service_calls.clear()

    ctx.run(ctx.on.update_status(), state)

    assert "slurmctld-charm-exporter.service" not in exporter.calls("restart")


def test_an_exporter_that_cannot_start_is_a_status(ctx, exporter: FakeMachine):
    exporter.service_fails("slurmctld-charm-exporter.service", "error: address already in use")

    out = ctx.run(ctx.on.config_changed(), running())

    assert out.unit_status == testing.BlockedStatus(
        "the Slurm exporter is not running: error: address already in use"
    )


def test_the_exporter_runs_unprivileged_in_a_sandbox(ctx, exporter: FakeMachine, tmp_path):
    """Any local user can scrape it: it runs as no one in particular, with nothing to write
    and no capability, never as root (its commands go through slurmctld's socket)."""
    ctx.run(ctx.on.config_changed(), network_leader())

    service = (tmp_path / UNIT).read_text().split("[Service]")[1].split("[Install]")[0]
    lines = service.splitlines()
    assert "DynamicUser=yes" in lines
    assert not any(line.startswith(("User=", "Group=")) for line in lines)
    for setting in (
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
    ):
        assert setting in lines
    assert "--address 127.0.0.1" in _exec_start(tmp_path)


def test_private_data_reaches_the_exporter(ctx, exporter: FakeMachine, tmp_path):
    """The exporter drops what PrivateData hides (the per-user series among it) itself."""
    config = {
        "use-network-state": True,
        "metrics-per-user": True,
        "slurm-conf-parameters": "PrivateData=jobs,usage\n",
    }
    ctx.run(ctx.on.config_changed(), dataclasses.replace(network_leader(), config=config))

    assert _exec_start(tmp_path).endswith("--per-user --private-data jobs,usage")
