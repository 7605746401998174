"""Scenarios for the sackd (login node) interface, with tiny charms observing its events."""

import json
from typing import ClassVar

import ops
import pytest
from hpc_libs.charm.ports import PortRange
from hpc_libs.interfaces.controller import (
    AUTH_KEY_LABEL,
    ControllerData,
    ControllerEntry,
    PortRangeEntry,
    get_or_create_auth_key_secret,
)
from hpc_libs.interfaces.sackd import SackdProvider, SackdRequirer
from hpc_libs_fakes import controller_meta, daemon_meta, granted_relation
from ops import testing

AUTH_KEY = "bG9naW4tbm9kZS1rZXk="


class LoginCharm(ops.CharmBase):
    """Reads the key and the controllers when slurmctld is ready."""

    seen: ClassVar[list[tuple[str, list[str]]]] = []

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmctld = SackdProvider(self)
        framework.observe(self.on["slurmctld"].relation_changed, self._on_changed)

    def _on_changed(self, _: ops.EventBase) -> None:
        data = self.slurmctld.controller_data
        if data is None or not self.slurmctld.is_ready():
            return
        LoginCharm.seen.append((self.slurmctld.auth_key(), data.conf_servers()))


class ControllerCharm(ops.CharmBase):
    """Shares the key and the controllers with every login node application that joins."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.login_nodes = SackdRequirer(self)
        framework.observe(self.on["login-node"].relation_joined, self._on_joined)

    def _on_joined(self, event: ops.RelationJoinedEvent) -> None:
        secret = get_or_create_auth_key_secret(self, lambda: AUTH_KEY)
        self.login_nodes.publish_controller_data(
            event.relation, secret, [ControllerEntry(hostname="ctl-0", address="10.0.0.1")]
        )


LOGIN_META = daemon_meta("sackd", "sackd")
CONTROLLER_META = controller_meta("login-node", "sackd")


def slurmctld_relation(secret: testing.Secret, **raw_fields: str) -> testing.Relation:
    """slurmctld's side, ready (key id, one controller), plus `raw_fields` as written."""
    bag = {
        "auth_key_id": json.dumps(secret.id),
        "controllers": json.dumps([{"hostname": "ctl-0", "address": "10.0.0.1"}]),
        **raw_fields,
    }
    return testing.Relation("slurmctld", remote_app_name="slurmctld", remote_app_data=bag)


@pytest.fixture
def login_ctx() -> testing.Context[LoginCharm]:
    LoginCharm.seen = []
    return testing.Context(LoginCharm, meta=LOGIN_META)


def test_login_node_reads_the_granted_key_and_the_controllers(
    login_ctx: testing.Context[LoginCharm],
) -> None:
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})
    relation = granted_relation(secret)

    login_ctx.run(
        login_ctx.on.relation_changed(relation),
        testing.State(relations={relation}, secrets={secret}),
    )

    assert LoginCharm.seen == [(AUTH_KEY, ["10.0.0.1:6817", "10.0.0.2:7817"])]


def test_login_node_without_controller_data_is_not_ready(
    login_ctx: testing.Context[LoginCharm],
) -> None:
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")

    login_ctx.run(login_ctx.on.relation_changed(relation), testing.State(relations={relation}))

    assert LoginCharm.seen == []


def test_controller_grants_the_key_to_the_login_node_and_publishes_only_its_id() -> None:
    ctx = testing.Context(ControllerCharm, meta=CONTROLLER_META)
    relation = testing.Relation("login-node", remote_app_name="login")

    out = ctx.run(
        ctx.on.relation_joined(relation), testing.State(leader=True, relations={relation})
    )

    secret = out.get_secret(label=AUTH_KEY_LABEL)
    assert secret.remote_grants == {relation.id: {"login"}}
    data = out.get_relation(relation.id).local_app_data
    assert json.loads(data["auth_key_id"]) == secret.id
    assert json.loads(data["controllers"]) == [
        {"hostname": "ctl-0", "address": "10.0.0.1", "port": None}
    ]
    assert AUTH_KEY not in json.dumps(dict(data))


def test_non_leader_controller_publishes_nothing() -> None:
    ctx = testing.Context(ControllerCharm, meta=CONTROLLER_META)
    secret = testing.Secret(tracked_content={"key": AUTH_KEY}, label=AUTH_KEY_LABEL, owner="app")
    relation = testing.Relation("login-node", remote_app_name="login")

    out = ctx.run(
        ctx.on.relation_joined(relation),
        testing.State(leader=False, relations={relation}, secrets={secret}),
    )

    assert dict(out.get_relation(relation.id).local_app_data) == {}


@pytest.mark.parametrize(
    ("digest", "ready"),
    [
        ("9f86d081884c7d65", True),
        ("9F86D081884C7D65", False),
        ("9f86d081\nclustername", False),
        ("../../clustername", False),
        (16, False),
    ],
    ids=["hex", "upper", "newline", "path", "int"],
)
def test_login_node_reads_the_config_digest_and_refuses_a_hostile_one(
    login_ctx: testing.Context[LoginCharm], digest: object, ready: bool
) -> None:
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})
    relation = slurmctld_relation(secret, config_digest=json.dumps(digest))

    login_ctx.run(
        login_ctx.on.relation_changed(relation),
        testing.State(relations={relation}, secrets={secret}),
    )

    assert LoginCharm.seen == ([(AUTH_KEY, ["10.0.0.1:6817"])] if ready else [])


class RangeControllerCharm(ControllerCharm):
    """Publishes `SrunPortRange` 60001-63000 with the controllers."""

    def _on_joined(self, event: ops.RelationJoinedEvent) -> None:
        secret = get_or_create_auth_key_secret(self, lambda: AUTH_KEY)
        self.login_nodes.publish_controller_data(
            event.relation,
            secret,
            [ControllerEntry(hostname="ctl-0", address="10.0.0.1")],
            srun_port_range=PortRangeEntry(first=60001, last=63000),
        )


def test_controller_publishes_the_srun_port_range_as_one_object() -> None:
    ctx = testing.Context(RangeControllerCharm, meta=CONTROLLER_META)
    relation = testing.Relation("login-node", remote_app_name="login")

    out = ctx.run(
        ctx.on.relation_joined(relation), testing.State(leader=True, relations={relation})
    )

    data = out.get_relation(relation.id).local_app_data
    assert json.loads(data["srun_port_range"]) == {"first": 60001, "last": 63000}


@pytest.mark.parametrize(
    ("raw", "ports"),
    [
        ('{"first": 60001, "last": 63000}', PortRange(60001, 63000)),
        ('{"first": 60001, "last": 60001}', PortRange(60001, 60001)),
        ('{"first": 60001}', None),  # An end is missing: nothing to open.
        ("null", None),
        ('{"first": 60001, "last": 63000, "protocol": "udp"}', PortRange(60001, 63000)),
    ],
)
def test_login_node_reads_the_srun_port_range(raw: str, ports: PortRange | None) -> None:
    data = ControllerData.model_validate_json(f'{{"srun_port_range": {raw}}}')

    assert data.srun_ports() == ports


@pytest.mark.parametrize(
    "raw",
    [
        '{"first": 63000, "last": 60001}',
        '{"first": 0, "last": 10}',
        '{"first": 1, "last": 65536}',
        '{"first": "60001", "last": 63000}',
        '{"first": 60001.5, "last": 63000}',
        '"60001-63000"',
        "[60001, 63000]",
    ],
)
def test_login_node_refuses_a_hostile_srun_port_range(
    login_ctx: testing.Context[LoginCharm], raw: str
) -> None:
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})
    relation = slurmctld_relation(secret, srun_port_range=raw)

    login_ctx.run(
        login_ctx.on.relation_changed(relation),
        testing.State(relations={relation}, secrets={secret}),
    )

    assert LoginCharm.seen == []
