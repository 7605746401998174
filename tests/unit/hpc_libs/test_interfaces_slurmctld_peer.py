"""The slurmctld peer application databag, read from raw databag vectors."""

import json

import ops
import pytest
from hpc_libs.interfaces.base import MAX_FIELD_CHARS
from hpc_libs.interfaces.slurmctld_peer import (
    ControllerHost,
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


@pytest.mark.parametrize(
    "field",
    [
        "[" * 100_000 + "]" * 100_000,  # Deeper than Python's recursion limit.
        "[" * 33 + "]" * 33,
        '{"a":' * 40 + "1" + "}" * 40,
        json.dumps(["x" * MAX_FIELD_CHARS]),
    ],
)
def test_too_deep_or_too_long_json_reads_as_nothing_remembered(field, caplog):
    assert read({"partitions": field, "controllers": json.dumps([{"unit": "c/0"}])}) == (
        SlurmctldPeerData()
    )
    assert "ignoring invalid SlurmctldPeerData data" in caplog.text


def test_nesting_as_deep_as_allowed_is_read():
    deep = {"partitionname": "compute", "nodes": ["compute"]}
    assert read({"partitions": json.dumps([{**PARTITION, "partition": deep}])}).partitions


# Each unit's host, in its own unit databag, as plain strings.


class HostCharm(ops.CharmBase):
    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.peer = SlurmctldPeer(self)
        self.hosts: dict[str, ControllerHost] = {}
        self.problems: list[str] = []
        framework.observe(self.on.update_status, self._on_update_status)

    def _on_update_status(self, _: ops.EventBase) -> None:
        self.hosts = self.peer.hosts()
        self.problems = self.peer.host_problems()


def hosts_of(peers: dict[int, dict[str, str]]) -> tuple[dict[str, ControllerHost], list[str]]:
    ctx = testing.Context(HostCharm, meta=META)
    peer = testing.PeerRelation("slurmctld-peer", peers_data=peers)
    with ctx(ctx.on.update_status(), testing.State(relations=[peer])) as manager:
        manager.run()
        return manager.charm.hosts, manager.charm.problems


def test_valid_host_vectors_are_read_as_plain_strings():
    hosts, problems = hosts_of(
        {
            1: {"hostname": "ctl1", "address": "10.0.0.1"},
            2: {"hostname": "ctl2.example", "address": "fe80::2%eth0"},
            3: {"hostname": "ctl3"},  # Not complete yet: not a controller, not a problem.
        }
    )

    assert hosts == {
        "ctl/1": ControllerHost(hostname="ctl1", address="10.0.0.1"),
        "ctl/2": ControllerHost(hostname="ctl2.example", address="fe80::2%eth0"),
    }
    assert problems == []


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            {"hostname": "ctl_1", "address": "10.0.0.1"},
            "ctl/1 sent an invalid hostname: 'ctl_1' is not a host name",
        ),
        (
            {"hostname": "ctl1\nSlurmUser=root", "address": "10.0.0.1"},
            "ctl/1 sent an invalid hostname: '\\n' is whitespace, a control or a non-ASCII "
            "character",
        ),
        (
            {"hostname": "ctl1", "address": "10.0.0.1 -f"},
            "ctl/1 sent an invalid address: ' ' is whitespace, a control or a non-ASCII character",
        ),
        (
            {"hostname": "ctl1", "address": "fe80::1%a,b"},
            "ctl/1 sent an invalid address: 'fe80::1%a,b' is not an IPv6 address with an "
            "interface name after '%'",
        ),
        (
            {"hostname": "ctl1", "address": "x" * (MAX_FIELD_CHARS + 1)},
            f"ctl/1 sent unreadable data: a field of {MAX_FIELD_CHARS + 1} characters "
            f"(more than {MAX_FIELD_CHARS})",
        ),
    ],
)
def test_an_invalid_host_vector_is_left_out_and_named(data, problem):
    hosts, problems = hosts_of({1: data, 2: {"hostname": "ctl2", "address": "10.0.0.2"}})

    assert list(hosts) == ["ctl/2"]
    assert problems == [problem]


@pytest.mark.parametrize(
    ("raw", "read_as"),
    [("true", True), ("false", False), ('"true"', None), ("1", None), ("null", None)],
)
def test_native_metrics_is_a_json_boolean_or_not_said_and_keeps_the_rest(raw, read_as):
    data = read({"native_metrics": raw, "departed_nodes": '[{"name": "c-1"}]'})

    assert data.native_metrics is read_as
    assert data.departed_nodes == [DepartedNode(name="c-1")]


MANAGED = {"qos": ["short"], "accounts": ["physics"], "users": ["alice", "bob"]}
DIGEST = "ab" * 32


def test_the_accounts_record_is_read_from_its_raw_vector():
    data = read({"accounts_managed": json.dumps(MANAGED), "accounts_applied": json.dumps(DIGEST)})

    assert data.accounts_managed is not None
    managed = data.accounts_managed.managed()
    assert (managed.qos, managed.accounts, managed.users) == (
        {"short"},
        {"physics"},
        {"alice", "bob"},
    )
    assert data.accounts_applied == DIGEST


@pytest.mark.parametrize(
    "raw",
    [
        {**MANAGED, "users": ["alice", "bob\nroot"]},
        {**MANAGED, "accounts": ["Physics Dept"]},
        {**MANAGED, "users": "alice"},
        ["alice"],
    ],
)
def test_an_invalid_accounts_record_reads_as_nothing_managed_and_keeps_the_rest(raw, caplog):
    data = read(
        {
            "accounts_managed": json.dumps(raw),
            "departed_nodes": json.dumps([{"name": "compute-3"}]),
        }
    )

    assert data.accounts_managed is None
    assert [n.name for n in data.departed_nodes or []] == ["compute-3"]
    assert "skipping invalid accounts_managed" in caplog.text


@pytest.mark.parametrize("raw", ["AB" * 32, "ab" * 31, 7, "ab" * 32 + "\n"])
def test_an_invalid_applied_digest_reads_as_not_said(raw):
    data = read({"accounts_applied": json.dumps(raw), "accounts_managed": json.dumps(MANAGED)})

    assert data.accounts_applied is None
    assert data.accounts_managed is not None


def test_the_leaders_config_digest_is_read_from_its_raw_vector():
    assert read({"config_digest": '"0123456789abcdef"'}).config_digest == "0123456789abcdef"


@pytest.mark.parametrize("raw", ["0123456789ABCDEF", "abc", "ab" * 33, 7, "ab" * 8 + "\n"])
def test_an_invalid_config_digest_reads_as_not_said_and_keeps_the_rest(raw):
    data = read(
        {"config_digest": json.dumps(raw), "departed_nodes": json.dumps([{"name": "compute-3"}])}
    )

    assert data.config_digest is None
    assert [n.name for n in data.departed_nodes or []] == ["compute-3"]
