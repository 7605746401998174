"""Scenarios for the slurmd interface, with tiny charms observing its events."""

import json
from typing import Any, ClassVar

import ops
import pytest
from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.slurmd import (
    AUTH_KEY_LABEL,
    ComputeData,
    ControllerData,
    ControllerEntry,
    SlurmctldDisconnectedEvent,
    SlurmdDisconnectedEvent,
    SlurmdProvider,
    SlurmdRequirer,
    get_or_create_auth_key_secret,
)
from hpc_libs.slurm.partition import PartitionSpec
from hpc_libs_fakes import granted_relation
from ops import testing
from pydantic import ValidationError

AUTH_KEY = "c2VjcmV0LWtleS1ieXRlcw=="
PARTITION = {"maxtime": 60}
"""The partition slurmd sends: the operator's keys (the names are the naming rule's)."""
NODESET = {"nodeset": "compute", "feature": "compute"}
COMPUTE = ComputeData.published("compute", PartitionSpec.of(PARTITION))


class SlurmdCharm(ops.CharmBase):
    """Publishes compute data when integrated and reads the key once slurmctld is ready."""

    seen_keys: ClassVar[list[str]] = []

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmctld = SlurmdProvider(self, "slurmctld")
        framework.observe(self.on["slurmctld"].relation_created, self._on_created)
        framework.observe(self.on["slurmctld"].relation_changed, self._on_changed)

    def _on_created(self, _: ops.RelationCreatedEvent) -> None:
        self.slurmctld.publish_compute_data(COMPUTE)

    def _on_changed(self, _: ops.RelationChangedEvent) -> None:
        if self.slurmctld.is_ready():
            SlurmdCharm.seen_keys.append(self.slurmctld.auth_key())


class SlurmctldCharm(ops.CharmBase):
    """Creates the auth key secret and shares it when a partition is ready."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmd = SlurmdRequirer(self, "slurmd")
        framework.observe(self.on["slurmd"].relation_changed, self._on_changed)

    def _on_changed(self, event: ops.RelationChangedEvent) -> None:
        data = self.slurmd.compute_data(event.relation)
        if data is None or not data.is_complete:
            return
        secret = get_or_create_auth_key_secret(self, lambda: AUTH_KEY)
        self.slurmd.publish_controller_data(
            event.relation,
            secret,
            [
                ControllerEntry(hostname="ctl-0", address="10.0.0.1"),
                ControllerEntry(hostname="ctl-1", address="10.0.0.2", port=7817),
            ],
        )


SLURMD_META: dict[str, Any] = {
    "name": "slurmd",
    "provides": {"slurmctld": {"interface": "slurmd", "limit": 1}},
}
SLURMCTLD_META: dict[str, Any] = {
    "name": "slurmctld",
    "requires": {"slurmd": {"interface": "slurmd"}},
}


@pytest.fixture
def slurmd_ctx() -> testing.Context[SlurmdCharm]:
    SlurmdCharm.seen_keys = []
    return testing.Context(SlurmdCharm, meta=SLURMD_META)


@pytest.fixture
def slurmctld_ctx() -> testing.Context[SlurmctldCharm]:
    return testing.Context(SlurmctldCharm, meta=SLURMCTLD_META)


def kinds(ctx: testing.Context[Any]) -> list[str]:
    return [e.handle.kind for e in ctx.emitted_events]


def all_databag_text(state: testing.State) -> str:
    parts: list[str] = []
    for relation in state.relations:
        parts.append(json.dumps(dict(relation.local_app_data)))
        parts.append(json.dumps(dict(relation.local_unit_data)))
    return "\n".join(parts)


# Models.


def test_empty_databag_models_parse() -> None:
    assert ControllerData() == ControllerData(auth_key_id=None, controllers=None)
    assert ControllerData().is_complete is False
    assert ComputeData().is_complete is False


def test_compute_data_validates_with_slurmutils() -> None:
    with pytest.raises(ValidationError):
        ComputeData.model_validate({"partition": {"partitionname": "p", "colour": "blue"}})
    with pytest.raises(ValidationError):
        ComputeData(nodeset={"nodeset": "n", "feature": 3})


# Provider side (the slurmd charm).


def test_connected_leader_publishes_compute_data(slurmd_ctx: testing.Context[SlurmdCharm]) -> None:
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")

    out = slurmd_ctx.run(
        slurmd_ctx.on.relation_created(relation), testing.State(leader=True, relations={relation})
    )

    data = out.get_relation(relation.id).local_app_data
    assert json.loads(data["partition"]) == PARTITION
    assert json.loads(data["nodeset"]) == NODESET


def test_publish_is_idempotent(slurmd_ctx: testing.Context[SlurmdCharm]) -> None:
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")
    state = testing.State(leader=True, relations={relation})

    first = slurmd_ctx.run(slurmd_ctx.on.relation_created(relation), state)
    second = slurmd_ctx.run(slurmd_ctx.on.relation_created(first.get_relation(relation.id)), first)

    assert first.get_relation(relation.id).local_app_data == (
        second.get_relation(relation.id).local_app_data
    )


def test_non_leader_does_not_publish(slurmd_ctx: testing.Context[SlurmdCharm]) -> None:
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")

    out = slurmd_ctx.run(
        slurmd_ctx.on.relation_created(relation), testing.State(leader=False, relations={relation})
    )

    assert dict(out.get_relation(relation.id).local_app_data) == {}


def test_ready_reads_the_granted_secret(slurmd_ctx: testing.Context[SlurmdCharm]) -> None:
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})
    relation = granted_relation(secret)

    slurmd_ctx.run(
        slurmd_ctx.on.relation_changed(relation),
        testing.State(relations={relation}, secrets={secret}),
    )

    assert SlurmdCharm.seen_keys == [AUTH_KEY]


@pytest.mark.parametrize(
    "remote_app_data",
    [
        {},
        {"controllers": json.dumps([{"hostname": "ctl-0", "address": "10.0.0.1"}])},
        {"auth_key_id": json.dumps("secret:abc")},
        {"auth_key_id": json.dumps("secret:abc"), "controllers": json.dumps([])},
        {
            "auth_key_id": "not json",
            "controllers": json.dumps([{"hostname": "ctl-0", "address": "10.0.0.1"}]),
        },
        {"auth_key_id": json.dumps(5), "controllers": json.dumps("ctl-0")},
    ],
    ids=["empty", "no-key", "no-controllers", "zero-controllers", "malformed", "wrong-types"],
)
def test_incomplete_or_bad_controller_data_is_not_ready(
    slurmd_ctx: testing.Context[SlurmdCharm], remote_app_data: dict[str, str]
) -> None:
    relation = testing.Relation(
        "slurmctld", remote_app_name="slurmctld", remote_app_data=remote_app_data
    )

    slurmd_ctx.run(slurmd_ctx.on.relation_changed(relation), testing.State(relations={relation}))

    assert SlurmdCharm.seen_keys == []


def test_auth_key_before_ready_is_an_integration_error() -> None:
    ctx = testing.Context(SlurmdCharm, meta=SLURMD_META)
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")

    with (
        ctx(ctx.on.update_status(), testing.State(relations={relation})) as manager,
        pytest.raises(IntegrationError),
    ):
        manager.charm.slurmctld.auth_key()
        assert manager.charm.slurmctld.controller_data == ControllerData()
        assert manager.charm.slurmctld.is_ready() is False


def test_secret_not_granted_is_an_integration_error() -> None:
    ctx = testing.Context(SlurmdCharm, meta=SLURMD_META)
    relation = testing.Relation(
        "slurmctld",
        remote_app_name="slurmctld",
        remote_app_data={
            "auth_key_id": json.dumps("secret:cqnf3a9ta1nbkc1rr8m0"),
            "controllers": json.dumps([{"hostname": "ctl-0", "address": "10.0.0.1"}]),
        },
    )

    with (
        ctx(ctx.on.update_status(), testing.State(relations={relation})) as manager,
        pytest.raises(IntegrationError),
    ):
        manager.charm.slurmctld.auth_key()


def test_this_unit_departing_is_disconnected() -> None:
    # Scenario names the departing unit after the remote application, so this scenario
    # gives the relation's remote side this charm's own name to make unit slurmd/3 depart.
    ctx = testing.Context(SlurmdCharm, meta=SLURMD_META, unit_id=3)
    relation = testing.Relation("slurmctld", remote_app_name="slurmd")

    ctx.run(
        ctx.on.relation_departed(relation, remote_unit=3, departing_unit=3),
        testing.State(relations={relation}),
    )

    assert "slurmctld_disconnected" in kinds(ctx)
    event = next(e for e in ctx.emitted_events if e.handle.kind == "slurmctld_disconnected")
    assert isinstance(event, SlurmctldDisconnectedEvent)


def test_a_controller_departing_is_not_disconnected(
    slurmd_ctx: testing.Context[SlurmdCharm],
) -> None:
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")

    slurmd_ctx.run(
        slurmd_ctx.on.relation_departed(relation, remote_unit=1, departing_unit=1),
        testing.State(relations={relation}),
    )

    assert "slurmctld_disconnected" not in kinds(slurmd_ctx)


def test_relation_broken_is_disconnected(slurmd_ctx: testing.Context[SlurmdCharm]) -> None:
    relation = testing.Relation("slurmctld", remote_app_name="slurmctld")

    slurmd_ctx.run(slurmd_ctx.on.relation_broken(relation), testing.State(relations={relation}))

    assert "slurmctld_disconnected" in kinds(slurmd_ctx)


# Requirer side (the slurmctld charm).


def compute_databag(data: ComputeData) -> dict[str, str]:
    return {k: json.dumps(v) for k, v in data.model_dump().items()}


def test_slurmd_ready_grants_the_secret_and_publishes_only_its_id(
    slurmctld_ctx: testing.Context[SlurmctldCharm],
) -> None:
    relation = testing.Relation(
        "slurmd", remote_app_name="compute", remote_app_data=compute_databag(COMPUTE)
    )

    out = slurmctld_ctx.run(
        slurmctld_ctx.on.relation_changed(relation),
        testing.State(leader=True, relations={relation}),
    )

    secret = out.get_secret(label=AUTH_KEY_LABEL)
    assert secret.owner == "app"
    assert secret.tracked_content == {"key": AUTH_KEY}
    assert secret.remote_grants == {relation.id: {"compute"}}
    data = out.get_relation(relation.id).local_app_data
    assert json.loads(data["auth_key_id"]) == secret.id
    assert json.loads(data["controllers"]) == [
        {"hostname": "ctl-0", "address": "10.0.0.1", "port": None},
        {"hostname": "ctl-1", "address": "10.0.0.2", "port": 7817},
    ]
    assert AUTH_KEY not in all_databag_text(out)


def test_existing_secret_is_reused_and_publish_is_idempotent(
    slurmctld_ctx: testing.Context[SlurmctldCharm],
) -> None:
    secret = testing.Secret(tracked_content={"key": AUTH_KEY}, label=AUTH_KEY_LABEL, owner="app")
    relation = testing.Relation(
        "slurmd", remote_app_name="compute", remote_app_data=compute_databag(COMPUTE)
    )
    state = testing.State(leader=True, relations={relation}, secrets={secret})

    first = slurmctld_ctx.run(slurmctld_ctx.on.relation_changed(relation), state)
    second = slurmctld_ctx.run(
        slurmctld_ctx.on.relation_changed(first.get_relation(relation.id)), first
    )

    assert len(second.secrets) == 1
    assert json.loads(second.get_relation(relation.id).local_app_data["auth_key_id"]) == secret.id
    assert first.get_relation(relation.id).local_app_data == (
        second.get_relation(relation.id).local_app_data
    )


@pytest.mark.parametrize(
    "remote_app_data",
    [
        {},
        {"nodeset": json.dumps(NODESET)},
        {"partition": json.dumps({"partitionname": "p", "colour": "blue"}), "nodeset": "{}"},
        {"partition": "{not json", "nodeset": json.dumps(NODESET)},
    ],
    ids=["empty", "no-partition", "bad-partition-key", "malformed"],
)
def test_incomplete_or_bad_compute_data_is_not_ready(
    slurmctld_ctx: testing.Context[SlurmctldCharm], remote_app_data: dict[str, str]
) -> None:
    relation = testing.Relation(
        "slurmd", remote_app_name="compute", remote_app_data=remote_app_data
    )

    out = slurmctld_ctx.run(
        slurmctld_ctx.on.relation_changed(relation),
        testing.State(leader=True, relations={relation}),
    )

    assert dict(out.get_relation(relation.id).local_app_data) == {}


def test_compute_data_read_back(slurmctld_ctx: testing.Context[SlurmctldCharm]) -> None:
    relation = testing.Relation(
        "slurmd", remote_app_name="compute", remote_app_data=compute_databag(COMPUTE)
    )

    with slurmctld_ctx(
        slurmctld_ctx.on.update_status(), testing.State(relations={relation})
    ) as manager:
        rel = manager.charm.model.get_relation("slurmd", relation.id)
        assert rel is not None
        assert manager.charm.slurmd.compute_data(rel) == COMPUTE


def test_non_leader_controller_does_not_publish(
    slurmctld_ctx: testing.Context[SlurmctldCharm],
) -> None:
    secret = testing.Secret(tracked_content={"key": AUTH_KEY}, label=AUTH_KEY_LABEL, owner="app")
    relation = testing.Relation(
        "slurmd", remote_app_name="compute", remote_app_data=compute_databag(COMPUTE)
    )

    out = slurmctld_ctx.run(
        slurmctld_ctx.on.relation_changed(relation),
        testing.State(leader=False, relations={relation}, secrets={secret}),
    )

    assert dict(out.get_relation(relation.id).local_app_data) == {}


def test_non_leader_cannot_create_the_secret(
    slurmctld_ctx: testing.Context[SlurmctldCharm],
) -> None:
    with (
        slurmctld_ctx(slurmctld_ctx.on.update_status(), testing.State()) as manager,
        pytest.raises(IntegrationError),
    ):
        get_or_create_auth_key_secret(manager.charm, lambda: AUTH_KEY)


def test_slurmd_application_leaving_is_disconnected(
    slurmctld_ctx: testing.Context[SlurmctldCharm],
) -> None:
    relation = testing.Relation("slurmd", remote_app_name="compute")

    slurmctld_ctx.run(
        slurmctld_ctx.on.relation_broken(relation), testing.State(relations={relation})
    )

    assert "slurmd_disconnected" in kinds(slurmctld_ctx)
    event = next(e for e in slurmctld_ctx.emitted_events if e.handle.kind == "slurmd_disconnected")
    assert isinstance(event, SlurmdDisconnectedEvent)


# `config_digest`: the digest of the configuration slurmctld last applied.

CONTROLLERS_BAG = json.dumps([{"hostname": "ctl-0", "address": "10.0.0.1"}])


@pytest.mark.parametrize("digest", ["0123abcd", "9f86d081884c7d65", "a" * 64])
def test_a_valid_config_digest_is_read_and_ready(
    slurmd_ctx: testing.Context[SlurmdCharm], digest: str
) -> None:
    secret = testing.Secret(tracked_content={"key": AUTH_KEY})
    relation = testing.Relation(
        "slurmctld",
        remote_app_name="slurmctld",
        remote_app_data={
            "auth_key_id": json.dumps(secret.id),
            "controllers": CONTROLLERS_BAG,
            "config_digest": json.dumps(digest),
        },
    )

    with slurmd_ctx(
        slurmd_ctx.on.relation_changed(relation),
        testing.State(relations={relation}, secrets={secret}),
    ) as manager:
        data = manager.charm.slurmctld.controller_data
        manager.run()

    assert data is not None and data.config_digest == digest
    assert SlurmdCharm.seen_keys == [AUTH_KEY]


@pytest.mark.parametrize(
    "digest",
    [
        "9F86D081884C7D65",
        "abc",
        "a" * 65,
        "9f86d081\n884c7d65",
        "9f86d081 --conf=x",
        "zz86d081884c7d65",
        "",
        5,
        ["9f86d081884c7d65"],
    ],
    ids=["upper", "short", "long", "newline", "argument", "not-hex", "empty", "int", "list"],
)
def test_a_hostile_config_digest_makes_the_data_not_ready(
    slurmd_ctx: testing.Context[SlurmdCharm], digest: object
) -> None:
    relation = testing.Relation(
        "slurmctld",
        remote_app_name="slurmctld",
        remote_app_data={
            "auth_key_id": json.dumps("secret:abc"),
            "controllers": CONTROLLERS_BAG,
            "config_digest": json.dumps(digest),
        },
    )

    slurmd_ctx.run(slurmd_ctx.on.relation_changed(relation), testing.State(relations={relation}))

    assert SlurmdCharm.seen_keys == []


def test_the_controller_publishes_the_config_digest_with_the_controllers() -> None:
    class DigestCharm(ops.CharmBase):
        def __init__(self, framework: ops.Framework) -> None:
            super().__init__(framework)
            self.slurmd = SlurmdRequirer(self, "slurmd")
            framework.observe(self.on["slurmd"].relation_changed, self._on_changed)

        def _on_changed(self, event: ops.RelationChangedEvent) -> None:
            secret = get_or_create_auth_key_secret(self, lambda: AUTH_KEY)
            entries = [ControllerEntry(hostname="ctl-0", address="10.0.0.1")]
            self.slurmd.publish_controller_data(event.relation, secret, entries, "0123abcd")

    ctx = testing.Context(DigestCharm, meta=SLURMCTLD_META)
    relation = testing.Relation(
        "slurmd", remote_app_name="compute", remote_app_data=compute_databag(COMPUTE)
    )

    out = ctx.run(
        ctx.on.relation_changed(relation), testing.State(leader=True, relations={relation})
    )

    assert json.loads(out.get_relation(relation.id).local_app_data["config_digest"]) == "0123abcd"


def test_a_bad_config_digest_is_never_published() -> None:
    with pytest.raises(ValidationError):
        ControllerData(config_digest="0123abcd\nmore")
