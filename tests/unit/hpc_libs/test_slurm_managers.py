"""Scenarios for the per-daemon managers: every file's path, owner, mode and content."""

import base64
from pathlib import Path

import pytest
from hpc_libs.errors import ConfigError, PackageError, SlurmOpsError
from hpc_libs.machine import systemd
from hpc_libs.slurm.base import SLURM_PPA, conf_server_option, parse_config_line
from hpc_libs.slurm.sackd import SackdManager
from hpc_libs.slurm.slurmctld import SlurmctldManager
from hpc_libs.slurm.slurmd import (
    START_OVERRIDE,
    SlurmdManager,
    gpu_model_name,
    node_config,
    parse_node_config,
    parse_slurmd_c,
)
from hpc_libs.slurm.slurmdbd import SlurmdbdManager
from hpc_libs.slurm.slurmrestd import SlurmrestdManager
from hpc_libs_fakes import FakeRun
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
        (SlurmctldManager, ["slurmctld", "slurm-client"]),
        (SlurmdManager, ["slurmd", "slurm-client"]),
        (SackdManager, ["sackd", "slurm-client"]),
        (SlurmdbdManager, ["slurmdbd"]),
        (SlurmrestdManager, ["slurmrestd"]),
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
    assert installed == [["slurmd", "slurm-client"]]


def test_install_when_installed_touches_nothing(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("dpkg-query", stdout="installed 24.11.5-1")

    assert SlurmdManager(tmp_path).install("ppa") is False

    assert all(call[0] == "dpkg-query" for call in fake_run.calls)


def test_version_reads_dpkg(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("dpkg-query", stdout="installed 24.11.5-1")

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


@pytest.mark.parametrize("manager", [SlurmctldManager, SlurmdbdManager, SlurmrestdManager])
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


def test_slurm_conf_edit_writes_once_and_reports_changes(tmp_path: Path, owners: Owners) -> None:
    config = SlurmctldManager(tmp_path).config

    with config.edit() as conf:
        conf.cluster_name = "hpc"
        conf.auth_type = "auth/slurm"
        conf.nodesets["compute"] = NodeSet(nodeset="compute", feature="compute")
        conf.partitions["compute"] = Partition(partitionname="compute", nodes=["compute"])
    assert config.changed is True

    with config.edit() as conf:
        conf.cluster_name = "hpc"
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


def test_controller_companion_files_paths_and_modes(tmp_path: Path, owners: Owners) -> None:
    manager = SlurmctldManager(tmp_path)

    assert manager.gres_config.path == tmp_path / "etc/slurm/gres.conf"
    assert manager.gres_config.mode == 0o644
    assert manager.acct_gather_config.path == tmp_path / "etc/slurm/acct_gather.conf"
    assert manager.acct_gather_config.mode == 0o600


def test_include_config_is_its_own_file(tmp_path: Path, owners: Owners) -> None:
    manager = SlurmctldManager(tmp_path)
    include = manager.include_config("slurm.conf.d-partitions.conf")

    with include.edit() as conf:
        conf.partitions["p"] = Partition(partitionname="p", nodes=["p"])

    assert (tmp_path / "etc/slurm/slurm.conf.d-partitions.conf").read_text() == (
        "partitionname=p nodes=p\n"
    )
    with pytest.raises(ValueError, match="plain file name"):
        manager.include_config("../slurm.conf")


def test_state_save_location_owned_by_slurm(tmp_path: Path, owners: Owners) -> None:
    path = SlurmctldManager(tmp_path).create_state_save_location()

    assert path == tmp_path / "var/lib/slurm/slurmctld"
    assert mode_of(path) == 0o750
    assert owners["slurmctld"] == ("slurm", "slurm")


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
        (SlurmrestdManager, "SLURMRESTD_OPTIONS"),
    ],
)
def test_daemon_options_file(
    manager: type[SlurmctldManager], variable: str, tmp_path: Path, owners: Owners
) -> None:
    daemon = manager(tmp_path)

    assert daemon.set_start_options("-vv") is True
    assert daemon.set_start_options("-vv") is False

    path = tmp_path / "etc/default" / daemon.daemon
    assert path.read_text().splitlines()[1:] == [f'{variable}="-vv"']
    assert mode_of(path) == 0o644
    assert owners[daemon.daemon] == ("root", None)
    assert daemon.options.read() == {variable: "-vv"}


def test_sackd_conf_servers(tmp_path: Path, owners: Owners) -> None:
    sackd = SackdManager(tmp_path)

    assert sackd.set_conf_servers(["ctl-0", "ctl-1:7817"]) is True

    assert sackd.options.read() == {"SACKD_OPTIONS": "--conf-server ctl-0:6817,ctl-1:7817"}
    with pytest.raises(ValueError):
        sackd.set_conf_servers([])


def test_options_refuse_quote_characters(tmp_path: Path, owners: Owners) -> None:
    with pytest.raises(ConfigError) as caught:
        SlurmctldManager(tmp_path).set_start_options('-f "x"')

    assert caught.value.key == "SLURMCTLD_OPTIONS"


def test_slurmd_start_options_keep_conf_one_argument(
    tmp_path: Path, owners: Owners, daemon_reloads: list[None]
) -> None:
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


def test_slurmd_start_options_unchanged_means_no_reload(
    tmp_path: Path, owners: Owners, daemon_reloads: list[None]
) -> None:
    slurmd = SlurmdManager(tmp_path)
    slurmd.set_start_options("n-0", ["ctl"], "cpus=2")

    assert slurmd.set_start_options("n-0", ["ctl"], "cpus=2") is False
    assert slurmd.set_start_options("n-0", ["ctl"], "cpus=4") is True
    assert daemon_reloads == [None]


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


def test_detect_hardware_with_gpus(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("slurmd", "-C", stdout=SLURMD_C)
    fake_run.on("nvidia-smi", stdout="Tesla T4\nTesla T4\nNVIDIA A100-SXM4-40GB\n")

    hardware = SlurmdManager(tmp_path).detect_hardware()

    assert hardware["Gres"] == "gpu:a100-sxm4-40gb:1,gpu:tesla_t4:2"
    assert ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"] in fake_run.calls


def test_nvidia_smi_failing_means_no_gpus(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("nvidia-smi", returncode=9, stderr="NVIDIA-SMI has failed")

    assert SlurmdManager(tmp_path).gpus() == {}


def test_unparsable_slurmd_c_is_an_error(fake_run: FakeRun, tmp_path: Path) -> None:
    fake_run.on("slurmd", "-C", stdout="garbage\n")

    with pytest.raises(SlurmOpsError):
        SlurmdManager(tmp_path).detect_hardware()


def test_parse_slurmd_c_ignores_name_and_uptime() -> None:
    assert "NodeName" not in parse_slurmd_c(SLURMD_C)
    assert parse_slurmd_c("") == {}


def test_gpu_model_name() -> None:
    assert gpu_model_name("NVIDIA GeForce RTX 4090") == "geforce_rtx_4090"


def test_node_config_merges_hardware_feature_and_admin_config() -> None:
    hardware: dict[str, int | str] = {"CPUs": 8, "RealMemory": 31906, "Gres": "gpu:t4:1"}

    conf = node_config(hardware, "compute", "Weight=10 RealMemory=30000 Features=fast")

    assert conf == "CPUs=8 RealMemory=30000 Gres=gpu:t4:1 Weight=10 Features=compute,fast"
    assert Node.from_str(conf).features == ["compute", "fast"]


def test_node_config_without_admin_config() -> None:
    assert node_config({"CPUs": 2}, "compute") == "CPUs=2 Features=compute"


@pytest.mark.parametrize(
    ("admin", "key"),
    [
        ("Bogus=1", "Bogus"),
        ("Weight=heavy", "Weight"),
        ("RealMemory", "RealMemory"),
        ("CPUs=2 =3", ""),
        ("NodeName=other", "NodeName"),
    ],
)
def test_bad_admin_node_config_names_the_key(admin: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        node_config({"CPUs": 2}, "compute", admin)

    assert caught.value.key == key


def test_parse_node_config_refuses_a_quoted_value() -> None:
    # A quoted value could hold whitespace and smuggle a key into the node's `--conf` line.
    with pytest.raises(ConfigError) as caught:
        parse_node_config('Weight=3 Reason="new disks"')
    assert caught.value.key == "Reason"


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
