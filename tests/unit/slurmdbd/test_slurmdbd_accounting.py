"""slurmdbd stores accounting in the database the mysql_client (v0) integration grants.

Each scenario starts from an installed unit, fires one event (or a short sequence, each run
on the state the previous one left) and checks the machine, the databags and the status. The
provider's databag is given raw, as the mysql and mysql-router charms write it (v0 vectors).
"""

import base64
import dataclasses
import json
import logging
from pathlib import Path

import ops
import pytest
from charm_testing import FakeMachine, already_installed
from ops import testing

KEY = base64.b64encode(b"k" * 1024).decode()
JWT_KEY = base64.b64encode(b"j" * 32).decode()
PASSWORD = "Zq3xV9pL2mN8rT5wY1cB6dF4hJ7kQ0sA"  # as the mysql charm generates: 32 alphanumerics
NEW_PASSWORD = "Hn4Rt8Wq2Lp6Xz1Vb9Mk3Js7Df5Gc0Ya"
REFUSED = "error: mysql_real_connect failed: 1045 Access denied for user 'relation-7'@'10.0.0.9'"


def conf_path(root: Path) -> Path:
    return root / "etc/slurm/slurmdbd.conf"


def key_path(root: Path) -> Path:
    return root / "etc/slurm/slurm.key"


def jwt_path(root: Path) -> Path:
    return root / "etc/slurm/jwt_hs256.key"


def conf(root: Path) -> dict[str, str]:
    """slurmdbd.conf as a dict of lower-case keys."""
    lines = conf_path(root).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line)


def auth_secret() -> testing.Secret:
    return testing.Secret({"key": KEY})


def jwt_secret(key: str = JWT_KEY) -> testing.Secret:
    return testing.Secret({"key": key})


def slurmctld(
    secret: testing.Secret | None, jwt: testing.Secret | None = None, **raw: str
) -> testing.Relation:
    """slurmctld's app databag as its leader writes it (`raw` adds or overrides keys)."""
    data = {"controllers": json.dumps([{"hostname": "ctl-0", "address": "10.0.0.1"}])}
    if secret is not None:
        data["auth_key_id"] = json.dumps(secret.id)
    if jwt is not None:
        data["jwt_key_id"] = json.dumps(jwt.id)
    data.update(raw)
    return testing.Relation("slurmctld", remote_app_name="slurmctld", remote_app_data=data)


def user_secret(password: str = PASSWORD) -> testing.Secret:
    return testing.Secret({"username": "relation-7", "password": password})


def mysql(secret: testing.Secret | None, **fields: str) -> testing.Relation:
    """The mysql charm's v0 answer: raw strings, credentials in `secret-user`."""
    data = {
        "database": "slurm_acct_db",
        "endpoints": "10.0.0.5:3306",
        "read-only-endpoints": "10.0.0.6:3306",
        "version": "8.0.39-0ubuntu0.22.04.1",
    }
    if secret is not None:
        data["secret-user"] = secret.id
    data.update(fields)
    return testing.Relation("database", remote_app_name="mysql", remote_app_data=data)


def ready_state(
    *, with_secret: bool = True, fields: dict[str, str] | None = None, **more: str
) -> tuple[testing.State, testing.Relation, testing.Secret]:
    """An installed leader integrated with slurmctld and mysql (whose data `fields` change)."""
    key, jwt, user = auth_secret(), jwt_secret(), user_secret()
    database = mysql(user if with_secret else None, **(fields or {}), **more)
    state = testing.State(
        leader=True,
        relations={database, slurmctld(key, jwt)},
        secrets={key, jwt, user},
        stored_states={already_installed("SlurmdbdCharm")},
    )
    return state, database, user


# The request (requirer side of v0).


def test_the_leader_asks_for_the_database_with_v0_fields_only(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    database = testing.Relation("database", remote_app_name="mysql")
    state = testing.State(
        leader=True, relations={database}, stored_states={already_installed("SlurmdbdCharm")}
    )

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert out.get_relation(database.id).local_app_data == {
        "database": "slurm_acct_db",
        "requested-secrets": '["username", "password", "tls", "tls-ca", "uris"]',
    }
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_a_non_leader_writes_no_request(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    database = testing.Relation("database", remote_app_name="mysql")
    state = testing.State(relations={database}, stored_states={already_installed("SlurmdbdCharm")})

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert out.get_relation(database.id).local_app_data == {}


# First answer, with secrets and without.


def test_the_first_answer_writes_slurmdbd_conf_and_key_and_starts_slurmdbd(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    dbd_root: Path,
    owners: dict[str, str],
):
    state, database, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(database), state)

    written = conf(dbd_root)
    assert written["storagetype"] == "accounting_storage/mysql"
    assert (written["storagehost"], written["storageport"]) == ("10.0.0.5", "3306")
    assert (written["storageuser"], written["storagepass"]) == ("relation-7", PASSWORD)
    assert written["storageloc"] == "slurm_acct_db"
    assert (written["dbdport"], written["slurmuser"], written["authtype"]) == (
        "6819",
        "slurm",
        "auth/slurm",
    )
    assert written["authalttypes"] == "auth/jwt"
    assert written["authaltparameters"] == f"jwt_key={jwt_path(Path('/'))}"
    for path in (conf_path(dbd_root), key_path(dbd_root), jwt_path(dbd_root)):
        assert path.stat().st_mode & 0o777 == 0o600
    assert owners["slurmdbd.conf"] == owners["slurm.key"] == owners["jwt_hs256.key"] == "slurm"
    assert key_path(dbd_root).read_bytes() == b"k" * 1024
    assert jwt_path(dbd_root).read_bytes() == b"j" * 32
    assert machine.calls("restart") == ["slurmdbd"]
    assert machine.opened_ports == ["6819/tcp"]
    assert out.unit_status == ops.ActiveStatus("accounting in slurm_acct_db on 10.0.0.5")


def test_slurmctld_learns_where_slurmdbd_listens_once_it_runs(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(database), state)

    relation = next(r for r in out.relations if r.endpoint == "slurmctld")
    (entry,) = json.loads(relation.local_app_data["dbds"])
    assert entry["port"] == 6819
    assert entry["address"]
    assert entry["hostname"]


def test_a_provider_without_secrets_gives_plain_credentials(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state(with_secret=False, username="relation-7", password=PASSWORD)

    ctx.run(ctx.on.relation_changed(database), state)

    assert conf(dbd_root)["storagepass"] == PASSWORD
    assert machine.calls("restart") == ["slurmdbd"]


def test_unchanged_data_does_not_restart_a_running_slurmdbd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)

    ctx.run(ctx.on.update_status(), out)

    assert machine.calls("restart") == ["slurmdbd"]


# Later changes: a primary switchover, a new password.


def test_an_endpoint_change_rewrites_the_conf_and_restarts_slurmdbd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)
    switched = dataclasses.replace(
        out.get_relation(database.id),
        remote_app_data={**database.remote_app_data, "endpoints": "10.0.0.6:3306,10.0.0.5:3306"},
    )

    out = ctx.run(
        ctx.on.relation_changed(switched),
        dataclasses.replace(
            out, relations={switched, *[r for r in out.relations if r.id != database.id]}
        ),
    )

    assert conf(dbd_root)["storagehost"] == "10.0.0.6"
    assert machine.calls("restart") == ["slurmdbd", "slurmdbd"]
    assert out.unit_status == ops.ActiveStatus("accounting in slurm_acct_db on 10.0.0.6")


def test_a_new_password_revision_is_picked_up_without_operator_action(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, user = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)
    rotated = dataclasses.replace(
        user, latest_content={**user.tracked_content, "password": NEW_PASSWORD}
    )
    out = dataclasses.replace(out, secrets={rotated, *[s for s in out.secrets if s.id != user.id]})

    ctx.run(ctx.on.secret_changed(rotated), out)

    assert conf(dbd_root)["storagepass"] == NEW_PASSWORD
    assert machine.calls("restart") == ["slurmdbd", "slurmdbd"]


# The JWT key: slurmdbd checks the REST API's tokens with slurmctld's key.


def test_a_new_jwt_key_revision_restarts_slurmdbd_with_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)
    (jwt,) = [s for s in out.secrets if s.tracked_content == {"key": JWT_KEY}]
    new_key = base64.b64encode(b"n" * 32).decode()
    rotated = dataclasses.replace(jwt, latest_content={"key": new_key})
    out = dataclasses.replace(out, secrets={rotated, *[s for s in out.secrets if s.id != jwt.id]})

    out = ctx.run(ctx.on.secret_changed(rotated), out)

    assert jwt_path(dbd_root).read_bytes() == b"n" * 32
    assert machine.calls("restart") == ["slurmdbd", "slurmdbd"]
    assert isinstance(out.unit_status, ops.ActiveStatus)


def test_slurmctld_without_a_jwt_key_waits_and_starts_nothing(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    key, user = auth_secret(), user_secret()
    database = mysql(user)
    state = testing.State(
        leader=True,
        relations={database, slurmctld(key)},
        secrets={key, user},
        stored_states={already_installed("SlurmdbdCharm")},
    )

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert out.unit_status == ops.WaitingStatus(
        "waiting for slurmctld's JWT key: slurmctld has not shared the JWT key yet"
    )
    assert machine.calls("restart") == []
    assert not conf_path(dbd_root).exists()


@pytest.mark.parametrize(
    ("jwt_key_id", "words"),
    [('"secret:x\\nAuthAltTypes=none"', "invalid jwt_key_id"), ("secret:x", "unreadable")],
)
def test_a_bad_jwt_key_id_waits_naming_the_key(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    dbd_root: Path,
    jwt_key_id: str,
    words: str,
):
    key, user = auth_secret(), user_secret()
    database = mysql(user)
    state = testing.State(
        leader=True,
        relations={database, slurmctld(key, jwt_key_id=jwt_key_id)},
        secrets={key, user},
        stored_states={already_installed("SlurmdbdCharm")},
    )

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert out.unit_status.message.startswith("slurmctld sent")
    assert words in out.unit_status.message
    assert machine.calls("restart") == []


def test_a_jwt_key_that_is_not_base64_waits(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    key, jwt, user = auth_secret(), jwt_secret("not base64!"), user_secret()
    database = mysql(user)
    state = testing.State(
        leader=True,
        relations={database, slurmctld(key, jwt)},
        secrets={key, jwt, user},
        stored_states={already_installed("SlurmdbdCharm")},
    )

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert out.unit_status == ops.WaitingStatus(
        "waiting for slurmctld's JWT key: the JWT key secret does not hold base64 text"
    )
    assert not jwt_path(dbd_root).exists()
    assert machine.calls("restart") == []


# Bad input.


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"endpoints": "10.0.0.5:3306 StorageUser=root"}, "invalid endpoint"),
        ({"endpoints": "10.0.0.5:99999"}, "invalid endpoint"),
        ({"endpoints": "db\nhost:3306"}, "invalid endpoint"),
        ({"database": "slurm acct"}, "invalid database name"),
        ({"database": "x;DROP"}, "invalid database name"),
    ],
)
def test_garbage_from_the_provider_blocks_and_writes_nothing(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    dbd_root: Path,
    fields: dict[str, str],
    problem: str,
):
    state, database, _ = ready_state(fields=fields)

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert not conf_path(dbd_root).exists()
    assert machine.calls("restart") == []
    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert out.unit_status.message.startswith(f"database: {problem}")


@pytest.mark.parametrize(
    "credentials",
    [
        {"username": "root --skip", "password": PASSWORD},
        {"username": "relation-7", "password": "pass word"},
        {"username": "relation-7", "password": "abc#def"},
        {"username": "relation-7", "password": "a=b"},
    ],
)
def test_bad_plain_credentials_block_without_showing_the_password(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    dbd_root: Path,
    credentials: dict[str, str],
):
    state, database, _ = ready_state(with_secret=False, fields=credentials)

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert not conf_path(dbd_root).exists()
    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert credentials["password"] not in out.unit_status.message


def test_a_unix_socket_endpoint_blocks_saying_slurmdbd_cannot_use_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    socket = "file:///var/snap/charmed-mysql/common/var/run/mysqlrouter/mysql.sock"
    state, database, _ = ready_state(endpoints=socket)

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert not conf_path(dbd_root).exists()
    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert "unix socket" in out.unit_status.message
    assert "cannot use" in out.unit_status.message


def test_an_unreadable_credentials_secret_blocks(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state(
        with_secret=False, fields={"secret-user": "secret:notgranted"}
    )

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert not conf_path(dbd_root).exists()
    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert "cannot read the database credentials secret" in out.unit_status.message


def test_an_answer_without_credentials_waits(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state(with_secret=False)

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert out.unit_status == ops.WaitingStatus("waiting for database credentials")
    assert machine.calls("restart") == []


def test_missing_database_blocks_and_starts_nothing(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    key = auth_secret()
    relation = slurmctld(key)
    state = testing.State(
        leader=True,
        relations={relation},
        secrets={key},
        stored_states={already_installed("SlurmdbdCharm")},
    )

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == ops.BlockedStatus("needs a database integration")
    assert machine.calls("restart") == []
    assert not key_path(dbd_root).exists()


def test_slurmctld_without_a_key_waits(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    user = user_secret()
    database = mysql(user)
    state = testing.State(
        relations={database, slurmctld(None)},
        secrets={user},
        stored_states={already_installed("SlurmdbdCharm")},
    )

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert out.unit_status == ops.WaitingStatus("waiting for slurmctld")
    assert machine.calls("restart") == []


def test_refused_credentials_block_with_the_servers_error_and_are_retried(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    machine.service_fails("slurmdbd", REFUSED)
    state, database, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(database), state)

    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert out.unit_status.message == f"slurmdbd cannot restart: {REFUSED}"
    machine.heal()

    out = ctx.run(ctx.on.update_status(), out)

    assert machine.calls("restart") == ["slurmdbd"] * 3  # the failing event tried twice
    assert isinstance(out.unit_status, ops.ActiveStatus)


def test_a_slurmdbd_that_died_shows_its_journal_reason(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)
    machine.active.clear()
    machine.journals["slurmdbd"] = ["fatal: Unable to initialize accounting_storage/mysql"]
    machine.service_fails("slurmdbd", REFUSED)

    out = ctx.run(ctx.on.update_status(), out)

    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert "slurmdbd cannot restart" in out.unit_status.message


# Leaving.


def test_slurmctld_gone_stops_slurmdbd_and_deletes_the_key_and_password(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)
    ctl = next(r for r in out.relations if r.endpoint == "slurmctld")

    out = ctx.run(ctx.on.relation_broken(ctl), out)

    assert "slurmdbd" not in machine.active
    assert machine.calls("stop") == ["slurmdbd"]
    assert not conf_path(dbd_root).exists()
    assert not key_path(dbd_root).exists()
    assert not jwt_path(dbd_root).exists()
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


def test_slurmctld_gone_deletes_the_key_set_of_a_rotation_too(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)
    key_set = key_path(dbd_root).with_name("slurm.jwks")  # as an auth key rotation leaves it
    key_set.write_text('{"keys": []}')
    ctl = next(r for r in out.relations if r.endpoint == "slurmctld")

    ctx.run(ctx.on.relation_broken(ctl), out)

    assert not key_path(dbd_root).exists()
    assert not key_set.exists()


def test_database_gone_stops_slurmdbd_and_withdraws_it_from_slurmctld(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)

    out = ctx.run(ctx.on.relation_broken(out.get_relation(database.id)), out)

    assert machine.calls("stop") == ["slurmdbd"]
    assert not conf_path(dbd_root).exists()
    relation = next(r for r in out.relations if r.endpoint == "slurmctld")
    assert json.loads(relation.local_app_data["dbds"]) == []
    assert out.unit_status == ops.BlockedStatus("needs a database integration")


# The password and the JWT key stay secret.


def test_the_password_and_jwt_key_never_reach_a_log_a_databag_or_a_status(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    dbd_root: Path,
    caplog: pytest.LogCaptureFixture,
):
    caplog.set_level(logging.DEBUG)
    machine.service_fails("slurmdbd", REFUSED)
    state, database, user = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)
    machine.heal()
    out = ctx.run(ctx.on.update_status(), out)
    rotated = dataclasses.replace(
        user, latest_content={**user.tracked_content, "password": NEW_PASSWORD}
    )
    out = dataclasses.replace(out, secrets={rotated, *[s for s in out.secrets if s.id != user.id]})
    out = ctx.run(ctx.on.secret_changed(rotated), out)

    assert conf(dbd_root)["storagepass"] == NEW_PASSWORD  # the scenario did use both
    seen = [caplog.text, str(out.unit_status), str(out.app_status)]
    seen += [record.getMessage() for record in caplog.records]
    seen += [str(log) for log in ctx.juju_log]
    for relation in out.relations:
        seen += [json.dumps(relation.local_app_data), json.dumps(relation.local_unit_data)]
    seen += [json.dumps(s.content) for s in out.stored_states]
    for password in (PASSWORD, NEW_PASSWORD, JWT_KEY):
        assert not [text for text in seen if password in text]
