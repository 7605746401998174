"""slurmd opens its port (SlurmdPort 6818) so clouds let slurmctld and other nodes reach it,
and the `SrunPortRange` slurmctld publishes: srun runs inside batch jobs on compute nodes.

The fake machine answers Juju's port hook tools as the lab does.
"""

import dataclasses
import json
from typing import Any

import ops
import pytest
from charm_testing import FakeMachine
from hpc_libs.machine import host
from ops import testing
from test_charm_slurmd import again, auth_secret, controller_relation, installed


def ranged(relation: testing.Relation, first: int, last: int) -> testing.Relation:
    data = {
        **relation.remote_app_data,
        "srun_port_range": json.dumps({"first": first, "last": last}),
    }
    return dataclasses.replace(relation, remote_app_data=data)


def test_an_enlisted_node_opens_slurmds_port(ctx, machine: FakeMachine):
    secret = auth_secret()
    relation = controller_relation(secret)

    ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert machine.opened_ports == ["6818/tcp"]


def test_the_port_stays_open_across_events(ctx, machine: FakeMachine, enlisted):
    ctx.run(ctx.on.update_status(), again(enlisted))

    assert machine.opened_ports == ["6818/tcp"]
    assert machine.ran("open-port") == []  # Already open: nothing to ask Juju.


def test_the_srun_port_range_opens_and_closes_with_slurmctlds_data(ctx, machine: FakeMachine):
    secret = auth_secret()
    relation = controller_relation(secret)
    with_range = ranged(relation, 60001, 63000)

    out = ctx.run(ctx.on.relation_changed(with_range), installed(with_range, secrets=[secret]))
    assert machine.opened_ports == ["6818/tcp", "60001-63000/tcp"]
    assert out.unit_status == ops.ActiveStatus()

    ctx.run(ctx.on.relation_changed(relation), again(out, relations=[relation]))
    assert machine.opened_ports == ["6818/tcp"]


def test_a_port_juju_refuses_is_a_status_and_the_node_still_enlists(ctx, machine: FakeMachine):
    secret = auth_secret()
    relation = ranged(controller_relation(secret), 60001, 63000)
    machine.fail("open-port", stderr="ERROR cannot open 60001-63000/tcp: quota\n")

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert out.unit_status == ops.BlockedStatus(
        "cannot open port 6818/tcp: ERROR cannot open 60001-63000/tcp: quota"
    )
    assert "slurmd" in machine.active
    machine.heal()
    out = ctx.run(ctx.on.update_status(), again(out))
    assert machine.opened_ports == ["6818/tcp", "60001-63000/tcp"]
    assert out.unit_status == ops.ActiveStatus()


def test_a_new_node_starts_slurmd_before_asking_juju_for_its_ports(
    ctx, machine: FakeMachine, monkeypatch: pytest.MonkeyPatch
):
    """The port tools run after slurmd's start, off a new node's way to registering."""
    ran: list[list[str]] = []
    run = host.run

    def recorded(command: list[str], *args: Any, **kwargs: Any) -> Any:
        ran.append(command)
        return run(command, *args, **kwargs)

    monkeypatch.setattr(host, "run", recorded)
    secret = auth_secret()
    relation = controller_relation(secret)

    ctx.run(ctx.on.relation_created(relation), installed(relation, secrets=[secret]))

    started = ran.index(["systemctl", "start", "slurmd"])
    asked = ran.index(["opened-ports", "--format=json"])
    assert started < asked
    assert machine.opened_ports == ["6818/tcp"]


def test_a_slurmd_that_cannot_start_still_has_its_port_opened(ctx, machine: FakeMachine):
    secret = auth_secret()
    relation = controller_relation(secret)
    machine.service_fails("slurmd", "slurmd: fatal: cannot bind 6818")

    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))

    assert "slurmd" not in machine.active
    assert out.unit_status.name == "blocked"
    assert machine.opened_ports == ["6818/tcp"]
