"""The JWT key on the `slurmdbd` contract, both sides, with raw databag vectors.

slurmctld's leader grants the JWT key secret to the relation and writes its id under
`jwt_key_id` (JSON text, beside `auth_key_id` and `controllers`); slurmdbd reads the id and the
secret's `key` field.
"""

import json

import ops
import pytest
from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.slurmdbd import JwtKeyData, SlurmdbdProvider, SlurmdbdRequirer
from ops import testing

JWT_KEY = "c2VjcmV0LWp3dC1rZXktb2YtYXQtbGVhc3QtMzItYnl0ZXMh"


class Controller(ops.CharmBase):
    """slurmctld's side: the requirer on `slurmdbd`."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.accounting = SlurmdbdRequirer(self, "slurmdbd")


class Dbd(ops.CharmBase):
    """slurmdbd's side: the provider on `slurmctld`."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmctld = SlurmdbdProvider(self, "slurmctld")


CONTROLLER_META = {"name": "slurmctld", "requires": {"slurmdbd": {"interface": "slurmdbd"}}}
DBD_META = {"name": "slurmdbd", "provides": {"slurmctld": {"interface": "slurmdbd"}}}


def owned_secret() -> testing.Secret:
    return testing.Secret({"key": JWT_KEY}, owner="app", label="slurm-jwt-key")


def share(state: testing.State, relation: testing.Relation) -> tuple[list[bool], testing.State]:
    """Call `share_jwt_key` twice in one hook; return what each call said and the state after."""
    ctx = testing.Context(Controller, meta=CONTROLLER_META)
    with ctx(ctx.on.update_status(), state) as manager:
        charm = manager.charm
        secret = charm.model.get_secret(label="slurm-jwt-key")
        rel = charm.model.get_relation("slurmdbd", relation.id)
        assert rel is not None
        said = [charm.accounting.share_jwt_key(rel, secret) for _ in range(2)]
        return said, manager.run()


# slurmctld's side.


def test_the_leader_grants_the_key_and_writes_only_its_id():
    secret = owned_secret()
    controllers = json.dumps([{"hostname": "ctl-0"}])
    relation = testing.Relation(
        "slurmdbd", local_app_data={"auth_key_id": '"secret:auth"', "controllers": controllers}
    )

    said, out = share(testing.State(leader=True, relations={relation}, secrets={secret}), relation)

    assert said == [True, False]  # idempotent
    assert out.get_relation(relation.id).local_app_data == {
        "auth_key_id": '"secret:auth"',
        "controllers": controllers,
        "jwt_key_id": json.dumps(secret.id),
    }
    assert relation.id in out.get_secret(id=secret.id).remote_grants
    assert JWT_KEY not in json.dumps(out.get_relation(relation.id).local_app_data)


def test_a_non_leader_shares_nothing():
    secret = owned_secret()
    relation = testing.Relation("slurmdbd")

    said, out = share(testing.State(relations={relation}, secrets={secret}), relation)

    assert said == [False, False]
    assert out.get_relation(relation.id).local_app_data == {}
    assert not out.get_secret(id=secret.id).remote_grants


def test_the_id_is_checked_before_it_is_published():
    with pytest.raises(ValueError, match="jwt_key_id"):
        JwtKeyData(jwt_key_id="secret:x\nAuthAltTypes=none")


# slurmdbd's side.


def read(remote_app_data: dict[str, str], *secrets: testing.Secret) -> tuple[str, str | None]:
    """Return what `jwt_key()` gives (or the error's text) and the databag's problem."""
    relation = testing.Relation("slurmctld", remote_app_data=remote_app_data)
    ctx = testing.Context(Dbd, meta=DBD_META)
    state = testing.State(relations={relation}, secrets=set(secrets))
    with ctx(ctx.on.update_status(), state) as manager:
        charm = manager.charm
        rel = charm.model.get_relation("slurmctld", relation.id)
        assert rel is not None
        problem = charm.slurmctld.problem(JwtKeyData, rel, rel.app)
        try:
            return charm.slurmctld.jwt_key(), problem
        except IntegrationError as e:
            return f"error: {e}", problem


def test_slurmdbd_reads_the_granted_key():
    secret = testing.Secret({"key": JWT_KEY})

    assert read({"jwt_key_id": json.dumps(secret.id)}, secret) == (JWT_KEY, None)


def test_the_tracked_revision_is_read_in_one_secret_get():
    """A newer revision waits for its secret-changed hook (`SlurmCharm` tracks it there)."""
    secret = testing.Secret({"key": JWT_KEY}, latest_content={"key": "bmV3LWtleQ=="})
    relation = testing.Relation("slurmctld", remote_app_data={"jwt_key_id": json.dumps(secret.id)})
    ctx = testing.Context(Dbd, meta=DBD_META)
    state = testing.State(relations={relation}, secrets={secret})
    with ctx(ctx.on.update_status(), state) as manager:
        backend = manager.charm.model._backend  # pyright: ignore[reportPrivateUsage]
        reads: list[dict[str, object]] = []
        secret_get = backend.secret_get

        def counted(**kwargs: object) -> dict[str, str]:
            reads.append(kwargs)
            return secret_get(**kwargs)  # pyright: ignore[reportArgumentType]

        backend.secret_get = counted  # pyright: ignore[reportAttributeAccessIssue]

        assert manager.charm.slurmctld.jwt_key() == JWT_KEY
        assert len(reads) == 1
        assert not reads[0].get("refresh")


@pytest.mark.parametrize(
    ("data", "words", "problem"),
    [
        ({}, "has not shared the JWT key", None),
        ({"auth_key_id": '"secret:auth"'}, "has not shared the JWT key", None),
        ({"jwt_key_id": "null"}, "has not shared the JWT key", None),
        ({"jwt_key_id": '"secret:abc --x"'}, "has not shared the JWT key", "jwt_key_id"),
        ({"jwt_key_id": "secret:abc"}, "has not shared the JWT key", "unreadable"),
        ({"jwt_key_id": "42"}, "has not shared the JWT key", "jwt_key_id"),
        ({"jwt_key_id": '"secret:notgranted"'}, "cannot read the JWT key secret", None),
    ],
)
def test_missing_or_bad_ids_are_errors_not_crashes(
    data: dict[str, str], words: str, problem: str | None
):
    got, found = read(data)

    assert got.startswith("error: ") and words in got
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_a_secret_without_the_key_field_is_an_error():
    secret = testing.Secret({"other": JWT_KEY})

    got, _ = read({"jwt_key_id": json.dumps(secret.id)}, secret)

    assert got == "error: the JWT key secret has no 'key' field"
