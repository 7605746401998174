"""Scenarios: `rotate-jwt-key` and `rotate-auth-key` (the key set's three steps)."""

import base64
import json
from typing import ClassVar

import charm
import ops
import pytest
from hpc_libs.interfaces.controller import ControllerPublisher, auth_key_digest
from ops import testing
from test_charm_slurmctld import KEY, PEER, compute_relation, jwt_secret, running

NEW = base64.b64encode(b"n" * 1024).decode()


@pytest.fixture
def rotation():
    """The charm's `rotation` module, as the charm imported it."""
    return charm.rotation


def auth_secret(content: str) -> testing.Secret:
    return testing.Secret(tracked_content={"key": content}, owner="app", label="slurm-auth-key")


def login_relation(confirmed: str | None = None) -> testing.Relation:
    unit = {"auth_key_digest": json.dumps(auth_key_digest(confirmed))} if confirmed else {}
    return testing.Relation("login-node", remote_app_name="login", remote_units_data={0: unit})


def with_auth_key(content: str, *relations: testing.RelationBase) -> testing.State:
    state = running(*relations)
    return testing.State(
        leader=True,
        relations=list(state.relations),
        secrets=[auth_secret(content), jwt_secret()],
        stored_states=state.stored_states,
        config={},
    )


def latest_key(state: testing.State) -> str:
    secret = next(s for s in state.secrets if s.label == "slurm-auth-key")
    return (secret.latest_content or secret.tracked_content)["key"]


def kids(rotation, content: str) -> list[tuple[str, bool]]:
    return [(k.kid, k.default) for k in rotation.key_set(content)]


# rotate-jwt-key.


def test_rotate_jwt_key_publishes_a_new_key_and_restarts_slurmctld(
    ctx, machine, tmp_path, settled
):
    state = settled(running())
    before = (tmp_path / "etc/slurm/jwt_hs256.key").read_bytes()

    out = ctx.run(ctx.on.action("rotate-jwt-key"), state)

    secret = next(s for s in out.secrets if s.label == "slurm-jwt-key")
    assert secret.latest_content is not None
    new = base64.b64decode(secret.latest_content["key"])
    assert new != before and len(new) == 32
    assert (tmp_path / "etc/slurm/jwt_hs256.key").read_bytes() == new
    assert machine.calls("restart") == ["slurmctld"]
    assert ctx.action_results == {"rotated": True}
    assert secret.latest_content["key"] not in str(ctx.action_results)


def test_rotate_jwt_key_on_a_non_leader_fails_and_changes_nothing(ctx, machine):
    state = testing.State(leader=False, relations=[testing.PeerRelation(PEER)])

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("rotate-jwt-key"), state)

    assert "leader" in failure.value.message
    assert machine.service_calls == []


def test_rotate_jwt_key_reports_a_slurmctld_that_fails_to_restart(ctx, machine, settled):
    state = settled(running())
    machine.service_fails("slurmctld", "fatal: bad key")

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("rotate-jwt-key"), state)

    assert failure.value.message.startswith("new JWT key published; slurmctld did not apply")


# rotate-auth-key: the key set.


def test_start_keeps_the_old_key_signing_and_adds_the_new_one(rotation):
    first = rotation.start(KEY, NEW)

    assert kids(rotation, first) == [("slurm-0", True), ("slurm-1", False)]
    assert {k.key for k in rotation.key_set(first)} == {KEY, NEW}
    document = json.loads(base64.b64decode(first))
    assert all(k["alg"] == "HS256" and k["kty"] == "oct" for k in document["keys"])


def test_the_steps_switch_the_signing_key_then_drop_the_old_one(rotation):
    first = rotation.start(KEY, NEW)
    second = rotation.next_step(first)
    third = rotation.next_step(second)

    assert kids(rotation, second) == [("slurm-0", False), ("slurm-1", True)]
    assert kids(rotation, third) == [("slurm-1", True)]
    assert rotation.key_set(third)[0].key == NEW
    assert rotation.next_step(third) is None
    assert rotation.next_step(KEY) is None
    assert rotation.phase(first) == "introducing slurm-1"
    assert rotation.phase(second).startswith("signing with slurm-1")
    assert rotation.phase(third) is None


def test_a_second_rotation_counts_the_key_ids_up(rotation):
    third = rotation.next_step(rotation.next_step(rotation.start(KEY, NEW)))

    again = rotation.start(third, KEY)

    assert kids(rotation, again) == [("slurm-1", True), ("slurm-2", False)]


def test_a_rotation_under_way_refuses_another(rotation):
    with pytest.raises(rotation.RotationError, match="under way"):
        rotation.start(rotation.start(KEY, NEW), KEY)


@pytest.mark.parametrize(
    "document",
    [
        {"keys": [{"kid": "other", "k": "YQ==", "use": "default"}]},
        {"keys": [{"kid": "slurm-x", "k": "YQ==", "use": "default"}]},
        {"keys": [{"kid": "slurm-1", "k": "YQ=="}]},
        {"keys": [{"kid": "slurm-1", "k": 5, "use": "default"}]},
    ],
)
def test_a_key_set_this_charm_did_not_write_is_refused(rotation, document):
    content = base64.b64encode(json.dumps(document).encode()).decode()

    with pytest.raises(ValueError):
        rotation.key_set(content)


# rotate-auth-key: the action and the leader's reconcile.


def test_rotate_auth_key_publishes_both_keys_and_writes_the_key_set(
    ctx, machine, tmp_path, rotation, settled
):
    state = settled(running(compute_relation()))

    out = ctx.run(ctx.on.action("rotate-auth-key"), state)

    content = latest_key(out)
    assert kids(rotation, content) == [("slurm-0", True), ("slurm-1", False)]
    assert rotation.key_set(content)[0].key == KEY
    jwks = tmp_path / "etc/slurm/slurm.jwks"
    assert jwks.read_bytes() == base64.b64decode(content)
    assert jwks.stat().st_mode & 0o777 == 0o600
    assert machine.calls("restart") == ["slurmctld"]
    assert ctx.action_results is not None
    assert ctx.action_results["new-key-id"] == "slurm-1"
    assert KEY[:40] not in str(ctx.action_results) and NEW[:40] not in str(ctx.action_results)


def test_rotate_auth_key_under_way_fails(ctx, machine, rotation, settled):
    state = settled(with_auth_key(rotation.start(KEY, NEW)))

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("rotate-auth-key"), state)

    assert "under way" in failure.value.message


def test_rotate_auth_key_on_a_non_leader_fails(ctx, machine):
    state = testing.State(leader=False, relations=[testing.PeerRelation(PEER)])

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("rotate-auth-key"), state)

    assert "leader" in failure.value.message


def test_the_rotation_waits_for_every_unit_to_confirm(ctx, machine, rotation, settled):
    first = rotation.start(KEY, NEW)
    state = settled(with_auth_key(first, login_relation(confirmed=KEY)))

    out = ctx.run(ctx.on.update_status(), state)

    assert latest_key(out) == first
    assert out.unit_status == testing.MaintenanceStatus(
        "rotating the auth key: introducing slurm-1; waiting for login/0"
    )


def test_every_confirmation_moves_the_rotation_one_step(ctx, machine, rotation, settled):
    first = rotation.start(KEY, NEW)
    second = rotation.next_step(first)
    state = settled(with_auth_key(first, login_relation()))
    assert latest_key(state) == first  # login/0 has not confirmed yet
    confirmed = login_relation(confirmed=first)
    state = with_auth_key(first, confirmed)
    state = testing.State(
        leader=True,
        relations=list(state.relations),
        secrets=list(state.secrets),
        stored_states=state.stored_states,
        config={},
    )

    out = ctx.run(ctx.on.relation_changed(confirmed, remote_unit=0), state)

    assert latest_key(out) == second


def test_the_last_step_leaves_the_new_key_alone(ctx, machine, rotation, tmp_path, settled):
    second = rotation.next_step(rotation.start(KEY, NEW))
    login = login_relation(confirmed=second)
    state = with_auth_key(second, login)

    out = ctx.run(ctx.on.relation_changed(login, remote_unit=0), state)

    assert kids(rotation, latest_key(out)) == [("slurm-1", True)]


def test_a_unit_that_never_got_the_key_is_not_waited_for(ctx, machine, rotation, settled):
    """A slurmd application whose partition is not served has no key: nothing to confirm."""
    first = rotation.start(KEY, NEW)
    unserved = testing.Relation("slurmd", remote_app_name="new", remote_units_data={0: {}})
    state = with_auth_key(first, unserved)

    out = ctx.run(ctx.on.update_status(), state)

    assert latest_key(out) == rotation.next_step(first)


def test_a_slurmd_unit_confirming_an_old_key_holds_the_rotation(ctx, machine, rotation, settled):
    first = rotation.start(KEY, NEW)
    compute = compute_relation()
    compute = testing.Relation(
        "slurmd",
        remote_app_name="compute",
        remote_app_data=compute.remote_app_data,
        remote_units_data={0: {"auth_key_digest": json.dumps(auth_key_digest(KEY))}},
    )
    state = settled(with_auth_key(first, compute))

    out = ctx.run(ctx.on.update_status(), state)

    assert latest_key(out) == first
    assert "waiting for compute/0" in out.unit_status.message


def test_a_login_nodes_data_change_without_a_rotation_runs_nothing(ctx, machine, settled):
    state = settled(running(login_relation(confirmed=KEY)))
    login = next(r for r in state.relations if r.endpoint == "login-node")

    out = ctx.run(ctx.on.relation_changed(login, remote_unit=0), state)

    # The leader reconciles (a login unit's new release may turn native metrics on), and
    # only reads: the opened ports, the controllers, rebuilds.
    queries = (["opened-ports", "--format=json"], ["scontrol", "ping"], ["squeue", "--all"])
    assert [c for c in machine.commands if c[:2] not in queries] == []
    assert machine.service_calls == []
    assert latest_key(out) == KEY


def test_the_leader_shares_the_digest_of_the_key_it_runs_with_its_peers(ctx, machine, settled):
    out = settled(running())

    peer = next(r for r in out.relations if isinstance(r, testing.PeerRelation))
    assert peer.local_unit_data["auth_key_digest"] == auth_key_digest(KEY)


class Controller(ops.CharmBase):
    """A controller with the rotation alone, to see whom it waits for."""

    waiting: ClassVar[list[str]] = []

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        module = charm.rotation
        publisher = ControllerPublisher(self, "login-node")
        self.rotation = module.AuthKeyRotation(self, [publisher], PEER, wake=[])  # type: ignore[arg-type]
        framework.observe(self.on.update_status, self._check)

    def _check(self, _: ops.EventBase) -> None:
        Controller.waiting = self.rotation.waiting_for(KEY, backups=True)


def test_backup_controllers_are_waited_for_with_network_state():
    ctx = testing.Context(
        Controller,
        meta={
            "name": "ctl",
            "peers": {PEER: {"interface": "p"}},
            "provides": {"login-node": {"interface": "x"}},
        },
    )
    peer = testing.PeerRelation(
        PEER,
        peers_data={
            1: {"address": "10.0.0.2", "auth_key_digest": auth_key_digest(KEY)},
            2: {"address": "10.0.0.3", "auth_key_digest": auth_key_digest(NEW)},
            3: {"address": "10.0.0.4"},
            4: {},  # no controller yet: nothing to wait for
        },
    )
    login = testing.Relation(
        "login-node",
        remote_app_name="login",
        local_app_data={"auth_key_id": json.dumps("secret:abc")},
        remote_units_data={0: {}},
    )

    ctx.run(ctx.on.update_status(), testing.State(leader=True, relations=[peer, login]))

    assert Controller.waiting == ["login/0", "ctl/2", "ctl/3"]


# Old revisions: Juju runs secret-remove on the leader once no unit tracks one any more.


def rotated(secret: testing.Secret, revisions: int) -> testing.Secret:
    """`secret` after `revisions` revisions (each rotation step adds one)."""
    object.__setattr__(secret, "_tracked_revision", revisions)
    object.__setattr__(secret, "_latest_revision", revisions)
    return secret


@pytest.mark.parametrize("label", ["slurm-auth-key", "slurm-jwt-key"])
def test_the_leader_removes_a_revision_no_unit_tracks_any_more(ctx, machine, label):
    state = running()
    secret = rotated(next(s for s in state.secrets if s.label == label), 4)

    ctx.run(ctx.on.secret_remove(secret, revision=2), state)

    assert ctx.removed_secret_revisions == [2]
    assert machine.service_calls == []  # Nothing else to do.


def test_a_unit_besides_the_leader_removes_no_revision(ctx, machine):
    state = running()
    state = testing.State(
        leader=False,
        relations=state.relations,
        secrets=[rotated(s, 3) for s in state.secrets],
        stored_states=state.stored_states,
    )
    secret = next(s for s in state.secrets if s.label == "slurm-auth-key")

    ctx.run(ctx.on.secret_remove(secret, revision=1), state)

    assert ctx.removed_secret_revisions == []
