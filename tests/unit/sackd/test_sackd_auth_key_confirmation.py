"""A login node confirms the auth key sackd runs with, for slurmctld's key rotation."""

import base64
import json
from pathlib import Path

import ops
from charm_testing import FakeMachine
from hpc_libs.interfaces.controller import auth_key_digest
from ops import testing
from test_sackd_login_node import (
    FATAL,
    KEY,
    joined,
    key_path,
    ready_state,
    with_new_revision,
)

KEY_SET = base64.b64encode(
    json.dumps({"keys": [{"kid": "slurm-1", "k": KEY, "use": "default"}]}).encode()
).decode()


def confirmed(state: testing.State, relation: testing.Relation) -> str | None:
    data = state.get_relation(relation.id).local_unit_data
    return json.loads(data["auth_key_digest"]) if "auth_key_digest" in data else None


def test_a_running_sackd_confirms_its_key(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])

    assert confirmed(state, relation) == auth_key_digest(KEY)


def test_a_key_set_is_written_restarts_sackd_and_is_confirmed(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    state, rotated = with_new_revision(state, KEY_SET)

    out = ctx.run(ctx.on.secret_changed(rotated), state)

    assert (sackd_root / "etc/slurm/slurm.jwks").read_bytes() == base64.b64decode(KEY_SET)
    assert key_path(sackd_root).read_bytes() == base64.b64decode(KEY_SET)
    assert machine.calls("restart") == ["sackd"]
    assert confirmed(out, relation) == auth_key_digest(KEY_SET)


def published_version(state: testing.State, relation: testing.Relation) -> str | None:
    data = state.get_relation(relation.id).local_unit_data
    return json.loads(data["version"]) if "version" in data else None


def test_a_running_sackd_publishes_its_slurm_release_for_slurmctld(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    """slurmctld writes keys an older sackd refuses only once every login unit says so."""
    state, relation = joined(ctx, machine, ["10.0.0.1"])

    assert published_version(state, relation) == "24.11.5"  # The installed package's release.
    assert confirmed(state, relation) == auth_key_digest(KEY)


def test_a_sackd_that_failed_to_restart_confirms_no_key_and_publishes_no_release(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, sackd_root: Path
):
    state, relation = ready_state(["10.0.0.1"])
    machine.service_fails("sackd", FATAL)

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert confirmed(out, relation) is None
    assert published_version(out, relation) is None
