"""Scenarios: accounting through slurmdbd, the JWT key, the REST API integration, `token`."""

import base64
import json
import logging

import pytest
from charm_testing import already_installed
from hpc_libs.errors import SlurmOpsError
from ops import testing
from slurmutils import SlurmConfig
from test_charm_slurmctld import (
    JWT_KEY,
    KEY,
    PEER,
    RECONFIGURE,
    STANDS_BY,
    compute_relation,
    databag,
    jwt_secret,
    later,
    running,
    slurm_conf,
    with_new_key,
)

DBD = {"hostname": "dbd0", "address": "10.0.0.5", "port": 6819}
BACKUP_DBD = {"hostname": "dbd1", "address": "10.0.0.6", "port": 6819}
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJhbGljZSJ9.c2lnbmF0dXJlLW5vdC1yZWFs"
TOKEN_COMMAND = ["scontrol", "token", "username=alice", "lifespan=600"]


def slurmdbd_relation(*dbds: dict[str, object], **kwargs) -> testing.Relation:
    data = databag(dbds=list(dbds)) if dbds else {}
    kwargs.setdefault("remote_app_data", data)
    return testing.Relation(
        "slurmdbd", remote_app_name="slurmdbd", remote_units_data={0: {}}, **kwargs
    )


def accounting_lines(tmp_path) -> list[str]:
    return [
        line for line in slurm_conf(tmp_path).splitlines() if line.startswith("accountingstorage")
    ]


def secret(state: testing.State, label: str) -> testing.Secret:
    return next(s for s in state.secrets if s.label == label)


def everything_published(state: testing.State) -> str:
    """Every databag of every relation, the status and the peer memory, as one text."""
    bags = [
        {**r.local_app_data, **r.local_unit_data}
        for r in state.relations
        if isinstance(r, (testing.Relation, testing.PeerRelation))
    ]
    return json.dumps(bags) + str(state.unit_status) + str(state.app_status)


# Accounting.


def test_slurmdbd_gets_the_auth_key_controllers_and_jwt_key_at_once(ctx, machine, tmp_path):
    relation = slurmdbd_relation()

    out = ctx.run(ctx.on.relation_created(relation), running(relation))

    published = out.get_relation(relation.id).local_app_data
    auth = secret(out, "slurm-auth-key")
    assert json.loads(published["auth_key_id"]) == auth.id
    assert [c["address"] for c in json.loads(published["controllers"])] == ["192.0.2.0"]
    assert relation.id in auth.remote_grants
    assert relation.id in secret(out, "slurm-jwt-key").remote_grants
    assert KEY not in everything_published(out)
    assert JWT_KEY not in everything_published(out)
    assert accounting_lines(tmp_path) == []
    assert out.unit_status == testing.WaitingStatus("waiting for slurmdbd to publish its address")


def test_slurmdbd_ready_turns_accounting_on_with_one_reconfigure(ctx, machine, tmp_path, settled):
    state = settled(running(slurmdbd_relation()))
    relation = slurmdbd_relation(DBD, id=state.get_relations("slurmdbd")[0].id)

    out = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), later(state, relation))

    assert accounting_lines(tmp_path) == [
        "accountingstoragetype=accounting_storage/slurmdbd",
        "accountingstoragehost=10.0.0.5",
        "accountingstorageport=6819",
    ]
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert machine.calls("restart") == []
    assert out.unit_status == testing.ActiveStatus("accounting on slurmdbd 10.0.0.5:6819")


def test_slurmdbd_without_port_or_address_uses_its_hostname_and_port_6819(ctx, machine, tmp_path):
    relation = slurmdbd_relation({"hostname": "dbd0"})

    ctx.run(ctx.on.relation_changed(relation, remote_unit=0), running(relation))

    assert "accountingstoragehost=dbd0" in accounting_lines(tmp_path)
    assert "accountingstorageport=6819" in accounting_lines(tmp_path)


def test_a_second_slurmdbd_is_the_backup_host(ctx, machine, tmp_path):
    relation = slurmdbd_relation(DBD, BACKUP_DBD)

    out = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), running(relation))

    assert accounting_lines(tmp_path) == [
        "accountingstoragetype=accounting_storage/slurmdbd",
        "accountingstoragehost=10.0.0.5",
        "accountingstorageport=6819",
        "accountingstoragebackuphost=10.0.0.6",
    ]
    assert out.unit_status == testing.ActiveStatus(
        "accounting on slurmdbd 10.0.0.5:6819, backup 10.0.0.6"
    )


def test_job_accounting_gather_stays_with_process_isolation(ctx, machine, tmp_path):
    relation = slurmdbd_relation(DBD)

    ctx.run(
        ctx.on.relation_changed(relation, remote_unit=0),
        running(relation, config={"process-isolation": "none"}),
    )

    conf = slurm_conf(tmp_path).splitlines()
    assert "jobacctgathertype=jobacct_gather/none" in conf
    assert "accountingstoragetype=accounting_storage/slurmdbd" in conf


def test_removing_slurmdbd_returns_to_no_accounting(ctx, machine, tmp_path, settled):
    relation = slurmdbd_relation(DBD)
    state = settled(running(relation, compute_relation()))
    assert accounting_lines(tmp_path)

    out = ctx.run(ctx.on.relation_broken(state.get_relation(relation.id)), state)

    assert accounting_lines(tmp_path) == []
    assert "partitionname=compute nodes=compute default=YES" in slurm_conf(tmp_path).splitlines()
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert machine.calls("restart") == []
    assert out.unit_status == testing.ActiveStatus()


def test_slurmdbd_withdrawing_its_daemons_turns_accounting_off(ctx, machine, tmp_path, settled):
    relation = slurmdbd_relation(DBD)
    state = settled(running(relation))
    withdrawn = slurmdbd_relation(id=relation.id, remote_app_data=databag(dbds=[]))

    out = ctx.run(ctx.on.relation_changed(withdrawn, remote_unit=0), later(state, withdrawn))

    assert accounting_lines(tmp_path) == []
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert out.unit_status == testing.WaitingStatus("waiting for slurmdbd to publish its address")


@pytest.mark.parametrize(
    "entry",
    [
        {"address": "10.0.0.5\nAccountingStorageType=x"},
        {"address": "db host"},
        {"hostname": "dbd0", "port": 70000},
        {"hostname": "dbd0", "port": "6819 --foo"},
        {"hostname": "dbd0", "port": True},
        {"hostname": "dbd0", "port": "6_819"},
        {"hostname": "dbd0", "port": "6819"},
        {"hostname": "dbd0", "port": 6819.0},
        {"hostname": "dbd0", "port": 0},
    ],
)
def test_bad_slurmdbd_data_blocks_naming_it_and_never_reaches_slurm_conf(
    ctx, machine, tmp_path, entry
):
    relation = slurmdbd_relation(entry)

    out = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), running(relation))

    assert accounting_lines(tmp_path) == []
    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("slurmdbd sent an invalid dbds")


@pytest.mark.parametrize("nested", ["[" * 100_000 + "]" * 100_000, "[" * 40 + "]" * 40])
def test_deeply_nested_json_from_slurmdbd_is_invalid_data_not_a_hook_error(
    ctx, machine, tmp_path, nested
):
    relation = testing.Relation(
        "slurmdbd",
        remote_app_name="slurmdbd",
        remote_units_data={0: {}},
        remote_app_data={"dbds": nested},
    )

    out = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), running(relation))

    assert accounting_lines(tmp_path) == []
    assert out.unit_status == testing.BlockedStatus(
        "slurmdbd sent unreadable data: a field nested deeper than 32 levels"
    )


def test_bad_slurmdbd_data_after_good_turns_accounting_off(ctx, machine, tmp_path, settled):
    state = settled(running(slurmdbd_relation(DBD)))
    rel_id = state.get_relations("slurmdbd")[0].id
    hostile = slurmdbd_relation({"address": "a;b"}, id=rel_id)

    out = ctx.run(ctx.on.relation_changed(hostile, remote_unit=0), later(state, hostile))

    assert accounting_lines(tmp_path) == []
    assert out.unit_status.message.startswith("slurmdbd sent an invalid dbds")


def test_failed_reconfigure_for_accounting_is_retried_by_the_next_event(
    ctx, machine, tmp_path, settled
):
    state = settled(running(slurmdbd_relation()))
    relation = slurmdbd_relation(DBD, id=state.get_relations("slurmdbd")[0].id)
    machine.fail(
        *RECONFIGURE, stderr="slurm_reconfigure error: Unable to contact slurm controller"
    )

    state = ctx.run(ctx.on.relation_changed(relation, remote_unit=0), later(state, relation))
    assert state.unit_status.name == "blocked"
    assert "Unable to contact slurm controller" in state.unit_status.message
    machine.heal()
    machine.commands.clear()

    out = ctx.run(ctx.on.update_status(), later(state, relation))

    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert out.unit_status == testing.ActiveStatus("accounting on slurmdbd 10.0.0.5:6819")


def test_accounting_is_applied_by_reconfigure_not_part_of_the_restart_identity(applied_module):
    """The one switch the lab may flip: `applied.identity` decides what takes a restart."""
    identity = applied_module.identity
    base = {"slurmctldhost": ["ctl0(10.0.0.1)"], "authalttypes": ["auth/jwt"]}
    with_accounting = {**base, "accountingstoragetype": "accounting_storage/slurmdbd"}

    plain = identity(SlurmConfig.from_dict(base), KEY, JWT_KEY)
    assert identity(SlurmConfig.from_dict(with_accounting), KEY, JWT_KEY) == plain
    assert identity(SlurmConfig.from_dict({**base, "authalttypes": []}), KEY, JWT_KEY) != plain
    assert identity(SlurmConfig.from_dict(base), KEY, KEY) != plain


# The JWT key.


def test_jwt_key_is_granted_to_slurmdbd_only(ctx, machine):
    dbd = slurmdbd_relation(DBD)
    rest = testing.Relation("slurmrestd", remote_app_name="rest", remote_units_data={0: {}})
    login = testing.Relation("login-node", remote_app_name="login", remote_units_data={0: {}})
    compute = compute_relation()

    out = ctx.run(ctx.on.update_status(), running(dbd, rest, login, compute))

    assert secret(out, "slurm-jwt-key").remote_grants.keys() == {dbd.id}
    auth_grants = secret(out, "slurm-auth-key").remote_grants.keys()
    assert auth_grants == {dbd.id, rest.id, login.id, compute.id}
    assert JWT_KEY not in everything_published(out)


def test_a_controller_running_without_jwt_restarts_once_to_load_it(ctx, machine, tmp_path):
    """Upgrade from a charm without JWT: the files on disk hold no JWT key; auth plugins
    load at start, so slurmctld restarts (once), not a reconfigure."""
    machine.active.add("slurmctld")
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/slurm.key").write_bytes(base64.b64decode(KEY))
    (tmp_path / "etc/slurm/slurm.conf").write_text("slurmctldhost=ctl0(192.0.2.0)\n")

    out = ctx.run(ctx.on.upgrade_charm(), running())

    assert machine.calls("restart") == ["slurmctld"]
    assert machine.ran(*RECONFIGURE) == []
    assert (tmp_path / "etc/slurm/jwt_hs256.key").read_bytes() == base64.b64decode(JWT_KEY)
    machine.service_calls.clear()
    ctx.run(ctx.on.update_status(), later(out))
    assert machine.service_calls == []
    assert machine.ran(*RECONFIGURE) == []


def test_a_new_jwt_key_restarts_slurmctld(ctx, machine, tmp_path, settled):
    new_key = base64.b64encode(b"z" * 32).decode()
    state = with_new_key(settled(running()), "slurm-jwt-key", new_key)

    ctx.run(ctx.on.config_changed(), state)

    assert machine.calls("restart") == ["slurmctld"]
    assert (tmp_path / "etc/slurm/jwt_hs256.key").read_bytes() == b"z" * 32


def test_a_standby_controller_writes_the_jwt_key_and_nothing_else(ctx, machine, tmp_path):
    state = testing.State(
        leader=False,
        relations=[testing.PeerRelation(PEER)],
        secrets=[jwt_secret()],
        stored_states={already_installed("SlurmctldCharm")},
    )

    out = ctx.run(ctx.on.config_changed(), state)

    key = tmp_path / "etc/slurm/jwt_hs256.key"
    assert key.read_bytes() == b"j" * 32
    assert key.stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert out.unit_status == STANDS_BY


def test_a_standby_controller_before_the_leader_made_the_key_waits_quietly(ctx, machine, tmp_path):
    state = testing.State(
        leader=False,
        relations=[testing.PeerRelation(PEER)],
        stored_states={already_installed("SlurmctldCharm")},
    )

    out = ctx.run(ctx.on.config_changed(), state)

    assert not (tmp_path / "etc/slurm/jwt_hs256.key").exists()
    assert out.unit_status == STANDS_BY


# The REST API integration.


def test_slurmrestd_gets_the_auth_key_and_controllers_like_a_login_node(
    ctx, machine, tmp_path, settled
):
    state = settled(running())
    before = (tmp_path / "etc/slurm/slurm.conf").stat().st_mtime_ns
    rest = testing.Relation("slurmrestd", remote_app_name="rest", remote_units_data={0: {}})

    out = ctx.run(ctx.on.relation_joined(rest, remote_unit=0), later(state, rest))

    published = out.get_relation(rest.id).local_app_data
    assert json.loads(published["auth_secret_id"]) == secret(out, "slurm-auth-key").id
    assert [c["port"] for c in json.loads(published["controllers"])] == [6817]
    assert rest.id not in secret(out, "slurm-jwt-key").remote_grants
    assert set(published) == {
        *("auth_secret_id", "auth_key_id"),  # The new name and, for one release, the old one.
        *("controllers", "config_digest", "srun_port_range"),
    }
    assert json.loads(published["srun_port_range"]) is None  # srun does not run there.
    assert (tmp_path / "etc/slurm/slurm.conf").stat().st_mtime_ns == before
    assert machine.ran(*RECONFIGURE) == []


# The `token` action.


def test_token_returns_the_jwt_in_the_action_result_and_nowhere_else(ctx, machine, caplog):
    caplog.set_level(logging.DEBUG)
    machine.responses[("scontrol", "token")] = f"SLURM_JWT={TOKEN}\n"

    out = ctx.run(ctx.on.action("token", params={"username": "alice", "lifespan": 600}), running())

    assert ctx.action_results == {"username": "alice", "lifespan": 600, "token": TOKEN}
    assert machine.ran("scontrol", "token") == [TOKEN_COMMAND]
    assert any(cmd == TOKEN_COMMAND and 0 < t <= 60 for cmd, t in machine.timeouts)
    assert TOKEN not in caplog.text
    assert not any(TOKEN in line.message for line in ctx.juju_log)
    assert TOKEN not in everything_published(out)


def test_token_lifespan_defaults_to_1800_seconds(ctx, machine):
    machine.responses[("scontrol", "token")] = f"SLURM_JWT={TOKEN}\n"

    ctx.run(ctx.on.action("token", params={"username": "alice"}), running())

    assert machine.ran("scontrol", "token") == [
        ["scontrol", "token", "username=alice", "lifespan=1800"]
    ]
    assert ctx.action_results is not None
    assert ctx.action_results["lifespan"] == 1800


@pytest.mark.parametrize(
    ("username", "lifespan"),
    [
        ("alice lifespan=1", 600),
        ("-alice", 600),
        ("alice\n", 600),
        ("al;ice", 600),
        ("$(id)", 600),
        ("", 600),
        ("..", 600),
        ("a" * 33, 600),
        ("alice", 0),
        ("alice", -5),
        ("alice", 2**31),
    ],
)
def test_token_refuses_bad_input_and_runs_nothing(ctx, machine, username, lifespan):
    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(
            ctx.on.action("token", params={"username": username, "lifespan": lifespan}),
            running(),
        )

    assert failure.value.message.startswith("invalid token request")
    assert machine.ran("scontrol") == []


@pytest.mark.parametrize(
    ("username", "lifespan"),
    [("alice", "600"), ("alice", 1.5), ("alice", True), ("alice", None), (None, 600), (7, 600)],
)
def test_token_request_refuses_values_of_the_wrong_type(credentials_module, username, lifespan):
    """Juju checks the action's schema; the charm does not rely on it."""
    with pytest.raises(ValueError, match="is not"):
        credentials_module.token_request(username, lifespan)


@pytest.mark.parametrize("username", ["alice", "svc.portal", "_batch", "user-1", "A1"])
def test_token_accepts_posix_user_names(ctx, machine, username):
    machine.responses[("scontrol", "token")] = f"SLURM_JWT={TOKEN}\n"

    ctx.run(ctx.on.action("token", params={"username": username}), running())

    assert machine.ran("scontrol", "token")[0][2] == f"username={username}"


def test_token_failure_fails_the_action_with_slurms_error(ctx, machine):
    machine.fail("scontrol", "token", stderr="slurm_request_token error: Invalid user id")

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("token", params={"username": "nobody1"}), running())

    assert failure.value.message == (
        "cannot get a token for nobody1: slurm_request_token error: Invalid user id"
    )


def test_token_timeout_fails_the_action(ctx, machine):
    machine.time_out("scontrol", "token")

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("token", params={"username": "alice"}), running())

    assert "timed out" in failure.value.message


def test_token_output_without_a_token_fails_without_quoting_it(ctx, machine, caplog):
    caplog.set_level(logging.DEBUG)
    machine.responses[("scontrol", "token")] = "something unexpected SECRETISH\n"

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("token", params={"username": "alice"}), running())

    assert "printed no SLURM_JWT" in failure.value.message
    assert "SECRETISH" not in failure.value.message
    assert "SECRETISH" not in caplog.text


def test_token_failure_without_stderr_says_what_failed(ctx, machine):
    machine.responses[("scontrol", "token")] = SlurmOpsError("scontrol failed", stderr="")

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("token", params={"username": "alice"}), running())

    assert failure.value.message == "cannot get a token for alice: scontrol failed"
