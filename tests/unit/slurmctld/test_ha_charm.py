"""Scenarios for controller high availability: network state, backups, order, roles, wake-up."""

import base64
import dataclasses
import json
import socket
import struct
import time
from pathlib import Path

import pytest
from charm_testing import already_installed
from ops import testing
from scenario.state import _Event  # The event a dispatch path names.
from test_charm_slurmctld import (
    KEY,
    PEER,
    RECONFIGURE,
    compute_relation,
    conf_servers,
    databag,
    jwt_secret,
    later,
    memory,
    running,
    slurm_conf,
)

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

CHECKPOINT = "/var/lib/slurm/checkpoint"
NETWORK = {"use-network-state": True}
PROGRAM = "/usr/local/libexec/slurmctld-charm/primary-changed"
MOUNT_REQUEST = {
    "mountpoint": '"/var/lib/slurm/checkpoint"',
    "noexec": "true",
    "nosuid": "true",
    "nodev": "true",
    "read_only": "false",
}


def mount(mounted: str | None = "true") -> testing.SubordinateRelation:
    """The filesystem-client subordinate on this machine, answering as its charm does."""
    answer = {} if mounted is None else {"mounted": mounted}
    return testing.SubordinateRelation(
        "mount", remote_app_name="filesystem-client", remote_unit_data=answer
    )


def peer(*units: tuple[int, str, str], order: list[int] | None = None) -> testing.PeerRelation:
    """The peer relation: (unit number, hostname, address) per peer, and the recorded order."""
    app = {} if order is None else databag(controllers=[{"unit": f"slurmctld/{n}"} for n in order])
    return testing.PeerRelation(
        PEER,
        local_app_data=app,
        peers_data={n: {"hostname": h, "address": a} for n, h, a in units},
    )


def network_leader(*relations: testing.RelationBase, **kwargs) -> testing.State:
    """The leader with network state on, its filesystem-client integrated."""
    kwargs.setdefault("config", NETWORK)
    if not any(r.endpoint == "mount" for r in relations):
        relations = (*relations, mount())
    return running(*relations, **kwargs)


def backup(*relations: testing.RelationBase, **kwargs) -> testing.State:
    """A unit besides the leader, installed, network state on."""
    kwargs.setdefault("config", NETWORK)
    if not any(r.endpoint == "mount" for r in relations):
        relations = (*relations, mount())
    if not any(isinstance(r, testing.PeerRelation) for r in relations):
        relations = (*relations, peer((9, "ctl9", "10.0.0.9")))
    return testing.State(
        leader=False,
        relations=list(relations),
        stored_states={already_installed("SlurmctldCharm")},
        **kwargs,
    )


def leader_wrote(checkpoint: Path, *hosts: str, **conf: object) -> Path:
    """What the leader puts on the share for the backups: slurm.conf and the keys."""
    shared = checkpoint / "etc-slurm"
    shared.mkdir(parents=True, exist_ok=True)
    (shared / "slurm.key").write_bytes(base64.b64decode(KEY))
    lines = [f"slurmctldhost={h}" for h in hosts or ("ctl9(10.0.0.9)", "ctl0(192.0.2.0)")]
    lines.append(f"statesavelocation={CHECKPOINT}/slurmctld")
    lines += [f"{k}={v}" for k, v in conf.items()]
    (shared / "slurm.conf").write_text("\n".join(lines) + "\n")
    return shared


def controllers_answer(machine, *up: str) -> None:
    """`scontrol ping --json` (24.11) answered by the hosts `up`, in that order."""
    pings = [{"hostname": h, "pinged": "UP", "responding": True} for h in up]
    machine.responses[("scontrol", "ping")] = json.dumps({"meta": META_24_11, "pings": pings})


def beat(checkpoint: Path, index: int, age: float = 0.0) -> None:
    """The heartbeat controller `index` wrote into the shared StateSaveLocation `age` s ago."""
    path = checkpoint / "slurmctld" / "heartbeat"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack(">QQ", int(time.time() - age), index))


def standing_by(ctx, machine, shared_fs: Path, **conf: object) -> testing.State:
    """A backup (ctl0, this unit) settled behind ctl9 with the leader's files; no call kept."""
    controllers_answer(machine, "ctl9", "ctl0")
    leader_wrote(shared_fs, **conf)
    state = ctx.run(ctx.on.update_status(), backup())
    machine.service_calls.clear()
    return state


def slurmctld_calls(machine) -> list[tuple[str, str]]:
    """What was done to slurmctld itself (not to the primary watch's units)."""
    return [call for call in machine.service_calls if call[1] == "slurmctld"]


def hosts(tmp_path: Path) -> list[str]:
    return [
        line for line in slurm_conf(tmp_path).splitlines() if line.startswith("slurmctldhost=")
    ]


# Without network state: one controller, the leader.


def test_a_second_unit_without_network_state_is_blocked_and_serves_nothing(ctx, machine, tmp_path):
    state = testing.State(
        leader=False,
        relations=[peer((9, "ctl9", "10.0.0.9"))],
        stored_states={already_installed("SlurmctldCharm")},
    )

    out = ctx.run(ctx.on.config_changed(), state)

    assert out.unit_status == testing.BlockedStatus(
        "high availability needs use-network-state=true and a filesystem-client integration "
        "on 'mount'; this unit stands by"
    )
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert machine.calls("start") == []


def test_a_former_leader_without_network_state_stops_its_controller(ctx, machine):
    machine.active.add("slurmctld")
    state = testing.State(
        leader=False,
        relations=[peer((1, "ctl1", "10.0.0.1"))],
        stored_states={already_installed("SlurmctldCharm")},
    )

    ctx.run(ctx.on.config_changed(), state)

    assert machine.calls("stop") == ["slurmctld"]  # Two primaries would split the queue.


def test_the_leader_without_network_state_is_the_only_controller(ctx, machine, tmp_path):
    relation = compute_relation()
    peers = peer((1, "ctl1", "10.0.0.1"), order=[0, 1])

    out = ctx.run(ctx.on.relation_changed(relation), running(relation, peers))

    assert hosts(tmp_path) == ["slurmctldhost=ctl0(192.0.2.0)"]
    assert "statesavelocation=/var/lib/slurm/slurmctld" in slurm_conf(tmp_path).splitlines()
    assert conf_servers(out.get_relation(relation.id).local_app_data) == ["192.0.2.0:6817"]
    assert memory(out)["controllers"] == [{"unit": "slurmctld/0"}, {"unit": "slurmctld/1"}]
    assert not (tmp_path / "etc/slurm").is_symlink()
    assert out.get_relation(peers.id).local_app_data  # The order is kept for later.


def test_the_failover_timers_are_in_slurm_conf(ctx, machine, tmp_path):
    ctx.run(
        ctx.on.config_changed(), running(config={"slurmctld-timeout": 20, "message-timeout": 8})
    )

    conf = slurm_conf(tmp_path).splitlines()
    assert "slurmctldtimeout=20" in conf
    assert "messagetimeout=8" in conf


def test_the_default_timers_fail_over_quickly(ctx, machine, tmp_path):
    ctx.run(ctx.on.config_changed(), running())

    conf = slurm_conf(tmp_path).splitlines()
    assert "slurmctldtimeout=4" in conf
    assert "messagetimeout=2" in conf


def test_a_message_timeout_over_half_the_slurmctld_timeout_is_refused(ctx, machine, tmp_path):
    out = ctx.run(
        ctx.on.config_changed(), running(config={"slurmctld-timeout": 12, "message-timeout": 7})
    )

    assert out.unit_status.name == "blocked"
    assert out.unit_status.message.startswith("invalid config option 'message-timeout': ")
    assert "at most half of slurmctld-timeout" in out.unit_status.message
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()


# Install only installs.


def test_install_only_installs(ctx, machine, tmp_path):
    out = ctx.run(ctx.on.install(), testing.State(leader=True))

    assert "slurmctld" in machine.installed
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert not (tmp_path / "etc/slurm/slurm.key").exists()
    assert machine.calls("start") == []
    assert not out.secrets

    ctx.run(ctx.on.start(), testing.State(leader=True, stored_states=out.stored_states))

    assert (tmp_path / "etc/slurm/slurm.key").exists()
    assert machine.calls("start") == ["slurmctld"]


# Network state: the mount first.


def test_network_state_without_a_filesystem_client_blocks_saying_what_to_integrate(
    ctx, machine, tmp_path
):
    out = ctx.run(ctx.on.config_changed(), running(config=NETWORK))

    assert out.unit_status == testing.BlockedStatus(
        f"use-network-state needs a filesystem-client integration on 'mount' ({CHECKPOINT})"
    )
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert machine.service_calls == []


def test_the_leader_asks_for_the_mount_with_json_values(ctx, machine):
    relation = mount(mounted=None)

    out = ctx.run(ctx.on.relation_created(relation), network_leader(relation))

    assert dict(out.get_relation(relation.id).local_app_data) == MOUNT_REQUEST


def test_a_backup_never_writes_the_mount_request(ctx, machine):
    relation = mount(mounted=None)

    out = ctx.run(ctx.on.relation_created(relation), backup(relation))

    assert out.get_relation(relation.id).local_app_data == {}


def test_without_network_state_nothing_is_asked_of_a_filesystem_client(ctx, machine):
    relation = mount(mounted=None)

    out = ctx.run(ctx.on.relation_created(relation), running(relation))

    assert out.get_relation(relation.id).local_app_data == {}


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("true", "is not a mount point"),
        (None, "is not a mount point"),
        ("false", "(it reports not mounted)"),
        ("yes", "is not a mount point"),  # Invalid: logged and skipped.
    ],
)
def test_the_controller_waits_until_the_checkpoint_is_really_mounted(
    ctx, machine, tmp_path, answer, why
):
    relation = mount(answer)

    out = ctx.run(ctx.on.relation_changed(relation), network_leader(relation))

    assert out.unit_status.name == "waiting"
    assert CHECKPOINT in out.unit_status.message
    assert out.unit_status.message.endswith(why)
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert machine.service_calls == []
    checkpoint = tmp_path / CHECKPOINT.lstrip("/")
    assert machine.ran("ls") == [["ls", "-A", "--", f"{checkpoint}/"]]  # Accessed, once.


def test_a_filesystem_client_leaving_stops_nothing_but_waits_again(
    ctx, machine, tmp_path, shared_fs
):
    state = ctx.run(ctx.on.config_changed(), network_leader())
    machine.service_calls.clear()
    gone = testing.State(
        leader=True,
        config=NETWORK,
        relations=[r for r in state.relations if r.endpoint != "mount"],
        secrets=state.secrets,
        stored_states=state.stored_states,
    )

    out = ctx.run(ctx.on.update_status(), gone)

    assert out.unit_status.name == "blocked"
    assert machine.service_calls == []  # A running controller is never stopped for it.


# The leader on the share.


def test_the_leader_moves_etc_slurm_and_state_to_the_share_and_starts(
    ctx, machine, tmp_path, shared_fs
):
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/local.conf").write_text("mine\n")

    out = ctx.run(ctx.on.config_changed(), network_leader())

    etc = tmp_path / "etc/slurm"
    assert etc.is_symlink() and etc.resolve() == (shared_fs / "etc-slurm").resolve()
    [backup_dir] = list(tmp_path.glob("etc/slurm_*"))
    assert (backup_dir / "local.conf").read_text() == "mine\n"
    conf = (shared_fs / "etc-slurm/slurm.conf").read_text().splitlines()
    assert f"statesavelocation={CHECKPOINT}/slurmctld" in conf
    assert f"slurmctldprimaryonprog={PROGRAM}" in conf
    assert f"slurmctldprimaryoffprog={PROGRAM}" in conf
    assert (shared_fs / "etc-slurm/slurm.key").read_bytes() == base64.b64decode(KEY)
    assert (shared_fs / "slurmctld").is_dir()
    assert set(machine.calls("start")) == {"slurmctld", "slurmctld-charm-primary.path"}
    assert out.unit_status.name == "active"


def test_the_leader_refuses_an_etc_slurm_on_the_share_not_written_as_the_charm_writes(
    ctx, machine, tmp_path, shared_fs
):
    """A tree left on the share is served configless: each entry is checked, none followed."""
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/local.conf").write_text("mine\n")
    shared = shared_fs / "etc-slurm"
    (shared / "plugstack.conf.d").mkdir(parents=True)
    (shared / "slurm.conf").write_text("clustername=old\n")
    (shared / "plugstack.conf.d/x.conf").write_text("")
    (shared / "plugstack.conf.d/x.conf").chmod(0o664)

    out = ctx.run(ctx.on.config_changed(), network_leader())

    assert out.unit_status == testing.BlockedStatus(
        f"refusing to serve {shared} configless: file {shared}/plugstack.conf.d/x.conf is "
        "writable by group or others (0664)"
    )
    assert not (tmp_path / "etc/slurm").is_symlink()
    assert list(tmp_path.glob("etc/slurm_*")) == []  # Refused before any backup.
    assert (shared / "slurm.conf").read_text() == "clustername=old\n"
    assert "slurmctld" not in machine.calls("start")


def test_a_backup_reads_nothing_from_an_etc_slurm_with_a_link_and_says_so(
    ctx, machine, tmp_path, shared_fs
):
    shared = leader_wrote(shared_fs)
    (tmp_path / "secret").write_text("root's\n")
    (shared / "cgroup.conf").symlink_to(tmp_path / "secret")

    out = ctx.run(ctx.on.config_changed(), backup())

    assert out.unit_status == testing.BlockedStatus(
        f"refusing to serve {shared} configless: {shared}/cgroup.conf is a symbolic link"
    )
    assert not (tmp_path / "etc/slurm").is_symlink()
    assert "slurmctld" not in machine.calls("start")


def test_a_running_controller_moves_to_the_share_without_losing_its_queue(
    ctx, machine, tmp_path, shared_fs
):
    state = ctx.run(ctx.on.update_status(), running(mount()))  # Local state, running.
    local = tmp_path / "var/lib/slurm/slurmctld"
    (local / "job_state").write_bytes(b"50 queued jobs and a running one")
    machine.service_calls.clear()

    ctx.run(
        ctx.on.config_changed(),
        testing.State(
            leader=True,
            config=NETWORK,
            relations=state.relations,
            secrets=state.secrets,
            stored_states=state.stored_states,
        ),
    )

    calls = machine.service_calls
    assert calls.index(("stop", "slurmctld")) < calls.index(("start", "slurmctld"))
    assert ("restart", "slurmctld") not in calls
    network = shared_fs / "slurmctld/job_state"
    assert network.read_bytes() == b"50 queued jobs and a running one"
    assert f"statesavelocation={CHECKPOINT}/slurmctld" in slurm_conf(tmp_path).splitlines()
    assert list(tmp_path.glob("etc/slurm_*"))  # The old /etc/slurm is kept.


def test_a_failed_stop_moves_nothing_and_the_next_event_moves_it(
    ctx, machine, tmp_path, shared_fs
):
    state = ctx.run(ctx.on.update_status(), running(mount()))
    (tmp_path / "var/lib/slurm/slurmctld/job_state").write_bytes(b"queue")
    machine.service_fails("slurmctld", "slurmctld: error: stop timed out", verbs=("stop",))
    moving = testing.State(
        leader=True,
        config=NETWORK,
        relations=state.relations,
        secrets=state.secrets,
        stored_states=state.stored_states,
    )

    out = ctx.run(ctx.on.config_changed(), moving)

    assert out.unit_status.name == "blocked"
    assert "stop" in out.unit_status.message
    assert not (tmp_path / "etc/slurm").is_symlink()
    assert not (shared_fs / "slurmctld").exists()

    machine.heal()
    ctx.run(ctx.on.update_status(), moving)

    assert (shared_fs / "slurmctld/job_state").read_bytes() == b"queue"
    assert (tmp_path / "etc/slurm").is_symlink()


def test_a_leader_that_has_not_seen_every_controller_does_not_move_its_state_yet(
    ctx, machine, tmp_path, shared_fs
):
    state = ctx.run(ctx.on.update_status(), running(mount()))
    machine.service_calls.clear()
    peers = peer((1, "ctl1", "10.0.0.1"))

    out = ctx.run(
        ctx.on.config_changed(),
        testing.State(
            leader=True,
            config=NETWORK,
            relations=[*(r for r in state.relations if r.endpoint != PEER), peers],
            secrets=state.secrets,
            stored_states=state.stored_states,
            planned_units=3,
        ),
    )

    assert slurmctld_calls(machine) == []  # Still serving from local state.
    assert not (tmp_path / "etc/slurm").is_symlink()
    assert out.unit_status == testing.WaitingStatus(
        "waiting to see every controller before changing them (2 of 3 seen)"
    )


def test_network_state_cannot_be_turned_off_once_on(ctx, machine, tmp_path, shared_fs):
    state = ctx.run(ctx.on.config_changed(), network_leader())
    before = slurm_conf(tmp_path)
    machine.service_calls.clear()

    out = ctx.run(
        ctx.on.config_changed(),
        testing.State(
            leader=True,
            config={"use-network-state": False},
            relations=state.relations,
            secrets=state.secrets,
            stored_states=state.stored_states,
        ),
    )

    assert out.unit_status == testing.BlockedStatus(
        "use-network-state cannot be turned off: the queue lives on the shared filesystem; "
        "set it back to true"
    )
    assert slurm_conf(tmp_path) == before
    assert machine.service_calls == []


# Backups: every other unit runs slurmctld from the leader's files.


def test_a_backup_waits_for_the_leaders_files_on_the_share(ctx, machine, tmp_path, shared_fs):
    out = ctx.run(ctx.on.config_changed(), backup())

    assert out.unit_status == testing.WaitingStatus(
        "waiting for the leader's slurm.conf (listing this unit) and keys on the shared filesystem"
    )
    assert not (tmp_path / "etc/slurm").is_symlink()
    assert machine.calls("start") == ["slurmctld-charm-primary.path"]


def test_a_backup_the_leader_has_not_listed_yet_does_not_start(ctx, machine, tmp_path, shared_fs):
    leader_wrote(shared_fs, "ctl9(10.0.0.9)")  # This unit (ctl0) joined after the leader wrote.

    out = ctx.run(ctx.on.config_changed(), backup())

    assert out.unit_status.name == "waiting"
    assert "slurmctld" not in machine.calls("start")
    assert not (tmp_path / "etc/slurm").is_symlink()


def test_a_backup_runs_slurmctld_from_the_shared_files_and_writes_nothing(
    ctx, machine, tmp_path, shared_fs
):
    shared = leader_wrote(shared_fs)
    before = {p.name: p.read_bytes() for p in shared.iterdir()}

    out = ctx.run(ctx.on.config_changed(), backup(secrets=[jwt_secret()]))

    assert (tmp_path / "etc/slurm").is_symlink()
    assert {p.name: p.read_bytes() for p in shared.iterdir()} == before
    assert "slurmctld" in machine.calls("start")
    assert machine.ran(*RECONFIGURE) == []
    peer_data = out.get_relation(next(r.id for r in out.relations if r.endpoint == PEER))
    assert peer_data.local_app_data == {}  # Only the leader writes the peer memory.


def test_a_standby_restarts_for_a_change_and_says_the_timeout_it_runs_with(
    ctx, machine, tmp_path, shared_fs
):
    """A backup reads slurm.conf only at start or on SIGHUP (backup.c), never at a reconfigure.

    So the SlurmctldTimeout it judges the primary by is the one it last loaded: a standby is
    restarted for a change (a SIGHUP would keep its plugins and forget its cluster id), and
    the unit says which SlurmctldTimeout it now runs with.
    """
    controllers_answer(machine, "ctl9", "ctl0")  # ctl0, this unit, stands by.
    leader_wrote(shared_fs)
    state = ctx.run(ctx.on.config_changed(), backup())
    state = ctx.run(ctx.on.update_status(), state)
    machine.service_calls.clear()
    state = ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == []  # Nothing changed: nothing reloaded.

    leader_wrote(shared_fs, maxnodecount=64, slurmctldtimeout=300)
    state = ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]
    assert machine.ran(*RECONFIGURE) == []
    peer = next(r for r in state.relations if r.endpoint == PEER)
    assert peer.local_unit_data["slurmctld_timeout"] == "300"
    machine.service_calls.clear()

    leader_wrote(shared_fs, "ctl9(10.0.0.9)", "ctl0(192.0.2.0)", "ctl2(10.0.0.2)")
    ctx.run(ctx.on.update_status(), state)
    assert machine.calls("restart") == ["slurmctld"]


def test_a_standby_follows_the_share_at_the_peer_event_of_the_leaders_new_digest(
    ctx, machine, shared_fs
):
    """Juju gives no event for a file: the leader's new `config_digest` in the peer memory is
    the other controllers' event to follow the files it changed on the share."""
    state = standing_by(ctx, machine, shared_fs)
    leader_wrote(shared_fs, slurmdtimeout=31)
    [memory] = [r for r in state.relations if isinstance(r, testing.PeerRelation)]
    memory = dataclasses.replace(
        memory, local_app_data={**memory.local_app_data, "config_digest": json.dumps("ab" * 8)}
    )
    others = [r for r in state.relations if r is not memory and r.endpoint != PEER]
    changed = dataclasses.replace(state, relations=[*others, memory])

    ctx.run(ctx.on.relation_changed(memory), changed)

    assert slurmctld_calls(machine) == [("restart", "slurmctld")]
    assert machine.ran(*RECONFIGURE) == []


METRICS_ON = {"metricstype": "metrics/openmetrics"}


@pytest.mark.parametrize(
    "plugin",
    [METRICS_ON, {"preempttype": "preempt/qos"}, {"jobsubmitplugins": "lua"}],
    ids=["metrics", "preemption", "job-submit"],
)
def test_a_standby_restarts_to_load_a_plugin_slurm_conf_now_names(ctx, machine, shared_fs, plugin):
    """A standby's SIGHUP re-reads slurm.conf but loads no plugin (backup.c); one reloaded
    into MetricsType served an empty body once in control (forky lab). It restarts instead,
    and for a later change too: a SIGHUP would also make it forget its cluster id."""
    state = standing_by(ctx, machine, shared_fs)

    leader_wrote(shared_fs, **plugin)
    state = ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]
    machine.service_calls.clear()

    leader_wrote(shared_fs, maxnodecount=64, **plugin)
    ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]


def test_a_backup_in_control_is_never_restarted_for_a_plugin(ctx, machine, shared_fs):
    """In control (the primary is down) a SIGHUP re-executes slurmctld, which loads every
    plugin: a restart would stop the cluster's only controller."""
    controllers_answer(machine, "ctl0")  # ctl9 does not answer: ctl0 took over,
    beat(shared_fs, 1)  # and names itself in the heartbeat.
    leader_wrote(shared_fs)
    state = ctx.run(ctx.on.update_status(), backup())
    machine.service_calls.clear()

    leader_wrote(shared_fs, **METRICS_ON)
    state = ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("reload", "slurmctld")]
    machine.service_calls.clear()

    ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == []  # Re-executed: nothing is left to load.


def test_a_standby_that_cannot_tell_its_role_reloads_and_restarts_once_it_can(
    ctx, machine, shared_fs
):
    leader_wrote(shared_fs)
    state = ctx.run(ctx.on.update_status(), backup())
    machine.service_calls.clear()
    machine.fail("scontrol", "ping", stderr="Unable to contact slurm controller")

    leader_wrote(shared_fs, **METRICS_ON)
    state = ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("reload", "slurmctld")]
    machine.heal()
    machine.service_calls.clear()
    controllers_answer(machine, "ctl9", "ctl0")

    ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]


def test_a_standby_whose_ping_times_out_is_told_by_the_heartbeat(ctx, machine, shared_fs):
    """On a busy machine `scontrol ping` times out; the heartbeat is a file on the share."""
    state = standing_by(ctx, machine, shared_fs)
    machine.fail("scontrol", "ping", stderr="Socket timed out on send/recv operation")
    beat(shared_fs, 0)

    leader_wrote(shared_fs, **METRICS_ON)
    ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]


@pytest.mark.parametrize("primary_beat_age", [0.0, 10.0], ids=["just-beaten", "beat-10s-ago"])
def test_a_standby_answering_alone_while_the_primary_beats_is_still_restarted(
    ctx, machine, shared_fs, primary_beat_age
):
    """A primary that misses a ping (re-executed by the leader's reconfigure, on a busy
    machine) leaves the standby first to answer, yet not in control while the primary's
    heartbeat is fresh (half SlurmctldTimeout, 15 s here). Taken for a takeover, a standby is
    only reloaded as accounting comes, and takes over later with no cluster id."""
    state = standing_by(ctx, machine, shared_fs, slurmctldtimeout=30)
    controllers_answer(machine, "ctl0")
    beat(shared_fs, 0, age=primary_beat_age)

    leader_wrote(shared_fs, slurmctldtimeout=30, **METRICS_ON)
    ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]


def test_a_standby_answering_alone_without_a_fresh_heartbeat_waits_to_tell(
    ctx, machine, shared_fs
):
    """The primary down and no fresh heartbeat: a takeover may be under way. Reloaded, never
    restarted, and the plugins stay unconfirmed until an event can tell."""
    state = standing_by(ctx, machine, shared_fs, slurmctldtimeout=8)
    controllers_answer(machine, "ctl0")
    beat(shared_fs, 0, age=5.0)

    leader_wrote(shared_fs, slurmctldtimeout=8, **METRICS_ON)
    state = ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("reload", "slurmctld")]
    machine.service_calls.clear()
    controllers_answer(machine, "ctl9", "ctl0")

    ctx.run(ctx.on.update_status(), state)
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]


@pytest.mark.parametrize(("order", "restarts"), [([0, 2], []), ([2, 0], ["slurmctld"])])
def test_a_leader_standing_by_restarts_what_its_reconfigure_does_not_reach(
    ctx, machine, shared_fs, order, restarts
):
    """`scontrol reconfigure` reaches the controller in charge only: a leader listed after
    another controller also restarts its own standing-by slurmctld, which reads slurm.conf
    only when it starts or on SIGHUP (which would keep its plugins and forget its id)."""
    controllers_answer(machine, *("ctl0" if i == 0 else "ctl2" for i in order))
    peers = peer((2, "ctl2", "10.0.0.2"), order=order)
    state = ctx.run(ctx.on.config_changed(), network_leader(peers, planned_units=2))
    machine.service_calls.clear()

    changed = dict(state.config, **{"slurmctld-timeout": 40})
    out = ctx.run(ctx.on.config_changed(), later(state, mount(), config=changed))

    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert slurmctld_calls(machine) == [("restart", name) for name in restarts]
    unit_data = next(r for r in out.relations if r.endpoint == PEER).local_unit_data
    assert unit_data["slurmctld_timeout"] == "40"


def test_a_leader_standing_by_that_could_not_tell_restarts_later_without_a_reconfigure(
    ctx, machine, shared_fs
):
    peers = peer((2, "ctl2", "10.0.0.2"), order=[2, 0])
    state = ctx.run(ctx.on.config_changed(), network_leader(peers, planned_units=2))
    machine.service_calls.clear()
    machine.fail("scontrol", "ping", stderr="Socket timed out on send/recv operation")

    changed = dict(state.config, **{"slurmctld-timeout": 40})
    state = ctx.run(ctx.on.config_changed(), later(state, mount(), config=changed))
    assert slurmctld_calls(machine) == [("reload", "slurmctld")]
    machine.heal()
    controllers_answer(machine, "ctl2", "ctl0")
    machine.service_calls.clear()
    reconfigures = len(machine.ran(*RECONFIGURE))

    ctx.run(ctx.on.update_status(), later(state, mount(), config=changed))
    assert slurmctld_calls(machine) == [("restart", "slurmctld")]
    assert len(machine.ran(*RECONFIGURE)) == reconfigures  # The primary is not re-executed.


def test_a_raised_upgrade_timeout_leaves_the_fence_on_the_configured_one(
    ctx, machine, tmp_path, shared_fs
):
    """The fence's grace stays half the configured SlurmctldTimeout (before any takeover),
    so raising it for an upgrade does not restart the watchdog (a 90 s stop on the lab)."""
    peers = peer((2, "ctl2", "10.0.0.2"), order=[0, 2])
    peers = dataclasses.replace(
        peers, local_app_data={**peers.local_app_data, **databag(upgrade_slurmctld_timeout=300)}
    )

    ctx.run(ctx.on.config_changed(), network_leader(peers, mount(), planned_units=2))

    unit = (tmp_path / "etc/systemd/system/slurmctld-charm-fence.service").read_text()
    assert f" {CHECKPOINT} {CHECKPOINT}/slurmctld 2 slurm" in unit


def test_a_backup_whose_slurmctld_fails_says_why(ctx, machine, shared_fs):
    leader_wrote(shared_fs)
    machine.service_fails("slurmctld", "slurmctld: fatal: Unable to bind listen port (6817)")

    out = ctx.run(ctx.on.config_changed(), backup())

    assert out.unit_status == testing.BlockedStatus(
        "slurmctld cannot start: fatal: Unable to bind listen port (6817)"
    )


# The order of the controllers.


def test_a_departed_controller_is_removed_and_the_others_keep_their_order(
    ctx, machine, tmp_path, shared_fs
):
    relation = compute_relation()
    peers = peer((2, "ctl2", "10.0.0.2"), order=[0, 1, 2])  # slurmctld/1 left.

    out = ctx.run(ctx.on.relation_changed(relation), network_leader(relation, peers))

    assert hosts(tmp_path) == ["slurmctldhost=ctl0(192.0.2.0)", "slurmctldhost=ctl2(10.0.0.2)"]
    assert conf_servers(out.get_relation(relation.id).local_app_data) == [
        "192.0.2.0:6817",
        "10.0.0.2:6817",
    ]
    assert memory(out)["controllers"] == [{"unit": "slurmctld/0"}, {"unit": "slurmctld/2"}]


def test_a_new_controller_is_appended_even_with_a_lower_number_than_the_last(
    ctx, machine, tmp_path, shared_fs
):
    peers = peer((3, "ctl3", "10.0.0.3"), (1, "ctl1", "10.0.0.1"), order=[0, 3])

    out = ctx.run(ctx.on.config_changed(), network_leader(peers, planned_units=3))

    assert memory(out)["controllers"] == [
        {"unit": "slurmctld/0"},
        {"unit": "slurmctld/3"},
        {"unit": "slurmctld/1"},
    ]


def test_a_rejoining_machine_comes_back_last_under_its_new_unit_name(
    ctx, machine, tmp_path, shared_fs
):
    peers = peer((2, "ctl2", "10.0.0.2"), (4, "ctl1", "10.0.0.1"), order=[0, 2])

    ctx.run(ctx.on.config_changed(), network_leader(peers, planned_units=3))

    assert hosts(tmp_path)[-1] == "slurmctldhost=ctl1(10.0.0.1)"


def test_a_new_leader_keeps_the_order_it_inherits(ctx, machine, tmp_path, shared_fs):
    relation = compute_relation()
    peers = peer((2, "ctl2", "10.0.0.2"), (1, "ctl1", "10.0.0.1"), order=[2, 0, 1])

    out = ctx.run(ctx.on.leader_elected(), network_leader(relation, peers, planned_units=3))

    assert hosts(tmp_path) == [
        "slurmctldhost=ctl2(10.0.0.2)",
        "slurmctldhost=ctl0(192.0.2.0)",
        "slurmctldhost=ctl1(10.0.0.1)",
    ]
    assert conf_servers(out.get_relation(relation.id).local_app_data)[0] == "10.0.0.2:6817"


def test_a_new_leader_changes_no_controller_before_it_has_seen_them_all(
    ctx, machine, tmp_path, shared_fs
):
    shared = leader_wrote(shared_fs, "ctl2(10.0.0.2)", "ctl0(192.0.2.0)", "ctl1(10.0.0.1)")
    before = (shared / "slurm.conf").read_text()
    relation = compute_relation()
    peers = peer((2, "ctl2", "10.0.0.2"), order=[2, 0, 1])  # slurmctld/1 not seen yet.

    out = ctx.run(ctx.on.leader_elected(), network_leader(relation, peers, planned_units=3))

    assert (shared / "slurm.conf").read_text() == before
    assert "controllers" not in out.get_relation(relation.id).local_app_data
    assert memory(out)["controllers"] == [
        {"unit": "slurmctld/2"},
        {"unit": "slurmctld/0"},
        {"unit": "slurmctld/1"},
    ]
    assert out.unit_status == testing.WaitingStatus(
        "waiting to see every controller before changing them (2 of 3 seen)"
    )
    assert "slurmctld" in machine.calls("start")  # It still stands by as a backup.


# What each controller does, in the unit's status.

PING = {
    "meta": META_24_11,
    "pings": [
        {"hostname": "ctl2", "pinged": "DOWN", "responding": False, "mode": "primary"},
        {"hostname": "ctl0", "pinged": "UP", "responding": True, "mode": "backup"},
        {"hostname": "ctl1", "pinged": "UP", "responding": True, "mode": "backup"},
    ],
}


def test_the_status_shows_this_units_role_first_then_the_others(ctx, machine, shared_fs):
    leader_wrote(shared_fs, "ctl2(10.0.0.2)", "ctl0(192.0.2.0)", "ctl1(10.0.0.1)")
    machine.responses[("scontrol", "ping")] = json.dumps(PING)

    out = ctx.run(ctx.on.update_status(), backup())

    assert out.unit_status == testing.ActiveStatus("backup1 - UP (primary - DOWN, backup2 - UP)")
    [ping] = machine.ran("scontrol", "ping")
    assert ping == ["scontrol", "ping", "--json"]


def test_a_failover_wakes_the_unit_through_its_primary_program(ctx, machine, shared_fs):
    leader_wrote(shared_fs, "ctl2(10.0.0.2)", "ctl0(192.0.2.0)", "ctl1(10.0.0.1)")
    machine.responses[("scontrol", "ping")] = json.dumps(PING)
    state = backup()

    out = ctx.run(_Event("slurmctld_wake"), state)

    assert out.unit_status == testing.ActiveStatus("backup1 - UP (primary - DOWN, backup2 - UP)")


def test_a_single_controller_shows_it_is_the_primary(ctx, machine):
    machine.responses[("scontrol", "ping")] = json.dumps(
        {"meta": META_24_11, "pings": [{"hostname": "ctl0", "pinged": "UP", "responding": True}]}
    )

    out = ctx.run(ctx.on.update_status(), running())

    assert out.unit_status == testing.ActiveStatus("primary - UP")


def test_a_controller_slurm_cannot_ping_shows_no_roles(ctx, machine, shared_fs):
    leader_wrote(shared_fs)
    machine.fail("scontrol", "ping", stderr="Unable to contact slurm controller")

    out = ctx.run(ctx.on.update_status(), backup())

    assert out.unit_status == testing.ActiveStatus()


# Peer host data is checked with Slurm's grammar before it becomes a SlurmctldHost.


@pytest.mark.parametrize(
    ("hostname", "address", "field"),
    [
        ("ctl2\nSlurmctldHost=evil(10.6.6.6)", "10.0.0.2", "hostname"),
        ("ctl_2", "10.0.0.2", "hostname"),
        ("ctl2 PartitionName=x", "10.0.0.2", "hostname"),
        ("ctl2", "10.0.0.2) SlurmUser=root #", "address"),
        ("ctl2", "10.0.0.2,10.6.6.6", "address"),
        ("ctl2", "fe80::2%a,b", "address"),
    ],
)
def test_a_peer_with_invalid_host_data_blocks_naming_it_and_is_never_rendered(  # noqa: PLR0917
    ctx, machine, tmp_path, shared_fs, hostname, address, field
):
    relation = compute_relation()
    peers = testing.PeerRelation(
        PEER,
        local_app_data=databag(controllers=[{"unit": "slurmctld/0"}, {"unit": "slurmctld/1"}]),
        peers_data={
            1: {"hostname": "ctl1", "address": "10.0.0.1"},
            2: {"hostname": hostname, "address": address},
        },
    )

    out = ctx.run(ctx.on.config_changed(), network_leader(relation, peers, planned_units=2))

    assert isinstance(out.unit_status, testing.BlockedStatus)
    assert out.unit_status.message.startswith(f"slurmctld/2 sent an invalid {field}: ")
    assert hosts(tmp_path) == ["slurmctldhost=ctl0(192.0.2.0)", "slurmctldhost=ctl1(10.0.0.1)"]
    conf = slurm_conf(tmp_path)
    assert "evil" not in conf and "10.6.6.6" not in conf and "=root" not in conf
    published = out.get_relation(relation.id).local_app_data
    assert conf_servers(published) == ["192.0.2.0:6817", "10.0.0.1:6817"]


def test_a_peer_with_invalid_host_data_is_not_counted_as_seen(ctx, machine, tmp_path, shared_fs):
    peers = peer((1, "ctl1", "10.0.0.1"), (2, "ctl_2", "10.0.0.2"), order=[0, 1])

    out = ctx.run(ctx.on.config_changed(), network_leader(peers, planned_units=3))

    assert out.unit_status == testing.BlockedStatus(
        "slurmctld/2 sent an invalid hostname: 'ctl_2' is not a host name"
    )
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()  # It waits for every controller.


def test_a_unit_whose_hostname_slurm_cannot_use_is_blocked_not_active(
    ctx, machine, tmp_path, monkeypatch
):
    monkeypatch.setattr(socket, "gethostname", lambda: "ctl_0")
    relation = compute_relation()

    out = ctx.run(ctx.on.config_changed(), running(relation))

    assert out.unit_status == testing.BlockedStatus(
        "this unit's hostname cannot be a SlurmctldHost: 'ctl_0' is not a host name"
    )
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert "hostname" not in out.get_relation(relation.id).local_app_data
    peer_data = next(r for r in out.relations if isinstance(r, testing.PeerRelation))
    assert "hostname" not in peer_data.local_unit_data
