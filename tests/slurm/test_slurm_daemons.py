"""hpc_libs against real Slurm 24.11 daemons in lab machines.

The session's cluster (see conftest) was configured and started only through hpc_libs. The
tests query and change it through `Scontrol`, run inside the machines exactly as the charms
run it, and check the results with Slurm's own tools. A test that changes a node puts it
back the way it found it.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from incluster import COMPUTES, PARTITION, SLURMCTLD_LOG, Cluster, wait_for
from slurm_lab.machines import Machine

pytestmark = pytest.mark.lab

SCONTROL = "from hpc_libs.slurm.scontrol import Scontrol\nscontrol = Scontrol()\n"
RECONFIGURE_LINE = "Processing Reconfiguration Request"


def running_jobs(cluster: Cluster, node: str) -> list[int] | None:
    """`SlurmdManager().running_jobs()` run on the compute machine of `node`."""
    return cluster.py(
        cluster.computes[node],
        "from hpc_libs.slurm.slurmd import SlurmdManager\nresult = SlurmdManager().running_jobs()",
    )


def update_node(cluster: Cluster, node: str, **params: str) -> None:
    cluster.py(
        cluster.controller,
        SCONTROL + "scontrol.update_node(args['node'], **args['params'])",
        node=node,
        params=params,
    )


def stat(cluster: Cluster, machine_name: str, path: str) -> str:
    machines = {cluster.controller.name: cluster.controller}
    machines.update({m.name: m for m in cluster.computes.values()})
    return cluster.sh(machines[machine_name], "stat", "-c", "%a %U %G", path).strip()


def sha256(cluster: Cluster, path: str) -> set[str]:
    machines = [cluster.controller, *cluster.computes.values()]
    return {cluster.sh(m, "sha256sum", path).split()[0] for m in machines}


def slurmd_argv(cluster: Cluster, node: str) -> list[str]:
    """The command line the running slurmd of `node` was started with."""
    machine = cluster.computes[node]
    pid = cluster.sh(machine, "systemctl", "show", "--value", "-p", "MainPID", "slurmd").strip()
    assert pid not in ("", "0"), f"slurmd is not running on {machine.name}"
    return cluster.sh(machine, "cat", f"/proc/{pid}/cmdline").rstrip("\0").split("\0")


def test_ping_reports_the_controller_up_and_primary(cluster: Cluster):
    pings = cluster.py(
        cluster.controller,
        SCONTROL + "result = [dict(p.model_dump(), is_up=p.is_up) for p in scontrol.ping()]",
    )

    assert pings == [
        {
            "hostname": cluster.controller.name,
            "pinged": "UP",
            "responding": True,
            "mode": "primary",
            "primary": True,
            "is_up": True,
        }
    ]


def test_show_node_finds_each_dynamic_node_by_its_n_name_idle_in_the_partition(
    cluster: Cluster,
):
    for node in COMPUTES:
        shown = cluster.node(node)
        assert shown is not None, f"show_node({node!r}) found nothing"
        assert shown["name"] == node
        assert "IDLE" in shown["state"], shown
        assert shown["features"] == [PARTITION]
        assert shown["partitions"] == [PARTITION]
    for machine in cluster.computes.values():
        assert cluster.node(machine.name) is None, "nodes are named by -N, not by hostname"

    everything = cluster.py(
        cluster.controller, SCONTROL + "result = [n.name for n in scontrol.show_nodes()]"
    )
    assert sorted(everything) == sorted(COMPUTES)


def test_the_partition_lists_the_nodeset_and_both_nodes(cluster: Cluster):
    partition = cluster.partition(PARTITION)

    assert partition is not None
    assert partition["nodes"]["total"] == len(COMPUTES)
    assert partition["nodes"]["configured"] == "compute-[0-1]"
    assert partition["node_sets"] == PARTITION
    assert "UP" in partition["partition"]["state"]


def test_ping_reports_a_stopped_controller_down_and_it_comes_back(cluster: Cluster):
    stopped = cluster.py(
        cluster.controller,
        SCONTROL + "from hpc_libs.slurm.slurmctld import SlurmctldManager\n"
        "service = SlurmctldManager().service\n"
        "service.stop()\n"
        "try:\n"
        "    result = {\n"
        "        'active': service.is_active(),\n"
        "        'pings': [dict(p.model_dump(), is_up=p.is_up) for p in scontrol.ping()],\n"
        "    }\n"
        "finally:\n"
        "    service.start()\n",
    )

    assert stopped["active"] is False
    assert [(p["hostname"], p["responding"], p["is_up"]) for p in stopped["pings"]] == [
        (cluster.controller.name, False, False)
    ]
    up = wait_for(
        "slurmctld to answer again",
        lambda: cluster.py(cluster.controller, SCONTROL + "result = scontrol.ping()[0].is_up"),
        bool,
    )
    assert up
    for node in COMPUTES:  # Dynamic nodes outlive a controller restart (StateSaveLocation).
        cluster.wait_for_node_state(node, "IDLE")


def test_update_node_changes_a_live_field_of_a_dynamic_node(cluster: Cluster):
    node = "compute-0"
    try:
        update_node(cluster, node, weight="7")
        shown = cluster.node(node)
        assert shown is not None
        assert shown["weight"] == 7
    finally:
        update_node(cluster, node, weight="1")
    restored = cluster.node(node)
    assert restored is not None
    assert restored["weight"] == 1


def test_update_partition_drains_and_reopens_the_partition(cluster: Cluster):
    def update(state: str) -> list[str]:
        code = SCONTROL + "scontrol.update_partition(args['name'], state=args['state'])"
        cluster.py(cluster.controller, code, name=PARTITION, state=state)
        partition = cluster.partition(PARTITION)
        assert partition is not None
        return partition["partition"]["state"]

    try:
        drained = update("drain")
    finally:
        reopened = update("up")

    assert drained == ["DRAIN"]
    assert reopened == ["UP"]


def test_srun_runs_on_both_nodes(cluster: Cluster):
    out = cluster.sh(cluster.controller, "srun", "-p", PARTITION, "-N2", "hostname", timeout=60)

    assert sorted(out.split()) == sorted(m.name for m in cluster.computes.values())


@pytest.mark.parametrize(
    "reason", ["a reason with spaces", "juju: applying new node configuration"]
)
def test_drain_reason_reaches_slurm_exactly_and_resume_undrains(cluster: Cluster, reason: str):
    node = "compute-0"
    try:
        update_node(cluster, node, state="drain", reason=reason)
        drained = cluster.node(node)
        assert drained is not None
        assert "DRAIN" in drained["state"], drained
        assert drained["reason"] == reason, f"Slurm stored the reason as {drained['reason']!r}"
    finally:
        update_node(cluster, node, state="resume")

    resumed = cluster.wait_for_node_state(node, "IDLE")
    assert "DRAIN" not in resumed["state"]  # Slurm 24.11 keeps the last reason: not checked.


def test_a_reason_with_dollars_and_percents_reaches_slurm_through_systemd_run(cluster: Cluster):
    """systemd expands `$$` and `${X}` in a transient unit's command: run_transient escapes."""
    node, reason = "compute-0", "cost $$5 at 100% ${HOME} $HOME %n"
    try:
        cluster.py(
            cluster.controller,
            """
            import shlex
            from hpc_libs.machine import systemd
            update = ["scontrol", "update", f"nodename={args['node']}", "state=drain",
                      f"reason={args['reason']}"]
            systemd.run_transient("reason-through-systemd", ["/bin/sh", "-c", shlex.join(update)],
                                  "drain with a reason holding $ and %")
            result = True
            """,
            node=node,
            reason=reason,
        )
        drained = wait_for(
            "the drain by the transient unit",
            lambda: cluster.node(node),
            lambda found: found is not None and "DRAIN" in found["state"],
        )
        assert drained is not None
        assert drained["reason"] == reason, f"Slurm stored the reason as {drained['reason']!r}"
    finally:
        update_node(cluster, node, state="resume")
    cluster.wait_for_node_state(node, "IDLE")


def test_an_exec_start_word_with_percent_and_dollar_reaches_the_program(cluster: Cluster):
    """systemd reads `%x` and `$X` in a unit file: exec_escape keeps them (fe80::1%eth0)."""
    word = "/tmp/fe80::1%eth0-$x-${HOME}-100%"
    cluster.py(
        cluster.controller,
        """
        from pathlib import Path
        from hpc_libs.machine import systemd
        Path("/etc/systemd/system/exec-start-check.service").write_text(
            "[Service]\\nType=oneshot\\n"
            f"ExecStart=/usr/bin/touch {systemd.exec_escape(args['word'])}\\n"
        )
        systemd.daemon_reload()
        systemd.Service("exec-start-check").start()
        result = True
        """,
        word=word,
    )

    cluster.sh(cluster.controller, "test", "-e", word)


def test_a_start_after_quick_failed_starts_is_not_refused_by_systemds_start_limit(
    cluster: Cluster,
):
    """Six failed starts in a few seconds (one per hook), then the fix: the next one runs."""
    started = cluster.py(
        cluster.controller,
        """
        from pathlib import Path
        from hpc_libs.errors import ServiceError
        from hpc_libs.machine import systemd
        Path("/etc/systemd/system/start-limit-check.service").write_text(
            "[Service]\\nType=oneshot\\nRemainAfterExit=yes\\n"
            "ExecStart=/usr/bin/test -e /etc/start-limit-fixed\\n"
        )
        systemd.daemon_reload()
        service = systemd.Service("start-limit-check")
        failures = 0
        for _ in range(6):
            try:
                service.start()
            except ServiceError:
                failures += 1
        Path("/etc/start-limit-fixed").touch()
        service.start()
        result = {"failures": failures, "active": service.is_active()}
        """,
    )

    assert started == {"failures": 6, "active": True}


@pytest.mark.parametrize(
    ("user", "setpriv"),
    [("root", []), ("slurm", ["setpriv", "--reuid=slurm", "--regid=slurm", "--clear-groups"])],
)
def test_show_node_says_who_set_the_reason(cluster: Cluster, user: str, setpriv: list[str]):
    """slurmd's re-registration tells slurmctld's own DOWN from an operator's by this field."""
    node = "compute-1"
    update = [*setpriv, "scontrol", "update", f"nodename={node}", "state=down"]
    try:
        cluster.sh(cluster.controller, *update, "reason=Not responding")
        down = cluster.node(node)
        assert down is not None
        assert (down["reason"], down["reason_set_by_user"]) == ("Not responding", user)
    finally:
        update_node(cluster, node, state="resume")
    cluster.wait_for_node_state(node, "IDLE")


def submit_sleep(cluster: Cluster, node: str) -> int:
    """Submit a 30 s batch job to node and wait until it runs; return its id."""
    out = cluster.sh(
        cluster.controller,
        "sbatch", "--parsable", "-p", PARTITION, "-w", node, "--wrap", "sleep 30",
    )  # fmt: skip
    job = int(out.strip().split(";")[0])
    wait_for(
        f"job {job} to run on {node}",
        lambda: cluster.sh(cluster.controller, "squeue", "-h", "-j", str(job), "-o", "%T %N"),
        lambda line: line.split() == ["RUNNING", node],
    )
    return job


def stepds(cluster: Cluster, node: str) -> str:
    """What `scontrol listjobs <node>` (the node named explicitly) prints on node's machine."""
    proc = cluster.computes[node].exec(["scontrol", "listjobs", node])
    return proc.stdout + proc.stderr


def test_running_jobs_on_the_node_lists_its_running_job(cluster: Cluster):
    node = "compute-1"
    job = submit_sleep(cluster, node)
    try:
        listed = wait_for(
            f"the slurmstepd of job {job}",
            lambda: running_jobs(cluster, node),
            lambda jobs: jobs == [job],
        )
        idle = running_jobs(cluster, "compute-0")
    finally:
        cluster.sh(cluster.controller, "scancel", str(job))

    assert listed == [job]
    assert idle == []


def test_a_step_killed_with_its_machine_is_no_running_job_though_listjobs_lists_it(
    cluster: Cluster,
):
    """A power cut's leftovers: the departure waited minutes on them (soak seed 74, CI25).

    `scontrol listjobs` lists the step sockets in slurmd's spool directory; a step killed
    with its machine leaves its socket, and slurmd removes it only when it connects to it
    and finds it 10 minutes old. Here the machine's Slurm processes are killed at once, as a
    power cut kills them, and slurmd starts again.
    """
    node = "compute-1"
    machine = cluster.computes[node]
    spool = cluster.sh(
        machine, "sh", "-c", "scontrol show config | sed -n 's/^SlurmdSpoolDir *= *//p'"
    )
    job = submit_sleep(cluster, node)
    try:
        wait_for(f"job {job}'s step", lambda: running_jobs(cluster, node), lambda j: j == [job])
        # By name, inside the machine's PID namespace: `systemctl kill` signals the unit's
        # cgroup, which the lab's machines share on this cgroup v1 host (lab/README.md).
        cluster.sh(machine, "pkill", "-KILL", "-x", "slurmd|slurmstepd")
        cluster.sh(machine, "sh", "-c", "systemctl reset-failed slurmd; systemctl start slurmd")
        left_behind = stepds(cluster, node)
        after = running_jobs(cluster, node)
    finally:
        cluster.sh(cluster.controller, "scancel", str(job))
        cluster.sh(machine, "sh", "-c", f'rm -f "{spool.strip()}/{node}_{job}".*')

    assert str(job) in left_behind.split(), (
        f"`scontrol listjobs {node}` no longer lists a killed step's job: {left_behind!r}"
    )
    assert after == [], f"running_jobs() on {node} says {after} with no slurmstepd left"


def test_a_running_job_blocks_delete_until_cancelled_then_the_node_goes(cluster: Cluster):
    node = "compute-1"
    job = submit_sleep(cluster, node)
    try:
        refused = cluster.py(
            cluster.controller,
            SCONTROL + "from hpc_libs.errors import ScontrolError\n"
            "try:\n"
            "    scontrol.delete_node(args['node'])\n"
            "except ScontrolError as e:\n"
            "    result = error_fields(e)\n",
            node=node,
        )
        assert refused is not None, "delete_node succeeded while a job ran on the node"
        assert refused["type"] == "ScontrolError"
        assert refused["command"] == ["scontrol", "delete", f"nodename={node}"]
        assert refused["returncode"] not in (0, None)
        assert "busy" in refused["stderr"], "ScontrolError must carry scontrol's stderr"
        assert cluster.node(node) is not None
    finally:
        # As the slurmd charm's destroy-jobs action does it: on the node itself.
        cluster.py(
            cluster.computes[node],
            SCONTROL + "scontrol.cancel_node_jobs(args['node'])",
            node=node,
        )

    wait_for(
        f"job {job} cancelled",
        lambda: cluster.sh(
            cluster.controller, "squeue", "-h", "-t", "all", "-j", str(job), "-o", "%T"
        ),
        lambda state: state.strip() == "CANCELLED",
    )
    wait_for(
        f"no slurmstepd on {node}",
        lambda: running_jobs(cluster, node),
        lambda jobs: jobs == [],
    )
    cluster.py(cluster.controller, SCONTROL + "scontrol.delete_node(args['node'])", node=node)
    assert cluster.node(node) is None

    # Back to the cluster as it was: a restarted slurmd registers the node again.
    cluster.py(
        cluster.computes[node],
        "from hpc_libs.slurm.slurmd import SlurmdManager\nSlurmdManager().service.restart()",
    )
    cluster.wait_for_node_state(node, "IDLE")


def test_an_edited_slurm_conf_takes_effect_on_reconfigure(cluster: Cluster):
    edit = (
        "from hpc_libs.slurm.slurmctld import SlurmctldManager\n"
        "from slurmutils import Partition\n" + SCONTROL + "manager = SlurmctldManager()\n"
        "conf = manager.config.load()\n"
        "if args['add']:\n"
        "    conf.partitions['extra'] = Partition.from_dict(\n"
        "        {'partitionname': 'extra', 'nodes': ['compute'], 'maxtime': 10}\n"
        "    )\n"
        "else:\n"
        "    del conf.partitions['extra']\n"
        "result = manager.config.write(conf)\n"
        "scontrol.reconfigure()\n"
    )
    try:
        assert cluster.py(cluster.controller, edit, add=True) is True
        added = cluster.partition("extra")
        assert added is not None, "reconfigure did not load the new partition"
        assert added["nodes"]["total"] == len(COMPUTES)
    finally:
        removed = cluster.py(cluster.controller, edit, add=False)
    assert removed is True
    assert cluster.partition("extra") is None
    for node in COMPUTES:
        cluster.wait_for_node_state(node, "IDLE")


def test_reconfigure_logs_exactly_one_reconfiguration_request(cluster: Cluster):
    def count() -> int:
        log = cluster.sh(cluster.controller, "cat", SLURMCTLD_LOG)
        return sum(RECONFIGURE_LINE in line for line in log.splitlines())

    def settled() -> int:
        """The count once it stops moving (an earlier test's reconfigure may still log)."""
        current = count()
        for _ in range(10):
            time.sleep(1)
            previous, current = current, count()
            if current == previous:
                break
        return current

    before = settled()
    cluster.py(cluster.controller, SCONTROL + "scontrol.reconfigure()")

    wait_for("the reconfigure log line", count, lambda n: n > before)
    for node in COMPUTES:  # slurmctld answers again, so reconfiguring is over.
        cluster.wait_for_node_state(node, "IDLE")
    assert count() == before + 1


def test_detect_hardware_matches_slurmd_c(cluster: Cluster):
    machine = cluster.computes["compute-0"]
    detected: dict[str, Any] = cluster.py(
        machine,
        "from hpc_libs.slurm.slurmd import SlurmdManager\n"
        "result = SlurmdManager().detect_hardware()",
    )
    first_line = cluster.sh(machine, "slurmd", "-C").splitlines()[0]
    reported = dict(re.findall(r"(\w+)=(\S+)", first_line))

    assert detected["CPUs"] == int(reported["CPUs"])
    assert detected["RealMemory"] == int(reported["RealMemory"])
    for key in ("Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore"):
        assert detected[key] == int(reported[key]), key
    assert "Gres" not in detected, "no GPU in the lab machines"

    registered = cluster.node("compute-0")
    assert registered is not None
    assert registered["cpus"] == detected["CPUs"]
    assert registered["real_memory"] == detected["RealMemory"]


def test_slurmd_runs_with_the_start_options_as_separate_arguments(cluster: Cluster):
    for node in COMPUTES:
        argv = slurmd_argv(cluster, node)
        assert "-Z" in argv, argv
        assert argv[argv.index("-N") + 1] == node, argv
        assert argv[argv.index("--conf-server") + 1] == f"{cluster.controller.name}:6817"
        conf = argv[argv.index("--conf") + 1]
        words = conf.lower().split()
        assert f"features={PARTITION}" in words, (
            f"--conf must arrive as ONE argument holding the whole node line: {argv}"
        )
        assert {w.split("=")[0] for w in words} >= {"cpus", "realmemory", "features"}, conf


def test_config_and_key_files_have_their_owner_and_mode(cluster: Cluster):
    ctl = cluster.controller.name
    assert stat(cluster, ctl, "/etc/slurm/slurm.conf") == "644 slurm slurm"
    assert stat(cluster, ctl, "/etc/slurm/cgroup.conf") == "644 slurm slurm"
    assert stat(cluster, ctl, "/etc/slurm/slurm.key") == "600 slurm slurm"
    assert stat(cluster, ctl, "/var/lib/slurm/slurmctld") == "750 slurm slurm"
    for machine in cluster.computes.values():
        assert stat(cluster, machine.name, "/etc/slurm/slurm.key") == "600 slurm slurm"
        assert stat(cluster, machine.name, "/etc/default/slurmd") == "644 root root"
    assert len(sha256(cluster, "/etc/slurm/slurm.key")) == 1, "slurm.key differs between hosts"
    size = cluster.sh(cluster.controller, "stat", "-c", "%s", "/etc/slurm/slurm.key")
    assert int(size) == 1024


def test_slurmctld_runs_the_configuration_it_was_given(cluster: Cluster):
    shown = cluster.sh(cluster.controller, "scontrol", "show", "config")
    config = {
        key.strip(): value.strip()
        for key, sep, value in (line.partition("=") for line in shown.splitlines())
        if sep
    }
    written = cluster.sh(cluster.controller, "cat", "/etc/slurm/slurm.conf").lower().split()

    assert config["AuthType"] == "auth/slurm"
    assert config["CredType"] == "cred/slurm"
    assert "enable_configless" in config["SlurmctldParameters"]
    assert config["ProctrackType"] == "proctrack/linuxproc"
    # "none" plugins show as (null). slurmutils refuses to write task/none; unset is none.
    assert config["TaskPlugin"] in ("task/none", "(null)")
    assert config["JobAcctGatherType"] == "(null)"
    assert "jobacctgathertype=jobacct_gather/none" in written
    assert config["MaxNodeCount"] == "16"
    assert config["SlurmctldLogFile"] == SLURMCTLD_LOG
    cgroup = cluster.sh(cluster.computes["compute-0"], "cat", "/run/slurm/conf/cgroup.conf")
    assert "cgroupplugin=disabled" in cgroup.lower(), "configless cgroup.conf reached slurmd"


def test_a_login_node_with_sackd_reaches_the_cluster(cluster: Cluster, login: Machine):
    seen = cluster.py(
        login,
        SCONTROL + "result = {\n"
        "    'up': [p.is_up for p in scontrol.ping()],\n"
        "    'nodes': sorted(n.name for n in scontrol.show_nodes()),\n"
        "}",
    )
    assert seen == {"up": [True], "nodes": sorted(COMPUTES)}

    out = cluster.sh(login, "srun", "-p", PARTITION, "-N2", "hostname", timeout=60)
    assert sorted(out.split()) == sorted(m.name for m in cluster.computes.values())

    assert cluster.sh(login, "stat", "-c", "%a %U %G", "/etc/slurm/slurm.key").strip() == (
        "600 slurm slurm"
    )
    options = cluster.sh(login, "cat", "/etc/default/sackd")
    assert f'SACKD_OPTIONS="--conf-server {cluster.controller.name}:6817"' in options
