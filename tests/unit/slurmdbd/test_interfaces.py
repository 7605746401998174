"""The two contracts of slurmdbd, read from raw databag vectors.

`mysql_client` v0 (what the mysql and mysql-router charms write) parsed by `MysqlRequirer`,
and the `slurmdbd` contract as slurmctld's side (`SlurmdbdRequirer`) reads it.
"""

import json

import ops
import pytest
from hpc_libs.interfaces.mysql_client import (
    MysqlClientError,
    MysqlEndpoint,
    MysqlRequirer,
    parse_endpoints,
)
from hpc_libs.interfaces.slurmdbd import SlurmdbdRequirer
from ops import testing

PASSWORD = "Zq3xV9pL2mN8rT5wY1cB6dF4hJ7kQ0sA"


class Client(ops.CharmBase):
    """A charm holding one requirer of each contract, recording what it reads."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.database = MysqlRequirer(self, "database", "slurm_acct_db")
        self.slurmdbd = SlurmdbdRequirer(self, "slurmdbd")
        self.ready: list[str] = []
        framework.observe(self.on["slurmdbd"].relation_changed, self._on_changed)
        framework.observe(self.slurmdbd.on.slurmdbd_disconnected, self._on_gone)

    def _on_changed(self, event: ops.RelationChangedEvent) -> None:
        data = self.slurmdbd.slurmdbd_data(event.relation)
        if data is not None and data.reachable():
            self.ready.append("ready")

    def _on_gone(self, _: ops.EventBase) -> None:
        self.ready.append("gone")


META = {
    "name": "client",
    "requires": {
        "database": {"interface": "mysql_client", "limit": 1},
        "slurmdbd": {"interface": "slurmdbd", "limit": 1},
    },
}


@pytest.fixture
def ctx() -> testing.Context[Client]:
    return testing.Context(Client, meta=META)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.5:3306", [MysqlEndpoint("10.0.0.5", 3306)]),
        (
            "10.0.0.6:3306,10.0.0.5:3306",
            [MysqlEndpoint("10.0.0.6", 3306), MysqlEndpoint("10.0.0.5", 3306)],
        ),
        ("db-0.example:3307", [MysqlEndpoint("db-0.example", 3307)]),
        ("[fd00::5]:3306", [MysqlEndpoint("fd00::5", 3306)]),
        ("10.0.0.5", [MysqlEndpoint("10.0.0.5", 3306)]),
    ],
)
def test_endpoints_parse(text: str, expected: list[MysqlEndpoint]):
    assert list(parse_endpoints(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "file:///var/snap/charmed-mysql/common/var/run/mysqlrouter/mysql.sock",
        "10.0.0.5:0",
        "10.0.0.5:3306 x",
        "10.0.0.5:33a",
        "-oProxyCommand=x:3306",
        "a,,b",
        "",
    ],
)
def test_bad_endpoints_are_refused(text: str):
    with pytest.raises(MysqlClientError):
        parse_endpoints(text)


def run(ctx: testing.Context[Client], relation: testing.Relation, *secrets: testing.Secret):
    """Fire relation-changed with `relation` and return what the charm reads."""
    state = testing.State(leader=True, relations={relation}, secrets=set(secrets))
    with ctx(ctx.on.relation_changed(relation), state) as manager:
        manager.run()
        return manager.charm.database.connection(), manager.charm.database.connection_problem()


def test_first_answer_with_secret_user(ctx: testing.Context[Client]):
    secret = testing.Secret({"username": "relation-7", "password": PASSWORD})
    relation = testing.Relation(
        "database",
        remote_app_data={
            "database": "slurm_acct_db",
            "endpoints": "10.0.0.5:3306",
            "read-only-endpoints": "10.0.0.6:3306",
            "version": "8.0.39",
            "secret-user": secret.id,
        },
    )

    connection, problem = run(ctx, relation, secret)

    assert problem is None
    assert connection is not None
    assert (connection.primary, connection.username, connection.password) == (
        MysqlEndpoint("10.0.0.5", 3306),
        "relation-7",
        PASSWORD,
    )
    assert connection.read_only_endpoints == (MysqlEndpoint("10.0.0.6", 3306),)
    assert PASSWORD not in repr(connection)


def test_switchover_changes_the_primary(ctx: testing.Context[Client]):
    data = {"database": "slurm_acct_db", "username": "u", "password": PASSWORD}
    before, _ = run(
        ctx,
        testing.Relation(
            "database", remote_app_data={**data, "endpoints": "10.0.0.5:3306,10.0.0.6:3306"}
        ),
    )
    after, _ = run(
        ctx,
        testing.Relation(
            "database", remote_app_data={**data, "endpoints": "10.0.0.6:3306,10.0.0.5:3306"}
        ),
    )

    assert before is not None and after is not None
    assert before.primary.host == "10.0.0.5"
    assert after.primary.host == "10.0.0.6"


def test_no_credentials_yet_is_not_a_problem(ctx: testing.Context[Client]):
    relation = testing.Relation("database", remote_app_data={"endpoints": "10.0.0.5:3306"})

    assert run(ctx, relation) == (None, None)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"endpoints": "file:///run/mysqlrouter/mysql.sock"}, "unix socket"),
        ({"endpoints": "10.0.0.5:3306", "database": "a b"}, "invalid database name"),
        ({"endpoints": "10.0.0.5:3306", "username": "a b"}, "invalid database user name"),
        ({"endpoints": "10.0.0.5:3306", "password": 'x"y'}, "password holds"),
        ({"endpoints": "10.0.0.5:3306", "secret-user": "secret:x y"}, "invalid secret-user"),
    ],
)
def test_garbage_is_a_problem_without_the_password(
    ctx: testing.Context[Client], data: dict[str, str], words: str
):
    fields = {"database": "slurm_acct_db", "username": "u", "password": PASSWORD} | data

    connection, problem = run(ctx, testing.Relation("database", remote_app_data=fields))

    assert connection is None
    assert problem is not None and words in problem
    assert fields["password"] not in problem


def test_slurmctld_reads_slurmdbd_entries_and_hears_ready(ctx: testing.Context[Client]):
    entries = [{"hostname": "dbd-0", "address": "10.0.0.9", "port": 6819}, {"hostname": "dbd-1"}]
    relation = testing.Relation("slurmdbd", remote_app_data={"dbds": json.dumps(entries)})

    with ctx(ctx.on.relation_changed(relation), testing.State(relations={relation})) as manager:
        manager.run()
        data = manager.charm.slurmdbd.slurmdbd_data(manager.charm.model.relations["slurmdbd"][0])
        assert manager.charm.ready == ["ready"]
    assert data is not None
    assert [(d.host, d.port_or_default) for d in data.reachable()] == [
        ("10.0.0.9", 6819),
        ("dbd-1", 6819),
    ]


@pytest.mark.parametrize(
    "entry",
    [{"address": "10.0.0.9 AccountingStorageUser=x"}, {"port": 70000}, {"hostname": "a_b"}],
)
def test_slurmctld_refuses_bad_slurmdbd_entries(
    ctx: testing.Context[Client], entry: dict[str, object]
):
    relation = testing.Relation("slurmdbd", remote_app_data={"dbds": json.dumps([entry])})

    with ctx(ctx.on.relation_changed(relation), testing.State(relations={relation})) as manager:
        manager.run()
        charm = manager.charm
        rel = charm.model.relations["slurmdbd"][0]
        assert charm.slurmdbd.slurmdbd_data(rel) is None
        assert charm.slurmdbd.slurmdbd_data_problem(rel) is not None
        assert charm.ready == []


def test_slurmctld_hears_slurmdbd_leave(ctx: testing.Context[Client]):
    relation = testing.Relation("slurmdbd")

    with ctx(ctx.on.relation_broken(relation), testing.State(relations={relation})) as manager:
        manager.run()
        assert manager.charm.ready == ["gone"]
