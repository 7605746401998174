"""The charms' defaults on a compute node that boots its own kernel (issue 34, item 2).

Every other module runs `process-isolation=none`, on containers of a cgroup v1 host. Here
slurmctld keeps its DEFAULT `process-isolation` (cgroup: proctrack/cgroup, task/cgroup +
task/affinity, jobacct_gather/cgroup, CgroupPlugin=autodetect, and confinement of cores, RAM
and devices), and the one slurmd unit runs on a VM (`virt-type=virtual-machine`: on the lab a
qemu VM with Debian's kernel and cgroup v2, 2 vCPUs, 1 GiB; see lab/README.md), with a sackd
login node. Each check below fails where the default fails to do its job:

- slurmd runs under cgroup v2 with the cgroup plugins and the node is idle;
- a job asking `--mem=64M` that fills 256 MiB ends OUT_OF_MEMORY and the node stays up;
- `srun -c1 nproc` prints 1 (and `-c2` prints 2) on the 2-CPU VM, and the step's cgroup
  allows one CPU (`cpuset.cpus.effective`): task/affinity alone makes nproc print 1, only
  ConstrainCores confines the cgroup;
- a process a job left in the background is gone once the job ended;

Each can fail, as runs here showed: with `process-isolation=none` on the same VM
(proctrack/linuxproc, no task plugin) the first four checks fail; with the confinement default
reverted (cgroup.conf's Constrain* keys back to Slurm's `no`) the first two do, and `srun -c1
nproc` still printed 1 (task/affinity pins the task): hence the check of the step's cpuset.
- `scancel` of a job with child processes leaves none of them, not even one that left the
  job's process tree (a double fork into a new session);
- slurmd restarted by the charm (a new auth key: `rotate-auth-key`) keeps the running job.

sacct's MaxRSS is not checked here: it needs slurmdbd and its database, two more machines
on a 2-core host, for a figure the cgroup plugin reads from the same memory controller the
OUT_OF_MEMORY check already proves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from deploy_helpers import LAB_OPTIONS
from dynamic_nodes_helpers import poll, sh

SETTLE = 25 * 60
"""A VM under software emulation: boot, then every hook of the slurmd unit."""
COMPUTE = "compute/0"
LOGIN = "login/0"


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    juju.deploy(charm_path("slurmctld"), "slurmctld", config=LAB_OPTIONS)
    constraints = {"virt-type": "virtual-machine"}  # Juju's own, on LXD clouds
    juju.deploy(charm_path("slurmd"), "compute", config=LAB_OPTIONS, constraints=constraints)
    juju.deploy(charm_path("sackd"), "login", config=LAB_OPTIONS)
    juju.integrate("slurmctld:slurmd", "compute:slurmctld")
    juju.integrate("slurmctld:login-node", "login:slurmctld")
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    poll(
        lambda: sh(juju, "sinfo -h -o %t", unit=LOGIN).strip() == "idle",
        timeout=300,
        what="node idle",
    )
    return juju


def on_node(juju: jubilant.Juju, command: str) -> str:
    return sh(juju, command, unit=COMPUTE)


def job_state(juju: jubilant.Juju, job: str) -> str:
    return sh(juju, f"scontrol show job {job} -o", unit=LOGIN).split("JobState=", 1)[1].split()[0]


def submit(juju: jubilant.Juju, options: str, script: str) -> str:
    """sbatch a one-line script as the ubuntu-less default user (root); return the job id."""
    return sh(juju, f"sbatch --parsable {options} --wrap '{script}'", unit=LOGIN).strip()


def wait_state(juju: jubilant.Juju, job: str, states: set[str], timeout: float = 180) -> str:
    poll(lambda: job_state(juju, job) in states, timeout=timeout, what=f"job {job} in {states}")
    return job_state(juju, job)


def test_slurmd_runs_under_cgroup_v2_with_the_cgroup_plugins(cluster: jubilant.Juju):
    assert on_node(cluster, "stat -f -c %T /sys/fs/cgroup").strip() == "cgroup2fs"
    assert on_node(cluster, "systemctl is-active slurmd").strip() == "active"
    config = sh(cluster, "scontrol show config", unit=LOGIN)
    assert "proctrack/cgroup" in config
    assert "task/cgroup" in config
    assert "jobacct_gather/cgroup" in config
    cgroup = sh(cluster, "scontrol show config | sed -n '/^Cgroup Support/,$p'", unit=LOGIN)
    for key in ("ConstrainCores", "ConstrainRAMSpace", "ConstrainDevices"):
        assert any(
            line.split("=")[0].strip() == key and line.split("=")[1].strip() == "yes"
            for line in cgroup.split("\n")
            if "=" in line
        ), cgroup
    assert sh(cluster, "sinfo -h -o %t", unit=LOGIN).strip() == "idle"


def test_a_job_over_its_memory_ends_out_of_memory_and_the_node_stays_up(cluster: jubilant.Juju):
    job = submit(cluster, "--mem=64M", 'python3 -c "a = b\\"x\\" * (256 << 20)"')
    assert wait_state(cluster, job, {"OUT_OF_MEMORY", "COMPLETED", "FAILED"}) == "OUT_OF_MEMORY"
    assert on_node(cluster, "systemctl is-active slurmd").strip() == "active"
    poll(
        lambda: sh(cluster, "sinfo -h -o %t", unit=LOGIN).strip() == "idle",
        timeout=60,
        what="node idle",
    )


STEP_CPUS = (
    "srun -c{} sh -c 'cat /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/cpuset.cpus.effective'"
)
"""The CPUs the step's own cgroup allows (task/affinity alone pins the task, not its cgroup)."""


def test_a_step_gets_only_the_cores_it_asked_for(cluster: jubilant.Juju):
    assert on_node(cluster, "nproc").strip() == "2"
    assert sh(cluster, "srun -c1 nproc", unit=LOGIN).strip() == "1"
    assert sh(cluster, "srun -c2 nproc", unit=LOGIN).strip() == "2"
    one = sh(cluster, STEP_CPUS.format(1), unit=LOGIN).strip()
    assert one in ("0", "1"), f"a 1-CPU step's cgroup allows CPUs {one!r}"
    assert sh(cluster, STEP_CPUS.format(2), unit=LOGIN).strip() == "0-1"


def test_a_process_a_job_left_behind_is_gone_when_the_job_ends(cluster: jubilant.Juju):
    job = submit(cluster, "", "setsid sleep 4242 </dev/null >/dev/null 2>&1 & sleep 2")
    assert wait_state(cluster, job, {"COMPLETED", "FAILED"}) == "COMPLETED"
    poll(
        lambda: "sleep 4242" not in on_node(cluster, "ps -eo args"),
        timeout=60,
        what="leftover killed",
    )


def test_scancel_leaves_no_child_of_the_job(cluster: jubilant.Juju):
    # One child stays the script's; the other leaves its tree (a double fork, a new session):
    # only the job's cgroup still holds it.
    job = submit(cluster, "", "(setsid sleep 4343 &); sleep 4343 & wait")
    wait_state(cluster, job, {"RUNNING"})
    poll(
        lambda: on_node(cluster, "ps -eo args").count("sleep 4343") == 2,
        timeout=60,
        what="children run",
    )
    sh(cluster, f"scancel {job}", unit=LOGIN)
    wait_state(cluster, job, {"CANCELLED"})
    poll(
        lambda: "sleep 4343" not in on_node(cluster, "ps -eo args"),
        timeout=60,
        what="children killed",
    )


def test_slurmd_restarted_by_the_charm_keeps_the_running_job(cluster: jubilant.Juju):
    job = submit(cluster, "", "sleep 150")
    wait_state(cluster, job, {"RUNNING"})
    before = on_node(cluster, "systemctl show -P MainPID slurmd").strip()
    cluster.run("slurmctld/0", "rotate-auth-key")
    poll(
        lambda: on_node(cluster, "systemctl show -P MainPID slurmd").strip() not in ("", before),
        timeout=600,
        what="slurmd restarted by the charm",
    )
    time.sleep(5)
    assert job_state(cluster, job) == "RUNNING"
    assert "sleep 150" in on_node(cluster, "ps -eo args")
    assert wait_state(cluster, job, {"COMPLETED", "FAILED", "NODE_FAIL"}, 400) == "COMPLETED"
