"""The slurm user cannot make root follow a link from the state directory (issue 20, High 1).

One controller and one compute node, on real Juju or the lab (see conftest.py). Debian's
package makes `/var/lib/slurm` slurm's, so the slurm user could replace
`/var/lib/slurm/slurmctld` by a link to any directory, stop its own slurmctld, and have root
chmod and chown the link's target at the next update-status. Here:

- the charm made `/var/lib/slurm` root's: the slurm user's `ln -s` there is refused;
- with the old layout put back (`/var/lib/slurm` slurm's again), the slurm user plants the
  link to a canary directory and kills its slurmctld; after the next update-status the
  canary's owner, mode and entries are unchanged, slurmctld stays down, and the unit is
  blocked naming the link (not a hook error).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from deploy_helpers import deploy_slurm

RELEASES = ("forky",)
"""One release, the newer: what is proven is the charm's file handling, not Slurm's."""

SETTLE = 10 * 60
REACT = 6 * 60
"""Bound for the next update-status: fired at once on the lab, Juju's 5 minutes otherwise."""
UNIT = "slurmctld/0"
STATE = "/var/lib/slurm/slurmctld"
CANARY = "/srv/canary"
AS_SLURM = "runuser -u slurm --"


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    deploy_slurm(juju, charm_path, login=False)
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    return juju


def sh(juju: jubilant.Juju, command: str) -> jubilant.Task:
    """Run `command` on the controller's machine as root; the task, whatever its exit."""
    try:
        return juju.exec(command, unit=UNIT, wait=120)
    except jubilant.TaskError as e:
        return e.task


def canary() -> str:
    return f"stat -c '%n %U:%G %a' {CANARY} {CANARY}/* && ls -A {CANARY}"


def test_a_planted_state_link_is_refused_and_followed_by_no_one(cluster: jubilant.Juju):
    assert sh(cluster, "stat -c '%U:%G %a' /var/lib/slurm").stdout.strip() == "root:root 755"
    planted = sh(cluster, f"{AS_SLURM} mv {STATE} {STATE}.mine")
    assert planted.return_code != 0 and "Permission denied" in planted.stderr
    print(f"EVIDENCE slurm's mv in /var/lib/slurm: {planted.stderr.strip()}")

    # The old layout (Debian's): /var/lib/slurm is slurm's; slurm plants the link and
    # stops its own slurmctld.
    setup = (
        f"mkdir -m 0711 {CANARY} && echo keep > {CANARY}/file && chmod 0640 {CANARY}/file"
        " && chown slurm:slurm /var/lib/slurm"
        f" && {AS_SLURM} mv {STATE} {STATE}.mine && {AS_SLURM} ln -s {CANARY} {STATE}"
        f" && {AS_SLURM} kill $(systemctl show -P MainPID slurmctld)"
        " && timeout 30 sh -c 'while systemctl is-active -q slurmctld; do sleep 0.5; done'"
    )
    assert sh(cluster, setup).return_code == 0
    before = sh(cluster, canary()).stdout
    assert "root:root 711" in before

    if hasattr(cluster, "update_status"):
        cluster.update_status(UNIT)  # type: ignore[attr-defined]  # lab only: fire it now

    def blocked(status: jubilant.Status) -> bool:
        unit = status.apps["slurmctld"].units[UNIT].workload_status
        return unit.current == "blocked" and "symbolic link" in unit.message

    status = cluster.wait(blocked, error=jubilant.any_error, timeout=REACT)
    message = status.apps["slurmctld"].units[UNIT].workload_status.message
    print(f"EVIDENCE {UNIT} status: blocked: {message}")
    assert STATE in message
    assert sh(cluster, canary()).stdout == before
    assert sh(cluster, "systemctl is-active slurmctld").stdout.strip() != "active"
    assert sh(cluster, "stat -c '%U:%G %a' /var/lib/slurm").stdout.strip() == "root:root 755"
    print(f"EVIDENCE canary unchanged:\n{before}")
