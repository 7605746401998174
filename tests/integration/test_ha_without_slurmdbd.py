"""A failover while slurmdbd is away, right after a change reached the standby.

Two slurmctld units on network state, slurmdbd on MySQL, one slurmd and a login node. A
slurmctld that takes control must know its cluster id: the one it read from `clustername` at
its start, or slurmdbd's. A SIGHUP makes a standby forget it (`_backup_reconfig` is
`slurm_conf_reinit`, backup.c), and a standby without it asks slurmdbd at its takeover and
waits until slurmdbd answers (`Retrying initial connection to slurmdbd`: measured, no controller
for the 173 s waited with slurmdbd frozen). The charm restarts a standby for every change, so
with slurmdbd stopped the backup still takes over from its state files and serves the queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from deploy_helpers import deploy_accounting, deploy_slurm, wait_for_active
from ha_helpers import exec_on, failover_seconds, logged_at, ping_hosts, recover, unit_of_host

from conftest import on_real_juju

RELEASES = ("trixie", "forky")
"""The takeover and its repair on 24.11 and 26.05."""

pytestmark = pytest.mark.skipif(on_real_juju(), reason="the faults are the lab's")

SETTLE = 15 * 60
STARTED = "started on cluster"
"""What slurmctld logs when its process starts (not at a SIGHUP)."""
FAILOVER_WITHOUT_SLURMDBD_S = 60.0
"""A backup that knows its cluster id takes over at once when slurmdbd refuses connections;
one that does not waits as long as slurmdbd is away."""


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    deploy_slurm(juju, charm_path, controllers=2, network_state=True)
    deploy_accounting(juju, charm_path)
    wait_for_active(juju, timeout=SETTLE)
    return juju


def test_a_backup_takes_over_with_slurmdbd_stopped_right_after_a_change(cluster: jubilant.Juju):
    hosts = ping_hosts(cluster)
    primary_host, backup_host = hosts[0], hosts[1]
    backup = unit_of_host(cluster.status(), "slurmctld", backup_host)
    changed_at = time.time()
    cluster.config("slurmctld", {"slurm-conf-parameters": "SlurmdTimeout=31\n"})
    wait_for_active(cluster, timeout=SETTLE)
    # The backup's config-changed may run before the leader wrote the files; no update-status
    # is fired: the leader's new `config_digest` in the peer memory is the backup's event.
    assert logged_at(cluster, backup, STARTED, changed_at) is not None, (
        f"{backup}'s standby slurmctld took the change without starting again"
    )

    exec_on(cluster, "systemctl stop slurmdbd", unit="slurmdbd/0")
    try:
        seconds = failover_seconds(
            cluster, "kill", primary_host, backup_host, timeout=FAILOVER_WITHOUT_SLURMDBD_S
        )
        print(f"\nslurmdbd stopped: {backup} served {seconds:.1f} s after the primary's kill")
    finally:
        exec_on(cluster, "systemctl start slurmdbd", unit="slurmdbd/0")
        recover(cluster, "kill", primary_host, hosts)
