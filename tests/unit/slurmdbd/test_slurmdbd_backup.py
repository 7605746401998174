"""Two slurmdbd units, active and backup: join order, slurmdbd.conf, statuses, publishing.

The peer databags are given raw, as the charm writes them: the leader's `dbds` (the join
order, objects with a `unit`), each unit's `hostname` and `address` (JSON strings). Each
scenario fires one event on one unit (its number set with `unit_ctx`) and checks the files,
the databags and the status.
"""

import dataclasses
import json
import socket
from collections.abc import Callable
from pathlib import Path

import ops
import pytest
from charm_testing import FakeMachine, already_installed
from ops import testing
from test_slurmdbd_accounting import (
    auth_secret,
    conf,
    conf_path,
    jwt_path,
    jwt_secret,
    key_path,
    mysql,
    slurmctld,
    user_secret,
)

UnitContext = Callable[[int], testing.Context[ops.CharmBase]]
HOSTS = {0: ("dbd-0", "10.0.0.10"), 1: ("dbd-1", "10.0.0.11"), 2: ("dbd-2", "10.0.0.12")}
WHERE = "accounting in slurm_acct_db on 10.0.0.5"
RUNS = "24.11.5"
"""The Slurm release each unit shares (the fake machine's dpkg reports 24.11.5-1)."""


@pytest.fixture
def hostname(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Make this machine `dbd-<n>` (slurmdbd compares DbdHost with its short host name)."""

    def set_unit(unit_id: int) -> None:
        monkeypatch.setattr(socket, "gethostname", lambda: f"{HOSTS[unit_id][0]}.lab.example")

    return set_unit


def shared(unit_id: int) -> dict[str, str]:
    """What unit `unit_id` puts in its peer unit databag."""
    name, address = HOSTS[unit_id]
    return {
        "hostname": json.dumps(name),
        "address": json.dumps(address),
        "version": json.dumps(RUNS),
    }


def order(*unit_ids: int) -> dict[str, str]:
    """The leader's peer app databag recording this join order."""
    return {"dbds": json.dumps([{"unit": f"slurmdbd/{n}"} for n in unit_ids])}


def peer(
    me: int, others: dict[int, dict[str, str]], app: dict[str, str] | None = None
) -> testing.PeerRelation:
    return testing.PeerRelation(
        "slurmdbd-peer",
        local_app_data=app or {},
        local_unit_data=shared(me),
        peers_data=others,
    )


def network(unit_id: int) -> testing.Network:
    """This unit's address on the `slurmctld` endpoint."""
    address = HOSTS[unit_id][1]
    return testing.Network(
        "slurmctld",
        bind_addresses=[testing.BindAddress([testing.Address(address)])],
        ingress_addresses=[address],
    )


def state(
    me: int,
    relation: testing.PeerRelation,
    *,
    leader: bool = False,
    config: dict[str, str | int | float | bool] | None = None,
) -> tuple[testing.State, testing.Relation]:
    """Unit `me`, installed, integrated with slurmctld and mysql, with `relation` as peers."""
    key, jwt, user = auth_secret(), jwt_secret(), user_secret()
    database = mysql(user)
    return (
        testing.State(
            leader=leader,
            relations={database, slurmctld(key, jwt), relation},
            secrets={key, jwt, user},
            networks={network(me)},
            config=config or {},
            stored_states={already_installed("SlurmdbdCharm")},
        ),
        database,
    )


def tcp_table(root: Path, table: str) -> None:
    """Give the machine (under the charm's `root`) the TCP table `table` (/proc/net/tcp)."""
    tables = root / "proc/net"
    tables.mkdir(parents=True)
    (tables / "tcp").write_text(table)


def published(out: testing.State) -> list[dict[str, object]]:
    relation = next(r for r in out.relations if r.endpoint == "slurmctld")
    return json.loads(relation.local_app_data.get("dbds", "null")) or []


def peer_out(out: testing.State) -> testing.PeerRelation:
    found = next(r for r in out.relations if r.endpoint == "slurmdbd-peer")
    assert isinstance(found, testing.PeerRelation)
    return found


# The join order and slurmdbd.conf.


def test_the_leader_records_the_join_order_and_names_the_backup(
    unit_ctx: UnitContext,
    hostname: Callable[[int], None],
    machine: FakeMachine,
    dbd_root: Path,
):
    hostname(0)
    before, database = state(0, peer(0, {1: shared(1)}), leader=True)

    out = unit_ctx(0).run(unit_ctx(0).on.relation_changed(database), before)

    assert json.loads(peer_out(out).local_app_data["dbds"]) == [
        {"unit": "slurmdbd/0"},
        {"unit": "slurmdbd/1"},
    ]
    written = conf(dbd_root)
    assert (written["dbdhost"], written["dbdaddr"], written["dbdbackuphost"]) == (
        "dbd-0",
        "10.0.0.10",
        "dbd-1",
    )
    assert machine.calls("restart") == ["slurmdbd"]
    assert published(out) == [
        {"hostname": "dbd-0", "address": "10.0.0.10", "port": 6819, "version": RUNS},
        {"hostname": "dbd-1", "address": "10.0.0.11", "port": 6819, "version": RUNS},
    ]
    assert out.unit_status == ops.ActiveStatus(f"primary slurmdbd, backup dbd-1; {WHERE}")


def test_the_backup_writes_the_same_conf_and_stands_by(
    unit_ctx: UnitContext,
    hostname: Callable[[int], None],
    machine: FakeMachine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    from hpc_libs.slurm.slurmdbd import SlurmdbdManager

    roots = {n: tmp_path / f"unit{n}" for n in (0, 1)}
    original = SlurmdbdManager.__init__
    outs: dict[int, testing.State] = {}
    for n, other in ((0, 1), (1, 0)):
        monkeypatch.setattr(
            SlurmdbdManager, "__init__", lambda self, root=roots[n]: original(self, root)
        )
        hostname(n)
        before, database = state(n, peer(n, {other: shared(other)}, order(0, 1)), leader=n == 0)
        outs[n] = unit_ctx(n).run(unit_ctx(n).on.relation_changed(database), before)

    assert conf_path(roots[0]).read_text() == conf_path(roots[1]).read_text()
    assert machine.calls("restart") == ["slurmdbd", "slurmdbd"]
    assert outs[1].unit_status == ops.ActiveStatus(
        f"backup slurmdbd for dbd-0, standing by; {WHERE}"
    )
    assert peer_out(outs[1]).local_app_data == order(0, 1)  # a non-leader writes no order
    assert published(outs[1]) == []


def test_a_backup_in_control_says_so(
    unit_ctx: UnitContext,
    hostname: Callable[[int], None],
    machine: FakeMachine,
    dbd_root: Path,
):
    """The backup listens on 6819 only while it is in control (Slurm 24.11)."""
    hostname(1)
    tcp_table(
        dbd_root,
        "  sl  local_address rem_address   st tx_queue rx_queue\n"
        "   0: 00000000:1AA3 00000000:0000 0A 00000000:00000000 00:00000000\n",
    )
    before, _ = state(1, peer(1, {0: shared(0)}, order(0, 1)))

    out = unit_ctx(1).run(unit_ctx(1).on.update_status(), before)

    assert out.unit_status == ops.ActiveStatus(
        f"backup slurmdbd in control: primary dbd-0 does not answer; {WHERE}"
    )


def test_a_connection_to_port_6819_is_not_listening(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    """A standby backup has only outgoing connections to the primary's 6819 (state 01)."""
    hostname(1)
    tcp_table(
        dbd_root,
        "  sl  local_address rem_address   st\n"
        "   0: 0B00000A:A1B2 0A00000A:1AA3 01 00000000:00000000\n"
        "   1: 00000000:1AA4 00000000:0000 0A 00000000:00000000\n",
    )
    before, _ = state(1, peer(1, {0: shared(0)}, order(0, 1)))

    out = unit_ctx(1).run(unit_ctx(1).on.update_status(), before)

    assert isinstance(out.unit_status, ops.ActiveStatus)
    assert "standing by" in out.unit_status.message


def test_a_new_leader_keeps_the_recorded_order(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(1)
    before, _ = state(1, peer(1, {0: shared(0)}, order(0, 1)), leader=True)

    out = unit_ctx(1).run(unit_ctx(1).on.leader_elected(), before)

    assert peer_out(out).local_app_data == order(0, 1)
    assert (conf(dbd_root)["dbdhost"], conf(dbd_root)["dbdbackuphost"]) == ("dbd-0", "dbd-1")
    assert [d["hostname"] for d in published(out)] == ["dbd-0", "dbd-1"]
    assert out.unit_status.message.startswith("backup slurmdbd for dbd-0")


def test_the_recorded_order_wins_over_unit_numbers(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(0)
    before, _ = state(0, peer(0, {1: shared(1)}, order(1, 0)), leader=True)

    out = unit_ctx(0).run(unit_ctx(0).on.update_status(), before)

    assert (conf(dbd_root)["dbdhost"], conf(dbd_root)["dbdbackuphost"]) == ("dbd-1", "dbd-0")
    assert peer_out(out).local_app_data == order(1, 0)


def test_the_backup_becomes_the_lone_primary_when_the_primary_leaves(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(1)
    relation = peer(1, {0: shared(0)}, order(0, 1))
    before, _ = state(1, relation, leader=True)
    out = unit_ctx(1).run(unit_ctx(1).on.update_status(), before)
    gone = dataclasses.replace(peer_out(out), peers_data={})

    out = unit_ctx(1).run(
        unit_ctx(1).on.relation_departed(gone, remote_unit=0, departing_unit=0),
        dataclasses.replace(out, relations={*[r for r in out.relations if r.id != gone.id], gone}),
    )

    written = conf(dbd_root)
    assert written["dbdhost"] == "dbd-1"
    assert "dbdbackuphost" not in written
    assert "dbdaddr" not in written
    assert peer_out(out).local_app_data == order(1)
    assert published(out) == [
        {"hostname": "dbd-1", "address": "10.0.0.11", "port": 6819, "version": RUNS}
    ]
    assert machine.calls("restart") == ["slurmdbd", "slurmdbd"]
    assert out.unit_status == ops.ActiveStatus(WHERE)


def test_a_departing_unit_stops_slurmdbd_and_leaves_the_published_pair(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    """The leaving unit sees no peers: it must not become a second primary meanwhile."""
    hostname(1)
    before, _ = state(1, peer(1, {0: shared(0)}, order(0, 1)), leader=True)
    out = unit_ctx(1).run(unit_ctx(1).on.update_status(), before)
    leaving = dataclasses.replace(peer_out(out), peers_data={})

    out = unit_ctx(1).run(
        unit_ctx(1).on.relation_departed(leaving, remote_unit=0, departing_unit=1),
        dataclasses.replace(
            out, relations={*[r for r in out.relations if r.id != leaving.id], leaving}
        ),
    )

    assert machine.calls("restart") == ["slurmdbd"]
    assert machine.calls("stop") == ["slurmdbd"]
    assert not conf_path(dbd_root).exists()
    assert [d["hostname"] for d in published(out)] == ["dbd-0", "dbd-1"]
    assert out.unit_status == ops.MaintenanceStatus("leaving: slurmdbd stopped")


def test_a_third_unit_is_idle_and_blocked(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(2)
    before, database = state(2, peer(2, {0: shared(0), 1: shared(1)}, order(0, 1, 2)))

    out = unit_ctx(2).run(unit_ctx(2).on.relation_changed(database), before)

    assert machine.calls("restart") == []
    assert not conf_path(dbd_root).exists()
    assert not key_path(dbd_root).exists()
    assert not jwt_path(dbd_root).exists()
    assert out.unit_status == ops.BlockedStatus(
        "slurmdbd supports one backup; this unit is idle (primary dbd-0, backup dbd-1)"
    )


def test_a_third_unit_moves_up_when_the_backup_leaves(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(2)
    before, _ = state(2, peer(2, {0: shared(0)}, order(0, 1, 2)))

    out = unit_ctx(2).run(unit_ctx(2).on.update_status(), before)

    assert (conf(dbd_root)["dbdhost"], conf(dbd_root)["dbdbackuphost"]) == ("dbd-0", "dbd-2")
    assert machine.calls("restart") == ["slurmdbd"]
    assert out.unit_status.message.startswith("backup slurmdbd for dbd-0")


def test_a_newcomer_joins_after_the_recorded_units(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    """Unit 0 joins after unit 1 was recorded alone: unit 1 stays the primary."""
    hostname(0)
    before, _ = state(0, peer(0, {1: shared(1)}, order(1)), leader=True)

    out = unit_ctx(0).run(unit_ctx(0).on.update_status(), before)

    assert peer_out(out).local_app_data == order(1, 0)
    assert conf(dbd_root)["dbdhost"] == "dbd-1"


def test_a_unit_shares_its_host_name_and_address(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(1)
    relation = testing.PeerRelation("slurmdbd-peer", peers_data={0: shared(0)})
    before, _ = state(1, relation)

    out = unit_ctx(1).run(unit_ctx(1).on.relation_changed(relation, remote_unit=0), before)

    assert json.loads(peer_out(out).local_unit_data["hostname"]) == "dbd-1"
    assert json.loads(peer_out(out).local_unit_data["address"]) == "10.0.0.11"


def test_waits_for_the_primary_to_share_its_host_and_starts_nothing(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(1)
    before, database = state(1, peer(1, {0: {}}, order(0, 1)))

    out = unit_ctx(1).run(unit_ctx(1).on.relation_changed(database), before)

    assert out.unit_status == ops.WaitingStatus("waiting for slurmdbd/0 to share its host")
    assert machine.calls("restart") == []
    assert not conf_path(dbd_root).exists()


@pytest.mark.parametrize(
    "unit_data",
    [
        # A host name or address that would add a key, or is no host at all.
        {"hostname": '"dbd-0\\nStorageHost=evil"', "address": '"10.0.0.10"'},
        {"hostname": '"dbd-0"', "address": '"10.0.0.10 DbdPort=1"'},
        {"hostname": '"dbd_0"', "address": '"10.0.0.10"'},
        {"hostname": "dbd-0", "address": '"10.0.0.10"'},  # not JSON
    ],
)
def test_bad_peer_host_data_is_never_written(
    unit_ctx: UnitContext,
    hostname: Callable[[int], None],
    machine: FakeMachine,
    dbd_root: Path,
    unit_data: dict[str, str],
):
    hostname(1)
    before, database = state(1, peer(1, {0: unit_data}, order(0, 1)))

    out = unit_ctx(1).run(unit_ctx(1).on.relation_changed(database), before)

    assert not conf_path(dbd_root).exists()
    assert out.unit_status == ops.WaitingStatus("waiting for slurmdbd/0 to share its host")


def test_bad_order_entries_are_skipped(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(1)
    app = {
        "dbds": json.dumps(
            [
                {"unit": "slurmdbd/9\nDbdHost=evil"},
                "slurmdbd/2",
                {"unit": 3},
                {"unit": "slurmdbd/0"},
            ]
        )
    }
    before, _ = state(1, peer(1, {0: shared(0)}, app))

    unit_ctx(1).run(unit_ctx(1).on.update_status(), before)

    assert (conf(dbd_root)["dbdhost"], conf(dbd_root)["dbdbackuphost"]) == ("dbd-0", "dbd-1")
    assert "evil" not in conf_path(dbd_root).read_text()


def test_a_lone_unit_without_peers_writes_no_backup(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(0)
    before, _ = state(0, testing.PeerRelation("slurmdbd-peer"), leader=True)

    out = unit_ctx(0).run(unit_ctx(0).on.update_status(), before)

    written = conf(dbd_root)
    assert written["dbdhost"] == "dbd-0"
    assert "dbdbackuphost" not in written
    assert out.unit_status == ops.ActiveStatus(WHERE)
