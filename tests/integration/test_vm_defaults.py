"""The charms' defaults on a compute node that boots its own kernel (issue 34, item 2).

Every other module runs `process-isolation=none`, on containers of a cgroup v1 host. Here
slurmctld keeps its DEFAULT `process-isolation` (cgroup: proctrack/cgroup, task/cgroup +
task/affinity, jobacct_gather/cgroup, CgroupPlugin=autodetect, and confinement of cores, RAM
and devices), and the one slurmd unit runs on a VM (`virt-type=virtual-machine`: on the lab a
qemu VM with Debian's kernel and cgroup v2, 2 vCPUs, 1 GiB; see lab/README.md), with a sackd
login node and slurmdbd on MySQL (the lab's stand-in; containers, as slurmctld). The compute
application is deployed without a unit: its one VM comes from `add_unit`. Each check below
fails where the default fails to do its job:

- slurmd runs under cgroup v2 with the cgroup plugins and the node is idle;
- a job asking `--mem=64M` that fills 256 MiB ends OUT_OF_MEMORY and the node stays up;
- `srun -c1 nproc` prints 1 (and `-c2` prints 2) on the 2-CPU VM, and the step's cgroup
  allows one CPU (`cpuset.cpus.effective`): task/affinity alone makes nproc print 1, only
  ConstrainCores confines the cgroup;
- a process a job left in the background is gone once the job ended;
- `scancel` of a job with child processes leaves none of them, not even one that left the
  job's process tree (a double fork into a new session);
- slurmd restarted by the charm (a new auth key: `rotate-auth-key`) keeps the running job,
  which then completes;
- a job's steps outlive slurmd stopped and started by hand: the drop-in's stop bound
  (`TimeoutStopSec=10`) and the packaged `KillMode=process` in force, slurmstepd in its own
  scope (`<node>_slurmstepd.scope`), not in slurmd.service's cgroup;
- the unit `add_unit` made runs on a VM, and the machine's `juju-exec` runs a command in the
  unit's hook context (hook tools on PATH, cwd the charm dir, which lies on the VM's disk);
- sacct reports the memory a finished step used (MaxRSS, from jobacct_gather/cgroup);
- last, as it reboots the VM: a bare `scontrol reboot` of the node, then `rebuild-nodes` over
  its partition, each a real kernel boot (a new btime) timed until the node is idle again; a
  job submitted once the node is out of the rollout runs after its new boot (one node: no
  running job to keep, and max-unavailable cannot be exceeded).

The VM image lacks dbus (lab/README.md): the slurmd charm installs it and starts it.

Each can fail, as runs here showed:
- with `process-isolation=none` on the same VM (proctrack/linuxproc, no task plugin) the
  first four checks and scancel's fail; with the confinement default reverted (cgroup.conf's
  Constrain* keys back to Slurm's `no`) the first two do, and `srun -c1 nproc` still printed 1
  (task/affinity pins the task): hence the check of the step's cpuset;
- the restart check failed once (run of 04:42): its job, then a 150-s sleep, had ended
  COMPLETED before the charm's three-step rotation restarted slurmd on a loaded host (hooks
  of 50-250 s): hence the job held until released. No charm setting was found whose revert
  loses the job: slurmstepd lives in a systemd scope of its own (`<node>_slurmstepd.scope`),
  not in slurmd.service, so a restart with `KillMode=control-group` kept the job (same run),
  and so did a restart with dbus stopped (run of 05:08: slurmd asks systemd for the scope over
  dbus only when the scope is missing, so dbus matters at slurmd's first start and after a
  boot: without it slurmd stops there, "systemd scope for slurmstepd could not be created",
  and the first check fails). The check guards Slurm's and systemd's
  side of a restart, and a charm that would re-register or drain the node on a key change;
- with a stop of slurmd that also kills slurmstepd's scope (the mutant
  `slurmd-stop-kills-job-steps`: `ExecStopPost=-/bin/systemctl kill --signal=KILL
  *_slurmstepd.scope` in the drop-in; run of 14:33, `-k "restarted or outlive"`) both job
  checks failed: the charm's own restarts of slurmd after the deploy (its secret-changed
  hooks) killed the restart check's running job (slurmd: "Purging vestigial job script"),
  slurmctld requeued it, and `wait_state(..., {"RUNNING"})` failed with 'PENDING' ==
  'RUNNING'; in the stop check the job was RUNNING for slurmctld with no slurm_script nor
  slurmstepd left on the node ("job script runs" timed out). A unit test guards the drop-in
  without a VM (tests/unit/hpc_libs/test_slurm_managers.py);
- the system bus: on the image without dbus, with the charm installing dbus but not starting
  it (run of 14:06), slurmd never started ("cannot connect to dbus system daemon: Failed to
  connect to socket /run/dbus/system_bus_socket", then "fatal: systemd scope for slurmstepd
  could not be set"), compute/0 stayed blocked "slurmd cannot start: ..." and the module's
  fixture could not settle. Not installing dbus at all leaves the same socket missing;
- the charm dir on the VM's disk: before the lab bound it there, findmnt showed the 9p share
  (by hand, in a run of this module);
- sacct's MaxRSS: with `process-isolation=none` (jobacct_gather/none) the step's MaxRSS
  stayed 0 and the check failed, as did the plugins' (run of 05:28);
- not yet shown failing by a run: the VM of `add_unit`.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from deploy_helpers import LAB_OPTIONS, deploy_accounting
from dynamic_nodes_helpers import poll, sh

SETTLE = 25 * 60
"""A VM under software emulation: boot, then every hook of the slurmd unit."""
COMPUTE = "compute/0"
LOGIN = "login/0"


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    juju.deploy(charm_path("slurmctld"), "slurmctld", config=LAB_OPTIONS)
    constraints = {"virt-type": "virtual-machine"}  # Juju's own, on LXD clouds
    # No unit at deploy: the one VM comes from add_unit, which must honour the constraint.
    juju.deploy(
        charm_path("slurmd"),
        "compute",
        config=LAB_OPTIONS,
        constraints=constraints,
        num_units=0,
    )
    juju.deploy(charm_path("sackd"), "login", config=LAB_OPTIONS)
    deploy_accounting(juju, charm_path)
    juju.integrate("slurmctld:slurmd", "compute:slurmctld")
    juju.integrate("slurmctld:login-node", "login:slurmctld")
    juju.add_unit("compute")
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    poll(
        lambda: sh(juju, "sinfo -h -o %t", unit=LOGIN).strip() == "idle",
        timeout=300,
        what="node idle",
    )
    return juju


NODE_WAIT = 600
"""Seconds a command on the VM may wait for the unit's running hook: `juju exec` runs in the
hook context, serialised with the unit's hooks, and a VM's hooks take 20-90 s each under
emulation, several in a row after a key rotation (120 s timed out three checks, run of 14:54)."""


def on_node(juju: jubilant.Juju, command: str) -> str:
    return sh(juju, command, unit=COMPUTE, wait=NODE_WAIT)


def node_processes(juju: jubilant.Juju) -> str:
    """Every process's command line on the compute node, one a line."""
    return on_node(juju, "ps -eo args")


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
    poll(lambda: "sleep 4242" not in node_processes(cluster), timeout=60, what="leftover killed")


def test_scancel_leaves_no_child_of_the_job(cluster: jubilant.Juju):
    # One child stays the script's; the other leaves its tree (a double fork, a new session):
    # only the job's cgroup still holds it.
    job = submit(cluster, "", "(setsid sleep 4343 &); sleep 4343 & wait")
    wait_state(cluster, job, {"RUNNING"})
    poll(lambda: node_processes(cluster).count("sleep 4343") == 2, timeout=60, what="children run")
    sh(cluster, f"scancel {job}", unit=LOGIN)
    wait_state(cluster, job, {"CANCELLED"})
    poll(lambda: "sleep 4343" not in node_processes(cluster), timeout=60, what="children killed")


def test_slurmd_restarted_by_the_charm_keeps_the_running_job(cluster: jubilant.Juju):
    # The job runs until the test releases it: the charm's restart (three key revisions, each
    # a hook on every unit) takes minutes on a loaded host, and the job must outlive it.
    job = submit(cluster, "", "until [ -e /tmp/release-$SLURM_JOB_ID ]; do sleep 1; done")
    try:
        restart_keeps(cluster, job)
    finally:  # a job left running would hold the node (its memory) for the next checks
        sh(cluster, f"scancel {job} || true", unit=LOGIN)


def restart_keeps(cluster: jubilant.Juju, job: str) -> None:
    wait_state(cluster, job, {"RUNNING"})
    before = on_node(cluster, "systemctl show -P MainPID slurmd").strip()
    cluster.run("slurmctld/0", "rotate-auth-key")
    poll(
        lambda: on_node(cluster, "systemctl show -P MainPID slurmd").strip() not in ("", before),
        timeout=900,
        what="slurmd restarted by the charm",
    )
    time.sleep(5)
    assert job_state(cluster, job) == "RUNNING"
    assert "slurm_script" in node_processes(cluster)
    on_node(cluster, f"touch /tmp/release-{job}")
    assert wait_state(cluster, job, {"COMPLETED", "FAILED", "NODE_FAIL"}, 400) == "COMPLETED"


def test_job_steps_outlive_a_slurmd_stop_under_cgroup_v2(cluster: jubilant.Juju):
    # The charm's drop-in bounds slurmd's stop (TimeoutStopSec=10) and leaves the packaged
    # KillMode=process; under cgroup v2 slurmstepd runs in a scope of its own, outside
    # slurmd.service's cgroup, so neither a stop nor its SIGKILL reaches a job's steps.
    assert on_node(cluster, "systemctl show -P TimeoutStopUSec slurmd").strip() == "10s"
    assert on_node(cluster, "systemctl show -P KillMode slurmd").strip() == "process"
    job = submit(cluster, "", "until [ -e /tmp/release-$SLURM_JOB_ID ]; do sleep 1; done")
    try:
        steps_outlive_a_stop(cluster, job)
    finally:  # a job left running would hold the node (its memory) for the next checks
        sh(cluster, f"scancel {job} || true", unit=LOGIN)
        on_node(cluster, "systemctl start slurmd")


def steps_outlive_a_stop(cluster: jubilant.Juju, job: str) -> None:
    wait_state(cluster, job, {"RUNNING"})
    poll(lambda: "slurm_script" in node_processes(cluster), timeout=60, what="job script runs")
    stepd = on_node(cluster, "cat /proc/$(pgrep -o -x slurmstepd)/cgroup").strip()
    assert "_slurmstepd.scope/" in stepd and "slurmd.service" not in stepd, stepd
    started = time.monotonic()
    on_node(cluster, "systemctl stop slurmd")
    stopped_s = time.monotonic() - started
    # slurmd stops at once, or, when it was serving a request (a health check, a prolog: slow
    # on an emulated CPU), at the drop-in's bound, killed alone: the unit is then `failed`
    # with Result=timeout (the official CI of stop 50). Either way no slurmd is left; a
    # slurmd that died of its own (any other Result) fails the test.
    shown = on_node(cluster, "systemctl show -p ActiveState -p Result -p MainPID slurmd")
    unit = dict(line.split("=", 1) for line in shown.split())
    assert unit["ActiveState"] in ("inactive", "failed") and unit["MainPID"] == "0", unit
    assert unit["Result"] in ("success", "timeout"), unit
    result = unit["Result"]
    time.sleep(5)  # slurmd down: the steps run on alone
    processes = node_processes(cluster)
    assert "slurm_script" in processes and "slurmstepd" in processes, processes
    on_node(cluster, "systemctl start slurmd")
    assert job_state(cluster, job) == "RUNNING"
    on_node(cluster, f"touch /tmp/release-{job}")
    assert wait_state(cluster, job, {"COMPLETED", "FAILED", "NODE_FAIL"}, 300) == "COMPLETED"
    print(f"\n[vm-defaults] slurmd stopped in {stopped_s:.1f} s ({result}) with job {job} running")


def juju_exec_on_the_node(juju: jubilant.Juju, command: str) -> tuple[str, str]:
    """Run `juju-exec -u compute/0 -- command` on the VM itself; its rc and stdout.

    As a transient service: the machine's juju-exec waits for the controller, which answers
    while a client drives it (the status polls here), as Juju's agent would.
    """
    name = f"vm-exec-{time.monotonic_ns()}"
    script = (
        f"juju-exec -u {COMPUTE} -- {shlex.quote(command)} >/tmp/{name}.out 2>&1; "
        f"echo $? >/tmp/{name}.rc"
    )
    on_node(juju, f"systemd-run --unit={name} --collect sh -c {shlex.quote(script)}")

    def ended() -> str | None:
        juju.status()
        return on_node(juju, f"cat /tmp/{name}.rc 2>/dev/null || true").strip() or None

    rc = poll(ended, timeout=600, interval=1, what=f"juju-exec {command}")
    return rc, on_node(juju, f"cat /tmp/{name}.out")


def test_add_unit_gave_the_unit_a_vm_and_juju_exec_runs_in_its_hook_context(
    cluster: jubilant.Juju,
):
    # The unit came from add_unit (the application was deployed without one): its machine
    # must be a VM (its own kernel, the constraint honoured), not a container of the host.
    assert on_node(cluster, "cat /sys/class/dmi/id/sys_vendor").strip() == "QEMU"
    assert on_node(cluster, "systemd-detect-virt").strip() == "qemu"
    # The machine's juju-exec runs the command in the unit's hook context, tools on PATH.
    rc, output = juju_exec_on_the_node(cluster, "is-leader --format=json; pwd")
    charm_dir = "/var/lib/juju/agents/unit-compute-0/charm"
    assert (rc, output.split()) == ("0", ["true", charm_dir]), output
    # The charm dir lies on the VM's own disk (as Juju unpacks it), not on the host's 9p share.
    assert on_node(cluster, f"findmnt -n -o FSTYPE -T {charm_dir}").strip() == "ext4"


def test_sacct_reports_the_memory_a_finished_step_used(cluster: jubilant.Juju):
    # jobacct_gather/cgroup reads the step's memory controller; --acctg-freq=task=1 samples it
    # every second, so a step that held 96 MiB for 4 s cannot have slipped between samples.
    fill = 'a = b"x" * (96 << 20); import time; time.sleep(4)'
    sh(cluster, f"srun --acctg-freq=task=1 --mem=256M python3 -c '{fill}'", unit=LOGIN)
    job = sh(cluster, "sacct -X -n -P -o JobID --name=python3", unit=LOGIN).strip().split("\n")[-1]

    def max_rss() -> int | None:
        rss = sh(cluster, f"sacct -n -P --noconvert -o MaxRSS -j {job}.0", unit=LOGIN).strip()
        return int(rss.rstrip("K")) if rss.rstrip("K").isdigit() else None

    rss = poll(max_rss, timeout=120, what=f"step {job}.0 in sacct")
    assert rss >= 64 << 10, f"MaxRSS {rss}K for a step that held 96 MiB"


NOT_BACK = frozenset(
    {"DOWN", "DRAIN", "NOT_RESPONDING", "REBOOT_ISSUED", "REBOOT_REQUESTED", "POWERING_UP"}
)
"""Flags of a node still out (a dynamic node back is IDLE with DYNAMIC_NORM)."""
NODE = "compute-0"
REBOOT_LIMIT = 600
"""Seconds a VM node may take to come back: a kernel reboot under TCG, then slurmd."""


def node_record(juju: jubilant.Juju) -> tuple[set[str], int]:
    """The compute node's state flags and boot time, as slurmctld sees them."""
    (record,) = json.loads(sh(juju, f"scontrol show node {NODE} --json", unit=LOGIN))["nodes"]
    return set(record["state"]), int((record.get("boot_time") or {}).get("number") or 0)


def node_back(juju: jubilant.Juju, booted_before: int, started: float) -> float:
    """Wait until the node is idle on a boot after `booted_before`; seconds since `started`."""

    def back() -> float | None:
        states, booted = node_record(juju)
        if booted > booted_before and "IDLE" in states and not states & NOT_BACK:
            return time.monotonic() - started
        return None

    return poll(back, timeout=REBOOT_LIMIT, interval=1, what=f"{NODE} back on a new boot")


def btime(juju: jubilant.Juju) -> int:
    """The VM kernel's boot time (/proc/stat's btime): a kernel boot changes it."""
    return int(on_node(juju, "awk '$1 == \"btime\" {print $2}' /proc/stat").strip())


def test_a_rolling_rebuild_reboots_the_vm_through_its_kernel_and_runs_the_pending_job(
    cluster: jubilant.Juju,
):
    # Last: it reboots the VM. First a bare `scontrol reboot` of the node (the charm's
    # RebootProgram, nothing else), then `rebuild-nodes` over the partition; each a real
    # kernel boot (a new btime), each timed until the node is idle again.
    kernel_before = btime(cluster)
    _, booted = node_record(cluster)
    started = time.monotonic()
    sh(cluster, f"scontrol reboot {NODE}", unit="slurmctld/0")
    bare_s = node_back(cluster, booted, started)
    kernel_bare = btime(cluster)
    assert kernel_bare > kernel_before, "scontrol reboot did not boot the VM's kernel"

    _, booted = node_record(cluster)
    started = time.monotonic()
    params = {"partition": "compute", "max-unavailable": 1}
    cluster.run("slurmctld/0", "rebuild-nodes", params)
    # Once the node is out, a job can only pend: it must run after the node's new boot.
    poll(
        lambda: node_record(cluster)[0] & NOT_BACK or node_record(cluster)[1] > booted,
        timeout=REBOOT_LIMIT,
        interval=1,
        what=f"{NODE} out for its rebuild",
    )
    job = submit(cluster, "-p compute", "true")
    rollout_s = node_back(cluster, booted, started)
    assert btime(cluster) > kernel_bare, "the rebuild did not boot the VM's kernel"
    assert wait_state(cluster, job, {"COMPLETED", "FAILED"}, 300) == "COMPLETED"
    record = json.loads(sh(cluster, f"scontrol show job {job} --json", unit=LOGIN))["jobs"][0]
    _, booted_after = node_record(cluster)
    assert int(record["start_time"]["number"]) >= booted_after, "the job ran before the reboot"
    status = cluster.run("slurmctld/0", "rebuild-status").results.get("compute", {})
    print(
        f"\n[vm-defaults] bare scontrol reboot {bare_s:.0f} s, rebuild-nodes {rollout_s:.0f} s"
        f" (node {NODE}, kernel btime {kernel_before} -> {kernel_bare} -> {btime(cluster)});"
        f" rebuild-status {status}"
    )
