"""slurmdbd in a major upgrade: the primary first, after a dump of the database; then the backup.

Two units in join order (slurmdbd/0 the primary, slurmdbd/1 the backup) run 24.11; the
operator names a source with 26.05. Each scenario fires one event on one unit and checks the
order, the dump taken through slurmdbd's own database account, and the status.
"""

import json
import stat
from collections.abc import Callable
from pathlib import Path

import ops
from charm_testing import FakeMachine
from ops import testing
from test_slurmdbd_backup import hostname, order, peer, shared, state

__all__ = ["hostname"]  # The fixture, used by name.

FORKY = "deb http://deb.debian.org/debian forky main"
MADISON = """\
  slurmdbd | 26.05.5-1 | http://deb.debian.org/debian forky/main amd64 Packages
  slurmdbd | 24.11.5-1 | http://deb.debian.org/debian trixie/main amd64 Packages
"""
UnitContext = Callable[[int], testing.Context[ops.CharmBase]]


def running(unit_id: int, version: str) -> dict[str, str]:
    """Unit `unit_id`'s peer data once it runs `version`."""
    return {**shared(unit_id), "version": json.dumps(version)}


def in_upgrade(me: int, other: int, other_version: str) -> testing.State:
    relation = peer(me, {other: running(other, other_version)}, order(0, 1))
    before, _ = state(me, relation, leader=me == 0, config={"slurm-package-source": FORKY})
    return before


def backups(root: Path) -> list[Path]:
    return sorted((root / "var/backups/slurm-charms").glob("*"))


def test_the_backup_unit_waits_for_the_primary(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(1)
    machine.responses[("apt-cache", "madison")] = MADISON

    out = unit_ctx(1).run(unit_ctx(1).on.config_changed(), in_upgrade(1, 0, "24.11.5"))

    assert out.unit_status == ops.WaitingStatus(
        "slurmdbd must run 26.05 first (slurmdbd/0 runs 24.11)"
    )
    assert machine.ran("mysqldump") == []
    assert machine.apt_installs == []


def test_the_primary_dumps_the_database_through_its_account_then_upgrades(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(0)
    machine.responses[("apt-cache", "madison")] = MADISON

    unit_ctx(0).run(unit_ctx(0).on.config_changed(), in_upgrade(0, 1, "24.11.5"))

    [dump] = machine.ran("mysqldump")
    assert "--host=10.0.0.5" in dump and "--port=3306" in dump and dump[-1] == "slurm_acct_db"
    assert not any("password" in word and "extra-file" not in word for word in dump)
    [kept] = backups(dbd_root)  # The credentials file is gone; the dump stays.
    assert kept.name.startswith("slurm_acct_db-24.11-to-26.05-") and kept.suffix == ".sql"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    download = machine.ran("apt-get", "install", "--yes", "--download-only")
    assert machine.commands.index(dump) < machine.commands.index(download[0])
    assert machine.apt_installs == [["default-mysql-client"], ["slurmdbd", "slurm-wlm-jwt-plugin"]]


def test_a_failed_dump_keeps_the_old_slurm_and_says_why(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(0)
    machine.responses[("apt-cache", "madison")] = MADISON
    machine.fail("mysqldump", returncode=2, stderr="mysqldump: Got error: 1045: Access denied")

    out = unit_ctx(0).run(unit_ctx(0).on.config_changed(), in_upgrade(0, 1, "24.11.5"))

    assert machine.ran("apt-get", "install") == []
    assert backups(dbd_root) == []  # No partial dump is left.
    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert "Access denied" in out.unit_status.message


def test_the_backup_unit_follows_once_the_primary_runs_the_target_without_a_dump(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(1)
    machine.responses[("apt-cache", "madison")] = MADISON

    unit_ctx(1).run(unit_ctx(1).on.config_changed(), in_upgrade(1, 0, "26.05.5"))

    assert machine.ran("mysqldump") == []
    assert machine.apt_installs == [["slurmdbd", "slurm-wlm-jwt-plugin"]]


def test_list_backups_gives_the_dump_path(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(0)
    machine.responses[("apt-cache", "madison")] = MADISON
    unit_ctx(0).run(unit_ctx(0).on.config_changed(), in_upgrade(0, 1, "24.11.5"))
    ctx = unit_ctx(0)

    ctx.run(ctx.on.action("list-backups"), in_upgrade(0, 1, "24.11.5"))

    assert ctx.action_results == {
        "directory": str(dbd_root / "var/backups/slurm-charms"),
        "backups": str(backups(dbd_root)[0]),
    }


def test_an_installed_mariadb_client_is_used_as_it_is(
    unit_ctx: UnitContext, hostname: Callable[[int], None], machine: FakeMachine, dbd_root: Path
):
    hostname(0)
    machine.responses[("apt-cache", "madison")] = MADISON
    machine.installed.add("mariadb-client")  # Debian's MariaDB server brings it.

    unit_ctx(0).run(unit_ctx(0).on.config_changed(), in_upgrade(0, 1, "24.11.5"))

    assert machine.ran("mysqldump")
    assert machine.apt_installs == [["slurmdbd", "slurm-wlm-jwt-plugin"]]
