"""hpc_libs.slurm.slurmdbd: the hosts, operator parameters and the listening check."""

from pathlib import Path

import pytest
from hpc_libs.errors import ConfigError
from hpc_libs.machine import files
from hpc_libs.slurm.grammar import SLURMDBD_CONF
from hpc_libs.slurm.slurmdbd import (
    PARAMETERS,
    DbdHosts,
    SlurmdbdManager,
    StorageSettings,
    parse_parameters,
)

OWNED_KEYS = sorted(PARAMETERS.owned)

STORAGE = StorageSettings("10.0.0.5", 3306, "slurm_acct_db", "relation-7", "Zq3xV9pL2mN8")


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SlurmdbdManager:
    monkeypatch.setattr(files, "set_owner", lambda path, owner, group, fd=None: None)
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
    manager.write_config(DbdHosts("dbd-0"), STORAGE, {"debuglevel": "verbose"})

    assert lines(manager)[-1] == "debuglevel=verbose"


def test_parameters_are_checked_again_when_written(manager: SlurmdbdManager):
    with pytest.raises(ConfigError) as raised:
        manager.write_config(DbdHosts("dbd-0"), STORAGE, {"storagehost": "10.9.9.9"})

    assert raised.value.key == "StorageHost"
    assert not manager.config.path.exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("debuglevel=DEBUG2", {"debuglevel": "debug2"}),
        ("TrackWCKey=TRUE archivejobs=0", {"trackwckey": True, "archivejobs": False}),
        ("DebugFlags=DB_Job,DB_QUERY", {"debugflags": ["db_job", "db_query"]}),
        ("Parameters=PreserveCaseUser", {"parameters": {"preservecaseuser": True}}),
        ("HashPlugin=hash/K12", {"hashplugin": "hash/k12"}),
        ("MaxQueryTimeRange=1-00:00:00", {"maxquerytimerange": "1-00:00:00"}),
        ("PurgeEventAfter=1Month", {"purgeeventafter": "1months"}),
        ("PurgeJobAfter=12", {"purgejobafter": "12months"}),
        ("PurgeStepAfter=012HOUR", {"purgestepafter": "12hours"}),
        ("ArchiveDir=/var/spool/slurm-archive", {"archivedir": "/var/spool/slurm-archive"}),
        ("LogTimeFormat=RFC3339,format_stderr", {"logtimeformat": "rfc3339,format_stderr"}),
    ],
)
def test_accepted_settings_are_spelled_for_slurmutils(
    manager: SlurmdbdManager, text: str, expected: dict[str, str]
):
    parsed = parse_parameters(text)

    assert parsed == expected
    manager.write_config(DbdHosts("dbd-0"), STORAGE, parsed)  # slurmutils takes them


# Every accepted value gets through the real writer (issue 20, High 3: `PurgeJobAfter=12`, as
# slurmdbd.conf(5) shows it, passed the option check and then failed in every hook).

EXAMPLES = {
    "AllowNoDefAcct": ("yes", "no", "1", "False"),
    "AllResourcesAbsolute": ("yes",),
    "ArchiveDir": ("/var/spool/slurm-archive",),
    "ArchiveEvents": ("yes", "0"),
    "ArchiveJobs": ("yes",),
    "ArchiveResvs": ("no",),
    "ArchiveScript": ("/usr/local/sbin/archive.sh",),
    "ArchiveSteps": ("yes",),
    "ArchiveSuspend": ("yes",),
    "ArchiveTXN": ("yes",),
    "ArchiveUsage": ("yes",),
    "CommitDelay": ("1", "60"),
    "DebugFlags": ("DB_Job", "DB_QOS,DB_Step,Network"),
    "DebugLevel": ("info", "debug5"),
    "DebugLevelSyslog": ("quiet",),
    "DefaultQOS": ("normal", "5", "high-prio"),
    "DisableCoordDBD": ("yes",),
    "HashPlugin": ("hash/k12", "hash/sha3"),
    "LogTimeFormat": ("iso8601", "rfc5424_ms,format_stderr", "thread_id"),
    "MaxQueryTimeRange": ("60", "1-00:00:00", "UNLIMITED"),
    "MessageTimeout": ("10",),
    "Parameters": ("PreserveCaseUser",),
    "PrivateData": ("accounts", "jobs,usage,users"),
    **{
        f"Purge{what}After": ("12", "1month", "24hours", "30days", "65535")
        for what in ("Event", "Job", "Resv", "Step", "Suspend", "TXN", "Usage")
    },
    "TCPTimeout": ("2",),
    "TrackSlurmctldDown": ("yes",),
    "TrackWCKey": ("no",),
}


def test_every_rule_has_accepted_examples():
    assert set(EXAMPLES) == set(SLURMDBD_CONF)


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_every_accepted_example_is_written_by_the_real_writer(manager: SlurmdbdManager, key):
    for value in EXAMPLES[key]:
        parsed = parse_parameters(f"{key}={value}")

        assert manager.write_config(DbdHosts("dbd-0"), STORAGE, parsed) in (True, False)

        written = [line for line in lines(manager) if line.startswith(f"{key.lower()}=")]
        assert len(written) == 1, (value, lines(manager))


def test_a_purge_age_without_unit_is_months_as_slurm_reads_it(manager: SlurmdbdManager):
    manager.write_config(DbdHosts("dbd-0"), STORAGE, parse_parameters("PurgeJobAfter=12"))

    assert "purgejobafter=12months" in lines(manager)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("PurgeJobAfter=0", "not between 1 and 65535"),
        ("PurgeJobAfter=65536", "not between 1 and 65535"),
        ("PurgeJobAfter=12x", "optional hours, days or months"),
        ("PurgeJobAfter=12minutes", "optional hours, days or months"),
    ],
)
def test_purge_ages_slurm_refuses_or_garbles_are_refused(text: str, words: str):
    with pytest.raises(ConfigError) as raised:
        parse_parameters(text)

    assert raised.value.key == "PurgeJobAfter"
    assert words in raised.value.message


def test_no_key_is_both_accepted_and_owned():
    assert not {k.lower() for k in SLURMDBD_CONF} & {k.lower() for k in OWNED_KEYS}


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
