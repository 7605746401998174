"""The slurmctld peer application databag, read from raw databag vectors."""

import json

import ops
import pytest
from hpc_libs.interfaces.slurmctld_peer import (
    DepartedNode,
    PartitionEntry,
    SlurmctldPeer,
    SlurmctldPeerData,
)
from ops import testing

META = {"name": "ctl", "peers": {"slurmctld-peer": {"interface": "slurmctld-peer"}}}


class PeerCharm(ops.CharmBase):
    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.peer = SlurmctldPeer(self)
        self.seen: SlurmctldPeerData | None = None
        framework.observe(self.on.update_status, self._on_update_status)
        framework.observe(self.on.config_changed, self._on_config_changed)

    def _on_update_status(self, _: ops.EventBase) -> None:
        self.seen = self.peer.read()

    def _on_config_changed(self, _: ops.EventBase) -> None:
        self.peer.write(SlurmctldPeerData(departed_nodes=[DepartedNode(name="c-1")]))


def read(raw: dict[str, str]) -> SlurmctldPeerData:
    ctx = testing.Context(PeerCharm, meta=META)
    peer = testing.PeerRelation("slurmctld-peer", local_app_data=raw)
    with ctx(ctx.on.update_status(), testing.State(leader=True, relations=[peer])) as manager:
        manager.run()
        assert manager.charm.seen is not None
        return manager.charm.seen


PARTITION = {
    "name": "compute",
    "partition": {"partitionname": "compute", "nodes": ["compute"], "maxtime": 60},
    "nodeset": {"nodeset": "compute", "feature": "compute"},
    "relation_id": 4,
    "retiring": True,
    "drained": False,
}


def test_empty_databag_reads_as_nothing_remembered():
    assert read({}) == SlurmctldPeerData()


def test_valid_vector():
    data = read(
        {
            "partitions": json.dumps([PARTITION]),
            "departed_nodes": json.dumps([{"name": "compute-3"}]),
            "controllers": json.dumps([{"unit": "slurmctld/1"}, {"unit": "slurmctld/0"}]),
        }
    )

    assert data.partitions == [PartitionEntry.model_validate(PARTITION)]
    assert [n.name for n in data.departed_nodes or []] == ["compute-3"]
    assert [c.unit for c in data.controllers or []] == ["slurmctld/1", "slurmctld/0"]


@pytest.mark.parametrize(
    "bad",
    [
        {**PARTITION, "name": "a b"},
        {**PARTITION, "partition": {"partitionname": "x", "maxtime": "60 Nodes=ALL"}},
        {**PARTITION, "nodeset": {"nodeset": "x", "nodes": "a\nb"}},
        {**PARTITION, "relation_id": "four"},
        "compute",
    ],
)
def test_an_invalid_partition_entry_is_skipped_and_the_rest_read(bad):
    data = read({"partitions": json.dumps([bad, PARTITION])})

    assert [p.name for p in data.partitions or []] == ["compute"]


@pytest.mark.parametrize("name", ["x;y", "a b", "", "n=1"])
def test_an_invalid_departed_node_is_skipped(name):
    data = read({"departed_nodes": json.dumps([{"name": name}, {"name": "ok-1"}])})

    assert [n.name for n in data.departed_nodes or []] == ["ok-1"]


def test_unreadable_json_reads_as_nothing_remembered():
    assert read({"partitions": "not json"}) == SlurmctldPeerData()


def test_unknown_keys_are_ignored():
    assert read({"surprise": '"x"'}) == SlurmctldPeerData()


@pytest.mark.parametrize("leader", [True, False])
def test_only_the_leader_writes(leader):
    ctx = testing.Context(PeerCharm, meta=META)
    peer = testing.PeerRelation("slurmctld-peer")

    out = ctx.run(ctx.on.config_changed(), testing.State(leader=leader, relations=[peer]))

    written = out.get_relation(peer.id).local_app_data
    if leader:
        assert json.loads(written["departed_nodes"]) == [{"name": "c-1"}]
    else:
        assert written == {}
