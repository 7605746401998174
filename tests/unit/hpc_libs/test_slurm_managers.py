"""Scenarios for the per-daemon managers: every file's path, owner, mode and content."""

import base64
import os
from pathlib import Path

import pytest
from charm_testing import FakeProcesses
from hpc_libs.errors import ConfigError, PackageError, SlurmOpsError
from hpc_libs.machine import files, systemd
from hpc_libs.slurm.base import SLURM_PPA, conf_server_option
from hpc_libs.slurm.sackd import SackdManager
from hpc_libs.slurm.slurmctld import SlurmctldManager
from hpc_libs.slurm.slurmd import (
    REAPER,
    REAPER_SOURCE,
    START_OVERRIDE,
    SlurmdManager,
    parse_slurmd_c,
)
from hpc_libs.slurm.slurmdbd import SlurmdbdManager
from hpc_libs.slurm.slurmrestd import SlurmrestdManager
from hpc_libs_fakes import FakeRun, node_config, parse_config_line
from slurmutils import Node, NodeSet, Partition, SlurmdbdConfig

Owners = dict[str, tuple[str, str | None]]

SLURMD_C = (
    "NodeName=juju-1 CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=4 ThreadsPerCore=2 "
    "RealMemory=31906\nUpTime=0-03:12:41\n"
)


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o7777


@pytest.fixture
def daemon_reloads(monkeypatch: pytest.MonkeyPatch) -> list[None]:
    calls: list[None] = []
    monkeypatch.setattr(systemd, "daemon_reload", lambda: calls.append(None))
    return calls


# Packages and versions.


@pytest.mark.parametrize(
    ("manager", "packages"),
    [
        (SlurmctldManager, ["slurmctld", "slurm-client", "slurm-wlm-jwt-plugin"]),
        (SlurmdManager, ["slurmd", "slurm-client", "dbus"]),
        (SackdManager, ["sackd", "slurm-client"]),
        (SlurmdbdManager, ["slurmdbd", "slurm-wlm-jwt-plugin"]),
        (SlurmrestdManager, ["slurmrestd", "slurm-wlm-jwt-plugin", "sackd", "slurm-client"]),
    ],
)
def test_each_daemon_installs_its_packages(
    manager: type[SlurmdManager], packages: list[str], tmp_path: Path
) -> None:
    assert list(manager(tmp_path).packages) == packages
    assert manager(tmp_path).service.name == manager.daemon


def test_install_from_ppa_adds_the_ppa_first(
    fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    installed: list[list[str]] = []
    monkeypatch.setattr(
        "hpc_libs.machine.apt.install", lambda p, upgrade=False: installed.append(list(p)) or True
    )
    fake_run.on("dpkg-query", returncode=1)

    assert SlurmdManager(tmp_path).install("ppa") is True

    assert ["add-apt-repository", "--yes", "--no-update", SLURM_PPA] in fake_run.calls
    assert installed == [["slurmd", "slurm-client", "dbus"]]


def test_install_when_installed_touches_nothing(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.dpkg("24.11.5-1")

    assert SlurmdManager(tmp_path).install("ppa") is False

    assert all(call[0] == "dpkg-query" for call in fake_run.calls)


def test_version_reads_dpkg(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.dpkg("24.11.5-1")

    assert SlurmctldManager(tmp_path).version() == "24.11.5-1"


def test_version_of_missing_package_is_a_package_error(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("dpkg-query", returncode=1, stderr="no packages found matching slurmctld")

    with pytest.raises(PackageError):
        SlurmctldManager(tmp_path).version()


# Keys.


def test_slurm_key_is_raw_bytes_0600_owned_by_slurm(tmp_path: Path, owners: Owners) -> None:
    manager = SlurmctldManager(tmp_path)
    key = manager.key.generate()

    assert manager.key.exists() is False
    assert manager.key.set(key) is True
    assert manager.key.set(key) is False

    path = tmp_path / "etc/slurm/slurm.key"
    assert path.read_bytes() == base64.b64decode(key)
    assert len(path.read_bytes()) == 1024
    assert mode_of(path) == 0o600
    assert owners["slurm.key"] == ("slurm", None)
    assert manager.key.get() == key


def test_generated_keys_differ(tmp_path: Path) -> None:
    manager = SlurmctldManager(tmp_path)

    assert manager.key.generate() != manager.key.generate()


def test_key_that_is_not_base64_is_refused(tmp_path: Path, owners: Owners) -> None:
    with pytest.raises(ConfigError):
        SlurmdManager(tmp_path).key.set("not base64!")

    assert not (tmp_path / "etc/slurm/slurm.key").exists()


@pytest.mark.parametrize("manager", [SlurmctldManager, SlurmdbdManager])
def test_jwt_key_is_0600_owned_by_slurm(
    manager: type[SlurmctldManager], tmp_path: Path, owners: Owners
) -> None:
    jwt = manager(tmp_path).jwt_key
    jwt.set(jwt.generate())

    path = tmp_path / "etc/slurm/jwt_hs256.key"
    assert len(path.read_bytes()) == 32
    assert mode_of(path) == 0o600
    assert owners["jwt_hs256.key"] == ("slurm", None)


# Configuration files.


def test_slurm_conf_write_writes_once_and_reports_changes(tmp_path: Path, owners: Owners) -> None:
    config = SlurmctldManager(tmp_path).config

    conf = config.load()
    conf.cluster_name = "hpc"
    conf.auth_type = "auth/slurm"
    conf.nodesets["compute"] = NodeSet(nodeset="compute", feature="compute")
    conf.partitions["compute"] = Partition(partitionname="compute", nodes=["compute"])
    config.write(conf)
    assert config.changed is True

    conf = config.load()
    conf.cluster_name = "hpc"
    config.write(conf)
    assert config.changed is False

    path = tmp_path / "etc/slurm/slurm.conf"
    assert path.read_text() == (
        "clustername=hpc\n"
        "authtype=auth/slurm\n"
        "nodeset=compute feature=compute\n"
        "partitionname=compute nodes=compute\n"
    )
    assert mode_of(path) == 0o644
    assert owners["slurm.conf"] == ("slurm", "slurm")
    assert config.load().partitions["compute"].nodes == ["compute"]


def test_missing_config_loads_empty(tmp_path: Path) -> None:
    config = SlurmctldManager(tmp_path).config

    assert config.exists() is False
    assert config.load().dict() == {}


def test_write_returns_whether_the_file_changed(tmp_path: Path, owners: Owners) -> None:
    config = SlurmctldManager(tmp_path).cgroup_config
    cgroup = config.load()
    cgroup.cgroup_plugin = "disabled"

    assert config.write(cgroup) is True
    assert config.write(cgroup) is False
    assert (tmp_path / "etc/slurm/cgroup.conf").read_text() == "cgroupplugin=disabled\n"


def test_controller_gres_conf_path_and_mode(tmp_path: Path, owners: Owners) -> None:
    manager = SlurmctldManager(tmp_path)

    assert manager.gres_config.path == tmp_path / "etc/slurm/gres.conf"
    assert manager.gres_config.mode == 0o644


def test_state_save_location_owned_by_slurm(tmp_path: Path, owners: Owners) -> None:
    path = SlurmctldManager(tmp_path).create_state_save_location()

    assert path == tmp_path / "var/lib/slurm/slurmctld"
    assert mode_of(path) == 0o750
    assert owners["slurmctld"] == ("slurm", "slurm")


def test_dpkg_gives_the_directories_the_charm_keeps_root_s_back_after_each_run(
    tmp_path: Path, owners: Owners
) -> None:
    """Slurm's postinst makes /var/lib/slurm and /var/log/slurm slurm's at every upgrade."""
    manager = SlurmctldManager(tmp_path)

    manager.create_state_save_location()
    manager.own_log_file("/var/log/slurm/slurmctld.log")

    hooks = sorted((tmp_path / "etc/dpkg/dpkg.cfg.d").iterdir())
    assert [h.name for h in hooks] == ["slurm-charms-var-lib-slurm", "slurm-charms-var-log-slurm"]
    assert all(mode_of(h) == 0o644 for h in hooks)
    assert [line for h in hooks for line in h.read_text().splitlines() if line[:1] != "#"] == [
        "post-invoke=chown -h root:root /var/lib/slurm 2>/dev/null || true",
        "post-invoke=chown -h root:root /var/log/slurm 2>/dev/null || true",
    ]


def test_slurmdbd_conf_is_0600_slurm(tmp_path: Path, owners: Owners) -> None:
    config = SlurmdbdManager(tmp_path).config

    config.write(SlurmdbdConfig(storagepass="secret", dbdhost="localhost"))

    path = tmp_path / "etc/slurm/slurmdbd.conf"
    assert mode_of(path) == 0o600
    assert owners["slurmdbd.conf"] == ("slurm", "slurm")
    assert "storagepass=secret" in path.read_text()


# Start options.


@pytest.mark.parametrize(
    ("manager", "variable"),
    [
        (SlurmctldManager, "SLURMCTLD_OPTIONS"),
        (SlurmdbdManager, "SLURMDBD_OPTIONS"),
    ],
)
def test_daemon_options_file(
    manager: type[SlurmctldManager], variable: str, tmp_path: Path, owners: Owners
) -> None:
    daemon = manager(tmp_path)

    assert daemon.options.write({variable: "-vv"}) is True
    assert daemon.options.write({variable: "-vv"}) is False

    path = tmp_path / "etc/default" / daemon.daemon
    assert path.read_text().splitlines()[1:] == [f'{variable}="-vv"']
    assert mode_of(path) == 0o644
    assert owners[daemon.daemon] == ("root", None)
    assert daemon.options.read() == {variable: "-vv"}


def test_a_controller_stop_is_bounded_once(fake_run: FakeRun, tmp_path: Path) -> None:
    controller = SlurmctldManager(tmp_path)

    assert controller.bound_stop_time() is True
    assert controller.bound_stop_time() is False

    drop_in = tmp_path / "etc/systemd/system/slurmctld.service.d/charm-stop.conf"
    assert drop_in.read_text().split("\n[Service]\n")[1].splitlines() == [
        "TimeoutStopSec=20",
        "Restart=on-failure",
        "RestartSec=10",
        "RestartPreventExitStatus=SIGKILL",
    ]
    assert fake_run.calls == [["systemctl", "daemon-reload"]]  # Once: the second wrote nothing.


def test_sackd_conf_servers(
    tmp_path: Path, owners: Owners, fake_run: FakeRun, daemon_reloads: list[None]
) -> None:
    fake_run.on("systemctl", "show", stdout="no\n")
    sackd = SackdManager(tmp_path)

    assert sackd.set_conf_servers(["ctl-0", "ctl-1:7817"]) is True

    assert sackd.options.read() == {"SACKD_OPTIONS": "--conf-server ctl-0:6817,ctl-1:7817"}
    with pytest.raises(ValueError):
        sackd.set_conf_servers([])


def test_a_sackd_stop_ends_every_process_of_its_unit_within_a_bound(
    tmp_path: Path, owners: Owners, fake_run: FakeRun, daemon_reloads: list[None]
) -> None:
    """A reconfigure's new sackd that systemd did not hold as the main process must not
    outlive a stop (the packaged KillMode=process let it): sackd keeps no child running."""
    fake_run.on("systemctl", "show", stdout="yes\n")  # sackd held loaded: the drop-in is new
    sackd = SackdManager(tmp_path)

    sackd.set_conf_servers(["ctl-0"])
    assert sackd.set_conf_servers(["ctl-0"]) is False

    drop_in = tmp_path / "etc/systemd/system/sackd.service.d/10-hpc-libs-stop.conf"
    service = drop_in.read_text().split("[Service]\n", 1)[1].splitlines()
    assert service == ["KillMode=control-group", "TimeoutStopSec=10"]
    assert daemon_reloads == [None]  # once: the second call wrote nothing


def test_options_refuse_quote_characters(tmp_path: Path, owners: Owners) -> None:
    with pytest.raises(ConfigError) as caught:
        SlurmctldManager(tmp_path).options.write({"SLURMCTLD_OPTIONS": '-f "x"'})

    assert caught.value.key == "SLURMCTLD_OPTIONS"


def test_slurmd_start_options_keep_conf_one_argument(
    tmp_path: Path, owners: Owners, fake_run: FakeRun, daemon_reloads: list[None]
) -> None:
    fake_run.on("systemctl", "show", stdout="yes\n")  # slurmd held loaded: the drop-in is new
    slurmd = SlurmdManager(tmp_path)

    changed = slurmd.set_start_options(
        "compute-0", ["ctl-0", "ctl-1"], "cpus=2 realmemory=1000 features=compute"
    )

    assert changed is True
    assert daemon_reloads == [None]
    drop_in = tmp_path / "etc/systemd/system/slurmd.service.d/10-hpc-libs-dynamic-node.conf"
    assert drop_in.read_text() == START_OVERRIDE
    exec_start = [line for line in START_OVERRIDE.splitlines() if line.startswith("ExecStart")]
    assert exec_start == [
        "ExecStart=",
        "ExecStart=/usr/sbin/slurmd --systemd -Z $SLURMD_OPTIONS --conf ${SLURMD_CONF}",
    ]
    assert "Type=notify" in START_OVERRIDE
    assert "EnvironmentFile=-/etc/default/slurmd" in START_OVERRIDE
    assert (tmp_path / "etc/default/slurmd").read_text().splitlines()[1:] == [
        'SLURMD_OPTIONS="-N compute-0 --conf-server ctl-0:6817,ctl-1:6817"',
        'SLURMD_CONF="cpus=2 realmemory=1000 features=compute"',
    ]


def test_slurmd_stop_is_bounded_far_below_systemds_default(
    tmp_path: Path, owners: Owners, fake_run: FakeRun, daemon_reloads: list[None]
) -> None:
    """slurmd waits for its running health check or prolog before it exits on SIGTERM.

    The drop-in bounds that wait; systemd's default, 90 s, held each stop and reboot.
    """
    fake_run.on("systemctl", "show", stdout="yes\n")
    SlurmdManager(tmp_path).set_start_options("compute-0", ["ctl-0"], "cpus=2")

    drop_in = tmp_path / "etc/systemd/system/slurmd.service.d/10-hpc-libs-dynamic-node.conf"
    service = drop_in.read_text().split("[Service]\n", 1)[1].splitlines()
    stop_timeouts = [line for line in service if line.startswith("TimeoutStopSec=")]
    assert stop_timeouts == ["TimeoutStopSec=10"]
    assert not [line for line in service if line.startswith("KillMode=")], (
        "the packaged KillMode=process keeps job steps running when slurmd is killed"
    )


def test_slurmds_drop_in_leaves_running_job_steps_alone_at_a_stop(
    tmp_path: Path, owners: Owners, fake_run: FakeRun, daemon_reloads: list[None]
) -> None:
    """A restart of slurmd by the charm (a new key, a new config) keeps the running jobs.

    They run in slurmstepd's own systemd scope (cgroup v2) and outlive slurmd; a stop that
    also acted on them (a kill mode, a stop command, a signal of its own) would end every
    running job at each restart. The drop-in sets the start, the stop's bound and the reaper
    of untracked slurmds, nothing else (a VM shows the steps live on:
    tests/integration/test_vm_defaults.py).
    """
    fake_run.on("systemctl", "show", stdout="yes\n")
    SlurmdManager(tmp_path).set_start_options("compute-0", ["ctl-0"], "cpus=2")

    drop_in = tmp_path / "etc/systemd/system/slurmd.service.d/10-hpc-libs-dynamic-node.conf"
    service = drop_in.read_text().split("[Service]\n", 1)[1].split("\n")
    keys = sorted(line.split("=", 1)[0] for line in service if line and not line.startswith("#"))
    assert keys == [
        "EnvironmentFile",
        "ExecStart",
        "ExecStart",
        "ExecStopPost",  # the reaper of untracked slurmds (the next test), never job steps
        "TimeoutStopSec",
        "Type",
    ]


def test_slurmds_stop_ends_with_the_reaper_of_the_slurmd_systemd_lost_track_of(
    tmp_path: Path, owners: Owners, fake_run: FakeRun, daemon_reloads: list[None]
) -> None:
    """Once the unit stopped, the program the manager installed root-owned kills slurmd's
    untracked processes (tests/unit/hpc_libs/test_reap_leftovers.py, and on the lab
    tests/slurm/test_slurmd_stop.py)."""
    fake_run.on("systemctl", "show", stdout="yes\n")
    SlurmdManager(tmp_path).set_start_options("compute-0", ["ctl-0"], "cpus=2")

    drop_in = tmp_path / "etc/systemd/system/slurmd.service.d/10-hpc-libs-dynamic-node.conf"
    lines = drop_in.read_text().splitlines()
    stop_posts = [line for line in lines if line.startswith("ExecStopPost=")]
    assert stop_posts == [f"ExecStopPost=/usr/bin/python3 {REAPER} /usr/sbin/slurmd"]
    program = tmp_path / REAPER.lstrip("/")
    assert program.read_bytes() == REAPER_SOURCE.read_bytes()
    assert program.stat().st_mode & 0o7777 == 0o755
    assert owners[program.name] == ("root", None)


def test_slurmd_start_options_unchanged_means_no_reload(
    tmp_path: Path, owners: Owners, fake_run: FakeRun, daemon_reloads: list[None]
) -> None:
    fake_run.on("systemctl", "show", stdout="yes\n")
    slurmd = SlurmdManager(tmp_path)
    slurmd.set_start_options("n-0", ["ctl"], "cpus=2")

    assert slurmd.set_start_options("n-0", ["ctl"], "cpus=2") is False
    assert slurmd.set_start_options("n-0", ["ctl"], "cpus=4") is True
    assert daemon_reloads == [None]


def test_a_new_slurmd_drop_in_needs_no_reload_while_systemd_holds_no_slurmd(
    tmp_path: Path, owners: Owners, fake_run: FakeRun, daemon_reloads: list[None]
) -> None:
    """Not enabled, never started: systemd loads the unit afresh, drop-in included."""
    fake_run.on("systemctl", "show", stdout="no\n")

    assert SlurmdManager(tmp_path).set_start_options("n-0", ["ctl"], "cpus=2") is True

    assert daemon_reloads == []
    assert fake_run.calls == [
        ["systemctl", "show", "--property=NeedDaemonReload", "--value", "slurmd"]
    ]


def test_slurmd_start_options_need_every_part(tmp_path: Path, owners: Owners) -> None:
    with pytest.raises(ValueError):
        SlurmdManager(tmp_path).set_start_options("n-0", [], "cpus=2")


# Hardware detection and the --conf string.


def test_detect_hardware_without_gpus(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("slurmd", "-C", stdout=SLURMD_C)
    fake_run.missing("nvidia-smi")

    assert SlurmdManager(tmp_path).detect_hardware() == {
        "CPUs": 8,
        "Boards": 1,
        "SocketsPerBoard": 1,
        "CoresPerSocket": 4,
        "ThreadsPerCore": 2,
        "RealMemory": 31906,
    }


def test_unparsable_slurmd_c_is_an_error(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("slurmd", "-C", stdout="garbage\n")

    with pytest.raises(SlurmOpsError):
        SlurmdManager(tmp_path).detect_hardware()


def test_parse_slurmd_c_ignores_name_and_uptime() -> None:
    assert "NodeName" not in parse_slurmd_c(SLURMD_C)
    assert parse_slurmd_c("") == {}


def test_node_config_merges_hardware_feature_and_admin_config() -> None:
    hardware: dict[str, int | str] = {"CPUs": 8, "RealMemory": 31906, "Gres": "gpu:t4:1"}

    conf = node_config(hardware, "compute", "Weight=10 RealMemory=30000 Features=fast")

    assert conf == "cpus=8 realmemory=30000 gres=gpu:t4:1 weight=10 features=compute,fast"
    assert Node.from_str(conf).features == ["compute", "fast"]


def test_node_config_without_admin_config() -> None:
    assert node_config({"CPUs": 2}, "compute") == "cpus=2 features=compute"


@pytest.mark.parametrize(
    ("admin", "key"),
    [
        ("Bogus=1", "Bogus"),
        ("Weight=heavy", "Weight"),
        ("RealMemory", "RealMemory"),
        ("CPUs=2 =3", ""),
    ],
)
def test_bad_admin_node_config_names_the_key(admin: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        node_config({"CPUs": 2}, "compute", admin)

    assert caught.value.key == key


def test_parse_config_line_for_partitions() -> None:
    partition = parse_config_line(Partition, "MaxTime=60 MaxNodes=4")

    assert partition.dict() == {"maxtime": 60, "maxnodes": 4}
    with pytest.raises(ConfigError) as caught:
        parse_config_line(Partition, "MaxTime=60 Colour=blue")
    assert caught.value.key == "Colour"


def test_unbalanced_quotes_are_a_config_error() -> None:
    with pytest.raises(ConfigError):
        parse_config_line(Partition, 'MaxTime="60')


def test_conf_server_option_keeps_order() -> None:
    assert conf_server_option(["b", "a:1"]) == "b:6817,a:1"


def test_unparsable_config_file_is_a_slurm_ops_error(tmp_path: Path) -> None:
    path = tmp_path / "etc/slurm/slurm.conf"
    path.parent.mkdir(parents=True)
    path.write_text("NoSuchParameter=1\n")

    with pytest.raises(SlurmOpsError, match="cannot parse"):
        SlurmctldManager(tmp_path).config.load()


# Network state (controller HA): /etc/slurm and StateSaveLocation on the shared checkpoint.


def local_etc(root: Path, files: dict[str, tuple[str, int]]) -> Path:
    etc = root / "etc/slurm"
    etc.mkdir(parents=True)
    for name, (content, mode) in files.items():
        (etc / name).write_text(content)
        (etc / name).chmod(mode)
    return etc


def controller_on_shared(tmp_path: Path, name: str) -> SlurmctldManager:
    """A controller whose /var/lib/slurm/checkpoint is the one shared directory (a "mount")."""
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    root = tmp_path / name
    (root / "var/lib/slurm").mkdir(parents=True)
    (root / "var/lib/slurm/checkpoint").symlink_to(shared)
    return SlurmctldManager(root)


def test_network_state_paths(tmp_path: Path) -> None:
    manager = SlurmctldManager(tmp_path)

    assert manager.checkpoint_dir == tmp_path / "var/lib/slurm/checkpoint"
    assert manager.network_state_save_location == tmp_path / "var/lib/slurm/checkpoint/slurmctld"
    assert manager.shared_etc_dir == tmp_path / "var/lib/slurm/checkpoint/etc-slurm"


def test_share_etc_backs_up_then_moves_etc_slurm_behind_a_symlink(tmp_path: Path) -> None:
    etc = local_etc(
        tmp_path, {"slurm.conf": ("ClusterName=c\n", 0o644), "slurm.key": ("k", 0o600)}
    )
    manager = SlurmctldManager(tmp_path)

    backup = manager.share_etc()

    assert backup is not None and backup.parent == tmp_path / "etc"
    assert backup.name.startswith("slurm_") and backup.name.endswith("Z")
    assert (backup / "slurm.conf").read_text() == "ClusterName=c\n"
    assert not (backup / "slurm.key").exists()  # The key lives on the share, not in backups.
    assert etc.is_symlink() and manager.etc_is_shared()
    assert (manager.shared_etc_dir / "slurm.key").read_text() == "k"
    assert mode_of(manager.shared_etc_dir / "slurm.key") == 0o600
    assert manager.config.load().cluster_name == "c"
    assert manager.shared_files_ready()
    # Nothing left over from the swap (dpkg/: `keep_root_after_dpkg`).
    left = sorted(p.name for p in (tmp_path / "etc").iterdir() if p.name != "dpkg")
    assert left == sorted(["slurm", backup.name])


def test_share_etc_is_idempotent(tmp_path: Path) -> None:
    local_etc(tmp_path, {"slurm.conf": ("ClusterName=c\n", 0o644)})
    manager = SlurmctldManager(tmp_path)
    manager.share_etc()

    assert manager.share_etc() is None
    assert len(list((tmp_path / "etc").glob("slurm_*"))) == 1


def test_a_peer_links_to_the_leaders_files_and_keeps_its_own_in_the_backup(
    tmp_path: Path,
) -> None:
    leader = controller_on_shared(tmp_path, "leader")
    peer = controller_on_shared(tmp_path, "peer")
    local_etc(leader.root, {"slurm.conf": ("ClusterName=leader\n", 0o644)})
    local_etc(peer.root, {"slurm.conf": ("ClusterName=peer\n", 0o644), "old.conf": ("x", 0o644)})
    leader.share_etc()

    backup = peer.share_etc()

    assert peer.config.load().cluster_name == "leader"
    assert not (peer.etc_dir / "old.conf").exists()
    assert backup is not None and (backup / "old.conf").read_text() == "x"
    assert (backup / "slurm.conf").read_text() == "ClusterName=peer\n"


def test_share_etc_without_local_etc_makes_the_link_and_the_shared_dir(tmp_path: Path) -> None:
    manager = SlurmctldManager(tmp_path)

    assert manager.share_etc() is None

    assert manager.etc_is_shared() and manager.shared_etc_dir.is_dir()
    assert not manager.shared_files_ready()


def test_share_etc_replaces_a_foreign_symlink(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "slurm.conf").write_text("x")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/slurm").symlink_to(elsewhere)
    manager = SlurmctldManager(tmp_path)

    manager.share_etc()

    assert manager.etc_is_shared()
    assert (elsewhere / "slurm.conf").read_text() == "x"


def test_share_etc_refuses_a_file_at_etc_slurm(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/slurm").write_text("not a directory")

    with pytest.raises(SlurmOpsError, match="not a directory"):
        SlurmctldManager(tmp_path).share_etc()
    assert (tmp_path / "etc/slurm").read_text() == "not a directory"


def test_share_etc_refuses_a_tree_on_the_share_it_cannot_trust_before_any_backup(
    tmp_path: Path,
) -> None:
    local_etc(tmp_path, {"slurm.conf": ("ClusterName=c\n", 0o644)})
    manager = SlurmctldManager(tmp_path)
    shared = manager.shared_etc_dir
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    (tmp_path / "elsewhere").mkdir()
    (shared / "slurm.conf").write_text("ClusterName=shared\n")
    (shared / "slurm.key").symlink_to(tmp_path / "elsewhere")

    with pytest.raises(SlurmOpsError) as refused:
        manager.share_etc()

    assert refused.value.message == (
        f"refusing to serve {shared} configless: {shared}/slurm.key is a symbolic link"
    )
    assert mode_of(shared) == 0o755  # Its top made root's first: nothing is added meanwhile.
    assert not manager.etc_is_shared() and list((tmp_path / "etc").glob("slurm_*")) == []
    assert not manager.shared_files_ready()


def group_writable_file(shared: Path) -> None:
    (shared / "a.conf").write_text("")
    (shared / "a.conf").chmod(0o664)


def others_writable_dir(shared: Path) -> None:
    (shared / "sub").mkdir()
    (shared / "sub").chmod(0o757)


def fifo(shared: Path) -> None:
    os.mkfifo(shared / "plugstack.conf.d/fifo")


def foreign_file(shared: Path) -> None:
    os.chown(shared / "slurm.conf", 4242, 0)


def deep_tree(shared: Path) -> None:
    (shared / "/".join("d" * 20)).mkdir(parents=True)


@pytest.mark.parametrize(
    ("make", "found"),
    [
        (group_writable_file, "a.conf is writable by group or others (0664)"),
        (others_writable_dir, "directory {shared}/sub is writable by group or others (0757)"),
        (fifo, "{shared}/plugstack.conf.d/fifo is not a regular file or directory"),
        pytest.param(
            foreign_file,
            "file {shared}/slurm.conf is owned by uid 4242",
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root"),
        ),
        (deep_tree, "is more than 16 directories deep"),
    ],
)
def test_only_a_tree_as_the_charm_writes_it_is_adopted(tmp_path: Path, make, found) -> None:
    manager = SlurmctldManager(tmp_path)
    shared = manager.shared_etc_dir
    shared.mkdir(parents=True)
    (shared / "slurm.conf").write_text("ClusterName=shared\n")
    (shared / "plugstack.conf.d").mkdir()
    assert manager.shared_etc_problem() is None

    make(shared)

    problem = manager.shared_etc_problem()
    assert problem is not None and found.format(shared=shared) in problem


def test_a_failed_copy_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = local_etc(tmp_path, {"slurm.conf": ("ClusterName=c\n", 0o644)})
    calls: list[Path] = []
    real_copy_tree = files.copy_tree

    def copy_tree_failing_on_the_shared_copy(src: Path, dst: Path, **under: Path) -> None:
        calls.append(Path(dst))
        if len(calls) > 1:
            raise SlurmOpsError("cannot copy: No space left on device")
        real_copy_tree(src, dst, **under)

    monkeypatch.setattr(files, "copy_tree", copy_tree_failing_on_the_shared_copy)
    manager = SlurmctldManager(tmp_path)

    with pytest.raises(SlurmOpsError, match="No space left"):
        manager.share_etc()

    assert not etc.is_symlink() and (etc / "slurm.conf").read_text() == "ClusterName=c\n"
    assert not manager.shared_etc_dir.exists()
    monkeypatch.setattr(files, "copy_tree", real_copy_tree)
    manager.share_etc()  # retried on the next event
    assert manager.etc_is_shared() and manager.config.load().cluster_name == "c"


def test_writes_through_the_link_are_atomic_renames_in_the_shared_dir(
    tmp_path: Path, owners: Owners
) -> None:
    del owners
    local_etc(tmp_path, {"slurm.conf": ("ClusterName=old\n", 0o644)})
    manager = SlurmctldManager(tmp_path)
    manager.share_etc()
    reader = (manager.shared_etc_dir / "slurm.conf").open()  # a peer reading the old file

    config = manager.config.load()
    config.cluster_name = "new"
    manager.config.write(config)

    assert reader.read() == "ClusterName=old\n"  # replaced by rename, never rewritten in place
    assert manager.config.load().cluster_name == "new"
    assert [p.name for p in manager.shared_etc_dir.iterdir()] == ["slurm.conf"]
    reader.close()


def test_keys_are_read_from_the_shared_file_on_every_access(
    tmp_path: Path, owners: Owners
) -> None:
    del owners
    leader = controller_on_shared(tmp_path, "leader")
    peer = controller_on_shared(tmp_path, "peer")
    leader.share_etc()
    peer.share_etc()
    assert peer.key.get() is None and peer.jwt_key.get() is None

    first = leader.key.generate()
    leader.key.set(first)
    leader.jwt_key.set(leader.jwt_key.generate())
    assert peer.key.get() == first
    assert peer.jwt_key.get() == leader.jwt_key.get()

    second = leader.key.generate()
    leader.key.set(second)
    assert peer.key.get() == second  # the same KeyFile object sees the new key
    assert mode_of(peer.shared_etc_dir / "slurm.key") == 0o600


def test_state_is_copied_to_the_network_location_once(tmp_path: Path, owners: Owners) -> None:
    manager = SlurmctldManager(tmp_path)
    local = manager.create_state_save_location()
    (local / "job_state").write_bytes(b"\x00jobs")
    (local / "hash.7").mkdir()
    (local / "hash.7/job.1007").mkdir()
    (local / "hash.7/job.1007/script").write_text("#!/bin/sh\n")
    (local / "hash.7/job.1007/script").chmod(0o600)

    assert manager.copy_state_to_network() is True

    network = manager.network_state_save_location
    assert (network / "job_state").read_bytes() == b"\x00jobs"
    assert (network / "hash.7/job.1007/script").read_text() == "#!/bin/sh\n"
    assert mode_of(network / "hash.7/job.1007/script") == 0o600
    assert mode_of(network) == 0o750
    assert (local / "job_state").read_bytes() == b"\x00jobs"  # the local state stays
    assert [p.name for p in manager.checkpoint_dir.iterdir()] == ["slurmctld"]
    (local / "job_state").write_bytes(b"newer")
    assert manager.copy_state_to_network() is False
    assert (network / "job_state").read_bytes() == b"\x00jobs"
    assert "slurmctld" in owners


def test_without_local_state_the_network_location_is_created_empty(
    tmp_path: Path, owners: Owners
) -> None:
    manager = SlurmctldManager(tmp_path)

    assert manager.copy_state_to_network() is False

    assert manager.network_state_save_location.is_dir()
    assert mode_of(manager.network_state_save_location) == 0o750
    assert owners["slurmctld"] == ("slurm", "slurm")


def test_migration_of_a_running_controller_in_the_charms_order(
    tmp_path: Path, owners: Owners, fake_run: FakeRun
) -> None:
    del owners
    manager = SlurmctldManager(tmp_path)
    local_etc(tmp_path, {"slurm.conf": ("ClusterName=c\nStateSaveLocation=/x\n", 0o644)})
    local = manager.create_state_save_location()
    (local / "job_state").write_text("queued and running jobs")

    manager.service.stop()
    manager.copy_state_to_network()
    manager.share_etc()
    config = manager.config.load()
    config.state_save_location = str(manager.network_state_save_location)
    manager.config.write(config)
    manager.service.start()

    assert [c[:2] for c in fake_run.calls if c[0] == "systemctl"] == [
        ["systemctl", "stop"],
        ["systemctl", "start"],
    ]
    conf = (manager.shared_etc_dir / "slurm.conf").read_text().lower()
    assert f"statesavelocation={manager.network_state_save_location}".lower() in conf
    assert (manager.network_state_save_location / "job_state").read_text() == (
        "queued and running jobs"
    )


def test_running_jobs_are_the_jobs_of_roots_slurmstepd_processes(tmp_path: Path) -> None:
    processes = FakeProcesses(tmp_path)
    for title in (
        "slurmstepd: [12.batch]",
        "slurmstepd: [12.extern]",
        "slurmstepd: [13.0+1]",
        "slurmstepd: [14.interactive stepmgr]",
        "slurmstepd: [15]",
    ):
        processes.run(title)
    processes.run("slurmstepd: [99.batch]", uid=1000)  # a user's process, named so
    processes.run("slurmstepd: [98.batch]", name="python3")
    processes.run("/usr/sbin/slurmd --systemd -Z", name="slurmd")

    assert SlurmdManager(root=tmp_path).running_jobs() == [12, 13, 14, 15]


def test_no_step_process_is_no_job_whatever_the_spool_directory_holds(tmp_path: Path) -> None:
    # A step killed with its machine leaves its socket: `scontrol listjobs` would list job 7.
    spool = tmp_path / "var/spool/slurmd"
    spool.mkdir(parents=True)
    (spool / "compute-0_7.4294967291").touch()
    FakeProcesses(tmp_path)

    assert SlurmdManager(root=tmp_path).running_jobs() == []


@pytest.mark.parametrize(
    "title",
    ["/usr/sbin/slurmstepd", "slurmstepd: [12.batch]; rm -rf /", "slurmstepd: [x.batch]", ""],
)
def test_a_step_whose_title_is_not_a_step_id_means_unknown_jobs(
    tmp_path: Path, title: str
) -> None:
    processes = FakeProcesses(tmp_path)
    processes.steps(12)
    processes.run(title)

    assert SlurmdManager(root=tmp_path).running_jobs() is None


def test_processes_that_cannot_be_listed_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(SlurmOpsError, match="cannot list the processes"):
        SlurmdManager(root=tmp_path).running_jobs()
