"""Issue 23: `slurm-autoscale` scales a slurmd application from 0 units and back to 0.

slurmctld, slurmrestd, a login node and a slurmd application `compute` with no unit. The
controller's `future-nodes` keeps 3 FUTURE placeholders in the partition, so a 2-node job is
accepted and pends. One `slurm-autoscale --once` pass adds 2 units and the job runs; once the
nodes have been idle for the policy's idle-timeout, another pass removes both units, and the
job ended COMPLETED (not cancelled, not requeued). That a node is not removed before
idle-timeout is checked by the unit tests over recorded responses, not here.

The program runs in this process (`slurm_autoscale.cli.run`, the console script's code) on
the test's model; it reaches slurmrestd with curl on the login unit (`--rest-via-unit`), as
this host has no route into the lab's network.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from deploy_helpers import deploy_rest_api, deploy_slurm
from dynamic_nodes_helpers import job, job_state, node_states, nodes, poll, sh, try_sh
from slurm_autoscale import cli

APP = "compute"
LOGIN = "login/0"
IDLE_TIMEOUT = 20
POLICY = f"""
[{APP}]
min = 0
max = 3
idle-timeout = {IDLE_TIMEOUT}
step = 3
cooldown = 0
cpus = 1
memory = 1
"""


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    deploy_slurm(juju, charm_path, computes=((APP, 0),))
    deploy_rest_api(juju, charm_path)
    juju.config("slurmctld", {"future-nodes": f"{APP}=3 cpus=1 realmemory=1"})
    juju.wait(lambda s: jubilant.all_active(s, "slurmctld", "slurmrestd", "login"), timeout=900)
    return juju


def autoscale(juju: jubilant.Juju, tmp_path: Path) -> int:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    argv = ["--policy", str(policy), "--once", "--state-file", str(tmp_path / "state.json")]
    return cli.run([*argv, "--rest-via-unit", LOGIN], juju=juju)


def units(juju: jubilant.Juju) -> list[str]:
    return sorted(juju.status().apps[APP].units)


def test_scale_from_zero_runs_the_job_then_returns_to_zero(
    cluster: jubilant.Juju, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="slurm-autoscale")
    assert units(cluster) == []
    too_big = try_sh(cluster, f"sbatch -p {APP} -N4 -o /dev/null --wrap true", unit=LOGIN)
    assert too_big is None  # More nodes than placeholders: refused at submission.
    submitted = time.monotonic()
    out = sh(cluster, f"sbatch --parsable -p {APP} -N2 -o /dev/null --wrap 'sleep 5'", unit=LOGIN)
    job_id = out.strip().split(";")[0]
    assert job_state(cluster, job_id) == "PENDING"

    assert autoscale(cluster, tmp_path) == 0
    pass_done = time.monotonic()
    assert "compute: +2, 1 pending jobs need 2 nodes, 0 idle, 0 enlisting" in caplog.text
    assert units(cluster) == ["compute/0", "compute/1"]
    poll(
        lambda: job_state(cluster, job_id) in ("RUNNING", "COMPLETED"),
        timeout=120,
        interval=1,
        what=f"job {job_id} running",
    )
    running = time.monotonic()
    print(
        f"\nsubmission to running: {running - submitted:.1f} s: the pass, adding 2 units, "
        f"{pass_done - submitted:.1f} s; then to running {running - pass_done:.1f} s"
    )
    poll(lambda: job_state(cluster, job_id) == "COMPLETED", timeout=60, what="job completed")

    # Not removed before idle-timeout: the unit tests check that over recorded responses
    # (here the time a pass takes on a loaded host would make it a race).
    time.sleep(IDLE_TIMEOUT)
    poll(
        lambda: all("IDLE" in node_states(n) for n in nodes(cluster).values()),
        timeout=30,
        what="nodes idle",
    )
    removal = time.monotonic()
    assert autoscale(cluster, tmp_path) == 0
    assert "compute: -2 (compute/0, compute/1)" in caplog.text
    poll(lambda: units(cluster) == [], timeout=300, what="compute back to 0 units")
    print(f"scale in to 0: {time.monotonic() - removal:.1f} s (one pass, 2 units)")
    record = job(cluster, job_id)
    assert record is not None
    assert record["job_state"] == ["COMPLETED"] and record["restart_cnt"] == 0
    # The partition is still there and takes jobs with 0 units.
    out = sh(cluster, f"sbatch --parsable -p {APP} -N1 -o /dev/null --wrap true", unit=LOGIN)
    assert job_state(cluster, out.strip().split(";")[0]) == "PENDING"
