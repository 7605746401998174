"""Scenarios: slurmctld's `config_digest` changing retries a failed sackd, and restarts none."""

import json

import ops
import pytest
from charm_testing import FakeMachine
from ops import testing
from test_sackd_login_node import joined, with_relation

FATAL = "sackd: fatal: Could not establish a configuration source"


def with_digest(relation: testing.Relation, digest: str) -> testing.Relation:
    data = {**relation.remote_app_data, "config_digest": json.dumps(digest)}
    return testing.Relation(
        "slurmctld", id=relation.id, remote_app_name="slurmctld", remote_app_data=data
    )


@pytest.mark.usefixtures("sackd_root")
def test_a_new_config_digest_restarts_a_sackd_that_is_down(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    machine.active.discard("sackd")
    machine.journals["sackd"] = [FATAL]

    out = ctx.run(
        ctx.on.relation_changed(with_digest(relation, "0123abcd00000002")),
        with_relation(state, with_digest(relation, "0123abcd00000002")),
    )

    assert machine.calls("restart") == ["sackd"]
    assert out.unit_status == ops.ActiveStatus()


@pytest.mark.usefixtures("sackd_root")
def test_a_new_config_digest_never_restarts_a_running_sackd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = joined(ctx, machine, ["10.0.0.1"])
    changed = with_digest(relation, "0123abcd00000002")

    out = ctx.run(ctx.on.relation_changed(changed), with_relation(state, changed))

    assert machine.service_calls == []
    assert out.unit_status == ops.ActiveStatus()
