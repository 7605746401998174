"""A login node joins the cluster: slurmctld shares the key and controllers, sackd runs."""

import base64
import json

import ops
import pytest
from charm_testing import FakeMachine, already_installed
from hpc_libs.slurm.sackd import SackdManager
from ops import testing

KEY = base64.b64encode(b"k" * 1024).decode()


@pytest.fixture
def sackd_root(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """Point the charm's SackdManager at a temporary root."""
    original = SackdManager.__init__
    monkeypatch.setattr(SackdManager, "__init__", lambda self, root=tmp_path: original(self, root))
    return tmp_path


def slurmctld(secret: testing.Secret | None, controllers: list[str]) -> testing.Relation:
    entries = [dict(zip(("address", "port"), c.split(":"), strict=False)) for c in controllers]
    data = {"controllers": json.dumps([{**e, "port": int(e.get("port", 6817))} for e in entries])}
    if secret is not None:
        data["auth_key_id"] = json.dumps(secret.id)
    return testing.Relation("slurmctld", remote_app_name="slurmctld", remote_app_data=data)


def ready_state(controllers: list[str]) -> tuple[testing.State, testing.Relation]:
    secret = testing.Secret(tracked_content={"key": KEY})
    relation = slurmctld(secret, controllers)
    state = testing.State(
        config={"slurm-package-source": "archive"},
        relations={relation},
        secrets={secret},
        stored_states={already_installed("SackdCharm")},
    )
    return state, relation


def test_slurmctld_ready_writes_key_and_controllers_and_starts_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root
):
    state, relation = ready_state(["10.0.0.1", "10.0.0.2"])

    out = ctx.run(ctx.on.relation_changed(relation), state)

    key = sackd_root / "etc/slurm/slurm.key"
    assert key.read_bytes() == b"k" * 1024
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    options = (sackd_root / "etc/default/sackd").read_text()
    assert "--conf-server 10.0.0.1:6817,10.0.0.2:6817" in options
    assert machine.calls("restart") == ["sackd"]
    assert out.unit_status == ops.ActiveStatus()
    assert KEY not in json.dumps(dict(out.get_relation(relation.id).local_unit_data))


def test_unchanged_data_does_not_restart_a_running_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root
):
    state, relation = ready_state(["10.0.0.1"])
    ctx.run(ctx.on.relation_changed(relation), state)
    machine.service_calls.clear()

    ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.calls("restart") == []


def test_a_new_controller_list_restarts_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root
):
    state, relation = ready_state(["10.0.0.1"])
    ctx.run(ctx.on.relation_changed(relation), state)
    machine.service_calls.clear()
    state, relation = ready_state(["10.0.0.1", "10.0.0.2"])

    ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.calls("restart") == ["sackd"]


def test_controllers_without_a_readable_key_wait_and_start_nothing(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root
):
    relation = slurmctld(None, ["10.0.0.1"])
    state = testing.State(relations={relation}, stored_states={already_installed("SackdCharm")})

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.service_calls == []
    assert not (sackd_root / "etc/slurm/slurm.key").exists()
    assert out.unit_status == ops.WaitingStatus("waiting for slurmctld")


def test_sackd_that_does_not_run_blocks(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root
):
    state, relation = ready_state(["10.0.0.1"])
    ctx.run(ctx.on.relation_changed(relation), state)
    machine.active.clear()

    out = ctx.run(ctx.on.update_status(), state)

    assert out.unit_status == ops.BlockedStatus("sackd is not running; see its journal")


def test_leaving_the_cluster_stops_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root
):
    state, relation = ready_state(["10.0.0.1"])
    ctx.run(ctx.on.relation_changed(relation), state)

    ctx.run(ctx.on.relation_broken(relation), state)

    assert machine.calls("stop") == ["sackd"]
    assert machine.calls("disable") == ["sackd"]
