"""`slurmdbd-conf-parameters`: operator settings merged into slurmdbd.conf.

A valid change rewrites slurmdbd.conf and restarts slurmdbd; a refused key or value blocks
naming the key and keeps the last valid file, with slurmdbd running as it was.
"""

import dataclasses
from pathlib import Path

import ops
import pytest
import yaml
from charm_testing import FakeMachine
from hpc_libs.slurm.grammar import SLURMDBD_CONF
from hpc_libs.slurm.slurmdbd import PARAMETERS
from ops import testing
from test_slurmdbd_accounting import PASSWORD, conf, conf_path, ready_state

OPTION = "slurmdbd-conf-parameters"
OWNED_KEYS = sorted(PARAMETERS.owned)
OWNED = PARAMETERS.owned["StorageLoc"]
CHARMCRAFT = Path(__file__).parents[3] / "charms/slurmdbd/charmcraft.yaml"


def configured(state: testing.State, text: str) -> testing.State:
    return dataclasses.replace(state, config={OPTION: text})


def test_parameters_are_merged_after_the_charms_keys_and_restart_slurmdbd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)

    out = ctx.run(
        ctx.on.config_changed(),
        configured(out, "DebugLevel=Verbose\nTrackWCKey=1  PurgeJobAfter=12Months\n"),
    )

    written = conf(dbd_root)
    assert written["debuglevel"] == "verbose"
    assert written["trackwckey"] == "yes"
    assert written["purgejobafter"] == "12months"
    assert written["storagepass"] == PASSWORD
    lines = conf_path(dbd_root).read_text().splitlines()
    assert lines[0] == "dbdhost=" + written["dbdhost"]
    assert lines[-3:] == ["debuglevel=verbose", "trackwckey=yes", "purgejobafter=12months"]
    assert machine.calls("restart") == ["slurmdbd", "slurmdbd"]
    assert isinstance(out.unit_status, ops.ActiveStatus)


def test_unchanged_parameters_do_not_restart_slurmdbd(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), configured(state, "DebugLevel=verbose"))

    ctx.run(ctx.on.config_changed(), out)

    assert machine.calls("restart") == ["slurmdbd"]


@pytest.mark.parametrize("key", OWNED_KEYS)
def test_every_key_the_charm_owns_is_refused_naming_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path, key: str
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)
    before = conf_path(dbd_root).read_text()

    out = ctx.run(ctx.on.config_changed(), configured(out, f"DebugLevel=info {key.lower()}=x"))

    assert out.unit_status == ops.BlockedStatus(f"{OPTION}: {key} {OWNED}")
    assert conf_path(dbd_root).read_text() == before
    assert machine.calls("restart") == ["slurmdbd"]
    assert "slurmdbd" in machine.active


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DebugLevel=loud", "invalid DebugLevel: 'loud' is not one of quiet, fatal, error"),
        ("MessageTimeout=-1", "invalid MessageTimeout: '-1' is not a whole number"),
        ("MessageTimeout=70000", "invalid MessageTimeout: 70000 is not between 0 and 65533"),
        ("TrackWCKey=maybe", "invalid TrackWCKey: 'maybe' is not one of YES, NO"),
        ("PurgeJobAfter=12weeks", "invalid PurgeJobAfter: '12weeks' is not a number"),
        ("ArchiveDir=relative", "invalid ArchiveDir: 'relative' is not an absolute path"),
        ("ArchiveDir=/var/../etc", "invalid ArchiveDir: '/var/../etc' holds '..'"),
        ("ArchiveScript=/bin/sh;id", "invalid ArchiveScript: '/bin/sh;id' is not an absolute"),
        ("DebugFlags=DB_Job,Everything", "invalid DebugFlags: 'Everything' is not one of"),
        ("PrivateData=jobs,", "invalid PrivateData: empty value"),
        ("LogTimeFormat=iso8601,loud", "invalid LogTimeFormat: 'iso8601,loud' is not one of"),
        ("DefaultQOS=normal'", 'invalid DefaultQOS: "\'" is not allowed in a value'),
        ('DebugLevel="info', "invalid DebugLevel: '\"' is not allowed in a value"),
        ("DebugLevel=info#x", "invalid DebugLevel: '#' is not allowed in a value"),
        ("DebugLevel=info\\", "invalid DebugLevel: '\\\\' is not allowed in a value"),
        ("MaxQueryTimeRange=1-2-3", "invalid MaxQueryTimeRange: '1-2-3' is not UNLIMITED"),
        ("CommunicationParameters=keepalivetime=5", "CommunicationParameters is not admitted"),
        ("DbdHostname=x", "unknown key DbdHostname"),
        ("DebugLevel=info DEBUGLEVEL=verbose", "DebugLevel is given twice"),
        ("DebugLevel", "'DebugLevel' is not key=value"),
        ("DebugLevel=", "'DebugLevel=' is not key=value"),
        ("=info", "'=info' is not key=value"),
    ],
)
def test_a_bad_setting_blocks_naming_it_and_keeps_the_last_valid_file(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    dbd_root: Path,
    text: str,
    message: str,
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), configured(state, "DebugLevel=verbose"))
    before = conf_path(dbd_root).read_text()

    out = ctx.run(ctx.on.config_changed(), configured(out, text))

    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert out.unit_status.message.startswith(f"{OPTION}: {message}")
    assert conf_path(dbd_root).read_text() == before
    assert machine.calls("restart") == ["slurmdbd"]


@pytest.mark.parametrize(
    "text",
    [
        "DebugLevel=info\nStorageHost=10.9.9.9",  # a second line naming an owned key
        "DebugLevel=info StoragePass=x",
        "DebugLevel=info\rDbdPort=1",
        "DebugLevel=info\x00\nAuthType=auth/none",
        "DebugLevel=info\u2028StorageUser=root",
    ],
)
def test_a_setting_can_never_add_a_line_or_a_key_the_charm_owns(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path, text: str
):
    state, database, _ = ready_state()
    ctx.run(ctx.on.relation_changed(database), configured(state, text))

    assert not conf_path(dbd_root).exists()
    assert machine.calls("restart") == []


def test_a_bad_setting_on_a_fresh_unit_writes_nothing(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(database), configured(state, "StorageLoc=other"))

    assert not conf_path(dbd_root).exists()
    assert machine.calls("restart") == []
    assert out.unit_status == ops.BlockedStatus(f"{OPTION}: StorageLoc {OWNED}")


def test_the_option_documents_exactly_the_keys_the_code_accepts_and_refuses():
    project = yaml.safe_load(CHARMCRAFT.read_text())
    text = " ".join(project["config"]["options"][OPTION]["description"].split())
    accepted, _, refused = text.partition("The keys the charm sets are refused:")

    for key in SLURMDBD_CONF:
        assert f" {key}," in accepted or f" {key} " in accepted or f" {key};" in accepted, key
        assert key not in refused.split(), key
    for key in OWNED_KEYS:
        assert any(word.strip(",.") == key for word in refused.split()), key


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("PurgeJobAfter=12", "purgejobafter=12months"),  # as slurmdbd.conf(5) shows it
        ("PurgeUsageAfter=24", "purgeusageafter=24months"),
        ("DefaultQOS=5", "defaultqos=5"),
    ],
)
def test_documented_values_slurmutils_reads_otherwise_are_written_not_a_hook_error(
    ctx: testing.Context[ops.CharmBase],
    machine: FakeMachine,
    dbd_root: Path,
    text: str,
    line: str,
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), state)

    out = ctx.run(ctx.on.config_changed(), configured(out, text))

    assert line in conf_path(dbd_root).read_text().splitlines()
    assert isinstance(out.unit_status, ops.ActiveStatus)


def test_a_file_slurmdbd_refuses_is_not_written_and_blocks_quoting_it(
    ctx: testing.Context[ops.CharmBase], machine: FakeMachine, dbd_root: Path
):
    state, database, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(database), configured(state, "DebugLevel=verbose"))
    before = conf_path(dbd_root).read_text()
    machine.fail(
        "slurmdbd",
        "-V",
        stderr="slurmdbd: fatal: Failed to stat the archive directory /srv/archive: "
        "No such file or directory\n",
    )

    out = ctx.run(ctx.on.config_changed(), configured(out, "ArchiveDir=/srv/archive"))

    assert out.unit_status == ops.BlockedStatus(
        "Slurm refuses the new slurmdbd.conf (the old one is kept): Failed to stat the archive "
        "directory /srv/archive: No such file or directory"
    )
    assert conf_path(dbd_root).read_text() == before
    assert machine.calls("restart") == ["slurmdbd"]
    assert "slurmdbd" in machine.active
