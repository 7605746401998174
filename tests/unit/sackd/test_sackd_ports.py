"""A login node opens SlurmdPort (6818): sackd listens there for the configuration slurmctld
pushes at each `scontrol reconfigure`. srun runs there too: when slurmctld publishes an
`SrunPortRange`, the unit opens it with Juju's hook tools. Without slurmctld it opens nothing.

The fake machine answers `open-port`, `close-port` and `opened-ports` as the lab does.
"""

import dataclasses
import json

import ops
import pytest
import test_sackd_login_node as login_node
from charm_testing import FakeMachine, already_installed
from ops import testing

pytestmark = pytest.mark.usefixtures("sackd_root")


def with_srun_range(relation: testing.Relation, raw: str) -> testing.Relation:
    """slurmctld's relation with `srun_port_range` as the raw databag text `raw`."""
    data = {**relation.remote_app_data, "srun_port_range": raw}
    return dataclasses.replace(relation, remote_app_data=data)


def test_a_login_node_in_the_cluster_opens_sackds_port(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = login_node.ready_state(["10.0.0.1"])

    ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.opened_ports == ["6818/tcp"]
    assert machine.ran("open-port") == [["open-port", "6818/tcp"]]


def test_it_opens_the_srun_port_range_and_follows_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = login_node.ready_state(["10.0.0.1"])
    ranged = with_srun_range(relation, '{"first": 60001, "last": 63000}')

    out = ctx.run(ctx.on.relation_changed(ranged), dataclasses.replace(state, relations={ranged}))
    assert machine.opened_ports == ["6818/tcp", "60001-63000/tcp"]
    assert out.unit_status == ops.ActiveStatus()

    moved = with_srun_range(relation, '{"first": 62000, "last": 64000}')
    ctx.run(ctx.on.relation_changed(moved), dataclasses.replace(state, relations={moved}))
    assert machine.opened_ports == ["6818/tcp", "62000-64000/tcp"]  # Closed, then opened.

    ctx.run(ctx.on.relation_changed(relation), state)
    assert machine.opened_ports == ["6818/tcp"]


@pytest.mark.parametrize(
    "raw",
    [
        '{"first": 63000, "last": 60001}',
        '{"first": 0, "last": 10}',
        '{"first": 60001, "last": 70000}',
        '{"first": "60001", "last": 63000}',
        '"60001-63000"',
    ],
)
def test_a_bad_range_is_named_and_opens_nothing_but_sackds_port(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, raw: str
):
    state, relation = login_node.ready_state(["10.0.0.1"])
    bad = with_srun_range(relation, raw)

    out = ctx.run(ctx.on.update_status(), dataclasses.replace(state, relations={bad}))

    assert machine.opened_ports == ["6818/tcp"]
    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert out.unit_status.message.startswith("slurmctld sent an invalid srun_port_range")


def test_a_range_holding_sackds_own_port_is_left_out(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = login_node.ready_state(["10.0.0.1"])
    clashing = with_srun_range(relation, '{"first": 6000, "last": 7000}')

    out = ctx.run(ctx.on.update_status(), dataclasses.replace(state, relations={clashing}))

    assert machine.opened_ports == ["6818/tcp"]
    assert out.unit_status == ops.ActiveStatus()


def test_a_range_with_one_end_opens_nothing_more(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = login_node.ready_state(["10.0.0.1"])
    half = with_srun_range(relation, json.dumps({"first": 60001}))

    out = ctx.run(ctx.on.relation_changed(half), dataclasses.replace(state, relations={half}))

    assert machine.opened_ports == ["6818/tcp"]
    assert out.unit_status == ops.ActiveStatus()


def test_a_port_juju_refuses_is_a_status_and_sackd_runs_anyway(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = login_node.ready_state(["10.0.0.1"])
    machine.fail("open-port", stderr="ERROR cannot open 6818/tcp: controller unreachable\n")

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == ops.BlockedStatus(
        "cannot open port 6818/tcp: ERROR cannot open 6818/tcp: controller unreachable"
    )
    assert "sackd" in machine.active
    machine.heal()
    out = ctx.run(ctx.on.update_status(), out)
    assert machine.opened_ports == ["6818/tcp"]
    assert out.unit_status == ops.ActiveStatus()


def test_a_login_node_without_slurmctld_closes_every_port(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = login_node.ready_state(["10.0.0.1"])
    ranged = with_srun_range(relation, '{"first": 60001, "last": 63000}')
    ctx.run(ctx.on.relation_changed(ranged), dataclasses.replace(state, relations={ranged}))
    alone = testing.State(stored_states={already_installed("SackdCharm")})

    ctx.run(ctx.on.update_status(), alone)

    assert machine.opened_ports == []
