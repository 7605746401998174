"""`rotate-auth-key` on a highly available controller (issues 11 and 8), against real Slurm.

One deployment: two slurmctld units on network state (the filesystem-client stand-in on
`mount`), a slurmd application `compute` with one unit and a sackd login node. The backup
controller holds the key too: the rotation waits for it, and once the old key is refused
everywhere the backup must still be able to take over, with the new key alone, while a job
that started before the rotation runs on. Every Slurm command runs on the login node.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import jubilant
import pytest
from accounting_rest_helpers import key_ids
from deploy_helpers import deploy_slurm, wait_for_active
from dynamic_nodes_helpers import all_nodes_idle, leader, poll
from ha_helpers import (
    FAILOVER_BOUND,
    LOGIN,
    all_controllers_up,
    failover_seconds,
    lab_of,
    ping_hosts,
    recover,
    submit_from_login,
    took_control_at,
    unit_of_host,
    wait_state,
)

RELEASES = ("trixie", "forky")
"""auth/slurm's key change under HA, on 24.11 and 26.05."""

SETTLE = 15 * 60
REACT = 3 * 60
APPS = ("slurmctld", "compute", "login")
KEY_HOLDERS = ("slurmctld/0", "slurmctld/1", "compute/0", LOGIN)
JOB_SECONDS = 150
"""The job outlives the rotation and the failover after it."""
BACKUP_BACK = 45
"""Seconds for a restarted backup to answer: the charm's 20 s stop bound, a start, a ping."""


def say(text: str) -> None:
    print(f"\n[ha-key-rotation] {text}", flush=True)


wait_active = partial(wait_for_active, timeout=SETTLE, apps=APPS)


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    lab_of(juju)  # The failover needs the lab's faults.
    deploy_slurm(juju, charm_path, controllers=2, network_state=True)
    wait_active(juju)
    poll(lambda: all_nodes_idle(juju, ["compute-0"]) or None, timeout=120, what="compute-0 idle")
    poll(
        lambda: len(ping_hosts(juju)) == 2 and all_controllers_up(juju, ping_hosts(juju)),
        timeout=REACT,
        what="both controllers UP",
    )
    return juju


def test_a_rotation_reaches_the_backup_which_then_takes_over_with_the_new_key(
    cluster: jubilant.Juju,
):
    job = submit_from_login(cluster, f"sleep {JOB_SECONDS}")
    wait_state(cluster, job, "RUNNING", timeout=60)
    hosts = ping_hosts(cluster)
    primary, backup = hosts
    status = cluster.status()
    controller = leader(status, "slurmctld")
    assert controller is not None
    assert unit_of_host(status, "slurmctld", primary) == controller

    began = time.monotonic()
    results = cluster.run(controller, "rotate-auth-key").results
    assert results["new-key-id"] == "slurm-1"
    poll(
        lambda: all(key_ids(cluster, unit) == "slurm-1*" for unit in KEY_HOLDERS) or None,
        timeout=REACT,
        interval=3,
        what="every daemon, the backup controller too, on the new key alone",
    )
    wait_active(cluster, timeout=REACT)
    rotated = time.monotonic()
    say(f"rotated on {len(KEY_HOLDERS)} units (2 controllers) in {rotated - began:.0f} s")
    # Each step restarts both controllers; a backup that hangs on SIGTERM is killed after the
    # charm's stop bound (20 s) instead of systemd's 90 s, so it answers again soon after.
    poll(
        lambda: all_controllers_up(cluster, hosts) or None,
        timeout=BACKUP_BACK,
        interval=1,
        what="the backup answering pings with the new key",
    )
    say(f"both controllers UP {time.monotonic() - rotated:.0f} s after the rotation ended")

    fault_at = time.time()
    failover_seconds(cluster, "kill", primary, backup)
    in_charge = took_control_at(cluster, unit_of_host(status, "slurmctld", backup), fault_at)
    assert in_charge is not None
    say(f"the backup took control {in_charge - fault_at:.1f} s after the primary was killed")
    assert in_charge - fault_at <= FAILOVER_BOUND
    served = submit_from_login(cluster, "true")  # Signed with the new key, checked by the backup.
    wait_state(cluster, served, "COMPLETED", timeout=60)
    assert key_ids(cluster, LOGIN) == "slurm-1*"

    recover(cluster, "kill", primary, hosts)
    wait_state(cluster, job, "COMPLETED", timeout=JOB_SECONDS + 60)
    wait_active(cluster, timeout=REACT)
