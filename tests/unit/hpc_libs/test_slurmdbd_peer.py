"""hpc_libs.interfaces.slurmdbd_peer: the join order and the hosts, from raw databag vectors."""

import json

import ops
import pytest
from hpc_libs.interfaces.base import join_order
from hpc_libs.interfaces.slurmdbd_peer import DbdHost, SlurmdbdPeer, SlurmdbdPeerData
from ops import testing

META = {"name": "slurmdbd", "peers": {"slurmdbd-peer": {"interface": "slurmdbd_peer"}}}


class Charm(ops.CharmBase):
    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.peer = SlurmdbdPeer(self)
        framework.observe(self.on.update_status, self._on_update_status)
        self.seen: dict[str, object] = {}

    def _on_update_status(self, _: ops.EventBase) -> None:
        self.seen["order"] = self.peer.recorded().order()
        self.seen["units"] = self.peer.units()
        self.seen["hosts"] = self.peer.hosts()
        self.seen["recorded"] = self.peer.record(["slurmdbd/0", "slurmdbd/1"])
        self.seen["shared"] = self.peer.share(DbdHost(hostname="dbd-0", address="10.0.0.10"))


def run(
    relation: testing.PeerRelation | None, *, leader: bool = True
) -> tuple[Charm, testing.State]:
    ctx = testing.Context(Charm, meta=META)
    state = testing.State(leader=leader, relations={relation} if relation else set())
    with ctx(ctx.on.update_status(), state) as manager:
        out = manager.run()
        return manager.charm, out


@pytest.mark.parametrize(
    ("recorded", "present", "expected"),
    [
        ([], ["slurmdbd/1", "slurmdbd/0"], ["slurmdbd/0", "slurmdbd/1"]),
        (["slurmdbd/1", "slurmdbd/0"], ["slurmdbd/0", "slurmdbd/1"], ["slurmdbd/1", "slurmdbd/0"]),
        (["slurmdbd/0", "slurmdbd/1"], ["slurmdbd/1"], ["slurmdbd/1"]),
        (
            ["slurmdbd/3"],
            ["slurmdbd/10", "slurmdbd/3", "slurmdbd/2"],
            ["slurmdbd/3", "slurmdbd/2", "slurmdbd/10"],
        ),
        (["slurmdbd/0", "slurmdbd/0"], ["slurmdbd/0"], ["slurmdbd/0"]),
    ],
)
def test_join_order_keeps_known_units_and_appends_newcomers_by_number(
    recorded: list[str], present: list[str], expected: list[str]
):
    assert join_order(recorded, present) == expected


def test_the_order_and_the_hosts_are_read_from_raw_databags():
    relation = testing.PeerRelation(
        "slurmdbd-peer",
        local_app_data={"dbds": '[{"unit": "slurmdbd/1"}, {"unit": "slurmdbd/0"}]'},
        peers_data={
            1: {"hostname": '"dbd-1"', "address": '"10.0.0.11"'},
            2: {"hostname": '"bad host"', "address": '"10.0.0.12"'},
            3: {},
        },
    )

    charm, out = run(relation)

    assert charm.seen["order"] == ["slurmdbd/1", "slurmdbd/0"]
    assert charm.seen["units"] == [
        "slurmdbd/0",
        "slurmdbd/1",
        "slurmdbd/2",
        "slurmdbd/3",
    ]  # sorted
    assert charm.seen["hosts"] == {
        "slurmdbd/1": DbdHost(hostname="dbd-1", address="10.0.0.11"),
        "slurmdbd/3": DbdHost(),
    }
    assert charm.seen["recorded"] is True
    peer = next(iter(out.relations))
    assert json.loads(peer.local_app_data["dbds"]) == [
        {"unit": "slurmdbd/0"},
        {"unit": "slurmdbd/1"},
    ]
    assert peer.local_unit_data["hostname"] == '"dbd-0"'
    assert peer.local_unit_data["address"] == '"10.0.0.10"'


def test_writing_is_idempotent_and_a_non_leader_records_nothing():
    relation = testing.PeerRelation(
        "slurmdbd-peer",
        local_app_data={"dbds": '[{"unit": "slurmdbd/0"}, {"unit": "slurmdbd/1"}]'},
        local_unit_data={"hostname": '"dbd-0"', "address": '"10.0.0.10"'},
    )

    leader, _ = run(relation)
    follower, _ = run(relation, leader=False)

    assert (leader.seen["recorded"], leader.seen["shared"]) == (False, False)
    assert follower.seen["recorded"] is False


def test_without_the_peer_relation_the_unit_is_alone():
    charm, _ = run(None)

    assert charm.seen["units"] == ["slurmdbd/0"]
    assert charm.seen["order"] == []
    assert (charm.seen["recorded"], charm.seen["shared"]) == (False, False)


@pytest.mark.parametrize(
    "slot",
    [{"unit": "slurmdbd/0\nDbdHost=x"}, {"unit": "slurmdbd"}, {"unit": 0}, "slurmdbd/0", None],
)
def test_invalid_order_entries_are_skipped(slot: object):
    data = SlurmdbdPeerData.model_validate({"dbds": [slot, {"unit": "slurmdbd/1"}]})

    assert data.order() == ["slurmdbd/1"]


@pytest.mark.parametrize(
    "fields",
    [
        {"hostname": "dbd-0.lab\nStorageHost=x"},
        {"hostname": "dbd_0"},
        {"address": "10.0.0.1 DbdPort=1"},
        {"address": "10.0.0.1,10.0.0.2"},
    ],
)
def test_host_data_breaking_the_grammar_is_refused(fields: dict[str, str]):
    with pytest.raises(ValueError):
        DbdHost.model_validate(fields)
