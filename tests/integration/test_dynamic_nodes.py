"""Dynamic nodes end to end (issue 4 "Done when", issue 3 cluster test), against real Slurm.

One deployment for the module, driven as a scenario: every test builds on the cluster the
previous tests left, and asserts one behaviour. Runs on real Juju or on the lab (see
conftest.py); on the lab every unit is a Debian 13 machine with Slurm 24.11.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from dynamic_nodes_helpers import (
    CONTROLLER,
    all_nodes_idle,
    is_idle,
    job_state,
    node,
    node_states,
    nodes,
    partition,
    partitions,
    poll,
    reconfigure_count,
    sh,
    slurm_conf_fingerprint,
    submit_sleep,
    try_sh,
)

LAB_OPTIONS = {"slurm-package-source": "archive"}
CONTROLLER_OPTIONS = {**LAB_OPTIONS, "process-isolation": "none"}
SETTLE = 10 * 60


def wait_active(juju: jubilant.Juju, *apps: str, timeout: float = SETTLE) -> None:
    juju.wait(
        lambda status: jubilant.all_active(status, *apps),
        error=lambda status: jubilant.any_error(status, *apps),
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    """slurmctld and a slurmd application `compute` with two units, all active."""
    juju.deploy(charm_path("slurmctld"), "slurmctld", config=CONTROLLER_OPTIONS)
    juju.deploy(charm_path("slurmd"), "compute", num_units=2, config=LAB_OPTIONS)
    juju.integrate("slurmctld:slurmd", "compute:slurmctld")
    wait_active(juju)
    poll(
        lambda: all_nodes_idle(juju, ["compute-0", "compute-1"]),
        timeout=60,
        what="compute-0 and compute-1 idle",
    )
    return juju


def test_job_without_partition_runs_on_both_nodes(cluster: jubilant.Juju):
    """Issue 3: `srun -N2 hostname` (default partition, no -p) reaches both units."""
    status = cluster.status()
    units = status.apps["compute"].units
    hostnames = {status.machines[u.machine].hostname for u in units.values()}

    out = sh(cluster, "srun -N2 hostname", wait=60)
    names = sh(cluster, "srun -N2 printenv SLURMD_NODENAME", wait=60)

    assert set(out.split()) == hostnames
    assert set(names.split()) == {"compute-0", "compute-1"}


def test_login_node_reaches_the_cluster(cluster: jubilant.Juju, charm_path: Callable[[str], Path]):
    """A sackd login node gets the key and controllers; users run jobs from it."""
    cluster.deploy(charm_path("sackd"), "login", config=LAB_OPTIONS)
    cluster.integrate("slurmctld:login-node", "login:slurmctld")
    wait_active(cluster)

    names = sh(cluster, "srun -N2 printenv SLURMD_NODENAME", unit="login/0", wait=60)
    nodes = sh(cluster, "sinfo --noheader --format=%N", unit="login/0")

    assert set(names.split()) == {"compute-0", "compute-1"}
    assert "compute-[0-1]" in nodes
    assert not try_sh(cluster, "test -e /etc/slurm/slurm.conf && echo present", unit="login/0")


def test_second_application_becomes_second_partition(
    cluster: jubilant.Juju, charm_path: Callable[[str], Path]
):
    cluster.deploy(charm_path("slurmd"), "debug", config=LAB_OPTIONS)
    cluster.integrate("slurmctld:slurmd", "debug:slurmctld")
    wait_active(cluster)
    poll(lambda: all_nodes_idle(cluster, ["debug-0"]), timeout=60, what="debug-0 idle")

    assert partitions(cluster) == {"compute", "debug"}
    assert "Default=YES" in partition(cluster, "compute")  # The oldest application's.
    assert "Default=NO" in partition(cluster, "debug")
    assert "Nodes=debug-0" in partition(cluster, "debug")


def test_scaling_up_enlists_nodes_without_reconfigure_or_conf_write(cluster: jubilant.Juju):
    reconfigures = reconfigure_count(cluster)
    conf = slurm_conf_fingerprint(cluster)

    cluster.add_unit("compute", num_units=2)
    wait_active(cluster)
    poll(
        lambda: all_nodes_idle(cluster, ["compute-2", "compute-3"]),
        timeout=60,
        what="compute-2 and compute-3 idle",
    )

    assert reconfigure_count(cluster) - reconfigures == 0
    assert slurm_conf_fingerprint(cluster) == conf
    assert "Nodes=compute-[0-3]" in partition(cluster, "compute")


def test_partition_config_change_shows_in_scontrol_with_one_reconfigure(
    cluster: jubilant.Juju,
):
    reconfigures = reconfigure_count(cluster)

    cluster.config("compute", {"partition-config": "MaxTime=60 DefaultTime=10"})
    poll(
        lambda: "MaxTime=01:00:00" in partition(cluster, "compute"),
        timeout=120,
        what="MaxTime=01:00:00 in partition compute",
    )
    wait_active(cluster)

    shown = partition(cluster, "compute")
    assert "DefaultTime=00:10:00" in shown
    assert "Default=YES" in shown
    assert reconfigure_count(cluster) - reconfigures == 1


def test_invalid_partition_config_blocks_naming_the_key_and_keeps_the_partition(
    cluster: jubilant.Juju,
):
    cluster.config("compute", {"partition-config": "MaxTime=30 NotAKey=1"})
    status = cluster.wait(lambda status: jubilant.all_blocked(status, "compute"), timeout=SETTLE)

    for unit in status.apps["compute"].units.values():
        assert "notakey" in unit.workload_status.message.lower()
    assert "MaxTime=01:00:00" in partition(cluster, "compute")


def test_valid_partition_config_unblocks(cluster: jubilant.Juju):
    cluster.config("compute", {"partition-config": "MaxTime=60 DefaultTime=10"})
    wait_active(cluster)

    assert "MaxTime=01:00:00" in partition(cluster, "compute")


def test_node_config_live_changes_show_in_scontrol(cluster: jubilant.Juju):
    task = cluster.run("compute/0", "node-config", {"parameters": "Weight=10 Features=fast"})

    record = poll(
        lambda: (n := node(cluster, "compute-0")) and n.get("weight") == 10 and n,
        timeout=60,
        what="compute-0 with weight 10",
    )
    assert "fast" in record["features"]
    assert "compute" in record["features"]
    assert "weight=10" in task.results["parameters"].lower()
    assert is_idle(record)


def test_invalid_node_config_fails_and_changes_nothing(cluster: jubilant.Juju):
    with pytest.raises(jubilant.TaskError) as failed:
        cluster.run("compute/0", "node-config", {"parameters": "Weight=heavy"})

    assert "weight" in str(failed.value.task.message).lower()
    report = cluster.run("compute/0", "node-config").results
    assert "weight=10" in report["parameters"].lower()
    record = node(cluster, "compute-0")
    assert record is not None and record["weight"] == 10


def test_resume_brings_a_drained_node_back_to_idle(cluster: jubilant.Juju):
    sh(cluster, "scontrol update nodename=compute-1 state=drain reason=maintenance")
    poll(
        lambda: "DRAIN" in node_states(node(cluster, "compute-1") or {}),
        timeout=30,
        what="compute-1 drained",
    )

    cluster.run(CONTROLLER, "resume", {"nodename": "compute-1"})

    poll(
        lambda: is_idle(node(cluster, "compute-1")),
        timeout=30,
        what="compute-1 idle again",
    )


def test_destroy_jobs_cancels_the_running_job(cluster: jubilant.Juju):
    job_id = submit_sleep(cluster, "compute-1", 600)

    task = cluster.run("compute/1", "destroy-jobs")

    assert job_id in task.results["cancelled"]
    poll(
        lambda: job_state(cluster, job_id) in (None, "CANCELLED"),
        timeout=60,
        what=f"job {job_id} cancelled",
    )
    poll(
        lambda: is_idle(node(cluster, "compute-1")),
        timeout=60,
        what="compute-1 idle after the cancel",
    )


def fire_pending_hooks(juju: jubilant.Juju) -> None:
    """Let the model run its periodic hooks (update-status) once, then carry on."""
    juju.wait(lambda status: True, delay=1, successes=1, timeout=60)


def test_leaving_with_a_running_job_drains_lets_it_finish_then_deletes_the_node(
    cluster: jubilant.Juju,
):
    """The departure sequence on a machine that stays: the `debug` integration is removed."""
    job_id = submit_sleep(cluster, "debug-0", 30)

    cluster.remove_relation("slurmctld:slurmd", "debug:slurmctld")

    record = node(cluster, "debug-0")
    assert record is not None, "node deleted while its job was still running"
    assert "DRAIN" in node_states(record)
    assert "leaving" in str(record.get("reason", ""))
    poll(
        lambda: job_state(cluster, job_id) == "COMPLETED",
        timeout=90,
        what=f"job {job_id} to complete on the draining node debug-0 (not killed)",
    )
    poll(
        lambda: "debug-0" not in nodes(cluster),
        timeout=60,
        what="debug-0 deleted once its job ended",
    )


def test_application_that_left_has_its_partition_removed(cluster: jubilant.Juju):
    def partition_gone() -> bool:
        fire_pending_hooks(cluster)
        return partitions(cluster) == {"compute"}

    poll(partition_gone, timeout=180, interval=5, what="partition debug removed")
    assert not re.search(r"\bdebug\b", sh(cluster, "cat /etc/slurm/slurm.conf"))


def test_removing_the_application_leaves_nothing_behind(cluster: jubilant.Juju):
    cluster.remove_application("debug")
    cluster.wait(lambda status: "debug" not in status.apps, timeout=SETTLE)

    assert partitions(cluster) == {"compute"}
    assert "debug-0" not in nodes(cluster)


def test_removing_a_busy_unit_drains_it_lets_the_job_finish_then_deletes_it(
    cluster: jubilant.Juju,
):
    job_id = submit_sleep(cluster, "compute-3", 40)

    cluster.remove_unit("compute/3")

    record = node(cluster, "compute-3")
    assert record is not None, "node deleted while its job was still running"
    assert "DRAIN" in node_states(record)
    assert "leaving" in str(record.get("reason", ""))
    poll(
        lambda: job_state(cluster, job_id) == "COMPLETED",
        timeout=90,
        what=(
            f"job {job_id} to complete on the draining node compute-3; it must not be killed"
            " (it is, when the unit's machine is destroyed with the unit)"
        ),
    )
    poll(
        lambda: "compute-3" not in nodes(cluster),
        timeout=60,
        what="compute-3 deleted once its job ended",
    )
    assert "compute-3" not in sh(cluster, "sinfo --noheader --Node --format=%N")
