"""The auth key's secret id on the wire: `auth_secret_id`, `auth_key_id` in the previous release.

For one release slurmctld writes the id under both names and the daemons read the new name,
else the old one. Each pair of releases is tested both ways with raw databags: what the
previous release wrote (`PREVIOUS`), what this one writes, and what the next one will write
(`NEXT`, the new name alone). The previous release's reader is `PreviousControllerData`:
the model it had, which reads `auth_key_id` and ignores any other key.
"""

import json
from typing import ClassVar

import ops
import pytest
from hpc_libs.interfaces.base import DatabagModel
from hpc_libs.interfaces.slurmd import (
    ControllerData,
    ControllerEntry,
    SlurmdProvider,
    SlurmdRequirer,
    get_or_create_auth_key_secret,
)
from hpc_libs_fakes import controller_meta, daemon_meta
from ops import testing

AUTH_KEY = "c2VjcmV0LWtleS1ieXRlcw=="
CONTROLLERS = json.dumps([{"hostname": "ctl-0", "address": "10.0.0.1"}])


class PreviousControllerData(DatabagModel):
    """The previous release's reader of slurmctld's databag (its secret id field)."""

    auth_key_id: str | None = None


class ConsumerCharm(ops.CharmBase):
    """A daemon's charm of this release: reads the key once slurmctld is ready."""

    seen: ClassVar[list[str | None]] = []

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmctld = SlurmdProvider(self, "slurmctld")
        framework.observe(self.on["slurmctld"].relation_changed, self._on_changed)

    def _on_changed(self, _: ops.RelationChangedEvent) -> None:
        ConsumerCharm.seen.append(self.slurmctld.auth_key() if self.slurmctld.is_ready() else None)


class PublisherCharm(ops.CharmBase):
    """slurmctld of this release: publishes the key and says whether each relation has it."""

    shared: ClassVar[list[bool]] = []

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmd = SlurmdRequirer(self, "slurmd")
        framework.observe(self.on["slurmd"].relation_changed, self._on_changed)
        framework.observe(self.on.update_status, self._on_update_status)

    def _on_changed(self, event: ops.RelationChangedEvent) -> None:
        secret = get_or_create_auth_key_secret(self, lambda: AUTH_KEY)
        controllers = [ControllerEntry(hostname="ctl-0", address="10.0.0.1")]
        self.slurmd.publish_controller_data(event.relation, secret, controllers)

    def _on_update_status(self, _: ops.UpdateStatusEvent) -> None:
        PublisherCharm.shared = [self.slurmd.shares_key(r) for r in self.slurmd.relations]


CONSUMER_META = daemon_meta("slurmd", "slurmd")
PUBLISHER_META = controller_meta("slurmd", "slurmd")


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ConsumerCharm.seen = []
    PublisherCharm.shared = []


def consume(secret: testing.Secret, remote_app_data: dict[str, str]) -> None:
    relation = testing.Relation(
        "slurmctld", remote_app_name="slurmctld", remote_app_data=remote_app_data
    )
    ctx = testing.Context(ConsumerCharm, meta=CONSUMER_META)
    state = testing.State(relations={relation}, secrets={secret})
    ctx.run(ctx.on.relation_changed(relation), state)


AUTH_SECRET = testing.Secret(
    tracked_content={"key": AUTH_KEY}, label="slurm-auth-key", owner="app"
)


def publish(local_app_data: dict[str, str] | None = None) -> dict[str, str]:
    """Run slurmctld of this release once, with its key's secret; return its databag."""
    relation = testing.Relation(
        "slurmd", remote_app_name="compute", local_app_data=local_app_data or {}
    )
    ctx = testing.Context(PublisherCharm, meta=PUBLISHER_META)
    state = testing.State(leader=True, relations={relation}, secrets={AUTH_SECRET})
    out = ctx.run(ctx.on.relation_changed(relation), state)
    return dict(out.get_relation(relation.id).local_app_data)


def test_this_release_reads_the_previous_slurmctlds_databag():
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})
    previous = {"auth_key_id": json.dumps(secret.id), "controllers": CONTROLLERS}

    consume(secret, previous)

    assert ConsumerCharm.seen == [AUTH_KEY]


def test_the_previous_release_reads_this_slurmctlds_databag():
    written = publish()

    assert json.loads(written["auth_secret_id"]) == AUTH_SECRET.id
    decoded = {key: json.loads(text) for key, text in written.items()}
    assert PreviousControllerData.model_validate(decoded).auth_key_id == AUTH_SECRET.id


def test_this_release_reads_its_own_and_the_next_releases_databag():
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})
    ours = {
        "auth_secret_id": json.dumps(secret.id),
        "auth_key_id": json.dumps(secret.id),
        "controllers": CONTROLLERS,
    }
    following = {"auth_secret_id": json.dumps(secret.id), "controllers": CONTROLLERS}

    consume(secret, ours)
    consume(secret, following)

    assert ConsumerCharm.seen == [AUTH_KEY, AUTH_KEY]


def test_the_new_name_wins_over_the_old_one():
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})
    both = {
        "auth_secret_id": json.dumps(secret.id),
        "auth_key_id": json.dumps("secret:stale"),
        "controllers": CONTROLLERS,
    }

    consume(secret, both)

    assert ConsumerCharm.seen == [AUTH_KEY]


@pytest.mark.parametrize("name", ["auth_secret_id", "auth_key_id"])
def test_an_invalid_secret_id_under_either_name_is_not_ready(name: str):
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})

    consume(secret, {name: json.dumps("secret:x --foo"), "controllers": CONTROLLERS})

    assert ConsumerCharm.seen == [None]
    assert ControllerData.model_validate({"auth_secret_id": None}).is_complete is False


def test_an_upgraded_slurmctld_writes_the_new_name_over_the_previous_databag():
    """The upgraded leader's data reads the same as the previous databag: it is written anyway,
    so the next release, which writes the new name alone, finds it there."""
    previous = publish()
    del previous["auth_secret_id"]  # What the previous release wrote: the same id, controllers.

    written = publish(previous)

    assert json.loads(written["auth_secret_id"]) == AUTH_SECRET.id


@pytest.mark.parametrize(
    ("local_app_data", "shared"),
    [
        ({}, False),
        ({"auth_key_id": json.dumps("secret:abc")}, True),
        ({"auth_secret_id": json.dumps("secret:abc")}, True),
    ],
    ids=["nothing", "previous-release", "this-release"],
)
def test_slurmctld_knows_a_relation_has_the_key_under_either_name(
    local_app_data: dict[str, str], shared: bool
):
    relation = testing.Relation("slurmd", remote_app_name="compute", local_app_data=local_app_data)
    ctx = testing.Context(PublisherCharm, meta=PUBLISHER_META)

    ctx.run(ctx.on.update_status(), testing.State(leader=True, relations={relation}))

    assert PublisherCharm.shared == [shared]
