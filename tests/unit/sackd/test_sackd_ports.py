"""A login node opens SlurmdPort (6818): sackd listens there for the configuration slurmctld
pushes at each `scontrol reconfigure`. Without slurmctld it opens nothing."""

import ops
import pytest
import test_sackd_login_node as login_node
from charm_testing import FakeMachine, already_installed
from ops import testing

sackd_root = login_node.sackd_root  # The fixture: the charm's files under tmp_path.
pytestmark = pytest.mark.usefixtures("sackd_root")


def test_a_login_node_in_the_cluster_opens_sackds_port(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, relation = login_node.ready_state(["10.0.0.1"])

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.opened_ports == frozenset({testing.TCPPort(6818)})


def test_a_login_node_without_slurmctld_closes_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine
):
    state, _ = login_node.joined(ctx, machine, ["10.0.0.1"])
    alone = testing.State(
        stored_states={already_installed("SackdCharm")},
        opened_ports=state.opened_ports,
    )

    out = ctx.run(ctx.on.update_status(), alone)

    assert state.opened_ports == frozenset({testing.TCPPort(6818)})
    assert out.opened_ports == frozenset()
