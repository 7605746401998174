"""The auth key set (slurm.jwks) beside slurm.key, and units confirming the key they run."""

import base64
import json
from pathlib import Path
from typing import ClassVar

import ops
import pytest
from hpc_libs.interfaces.controller import (
    ConsumerUnitData,
    ControllerConsumer,
    ControllerPublisher,
    auth_key_digest,
)
from hpc_libs.slurm.base import KeyFile, SlurmManager, is_key_set
from ops import testing

RAW = base64.b64encode(b"r" * 1024).decode()
DOCUMENT = json.dumps({"keys": [{"kid": "slurm-1", "k": "YWJj", "use": "default"}]}).encode()
KEY_SET = base64.b64encode(DOCUMENT).decode()


def key_file(tmp_path: Path) -> KeyFile:
    return KeyFile(
        tmp_path / "slurm.key", size=1024, owner="root", key_set_path=tmp_path / "slurm.jwks"
    )


def test_a_key_set_is_written_to_slurm_jwks_too_0600(tmp_path: Path, owners) -> None:
    keys = key_file(tmp_path)

    assert keys.set(KEY_SET)

    assert (tmp_path / "slurm.jwks").read_bytes() == DOCUMENT
    assert (tmp_path / "slurm.key").read_bytes() == DOCUMENT
    assert (tmp_path / "slurm.jwks").stat().st_mode & 0o777 == 0o600
    assert keys.get() == KEY_SET
    assert not keys.set(KEY_SET)  # nothing changed


def test_a_plain_key_removes_a_key_set_left_from_before(tmp_path: Path, owners) -> None:
    keys = key_file(tmp_path)
    keys.set(KEY_SET)

    assert keys.set(RAW)

    assert not (tmp_path / "slurm.jwks").exists()
    assert (tmp_path / "slurm.key").read_bytes() == b"r" * 1024
    assert not keys.remove_key_set()


def test_a_key_file_without_a_key_set_path_never_writes_one(tmp_path: Path, owners) -> None:
    keys = KeyFile(tmp_path / "jwt_hs256.key", size=32, owner="root")

    keys.set(KEY_SET)

    assert list(tmp_path.iterdir()) == [tmp_path / "jwt_hs256.key"]
    assert not keys.remove_key_set()


def test_every_managers_slurm_key_has_its_key_set_beside_it(tmp_path: Path) -> None:
    class Manager(SlurmManager):
        daemon = "sackd"
        packages = ("sackd",)

    manager = Manager(tmp_path)

    assert manager.key.key_set_path == tmp_path / "etc/slurm/slurm.jwks"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (DOCUMENT, True),
        (b"r" * 1024, False),
        (bytes(range(256)) * 4, False),
        (b'{"keys": "no list"}', False),
        (b"[1, 2]", False),
    ],
)
def test_is_key_set(data: bytes, expected: bool) -> None:
    assert is_key_set(data) is expected


def test_the_digest_is_short_hex_and_differs_per_key() -> None:
    assert len(auth_key_digest(RAW)) == 16
    assert auth_key_digest(RAW) != auth_key_digest(KEY_SET)
    assert RAW[:8] not in auth_key_digest(RAW)


class Consumer(ops.CharmBase):
    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmctld = ControllerConsumer(self, "slurmctld")
        framework.observe(self.on.update_status, self._confirm)

    def _confirm(self, _: ops.EventBase) -> None:
        self.slurmctld.confirm_auth_key(RAW)


class Publisher(ops.CharmBase):
    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.login = ControllerPublisher(self, "login-node")
        framework.observe(self.on.update_status, self._check)

    def _check(self, _: ops.EventBase) -> None:
        relation = self.login.relations[0]
        Publisher.missing = self.login.units_without_key(relation, RAW)

    missing: ClassVar[list[str]] = []


def test_a_consumer_confirms_the_key_in_its_unit_databag() -> None:
    ctx = testing.Context(
        Consumer, meta={"name": "login", "requires": {"slurmctld": {"interface": "x"}}}
    )
    relation = testing.Relation("slurmctld")

    out = ctx.run(ctx.on.update_status(), testing.State(relations=[relation]))

    data = out.get_relation(relation.id).local_unit_data
    assert json.loads(data["auth_key_digest"]) == auth_key_digest(RAW)


def test_a_publisher_lists_the_units_that_have_not_confirmed() -> None:
    ctx = testing.Context(
        Publisher, meta={"name": "ctl", "provides": {"login-node": {"interface": "x"}}}
    )
    relation = testing.Relation(
        "login-node",
        remote_app_name="login",
        remote_units_data={
            0: {"auth_key_digest": json.dumps(auth_key_digest(RAW))},
            1: {"auth_key_digest": json.dumps(auth_key_digest(KEY_SET))},
            2: {},
            3: {"auth_key_digest": json.dumps("not hex")},
        },
    )

    ctx.run(ctx.on.update_status(), testing.State(relations=[relation]))

    assert Publisher.missing == ["login/1", "login/2", "login/3"]


def test_a_bad_digest_is_refused_by_the_model() -> None:
    with pytest.raises(ValueError):
        ConsumerUnitData(auth_key_digest="x y")
