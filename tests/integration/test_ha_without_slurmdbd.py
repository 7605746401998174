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
from dynamic_nodes_helpers import poll
from ha_helpers import (
    all_controllers_up,
    exec_on,
    failover_seconds,
    logged_at,
    ping_hosts,
    recover,
    unit_of_host,
)

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


def test_a_standby_that_crashed_is_started_again_by_systemd_alone(cluster: jubilant.Juju):
    """A slurmctld that exits with an error (here a SIGSEGV; on 26.05, a backup that handed
    control back late exits with `fatal: Two slurmctld daemons are running as primary`) is
    started again by systemd (the charm's drop-in: `Restart=on-failure`), not by a hook: the
    probes go over ssh, which runs no hook on the lab, and no Juju event follows a crash."""
    hosts = ping_hosts(cluster)
    backup = unit_of_host(cluster.status(), "slurmctld", hosts[1])
    restarts = "systemctl show -p NRestarts --value slurmctld"
    before = int(exec_on(cluster, restarts, unit=backup))
    crashed_at = time.time()
    # By PID: `systemctl kill` signals a cgroup that every lab machine shares on a v1 host.
    exec_on(cluster, "kill -SEGV $(systemctl show -p MainPID --value slurmctld)", unit=backup)
    poll(
        lambda: not all_controllers_up(cluster, hosts) or None,
        timeout=30,
        interval=0.5,
        what=f"{backup}'s slurmctld gone after its crash",
    )
    try:
        poll(
            lambda: all_controllers_up(cluster, hosts) or None,
            timeout=120,
            interval=1,
            what=f"{backup}'s slurmctld standing by again",
        )
    except AssertionError as e:
        unit = exec_on(cluster, "systemctl status --no-pager -n 20 slurmctld || true", unit=backup)
        raise AssertionError(f"{e}\n{unit}") from None
    print(f"\n{backup}: standing by again {time.time() - crashed_at:.0f} s after its crash")
    assert int(exec_on(cluster, restarts, unit=backup)) == before + 1
    assert logged_at(cluster, backup, STARTED, crashed_at) is not None
