"""A Slurm major upgrade (24.11 -> 26.05) of a running cluster, in Slurm's order, on the lab.

A lean cluster on trixie (Slurm 24.11): slurmdbd on the MySQL stand-in, one slurmctld, a
slurmd application `compute` (one unit) and a sackd `login`. A job has finished and one runs
when the operator names the lab's mirror of Debian forky's Slurm 26.05 (`Lab.serve_mirror`)
as `slurm-package-source`: first on the daemons that come last, so their statuses show the
order while they wait, slurmdbd last. Then slurmdbd upgrades (after a dump of the database),
slurmctld (after archiving StateSaveLocation), sackd, and the compute node through
`rebuild-nodes upgrade=true`. Checked: the waits in the statuses, the backups listed,
`sacct` still lists the jobs from before, `scontrol ping` and every daemon on 26.05, and a
new job runs. The lab only: real Juju has no mirror to name.

Run with `-s` to see the timings. On the 2-core lab host: about 8 min 15 s in all (deploy
5 min; slurmdbd, slurmctld and sackd upgraded in 2-3 min; the node's rollout 67 s).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from conftest import on_real_juju
from deploy_helpers import deploy_accounting, deploy_slurm
from dynamic_nodes_helpers import CONTROLLER, all_nodes_idle, poll, sh, submit, wait_running

pytestmark = pytest.mark.skipif(on_real_juju(), reason="needs the lab's mirror of Slurm 26.05")

SETTLE = 10 * 60
UPGRADE = 10 * 60
TARGET = "26.05"
LOGIN = "login/0"


def say(text: str) -> None:
    print(f"\n[major-upgrade] {text}", flush=True)


def message(juju: jubilant.Juju, unit: str) -> tuple[str, str]:
    app = unit.split("/", 1)[0]
    status = juju.status().apps[app].units[unit].workload_status
    return status.current, status.message


def wait_message(juju: jubilant.Juju, unit: str, prefix: str, timeout: float) -> tuple[str, str]:
    """Wait until the unit's status message starts with `prefix`; return (status, message)."""

    def probe() -> tuple[str, str] | None:
        current = message(juju, unit)
        return current if current[1].startswith(prefix) else None

    return poll(probe, timeout=timeout, what=f"{unit}: {prefix}")


def node_back_on(juju: jubilant.Juju, major: str) -> bool | None:
    """Whether compute-0 registered with Slurm `major` and is idle again."""
    line = sh(juju, "scontrol show node compute-0 --oneliner")
    idle = "IDLE" in sh(juju, "sinfo -h -n compute-0 -o %T").upper()
    return (f"Version={major}" in line and idle) or None


def slurm_version(juju: jubilant.Juju, unit: str) -> str:
    """The Slurm release the unit's packages are (`dpkg-query`), such as `26.05.5-1`."""
    return sh(juju, "dpkg-query --show --showformat='${Version}' slurm-client", unit=unit)


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    began = time.monotonic()
    deploy_slurm(juju, charm_path, computes=(("compute", 1),), login=True)
    deploy_accounting(juju, charm_path)
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    poll(lambda: all_nodes_idle(juju, ["compute-0"]), timeout=SETTLE, what="the node idle")
    say(f"deployed in {time.monotonic() - began:.0f} s")
    return juju


def test_a_major_upgrade_in_slurms_order_keeps_the_accounting_and_runs_jobs(
    cluster: jubilant.Juju,
):
    juju = cluster
    source = juju.lab.serve_mirror()  # pyright: ignore[reportAttributeAccessIssue]
    assert slurm_version(juju, CONTROLLER).startswith("24.11")
    done_before = submit(juju, "compute", 1)
    poll(
        lambda: "COMPLETED" in sh(juju, f"sacct -X -n -P -j {done_before} -o State") or None,
        timeout=120,
        what="the first job completed in accounting",
    )
    running = submit(juju, "compute", 90)
    wait_running(juju, running)
    began = time.monotonic()

    # The daemons that come last are told first: they wait, and say for what.
    for app in ("compute", "login"):
        juju.config(app, {"slurm-package-source": source})
    waits_for_controller = f"slurmctld must run {TARGET} first"
    login_wait = wait_message(juju, LOGIN, waits_for_controller, 180)
    compute_wait = message(juju, "compute/0")
    say(f"login: {login_wait}; compute: {compute_wait}")
    juju.config("slurmctld", {"slurm-package-source": source})
    controller_wait = wait_message(juju, CONTROLLER, f"slurmdbd must run {TARGET} first", 180)
    say(f"slurmctld: {controller_wait}")
    assert slurm_version(juju, CONTROLLER).startswith("24.11")  # Nothing moved out of turn.
    assert slurm_version(juju, LOGIN).startswith("24.11")

    # slurmdbd's turn: then each daemon follows once the one before it runs 26.05.
    juju.config("slurmdbd", {"slurm-package-source": source})
    poll(
        lambda: slurm_version(juju, LOGIN).startswith(TARGET) or None,
        timeout=UPGRADE,
        what="slurmdbd, slurmctld and sackd on 26.05",
    )
    say(f"slurmdbd, slurmctld and the login node on {TARGET} in {time.monotonic() - began:.0f} s")
    pending = wait_message(juju, "compute/0", f"Slurm {TARGET} pending", 180)
    say(f"compute: {pending}")
    assert slurm_version(juju, "compute/0").startswith("24.11")

    rollout = time.monotonic()
    task = juju.run(CONTROLLER, "rebuild-nodes", {"partition": "compute", "upgrade": True})
    say(f"rebuild-nodes upgrade=true: {task.results}")
    poll(
        lambda: node_back_on(juju, TARGET),
        timeout=UPGRADE,
        what="compute-0 back on 26.05",
    )
    say(f"compute-0 upgraded and back in {time.monotonic() - rollout:.0f} s")

    ping = sh(juju, "scontrol ping")
    assert "is UP" in ping, ping
    assert re.search(rf"\b{TARGET}\.\d+", sh(juju, "scontrol --version")), "controller CLI"
    config = sh(juju, "scontrol show config")
    assert re.search(rf"SLURM_VERSION\s*=\s*{TARGET}\.", config), "slurmctld's own version"
    accounted = sh(juju, f"sacct -X -n -P -j {done_before},{running} -o JobID,State")
    assert f"{done_before}|COMPLETED" in accounted and f"{running}|" in accounted, accounted
    after = submit(juju, "compute", 1)
    poll(
        lambda: "COMPLETED" in sh(juju, f"sacct -X -n -P -j {after} -o State") or None,
        timeout=180,
        what="a new job completed after the upgrade",
    )
    backups = {
        app: juju.run(f"{app}/0", "list-backups").results["backups"]
        for app in ("slurmctld", "slurmdbd")
    }
    say(f"backups: {backups}; whole upgrade {time.monotonic() - began:.0f} s")
    assert "slurmctld-state-24.11-to-26.05-" in backups["slurmctld"]
    assert "slurm_acct_db-24.11-to-26.05-" in backups["slurmdbd"]
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
