"""High availability with accounting: a failover while slurmdbd is away, a crashed standby, and
a key change that reaches every daemon, slurmdbd too, then a takeover with the new key alone.

One deployment: two slurmctld units on network state (the filesystem-client stand-in), slurmdbd
on MySQL, a slurmd application `compute` with one unit and a sackd login node. The scenarios run
in order on it, each right after the one before.

A slurmctld that takes control must know its cluster id: the one it read from `clustername` at
its start, or slurmdbd's. A SIGHUP makes a standby forget it (`_backup_reconfig` is
`slurm_conf_reinit`, backup.c), and a standby without it asks slurmdbd at its takeover and
waits until slurmdbd answers (`Retrying initial connection to slurmdbd`: measured, no controller
for the 173 s waited with slurmdbd frozen). The charm restarts a standby for every change, so
with slurmdbd stopped the backup still takes over from its state files and serves the queue.

`rotate-auth-key` (issues 11 and 8): the backup controller and slurmdbd hold the key too, and
the rotation waits for them; once the old key is refused everywhere the backup must still be
able to take over, with the new key alone, while a job that started before the rotation runs on.
(Until 2026-12-02 the key change had a module and a deployment of its own, without slurmdbd:
merged here for CI time, and so that the rotation also meets accounting.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import jubilant
import pytest
from accounting_rest_helpers import key_ids
from deploy_helpers import deploy_accounting, deploy_slurm, wait_for_active
from dynamic_nodes_helpers import all_nodes_idle, leader, poll
from ha_helpers import (
    FAILOVER_BOUND,
    LOGIN,
    all_controllers_up,
    exec_on,
    failover_seconds,
    lab_of,
    logged_at,
    ping_hosts,
    recover,
    submit_from_login,
    took_control_at,
    unit_of_host,
    wait_state,
)

from conftest import on_real_juju

RELEASES = ("trixie", "forky")
"""The takeover and its repair, auth/slurm's key change, on 24.11 and 26.05."""

pytestmark = pytest.mark.skipif(on_real_juju(), reason="the faults are the lab's")

SETTLE = 15 * 60
STARTED = "started on cluster"
"""What slurmctld logs when its process starts (not at a SIGHUP)."""
FAILOVER_WITHOUT_SLURMDBD_S = 60.0
"""A backup that knows its cluster id takes over at once when slurmdbd refuses connections;
one that does not waits as long as slurmdbd is away."""
REACT = 3 * 60
KEY_HOLDERS = ("slurmctld/0", "slurmctld/1", "compute/0", LOGIN, "slurmdbd/0")
JOB_SECONDS = 150
"""The job outlives the rotation and the failover after it."""
BACKUP_BACK = 45
"""Seconds for a restarted backup to answer: the charm's 20 s stop bound, a start, a ping."""

wait_active = partial(wait_for_active, timeout=SETTLE)


def say(text: str) -> None:
    print(f"\n[ha-with-accounting] {text}", flush=True)


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    lab_of(juju)  # The failovers need the lab's faults.
    deploy_slurm(juju, charm_path, controllers=2, network_state=True)
    deploy_accounting(juju, charm_path)
    wait_active(juju)
    return juju


def test_a_backup_takes_over_with_slurmdbd_stopped_right_after_a_change(cluster: jubilant.Juju):
    hosts = ping_hosts(cluster)
    primary_host, backup_host = hosts[0], hosts[1]
    backup = unit_of_host(cluster.status(), "slurmctld", backup_host)
    changed_at = time.time()
    cluster.config("slurmctld", {"slurm-conf-parameters": "SlurmdTimeout=31\n"})
    wait_active(cluster)
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


def test_a_rotation_reaches_the_backup_and_slurmdbd_then_the_backup_takes_over_with_the_new_key(
    cluster: jubilant.Juju,
):
    """Right after the crash above: the job's node idle and both controllers UP first."""
    poll(
        lambda: all_nodes_idle(cluster, ["compute-0"]) or None, timeout=120, what="compute-0 idle"
    )
    poll(
        lambda: all_controllers_up(cluster, ping_hosts(cluster)) or None,
        timeout=REACT,
        what="both controllers UP",
    )
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
        what="every daemon, the backup controller and slurmdbd too, on the new key alone",
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
