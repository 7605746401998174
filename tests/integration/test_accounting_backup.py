"""Two slurmdbd units, active and backup (issue 9), and `slurmdbd-conf-parameters` (issue 11).

One deployment for the module: slurmctld, a slurmd application `compute` (one unit), a sackd
login node, MySQL (on the lab: the MariaDB stand-in) and slurmdbd with two units. Each test
builds on the cluster the previous ones left:

* slurm.conf names the backup (`AccountingStorageBackupHost`), both units write the same
  slurmdbd.conf (`DbdHost`, `DbdBackupHost`) and their statuses say which is which;
* with the primary slurmdbd stopped (on the lab: SIGKILLed and masked, `kill_service`) the
  backup takes control and a job from the login node appears in sacct; the primary takes
  control back once it runs again;
* a `slurmdbd-conf-parameters` change reaches the running slurmdbd, and a key the charm owns
  blocks naming it, keeping slurmdbd.conf as it was.

Run with `-s` to see the measurements (how long accounting was unavailable).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, cast

import jubilant
import pytest
from accounting_rest_helpers import (
    LOGIN,
    poll,
    sbatch,
    sh,
    slurm_config,
    try_sh,
    wait_sacct,
)
from deploy_helpers import deploy_accounting, deploy_slurm, wait_for_active

RELEASES = ("trixie", "forky")
"""slurmdbd's database, its dump and its restore, on 24.11 and 26.05."""

SETTLE = 10 * 60
PARTITION = "compute"
DBD_APP = "slurmdbd"
EVERY_APP = ("slurmctld", "compute", "login", "mysql", DBD_APP)
CONF = "/etc/slurm/slurmdbd.conf"
OPTION = "slurmdbd-conf-parameters"


def say(text: str) -> None:
    """A measurement for the report (visible with `-s`)."""
    print(f"\n[accounting-backup] {text}", flush=True)


wait_active = partial(wait_for_active, timeout=SETTLE)


def dbd_messages(juju: jubilant.Juju) -> dict[str, str]:
    """Each slurmdbd unit's status message."""
    units = juju.status().apps[DBD_APP].units
    return {name: unit.workload_status.message for name, unit in units.items()}


def unit_address(juju: jubilant.Juju, unit: str) -> str:
    return juju.status().apps[DBD_APP].units[unit].public_address


def machine_name(juju: jubilant.Juju, unit: str) -> str:
    status = juju.status()
    return status.machines[status.apps[DBD_APP].units[unit].machine].hostname


def conf_keys(juju: jubilant.Juju, unit: str) -> dict[str, str]:
    """slurmdbd.conf on `unit` without StoragePass (lower-case keys)."""
    text = sh(juju, f"grep -iv '^storagepass=' {CONF}", unit=unit)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def pings(juju: jubilant.Juju) -> dict[str, str] | None:
    """`sacctmgr ping` from the login node: {"primary": "UP", ...}; None if it fails to run.

    Slurm 24.11 lists the backup only when the primary does not answer.
    """
    out = try_sh(juju, "sacctmgr ping || true", unit=LOGIN)
    if out is None:
        return None
    found: dict[str, str] = {}
    for line in out.splitlines():
        # slurmdbd(primary) at 10.151.0.4 is UP
        if line.startswith("slurmdbd(") and " is " in line:
            role = line[len("slurmdbd(") : line.index(")")]
            found[role] = line.rsplit(" is ", 1)[1].strip()
    return found


def accounting_answers(juju: jubilant.Juju) -> bool:
    """Whether sacctmgr gets an answer from a slurmdbd (the primary or the backup)."""
    return try_sh(juju, "sacctmgr -n -P show cluster format=Cluster", unit=LOGIN) is not None


@pytest.fixture(scope="module")
def memo() -> dict[str, Any]:
    """What one test of the scenario leaves for a later one."""
    return {}


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    """The cluster with accounting on two slurmdbd units: every unit active."""
    began = time.monotonic()
    deploy_slurm(juju, charm_path)
    deploy_accounting(juju, charm_path, units=2)
    wait_active(juju, *EVERY_APP)
    poll(
        lambda: slurm_config(juju, "AccountingStorageBackupHost") not in (None, "(null)"),
        timeout=120,
        what="slurmctld to name the backup slurmdbd",
    )
    say(f"deployed with two slurmdbd units, every unit active in {time.monotonic() - began:.0f} s")
    return juju


def test_slurm_conf_names_the_backup_and_each_unit_says_its_role(
    cluster: jubilant.Juju, memo: dict[str, Any]
):
    messages = dbd_messages(cluster)
    say(f"slurmdbd statuses: {messages}")
    controller = cluster.status().apps["slurmctld"].units["slurmctld/0"]
    say(f"slurmctld status: {controller.workload_status.message!r}")
    (primary,) = [u for u, m in messages.items() if m.startswith("primary slurmdbd")]
    (backup,) = [u for u, m in messages.items() if m.startswith("backup slurmdbd for")]
    primary_host = sh(cluster, "hostname -s", unit=primary).strip()
    backup_host = sh(cluster, "hostname -s", unit=backup).strip()

    assert primary == "slurmdbd/0", "the first unit to join is the primary"
    assert f"backup {backup_host}" in messages[primary]
    assert f"for {primary_host}, standing by" in messages[backup]
    assert slurm_config(cluster, "AccountingStorageHost") == unit_address(cluster, primary)
    assert slurm_config(cluster, "AccountingStorageBackupHost") == unit_address(cluster, backup)
    confs = [conf_keys(cluster, unit) for unit in (primary, backup)]
    assert confs[0] == confs[1], "both units write the same slurmdbd.conf"
    assert (confs[0]["dbdhost"], confs[0]["dbdbackuphost"]) == (primary_host, backup_host)
    assert confs[0]["dbdaddr"] == unit_address(cluster, primary)
    for unit in (primary, backup):
        mode = sh(cluster, f"stat -c '%a %U' {CONF}", unit=unit).strip()
        assert mode == "600 slurm"
    assert pings(cluster) == {"primary": "UP"}
    memo.update(primary=primary, backup=backup, primary_host=primary_host)


def test_accounting_keeps_working_when_the_primary_stops(
    cluster: jubilant.Juju, memo: dict[str, Any]
):
    primary, backup = memo["primary"], memo["backup"]
    lab: Any = getattr(cluster, "lab", None)
    machine = machine_name(cluster, primary)
    before = sbatch(cluster, "exit 0", partition=PARTITION)
    wait_sacct(cluster, before)

    stopped = time.monotonic()
    if lab is not None:
        lab.fault("kill", machine, "slurmdbd")  # SIGKILL, masked: the charm cannot restart it
    else:
        sh(cluster, "systemctl stop slurmdbd", unit=primary)
    try:
        poll(lambda: accounting_answers(cluster), timeout=60, interval=0.2, what="the backup")
        unavailable = time.monotonic() - stopped
        job_id = sbatch(cluster, "exit 4", partition=PARTITION)
        submitted = time.monotonic()
        record = wait_sacct(cluster, job_id, timeout=120)
        recorded = time.monotonic() - submitted
        ping = pings(cluster)
        if lab is not None:
            cast(Any, cluster).update_status(backup)  # lab only: the status in control
        backup_status = dbd_messages(cluster)[backup]
    finally:
        if lab is not None:
            lab.repair("kill", machine, "slurmdbd")
        else:
            sh(cluster, "systemctl start slurmdbd", unit=primary)
    revived = time.monotonic()
    poll(lambda: pings(cluster) == {"primary": "UP"}, timeout=120, interval=0.5, what="primary")
    handed_back = time.monotonic() - revived

    say(f"primary slurmdbd killed: sacctmgr answered again (backup) after {unavailable:.1f} s")
    say(f"job {job_id} (exit 4) in sacct {recorded:.1f} s after sbatch, primary down")
    say(f"sacctmgr ping with the primary down: {ping}; backup status: {backup_status!r}")
    say(f"primary revived: `sacctmgr ping` lists it UP again after {handed_back:.1f} s")
    assert (record["state"], record["exit_code"]) == ("FAILED", "4:0")
    assert ping == {"primary": "DOWN", "backup": "UP"}
    if lab is not None:
        assert backup_status.startswith("backup slurmdbd in control")
    log = "tail -n 20 /var/log/slurm/slurmdbd.log"
    poll(
        lambda: (
            "Primary has come back" in sh(cluster, log, unit=backup).split("Taking Control")[-1]
        ),
        timeout=60,
        what="the backup to give control back",
    )


def test_a_parameters_change_reaches_the_running_slurmdbd(
    cluster: jubilant.Juju, memo: dict[str, Any]
):
    primary, backup = memo["primary"], memo["backup"]
    started = time.monotonic()

    cluster.config(DBD_APP, {OPTION: "DebugLevel=verbose\nPurgeEventAfter=12months"})

    wait_active(cluster, DBD_APP, timeout=180)

    def shown() -> str | None:
        out = try_sh(cluster, "sacctmgr show configuration", unit=LOGIN) or ""
        levels = [line for line in out.splitlines() if line.split("=")[0].strip() == "DebugLevel"]
        return levels[0].split("=", 1)[1].strip() if levels else None

    level = poll(lambda: shown() == "verbose" and "verbose", timeout=120, what="DebugLevel")
    say(f"DebugLevel={level} in `sacctmgr show configuration` {time.monotonic() - started:.1f} s")
    for unit in (primary, backup):
        keys = conf_keys(cluster, unit)
        assert (keys["debuglevel"], keys["purgeeventafter"]) == ("verbose", "12months")


def test_a_key_the_charm_owns_blocks_naming_it_and_keeps_the_file(
    cluster: jubilant.Juju, memo: dict[str, Any]
):
    primary = memo["primary"]
    digest = f"sha256sum {CONF}"
    before = sh(cluster, digest, unit=primary)

    cluster.config(DBD_APP, {OPTION: "DebugLevel=info StorageHost=10.0.0.99"})

    status = cluster.wait(lambda s: jubilant.all_blocked(s, DBD_APP), timeout=120)
    message = status.apps[DBD_APP].units[primary].workload_status.message
    say(f"a refused key: {message!r}")
    assert message.startswith(f"{OPTION}: StorageHost is the charm's: ")
    assert sh(cluster, digest, unit=primary) == before
    assert sh(cluster, "systemctl is-active slurmdbd", unit=primary).strip() == "active"

    cluster.config(DBD_APP, reset=OPTION)

    wait_active(cluster, DBD_APP, timeout=180)
    assert "debuglevel" not in conf_keys(cluster, primary)
