"""Scenarios for the mount_info interface, with raw databag vectors of the filesystem-client.

The vectors are the exact strings the published filesystem-client charm reads (the principal's
app databag, decoded with `json.loads` per key into its `MountInfo` dataclass) and writes (its
unit databag, `mounted` as a plain `"true"`/`"false"`).
"""

from typing import Any, ClassVar

import ops
import pytest
from hpc_libs.interfaces.mount_info import MountInfo, MountInfoProvider
from ops import testing

CHECKPOINT = "/var/lib/slurm/checkpoint"

# What the real subordinate expects to find in the principal's app databag.
REQUEST_VECTOR = {
    "mountpoint": '"/var/lib/slurm/checkpoint"',
    "noexec": "false",
    "nosuid": "false",
    "nodev": "false",
    "read_only": "false",
}


class PrincipalCharm(ops.CharmBase):
    """Asks for the checkpoint mount when connected; records what it sees."""

    seen: ClassVar[list[tuple[str, list[bool]]]] = []
    info: ClassVar[MountInfo] = MountInfo(mountpoint=CHECKPOINT)

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.mount = MountInfoProvider(self)
        framework.observe(self.on["mount"].relation_created, self._on_connected)
        framework.observe(self.on["mount"].relation_changed, self._on_changed)
        framework.observe(self.mount.on.mount_disconnected, self._on_disconnected)

    def _on_connected(self, _: ops.EventBase) -> None:
        self.mount.publish(PrincipalCharm.info)

    def _on_changed(self, _: ops.EventBase) -> None:
        PrincipalCharm.seen.append(("changed", self.mount.answers()))

    def _on_disconnected(self, _: ops.EventBase) -> None:
        PrincipalCharm.seen.append(("disconnected", []))


META: dict[str, Any] = {
    "name": "slurmctld",
    "provides": {"mount": {"interface": "mount_info", "scope": "container"}},
}


@pytest.fixture
def ctx() -> testing.Context[PrincipalCharm]:
    PrincipalCharm.seen = []
    PrincipalCharm.info = MountInfo(mountpoint=CHECKPOINT)
    return testing.Context(PrincipalCharm, meta=META)


def mount_relation(**kwargs: Any) -> testing.SubordinateRelation:
    return testing.SubordinateRelation(
        "mount", interface="mount_info", remote_app_name="filesystem-client", **kwargs
    )


def test_leader_writes_exactly_the_bytes_the_filesystem_client_reads(
    ctx: testing.Context[PrincipalCharm],
) -> None:
    relation = mount_relation()

    out = ctx.run(
        ctx.on.relation_created(relation), testing.State(leader=True, relations={relation})
    )

    assert dict(out.get_relation(relation.id).local_app_data) == REQUEST_VECTOR


def test_options_are_json_booleans_under_their_wire_names(
    ctx: testing.Context[PrincipalCharm],
) -> None:
    PrincipalCharm.info = MountInfo(mountpoint="/srv/state", nosuid=True, read_only=True)
    relation = mount_relation()

    out = ctx.run(
        ctx.on.relation_created(relation), testing.State(leader=True, relations={relation})
    )

    assert dict(out.get_relation(relation.id).local_app_data) == {
        "mountpoint": '"/srv/state"',
        "noexec": "false",
        "nosuid": "true",
        "nodev": "false",
        "read_only": "true",
    }


def test_non_leader_writes_nothing(ctx: testing.Context[PrincipalCharm]) -> None:
    relation = mount_relation()

    out = ctx.run(
        ctx.on.relation_created(relation), testing.State(leader=False, relations={relation})
    )

    assert dict(out.get_relation(relation.id).local_app_data) == {}


def test_publish_is_idempotent() -> None:
    ctx = testing.Context(PrincipalCharm, meta=META)
    relation = mount_relation(local_app_data=dict(REQUEST_VECTOR))

    with ctx(ctx.on.update_status(), testing.State(leader=True, relations={relation})) as manager:
        charm = manager.charm
        assert charm.mount.publish(MountInfo(mountpoint=CHECKPOINT)) is False
        assert charm.mount.publish(MountInfo(mountpoint="/srv")) is True
        assert charm.mount.publish(MountInfo(mountpoint="/srv")) is False
        assert charm.mount.requested(charm.mount.relations[0]) == MountInfo(mountpoint="/srv")


def test_publish_refuses_a_request_without_mountpoint() -> None:
    ctx = testing.Context(PrincipalCharm, meta=META)
    relation = mount_relation()
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations={relation})) as manager:
        with pytest.raises(ValueError, match="mountpoint"):
            manager.charm.mount.publish(MountInfo())
        assert manager.charm.mount.requested(manager.charm.mount.relations[0]) is None


@pytest.mark.parametrize(
    "mountpoint",
    ["var/lib/x", "/", "/a b", "/a\nb", "/a/../b", "/a/", "/a#b", "/a'b", '/a"b', "/a\\b"],
)
def test_bad_mountpoints_are_refused(mountpoint: str) -> None:
    with pytest.raises(ValueError):
        MountInfo(mountpoint=mountpoint)


@pytest.mark.parametrize(
    ("unit_data", "answers"),
    [
        ({"mounted": "true"}, [True]),
        ({"mounted": "false"}, [False]),
        # Juju's own keys are not JSON and are never decoded.
        ({"mounted": "true", "ingress-address": "10.0.0.1"}, [True]),
        ({}, []),
        # Invalid answers are logged and skipped.
        ({"mounted": "yes"}, []),
        ({"mounted": "1"}, []),
        ({"mounted": '"true"'}, []),
    ],
)
def test_the_subordinate_answer_is_read_from_its_unit_databag(
    ctx: testing.Context[PrincipalCharm],
    unit_data: dict[str, str],
    answers: list[bool],
) -> None:
    relation = mount_relation(remote_unit_data=unit_data)

    ctx.run(ctx.on.relation_changed(relation, remote_unit=0), testing.State(relations={relation}))

    assert PrincipalCharm.seen == [("changed", answers)]


def test_invalid_answer_is_logged(
    ctx: testing.Context[PrincipalCharm], caplog: pytest.LogCaptureFixture
) -> None:
    relation = mount_relation(remote_unit_data={"mounted": "yes"})

    ctx.run(ctx.on.relation_changed(relation, remote_unit=0), testing.State(relations={relation}))

    assert "ignoring invalid MountState data" in caplog.text


def test_invalid_request_in_own_databag_reads_as_nothing_requested() -> None:
    ctx = testing.Context(PrincipalCharm, meta=META)
    # An unquoted mountpoint: what breaks the real subordinate's json.loads.
    relation = mount_relation(local_app_data={"mountpoint": CHECKPOINT})
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations={relation})) as manager:
        assert manager.charm.mount.requested(manager.charm.mount.relations[0]) is None
        assert manager.charm.mount.publish(MountInfo(mountpoint=CHECKPOINT)) is True
        out = manager.run()
    assert dict(out.get_relation(relation.id).local_app_data) == REQUEST_VECTOR


def test_relation_broken_is_reported(ctx: testing.Context[PrincipalCharm]) -> None:
    relation = mount_relation(remote_unit_data={"mounted": "true"})

    ctx.run(ctx.on.relation_broken(relation), testing.State(relations={relation}))

    assert PrincipalCharm.seen == [("disconnected", [])]
