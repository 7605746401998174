"""slurmd opens its port (SlurmdPort 6818) so clouds let slurmctld and other nodes reach it."""

from ops import testing
from test_charm_slurmd import again, auth_secret, controller_relation, installed


def test_an_enlisted_node_opens_slurmds_port(ctx, machine):
    secret = auth_secret()
    relation = controller_relation(secret)

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert out.opened_ports == frozenset({testing.TCPPort(6818)})


def test_the_port_stays_open_across_events(ctx, machine, enlisted):
    out = ctx.run(ctx.on.update_status(), again(enlisted))

    assert out.opened_ports == frozenset({testing.TCPPort(6818)})
