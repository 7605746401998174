"""Scenarios for the slurmctld charm: build a State, fire one event, check state and commands."""

import base64
import json
import stat
from pathlib import Path

import pytest
from charm_testing import SLURM_VERSION, already_installed
from hpc_libs.errors import SlurmOpsError
from ops import testing

KEY = base64.b64encode(b"k" * 1024).decode()
JWT_KEY = base64.b64encode(b"j" * 32).decode()
RECONFIGURE = ["scontrol", "reconfigure"]
PEER = "slurmctld-peer"
STANDS_BY = testing.BlockedStatus(
    "high availability needs use-network-state=true and a filesystem-client integration on "
    "'mount'; this unit stands by"
)
"""A unit besides the leader without network state: it cannot help, and says what would."""


def databag(**fields: object) -> dict[str, str]:
    """A databag as ops.Relation.save writes it: every field JSON-encoded."""
    return {name: json.dumps(value) for name, value in fields.items()}


def compute_relation(app: str = "compute", units: int = 1, **partition: object):
    return testing.Relation(
        "slurmd",
        remote_app_name=app,
        remote_app_data=databag(
            partition={"partitionname": app, "nodes": [app], **partition},
            nodeset={"nodeset": app, "feature": app},
        ),
        remote_units_data={i: {} for i in range(units)},
    )


def auth_secret() -> testing.Secret:
    return testing.Secret(tracked_content={"key": KEY}, owner="app", label="slurm-auth-key")


def jwt_secret() -> testing.Secret:
    return testing.Secret(tracked_content={"key": JWT_KEY}, owner="app", label="slurm-jwt-key")


def running(*relations: testing.RelationBase, **kwargs) -> testing.State:
    """A leader whose slurmctld is installed, with the key secrets made earlier.

    The peer relation is there unless one is given: the controller's memory lives in it.
    """
    kwargs.setdefault("config", {})
    if not any(isinstance(r, testing.PeerRelation) for r in relations):
        relations = (*relations, testing.PeerRelation(PEER))
    return testing.State(
        leader=True,
        relations=list(relations),
        secrets=[auth_secret(), jwt_secret()],
        stored_states={already_installed("SlurmctldCharm")},
        **kwargs,
    )


def later(state: testing.State, *relations: testing.RelationBase, **kwargs) -> testing.State:
    """The same unit at a later event: its stored state, secrets and peer memory kept.

    `relations` replace the non-peer relations.
    """
    peers = [r for r in state.relations if isinstance(r, testing.PeerRelation)]
    kwargs.setdefault("leader", True)
    return testing.State(
        relations=[*relations, *peers],
        secrets=list(state.secrets),
        stored_states=state.stored_states,
        **kwargs,
    )


def memory(state: testing.State) -> dict:
    """The controller's memory: the peer application databag, decoded."""
    peer = next(r for r in state.relations if isinstance(r, testing.PeerRelation))
    return {key: json.loads(value) for key, value in peer.local_app_data.items()}


def slurm_conf(tmp_path: Path) -> str:
    return (tmp_path / "etc/slurm/slurm.conf").read_text()


# Install and start.


def test_install_from_ppa_then_start_writes_config_and_starts(ctx, machine, tmp_path):
    installed = ctx.run(ctx.on.install(), testing.State(leader=True))

    assert {"slurmctld", "slurm-client", "slurm-wlm-jwt-plugin"} <= machine.installed
    assert machine.ran("add-apt-repository")
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()  # Install only installs.

    out = ctx.run(
        ctx.on.start(), testing.State(leader=True, stored_states=installed.stored_states)
    )

    conf = slurm_conf(tmp_path)
    for line in (
        "slurmctldhost=ctl0(192.0.2.0)",
        "authtype=auth/slurm",
        "credtype=cred/slurm",
        "slurmctldparameters=enable_configless",
        "maxnodecount=1024",
        "grestypes=gpu",
        "proctracktype=proctrack/cgroup",
        "taskplugin=task/cgroup,task/affinity",
        "authalttypes=auth/jwt",
        "authaltparameters=jwt_key=/etc/slurm/jwt_hs256.key",
    ):
        assert line in conf.splitlines()
    assert "cgroupplugin=autodetect" in (tmp_path / "etc/slurm/cgroup.conf").read_text()
    key = tmp_path / "etc/slurm/slurm.key"
    assert len(key.read_bytes()) == 1024
    assert key.stat().st_mode & 0o777 == 0o600
    assert machine.calls("start") == ["slurmctld"]
    assert sorted(s.label for s in out.secrets) == ["slurm-auth-key", "slurm-jwt-key"]
    jwt_key = tmp_path / "etc/slurm/jwt_hs256.key"
    assert len(jwt_key.read_bytes()) == 32
    assert jwt_key.stat().st_mode & 0o777 == 0o600
    assert not any(line.startswith("accountingstorage") for line in conf.splitlines())
    assert out.unit_status == testing.ActiveStatus()


def test_install_from_archive_adds_no_repository(ctx, machine):
    ctx.run(ctx.on.install(), testing.State(config={"slurm-package-source": "archive"}))

    assert machine.ran("add-apt-repository") == []
    assert "slurmctld" in machine.installed


def test_upgrade_refreshes_the_workload_version_of_packages_present(ctx, machine, settled):
    state = settled(running())
    machine.installed.update({"slurmctld", "slurm-client", "slurm-wlm-jwt-plugin"})

    out = ctx.run(ctx.on.upgrade_charm(), state)

    assert out.workload_version == SLURM_VERSION
    assert machine.apt_installs == []
    assert machine.ran("add-apt-repository") == []


def test_key_secrets_are_made_once(ctx, machine, settled):
    state = settled(running())

    out = ctx.run(ctx.on.config_changed(), state)

    assert len(out.secrets) == 2
    assert machine.calls("restart") == []


def test_process_isolation_none_uses_container_friendly_plugins(ctx, machine, tmp_path):
    ctx.run(ctx.on.config_changed(), running(config={"process-isolation": "none"}))

    conf = slurm_conf(tmp_path).splitlines()
    assert "proctracktype=proctrack/linuxproc" in conf
    assert not any(line.startswith("taskplugin=") for line in conf)
    assert "jobacctgathertype=jobacct_gather/none" in conf
    assert "cgroupplugin=disabled" in (tmp_path / "etc/slurm/cgroup.conf").read_text()


@pytest.mark.parametrize(
    ("option", "value"),
    [("max-node-count", 0), ("process-isolation", "vm"), ("cluster-name", "Bad Name")],
)
def test_invalid_option_blocks_naming_it_and_writes_nothing(ctx, machine, tmp_path, option, value):
    out = ctx.run(ctx.on.config_changed(), running(config={option: value}))

    assert out.unit_status == testing.BlockedStatus(
        f"invalid config option '{option}': {out.unit_status.message.split(': ', 1)[1]}"
    )
    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert machine.service_calls == []


def test_non_leader_leaves_the_cluster_config_alone(ctx, machine, tmp_path):
    state = running()
    state = testing.State(stored_states=state.stored_states, leader=False)

    out = ctx.run(ctx.on.config_changed(), state)

    assert not (tmp_path / "etc/slurm/slurm.conf").exists()
    assert out.unit_status == STANDS_BY


# Partitions from slurmd applications.


def test_slurmd_ready_adds_partition_reconfigures_once_and_publishes(ctx, machine, tmp_path):
    relation = compute_relation()
    ctx.run(ctx.on.update_status(), running())  # slurmctld runs without partitions.
    machine.commands.clear()

    out = ctx.run(ctx.on.relation_changed(relation), running(relation))

    conf = slurm_conf(tmp_path).splitlines()
    assert "nodeset=compute feature=compute" in conf
    assert "partitionname=compute nodes=compute default=YES" in conf
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert machine.calls("restart") == []
    published = out.get_relation(relation.id).local_app_data
    secret = out.get_secret(label="slurm-auth-key")
    assert json.loads(published["auth_key_id"]) == secret.id
    assert conf_servers(published) == ["192.0.2.0:6817"]
    assert relation.id in secret.remote_grants


def test_login_node_gets_the_key_and_controllers_without_touching_slurm_conf(
    ctx, machine, tmp_path, settled
):
    state = settled(running(compute_relation()))
    before = (tmp_path / "etc/slurm/slurm.conf").stat().st_mtime_ns
    login = testing.Relation("login-node", remote_app_name="login", remote_units_data={0: {}})
    state = testing.State(
        leader=True,
        relations=[*state.relations, login],
        secrets=state.secrets,
        stored_states=state.stored_states,
        config={},
    )
    machine.commands.clear()

    out = ctx.run(ctx.on.relation_joined(login, remote_unit=0), state)

    published = out.get_relation(login.id).local_app_data
    secret = out.get_secret(label="slurm-auth-key")
    assert json.loads(published["auth_key_id"]) == secret.id
    assert conf_servers(published) == ["192.0.2.0:6817"]
    assert login.id in secret.remote_grants
    assert KEY not in json.dumps(dict(published))
    assert (tmp_path / "etc/slurm/slurm.conf").stat().st_mtime_ns == before
    assert machine.ran(*RECONFIGURE) == []


def test_adding_compute_units_writes_nothing_and_never_reconfigures(
    ctx, machine, tmp_path, settled
):
    state = settled(running(compute_relation(units=1)))
    before = (tmp_path / "etc/slurm/slurm.conf").stat().st_mtime_ns
    grown = compute_relation(units=3)
    state = later(state, grown)

    ctx.run(ctx.on.relation_joined(grown, remote_unit=2), state)
    ctx.run(ctx.on.relation_changed(grown, remote_unit=2), state)

    assert (tmp_path / "etc/slurm/slurm.conf").stat().st_mtime_ns == before
    assert machine.ran(*RECONFIGURE) == []
    assert machine.service_calls == []


def test_partition_config_change_updates_that_partition_with_one_reconfigure(
    ctx, machine, tmp_path, settled
):
    other = compute_relation("gpu")
    state = settled(running(compute_relation(), other))
    changed = compute_relation(maxtime=60)
    state = later(state, changed, other)

    ctx.run(ctx.on.relation_changed(changed), state)

    conf = slurm_conf(tmp_path).splitlines()
    assert "partitionname=compute nodes=compute maxtime=60" in conf
    assert "partitionname=gpu nodes=gpu default=YES" in conf  # The older integration.
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert machine.calls("restart") == []


def test_partition_names_are_forced_to_the_application_name(ctx, machine, tmp_path):
    hijack = testing.Relation(
        "slurmd",
        remote_app_name="compute",
        remote_app_data=databag(
            partition={"partitionname": "debug", "nodes": ["ALL"], "maxtime": 5},
            nodeset={"nodeset": "debug", "feature": "x"},
        ),
    )

    ctx.run(ctx.on.relation_changed(hijack), running(hijack))

    conf = slurm_conf(tmp_path).splitlines()
    assert "partitionname=compute nodes=compute maxtime=5 default=YES" in conf
    assert "nodeset=compute feature=compute" in conf
    assert not any("debug" in line for line in conf)


@pytest.mark.parametrize("app", ["default", "all"])
def test_application_with_a_reserved_slurm_name_blocks(ctx, machine, tmp_path, app):
    relation = compute_relation(app)

    out = ctx.run(ctx.on.relation_changed(relation), running(relation))

    assert f"partitionname={app}" not in slurm_conf(tmp_path)
    assert out.unit_status == testing.BlockedStatus(
        f"cannot serve partition of application '{app}'"
    )
    assert "auth_key_id" not in out.get_relation(relation.id).local_app_data


# A slurmd application leaving.


def test_application_leaving_with_jobs_drains_its_partition(ctx, machine, tmp_path, settled):
    relation = compute_relation()
    state = settled(running(relation))
    machine.responses[("squeue",)] = "42\n"

    out = ctx.run(ctx.on.relation_broken(state.get_relation(relation.id)), state)

    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", "partitionname=compute", "state=drain"]
    ]
    conf = slurm_conf(tmp_path).splitlines()
    assert "partitionname=compute nodes=compute state=drain" in conf
    assert out.unit_status == testing.ActiveStatus("draining partitions: compute")


def test_drained_partition_is_removed_once_its_jobs_end(ctx, machine, tmp_path, settled):
    relation = compute_relation()
    state = settled(running(relation))
    machine.responses[("squeue",)] = "42\n"
    state = ctx.run(ctx.on.relation_broken(state.get_relation(relation.id)), state)
    state = later(state)
    ctx.run(ctx.on.update_status(), state)  # Still busy: nothing changes.
    machine.commands.clear()
    machine.responses[("squeue",)] = ""

    out = ctx.run(ctx.on.update_status(), state)

    assert "compute" not in slurm_conf(tmp_path)
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert machine.ran("scontrol", "update") == []
    assert out.unit_status == testing.ActiveStatus()


def test_application_leaving_without_jobs_removes_its_partition(ctx, machine, tmp_path, settled):
    relation = compute_relation()
    state = settled(running(relation))

    ctx.run(ctx.on.relation_broken(state.get_relation(relation.id)), state)

    assert "compute" not in slurm_conf(tmp_path)
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert machine.ran("scontrol", "update") == []
    assert machine.calls("restart") == []


def test_unreachable_squeue_counts_as_busy(ctx, machine, tmp_path, settled):
    relation = compute_relation()
    state = settled(running(relation))
    machine.responses[("squeue",)] = SlurmOpsError("squeue failed", stderr="timeout")

    ctx.run(ctx.on.relation_broken(state.get_relation(relation.id)), state)

    assert "partitionname=compute nodes=compute state=drain" in slurm_conf(tmp_path)


# Restarts versus reconfigures.


def test_upgrade_rerenders_every_generated_file(ctx, machine, tmp_path, settled):
    state = settled(running(compute_relation()))
    (tmp_path / "etc/slurm/slurm.conf").write_text("clustername=old\n")
    (tmp_path / "etc/slurm/cgroup.conf").write_text("cgroupplugin=disabled\n")

    ctx.run(ctx.on.upgrade_charm(), state)

    assert "partitionname=compute nodes=compute" in slurm_conf(tmp_path)
    assert "autodetect" in (tmp_path / "etc/slurm/cgroup.conf").read_text()


def test_new_controller_address_restarts_instead_of_reconfiguring(ctx, machine, tmp_path, settled):
    state = settled(running())
    changed = later(
        state, networks={testing.Network("slurmd", bind_addresses=[_address("10.9.9.9")])}
    )

    ctx.run(ctx.on.config_changed(), changed)

    assert "slurmctldhost=ctl0(10.9.9.9)" in slurm_conf(tmp_path)
    assert machine.calls("restart") == ["slurmctld"]
    assert machine.ran(*RECONFIGURE) == []


def test_max_node_count_change_reconfigures_without_restart(ctx, machine, tmp_path, settled):
    state = settled(running())
    changed = later(state, config={"max-node-count": 64})

    ctx.run(ctx.on.config_changed(), changed)

    assert "maxnodecount=64" in slurm_conf(tmp_path)
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]
    assert machine.calls("restart") == []


def test_controllers_are_listed_in_join_order(ctx, machine, tmp_path, shared_fs):
    peer = testing.PeerRelation(
        "slurmctld-peer",
        local_app_data=databag(controllers=[{"unit": "slurmctld/0"}, {"unit": "slurmctld/3"}]),
        peers_data={
            3: {"hostname": "ctl3", "address": "10.0.0.3"},
            1: {"hostname": "ctl1", "address": "10.0.0.1"},
        },
    )
    relation = compute_relation()

    mount = testing.SubordinateRelation("mount", remote_unit_data={"mounted": "true"})
    state = running(relation, peer, mount, config={"use-network-state": True}, planned_units=3)

    out = ctx.run(ctx.on.relation_changed(relation), state)

    conf = slurm_conf(tmp_path).splitlines()
    hosts = [line for line in conf if line.startswith("slurmctldhost=")]
    assert hosts == [
        "slurmctldhost=ctl0(192.0.2.0)",
        "slurmctldhost=ctl3(10.0.0.3)",
        "slurmctldhost=ctl1(10.0.0.1)",
    ]
    published = out.get_relation(relation.id).local_app_data
    assert conf_servers(published) == ["192.0.2.0:6817", "10.0.0.3:6817", "10.0.0.1:6817"]
    assert memory(out)["controllers"] == [
        {"unit": "slurmctld/0"},
        {"unit": "slurmctld/3"},
        {"unit": "slurmctld/1"},
    ]


# Actions.


def test_resume_returns_nodes_to_service(ctx, machine):
    ctx.run(ctx.on.action("resume", params={"nodename": "compute-[0-2]"}), running())

    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", "nodename=compute-[0-2]", "state=resume"]
    ]
    assert ctx.action_results == {"nodename": "compute-[0-2]", "state": "resume"}


def test_resume_failure_fails_the_action_with_slurms_error(ctx, machine):
    machine.responses[("scontrol", "update")] = SlurmOpsError(
        "scontrol failed", stderr="Invalid node name specified"
    )

    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(ctx.on.action("resume", params={"nodename": "nope"}), running())

    assert "Invalid node name specified" in failure.value.message


def _address(ip: str) -> testing.BindAddress:
    return testing.BindAddress([testing.Address(ip)])


def test_install_waits_for_valid_config_and_any_later_event_retries(ctx, machine, tmp_path):
    bad = testing.State(leader=True, config={"max-node-count": -1})
    out = ctx.run(ctx.on.install(), bad)
    assert machine.installed == set()

    fixed = testing.State(leader=True, stored_states=out.stored_states)
    ctx.run(ctx.on.config_changed(), fixed)

    assert "slurmctld" in machine.installed
    assert machine.calls("start") == ["slurmctld"]


def test_every_unit_shares_its_address_with_the_other_controllers(ctx, machine):
    peer = testing.PeerRelation("slurmctld-peer")
    state = running(peer)
    state = testing.State(leader=False, relations=[peer], stored_states=state.stored_states)

    out = ctx.run(ctx.on.config_changed(), state)

    shared = out.get_relation(peer.id).local_unit_data
    assert (shared["hostname"], shared["address"]) == ("ctl0", "192.0.2.0")


def test_corrupt_slurm_conf_is_rewritten_without_disturbing_slurmctld(
    ctx, machine, tmp_path, settled
):
    """slurmctld runs with what was applied; the file on disk is only put back."""
    state = settled(running())
    (tmp_path / "etc/slurm/slurm.conf").write_text("this is = not [slurm.conf\n")

    ctx.run(ctx.on.update_status(), state)

    assert "slurmctldhost=ctl0(192.0.2.0)" in slurm_conf(tmp_path)
    assert machine.service_calls == []
    assert machine.ran(*RECONFIGURE) == []


def test_corrupt_slurm_conf_of_an_unrecorded_controller_restarts_it(ctx, machine, tmp_path):
    """Nothing recorded (a charm upgraded from an older version): a bad file is not trusted."""
    machine.active.add("slurmctld")
    (tmp_path / "etc/slurm").mkdir(parents=True)
    (tmp_path / "etc/slurm/slurm.key").write_bytes(base64.b64decode(KEY))
    (tmp_path / "etc/slurm/slurm.conf").write_text("this is = not [slurm.conf\n")

    ctx.run(ctx.on.upgrade_charm(), running())

    assert machine.calls("restart") == ["slurmctld"]


def test_resumed_node_is_never_put_down_again_by_the_charm(ctx, machine, tmp_path, settled):
    relation = compute_relation()
    state = settled(running(relation))
    state = ctx.run(ctx.on.action("resume", params={"nodename": "compute-0"}), state)
    machine.commands.clear()

    ctx.run(ctx.on.relation_changed(state.get_relation(relation.id)), state)
    ctx.run(ctx.on.upgrade_charm(), state)

    assert not any("nodename=compute-0" in " ".join(c) for c in machine.commands)
    assert "downnodes" not in slurm_conf(tmp_path)  # slurm.conf holds no node state at all.


def test_slurmd_application_that_has_not_published_yet_is_not_an_error(ctx, machine):
    relation = testing.Relation("slurmd", remote_app_name="compute")

    out = ctx.run(ctx.on.update_status(), running(relation))

    assert out.unit_status == testing.ActiveStatus()
    assert out.get_relation(relation.id).local_app_data == {}


def test_boolean_partition_parameters_are_written_as_slurm_spells_them(ctx, machine, tmp_path):
    relation = compute_relation(default=True)

    ctx.run(ctx.on.relation_changed(relation), running(relation))

    assert "partitionname=compute nodes=compute default=YES" in slurm_conf(tmp_path).splitlines()


def test_failed_partition_drain_is_retried_by_the_next_event(ctx, machine, tmp_path, settled):
    relation = compute_relation()
    state = settled(running(relation))
    machine.responses[("squeue",)] = "42\n"
    machine.responses[("scontrol", "update")] = SlurmOpsError("update", stderr="timeout")
    state = ctx.run(ctx.on.relation_broken(state.get_relation(relation.id)), state)
    state = later(state)
    del machine.responses[("scontrol", "update")]
    machine.commands.clear()

    ctx.run(ctx.on.update_status(), state)

    assert machine.ran("scontrol", "update") == [
        ["scontrol", "update", "partitionname=compute", "state=drain"]
    ]


# The default partition (jobs submitted without `-p`).


def partition_lines(tmp_path: Path) -> list[str]:
    """The slurmd applications' partitions (the hidden rebuild partition has its own tests)."""
    return [
        line
        for line in slurm_conf(tmp_path).splitlines()
        if line.startswith("partition") and not line.startswith("partitionname=rebuild ")
    ]


def test_oldest_application_partition_is_the_default(ctx, machine, tmp_path):
    oldest, newer = compute_relation("compute"), compute_relation("debug")

    ctx.run(ctx.on.relation_changed(newer), running(newer, oldest))

    assert partition_lines(tmp_path) == [
        "partitionname=compute nodes=compute default=YES",
        "partitionname=debug nodes=debug",
    ]


def test_application_asking_for_default_wins_over_the_oldest(ctx, machine, tmp_path):
    oldest, newer = compute_relation("compute"), compute_relation("debug", default=True)

    ctx.run(ctx.on.relation_changed(newer), running(oldest, newer))

    assert partition_lines(tmp_path) == [
        "partitionname=compute nodes=compute",
        "partitionname=debug nodes=debug default=YES",
    ]


def test_oldest_application_saying_default_no_is_respected(ctx, machine, tmp_path):
    oldest, newer = compute_relation("compute", default=False), compute_relation("debug")

    ctx.run(ctx.on.relation_changed(newer), running(oldest, newer))

    assert partition_lines(tmp_path) == [
        "partitionname=compute nodes=compute default=NO",
        "partitionname=debug nodes=debug",
    ]


def test_default_moves_to_the_next_oldest_when_the_default_application_leaves(
    ctx, machine, tmp_path, settled
):
    oldest, newer = compute_relation("compute"), compute_relation("debug")
    state = settled(running(oldest, newer))
    state = later(state, newer)

    ctx.run(ctx.on.relation_changed(newer), state)  # squeue: compute has no jobs left.

    assert partition_lines(tmp_path) == ["partitionname=debug nodes=debug default=YES"]
    assert machine.ran(*RECONFIGURE) == [RECONFIGURE]


def test_retiring_partition_is_never_the_default(ctx, machine, tmp_path, settled):
    oldest, newer = compute_relation("compute"), compute_relation("debug")
    state = settled(running(oldest, newer))
    machine.responses[("squeue",)] = "42\n"  # compute still runs a job.
    state = later(state, newer)

    ctx.run(ctx.on.relation_changed(newer), state)

    assert partition_lines(tmp_path) == [
        "partitionname=compute nodes=compute state=drain",
        "partitionname=debug nodes=debug default=YES",
    ]


def test_slurmctld_logs_to_its_own_file_in_a_directory_only_root_changes(ctx, machine, tmp_path):
    """The COS collector reads the log as root, by its name: slurm (which could write the
    directory before) may have planted a link there to any file. The directory becomes
    root's, the link a plain log file slurm appends to, and the collector is offered that
    one file, not a glob; logrotate (root) creates the next log."""
    log_dir = tmp_path / "var/log/slurm"
    log_dir.mkdir(parents=True)
    log_dir.chmod(0o777)
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    (log_dir / "slurmctld.log").symlink_to(secret)
    relation = testing.Relation("cos-agent", remote_app_name="otelcol")

    state = ctx.run(ctx.on.update_status(), running(relation))
    out = ctx.run(ctx.on.relation_changed(state.get_relation(relation.id), remote_unit=0), state)

    assert "slurmctldlogfile=/var/log/slurm/slurmctld.log" in slurm_conf(tmp_path).splitlines()
    assert stat.S_IMODE(log_dir.stat().st_mode) == 0o755
    log = log_dir / "slurmctld.log"
    assert not log.is_symlink() and log.read_text() == ""
    assert stat.S_IMODE(log.stat().st_mode) == 0o640
    assert secret.read_text() == "root's\n"
    offered = json.loads(out.get_relation(relation.id).local_unit_data["config"])
    assert offered["include_log_files"] == ["/var/log/slurm/slurmctld.log"]
    rotation = (tmp_path / "etc/logrotate.d/slurmctld-charm").read_text()
    assert "/var/log/slurm/slurmctld.log {" in rotation
    assert "create 0640 slurm slurm" in rotation


# Nodes of departed compute units (their machine may vanish before they retire themselves).

NODE_JSON = json.dumps({"nodes": [{"name": "compute-1", "state": ["IDLE", "DRAIN"]}]})


def test_departing_unit_node_is_drained_and_deleted_once_idle(ctx, machine, settled):
    relation = compute_relation(units=2)
    state = settled(running(relation))
    machine.responses[("scontrol", "show", "node", "compute-1")] = NODE_JSON

    ctx.run(
        ctx.on.relation_departed(state.get_relation(relation.id), remote_unit=1, departing_unit=1),
        state,
    )

    drain = machine.ran("scontrol", "update", "nodename=compute-1")
    assert drain == [
        [
            "scontrol",
            "update",
            "nodename=compute-1",
            "state=drain",
            "reason=juju: unit leaving the cluster",
        ]
    ]
    assert machine.ran("scontrol", "delete") == [["scontrol", "delete", "nodename=compute-1"]]
    assert machine.ran(*RECONFIGURE) == []


def test_departed_node_with_jobs_is_deleted_by_a_later_event_once_idle(ctx, machine, settled):
    relation = compute_relation(units=2)
    state = settled(running(relation))
    machine.responses[("scontrol", "show", "node", "compute-1")] = NODE_JSON
    machine.responses[("squeue",)] = "42\n"

    state = ctx.run(
        ctx.on.relation_departed(state.get_relation(relation.id), remote_unit=1, departing_unit=1),
        state,
    )
    assert machine.ran("scontrol", "delete") == []  # Never while a job runs.

    del machine.responses[("squeue",)]
    ctx.run(ctx.on.update_status(), state)
    assert machine.ran("scontrol", "delete") == [["scontrol", "delete", "nodename=compute-1"]]


def test_departed_node_already_retired_by_its_unit_is_forgotten(ctx, machine, settled):
    relation = compute_relation(units=2)
    state = settled(running(relation))
    machine.responses[("scontrol", "show", "node", "compute-1")] = json.dumps({"nodes": []})

    out = ctx.run(
        ctx.on.relation_departed(state.get_relation(relation.id), remote_unit=1, departing_unit=1),
        state,
    )

    assert machine.ran("scontrol", "delete") == []
    assert memory(out)["departed_nodes"] == []


def test_departed_node_slurm_cannot_report_on_is_kept_for_later(ctx, machine, settled):
    relation = compute_relation(units=2)
    state = settled(running(relation))
    machine.responses[("scontrol", "show", "node", "compute-1")] = SlurmOpsError(
        "scontrol failed", stderr="Unable to contact slurm controller"
    )

    out = ctx.run(
        ctx.on.relation_departed(state.get_relation(relation.id), remote_unit=1, departing_unit=1),
        state,
    )

    assert machine.ran("scontrol", "delete") == []
    assert memory(out)["departed_nodes"] == [{"name": "compute-1"}]


def conf_servers(databag) -> list[str]:
    """The `--conf-server` entries a consumer reads from slurmctld's published databag."""
    entries = json.loads(databag["controllers"])
    return [f"{e['address']}:{e['port']}" for e in entries]
