"""hpc_libs.slurm.slurmdbd: the hosts, operator parameters and the listening check."""

from pathlib import Path

import pytest
from hpc_libs.errors import ConfigError
from hpc_libs.machine import files
from hpc_libs.slurm.slurmdbd import (
    OWNED_KEYS,
    PARAMETER_RULES,
    DbdHosts,
    SlurmdbdManager,
    StorageSettings,
    parse_parameters,
)

STORAGE = StorageSettings("10.0.0.5", 3306, "slurm_acct_db", "relation-7", "Zq3xV9pL2mN8")


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SlurmdbdManager:
    monkeypatch.setattr(files, "set_owner", lambda path, owner, group: None)
    return SlurmdbdManager(tmp_path)


def lines(manager: SlurmdbdManager) -> list[str]:
    return manager.config.path.read_text().splitlines()


def test_a_lone_primary_has_no_backup_and_no_dbd_addr(manager: SlurmdbdManager):
    manager.write_config(DbdHosts("dbd-0", "10.0.0.10"), STORAGE)

    assert lines(manager)[0] == "dbdhost=dbd-0"
    assert not [line for line in lines(manager) if line.startswith(("dbdaddr", "dbdbackup"))]


def test_with_a_backup_the_primary_is_reached_at_its_address(manager: SlurmdbdManager):
    manager.write_config(DbdHosts("dbd-0", "10.0.0.10", "dbd-1"), STORAGE)

    assert lines(manager)[:3] == ["dbdhost=dbd-0", "dbdaddr=10.0.0.10", "dbdbackuphost=dbd-1"]


@pytest.mark.parametrize(
    ("hosts", "key"),
    [
        (DbdHosts("dbd 0"), "DbdHost"),
        (DbdHosts("dbd-0", "10.0.0.10\nStorageHost=x", "dbd-1"), "DbdAddr"),
        (DbdHosts("dbd-0", "10.0.0.10", "dbd-1=x"), "DbdBackupHost"),
    ],
)
def test_hosts_breaking_the_grammar_are_refused_naming_the_key(
    manager: SlurmdbdManager, hosts: DbdHosts, key: str
):
    with pytest.raises(ConfigError) as raised:
        manager.write_config(hosts, STORAGE)

    assert raised.value.key == key
    assert not manager.config.path.exists()


def test_operator_parameters_come_after_the_charms_keys(manager: SlurmdbdManager):
    manager.write_config(DbdHosts("dbd-0"), STORAGE, {"DebugLevel": "verbose"})

    assert lines(manager)[-1] == "debuglevel=verbose"


def test_parameters_are_checked_again_when_written(manager: SlurmdbdManager):
    with pytest.raises(ConfigError) as raised:
        manager.write_config(DbdHosts("dbd-0"), STORAGE, {"StorageHost": "10.9.9.9"})

    assert raised.value.key == "StorageHost"
    assert not manager.config.path.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("debuglevel=DEBUG2", {"DebugLevel": "debug2"}),
        ("TrackWCKey=TRUE archivejobs=0", {"TrackWCKey": "yes", "ArchiveJobs": "no"}),
        ("DebugFlags=DB_Job,DB_QUERY", {"DebugFlags": "db_job,db_query"}),
        ("Parameters=PreserveCaseUser", {"Parameters": "preservecaseuser"}),
        ("HashPlugin=hash/K12", {"HashPlugin": "hash/k12"}),
        ("MaxQueryTimeRange=1-00:00:00", {"MaxQueryTimeRange": "1-00:00:00"}),
        ("PurgeEventAfter=1Month", {"PurgeEventAfter": "1month"}),
        ("ArchiveDir=/var/spool/slurm-archive", {"ArchiveDir": "/var/spool/slurm-archive"}),
        ("LogTimeFormat=RFC3339,format_stderr", {"LogTimeFormat": "rfc3339,format_stderr"}),
    ],
)
def test_accepted_settings_are_spelled_for_slurmutils(
    manager: SlurmdbdManager, text: str, expected: dict[str, str]
):
    parsed = parse_parameters(text)

    assert parsed == expected
    manager.write_config(DbdHosts("dbd-0"), STORAGE, parsed)  # slurmutils takes them


def test_no_key_is_both_accepted_and_owned():
    assert not {k.lower() for k in PARAMETER_RULES} & {k.lower() for k in OWNED_KEYS}


@pytest.mark.parametrize(
    ("table", "content", "serving"),
    [
        ("tcp", "   0: 00000000:1AA3 00000000:0000 0A 00000000:00000000", True),
        ("tcp6", "   0: 00000000000000000000000000000000:1AA3 0000:0000 0A 0", True),
        ("tcp", "   0: 0B00000A:D431 0A00000A:1AA3 01 00000000:00000000", False),
        ("tcp", "   0: 00000000:1AA4 00000000:0000 0A 00000000:00000000", False),
        ("tcp", "garbage", False),
    ],
)
def test_serving_means_a_socket_listens_on_6819(
    manager: SlurmdbdManager, table: str, content: str, serving: bool
):
    tables = manager.root / "proc/net"
    tables.mkdir(parents=True)
    (tables / table).write_text(f"  sl  local_address rem_address   st\n{content}\n")

    assert manager.serving() is serving


def test_no_socket_tables_means_not_serving(manager: SlurmdbdManager):
    assert manager.serving() is False
