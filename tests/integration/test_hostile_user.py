"""Issue 33 end to end, as an unprivileged user: root never acts on a user's text.

Slurm 24.11 takes a newline in a job's comment, name, account and partition string, and
prints or logs it verbatim. A user who writes one makes up whole lines in what root parses.
Each scenario here is such a user (`nobody`, the same uid on every machine) forging lines that
name a VICTIM, a job of root that must stay untouched, and checks on the victim itself that
root did nothing to it. On the packed charms of one small cluster, deployed once: two
slurmctld units on network state (the filesystem-client stand-in), one slurmd application
`compute` of one unit, a sackd `login`. In order, each scenario cleaning up after itself so
that one failing does not fail the next:

1. The hidden root-only `rebuild` partition refuses the user, alone and in a partition list
   (`EnforcePartLimits=ALL`): a job listed there would be read as a rollout's.
2. A forged `--account` (any account is taken: no `AccountingStorageEnforce`) adds no pending
   job to the exporter's series, and does not hide the user's own.
3. A forged rebuild comment never makes root cancel, hold or requeue the victim: through
   `rebuild-cancel`; through the leader's reconcile while a node is DOWN; through the slurmd
   RebootProgram of a real rollout that fails on its node. The forgery rides in a job of the
   user's own partition, and in `compute,rebuild` where Slurm takes that list.
4. A forged partition string, logged verbatim by the new primary's slurmctld, never makes the
   takeover repair (after the primary's slurmctld was SIGKILLed) requeue a job that ended by
   its own exit: COMPLETED or FAILED shortly before the kill, COMPLETED after the takeover.

The scenarios need the lab (`juju.update_status`, controller faults): on real Juju they skip.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import jubilant
import pytest
from deploy_helpers import deploy_slurm
from dynamic_nodes_helpers import (
    all_nodes_idle,
    job_words,
    leader,
    node_states,
    nodes,
    poll,
    reboot_node,
)
from ha_helpers import (
    LOGIN,
    all_controllers_up,
    exec_on,
    inject,
    lab_of,
    ping_hosts,
    recover,
    took_control_at,
    unit_of_host,
)

RELEASES = ("forky",)
"""One release, the newer: what is proven is the charms' file handling, not Slurm's."""

SETTLE = 15 * 60
USER = "nobody"
APP = "compute"
NODE = "compute-0"
NODE_UNIT = "compute/0"
REBUILD = "rebuild"
METRICS_INTERVAL = 5
"""The exporter's pass interval (`metrics-interval`, its minimum; 30 s by default)."""
EXPORTER = "http://127.0.0.1:9341/metrics"
BROKEN_SOURCE = "/etc/apt/sources.list.d/hostile-test.list"
"""A malformed apt source: `apt-get update` fails on it without reaching any address."""
RELEASE = "/tmp/hostile-release"
"""A victim of the takeover scenario runs until `<RELEASE>-<job id>` exists on its node."""
RUNS = "/tmp/hostile-runs"
"""Each run of a takeover victim appends a line to `<RUNS>-<job id>` on its node."""
QUIET = 6
"""Seconds for slurmctld's state save (at most every 5 s) to hold a job's completion."""
LOOK = 25
"""Seconds a scenario watches the victim after the forgery: the takeover repair looks every
10 s while its window is open, and a reconcile holds within its hook."""


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    lab_of(juju)
    deploy_slurm(juju, charm_path, controllers=2, network_state=True, computes=((APP, 1),))
    juju.config("slurmctld", {"metrics-interval": METRICS_INTERVAL})
    juju.wait(
        lambda status: jubilant.all_active(status, "slurmctld", APP, "login"),
        error=lambda status: jubilant.any_error(status, "slurmctld", APP, "login"),
        timeout=SETTLE,
    )
    poll(lambda: all_nodes_idle(juju, [NODE]) or None, timeout=120, what=f"{NODE} idle")
    hosts = ping_hosts(juju)
    poll(lambda: all_controllers_up(juju, hosts), timeout=SETTLE, what=f"{hosts} all UP")
    return juju


# --- the user and the victim --------------------------------------------------------------------


def as_user(juju: jubilant.Juju, *argv: str) -> jubilant.Task:
    """Run a command as the user on the login node; its task, whether it failed or not."""
    command = f"cd /tmp && runuser -u {USER} -- {shlex.join(argv)}"
    try:
        return juju.exec(command, unit=LOGIN, wait=120)
    except jubilant.TaskError as e:
        return e.task


def user_sbatch(juju: jubilant.Juju, *options: str, wrap: str = "true") -> str | None:
    """Submit a job as the user; its id, or None when Slurm refused it."""
    task = as_user(
        juju,
        "sbatch",
        "--parsable",
        "--chdir=/tmp",
        "--output=/dev/null",
        "--mem=1",
        *options,
        f"--wrap={wrap}",
    )
    return task.stdout.strip().split(";")[0] if task.return_code == 0 else None


def forge(juju: jubilant.Juju, text: str) -> list[str]:
    """Queue held jobs of the user whose comment and name are `text`; their ids.

    One in the user's own partition, one in `compute,rebuild` if Slurm takes that list (the
    rebuild queries read that partition). Held, they stay pending until cancelled.
    """
    queued = [
        user_sbatch(
            juju, f"--partition={partition}", "--hold", f"--comment={text}", f"--job-name={text}"
        )
        for partition in (f"{APP},{REBUILD}", APP)
    ]
    return [job_id for job_id in queued if job_id is not None]


def root_sbatch(juju: jubilant.Juju, *options: str, wrap: str = "true") -> str:
    """Submit a job as root from the login node; its id."""
    argv = ["sbatch", "--parsable", f"--partition={APP}", "--nodes=1", "--mem=1", *options]
    out = exec_on(juju, shlex.join([*argv, f"--wrap={wrap}"]))
    return out.strip().split(";")[0]


def pending_victim(juju: jubilant.Juju) -> str:
    """Root's job, pending for an hour (`--begin`): not held, never started, requeueable."""
    return root_sbatch(juju, "--output=/dev/null", "--begin=now+3600", "--requeue")


def job_fields(juju: jubilant.Juju, job_id: str) -> dict[str, str]:
    """`scontrol show job -o` of one of root's jobs as a dict (no user text in its fields)."""
    return job_words(exec_on(juju, f"scontrol show job -o {job_id}"))


WATCHED = ("JobState", "Reason", "Priority", "Restarts", "EndTime")
"""The fields a failure shows of a victim."""


def shown(fields: dict[str, str]) -> dict[str, str]:
    return {key: fields.get(key, "?") for key in WATCHED}


def touched(fields: dict[str, str]) -> list[str]:
    """What root did to a job: held it, cancelled it, requeued it (none: untouched)."""
    found = []
    pending = fields.get("JobState") == "PENDING"
    if fields.get("Reason") == "JobHeldAdmin" or (pending and fields.get("Priority") == "0"):
        found.append("held by root")
    if fields.get("JobState") == "CANCELLED":
        found.append("cancelled")
    if fields.get("Restarts", "0") != "0":
        found.append(f"requeued {fields.get('Restarts')} times")
    return found


def watch(juju: jubilant.Juju, victims: list[str], seconds: float) -> dict[str, dict[str, str]]:
    """The victims' fields once one was touched, or after `seconds` (each second)."""
    deadline = time.monotonic() + seconds
    while True:
        found = {job_id: job_fields(juju, job_id) for job_id in victims}
        if time.monotonic() >= deadline or any(map(touched, found.values())):
            return found
        time.sleep(1)


def cancel(juju: jubilant.Juju, job_ids: list[str]) -> None:
    if job_ids:
        exec_on(juju, f"scancel {' '.join(job_ids)}")


def leader_unit(juju: jubilant.Juju) -> str:
    unit = leader(juju.status(), "slurmctld")
    assert unit is not None
    return unit


def run_hooks(juju: jubilant.Juju, unit: str) -> None:
    """Fire update-status on a unit now and return once its hook ran (lab only)."""
    cast(Any, juju).update_status(unit)

    def idle() -> bool:
        agent = juju.status().apps[unit.partition("/")[0]].units[unit].juju_status
        return agent.current == "idle"

    poll(idle, timeout=120, interval=1, what=f"{unit}'s update-status done")


# --- 1. the rebuild partition -------------------------------------------------------------------


def test_the_rebuild_partition_refuses_the_user_alone_and_in_a_list(cluster: jubilant.Juju):
    accepted = {
        partition: job_id
        for partition in (REBUILD, f"{APP},{REBUILD}")
        if (job_id := user_sbatch(cluster, f"--partition={partition}", "--hold")) is not None
    }
    cancel(cluster, list(accepted.values()))

    assert accepted == {}, f"the user queued jobs into the root-only partition: {accepted}"


# --- 2. the exporter ----------------------------------------------------------------------------

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(juju: jubilant.Juju, unit: str) -> list[tuple[str, dict[str, str], float]]:
    """The exporter's samples on a controller unit: name, labels, value."""
    text = exec_on(juju, f"curl -sf {EXPORTER}", unit=unit)
    samples = []
    for line in text.split("\n"):
        if (match := SAMPLE.match(line)) is not None:
            labels = dict(LABEL.findall(match["labels"] or ""))
            samples.append((match["name"], labels, float(match["value"])))
    return samples


def test_a_forged_account_adds_no_pending_job_and_hides_none(cluster: jubilant.Juju):
    """The account is the 5th of 7 fields the exporter reads per job: the forgery ends the
    user's line early and adds two lines, a pending job of `compute` submitted in 1970 and
    one of a partition `ghost` that does not exist."""
    juju = cluster
    in_control = unit_of_host(juju.status(), "slurmctld", ping_hosts(juju)[0])
    account = f"a\n{APP}|PENDING|1|root|a|1|None\nghost|PENDING|1|root|a"
    submitted = time.time()
    own = user_sbatch(juju, f"--partition={APP}", "--hold", f"--account={account}")
    assert own is not None, "Slurm refused the account: nothing to forge with here"

    def pass_after_submit() -> list[tuple[str, dict[str, str], float]] | None:
        samples = scrape(juju, in_control)
        last = [
            v for name, _, v in samples if name == "slurm_exporter_last_success_timestamp_seconds"
        ]
        cluster_wide = any(name == "slurm_partition_jobs" for name, _, _ in samples)
        return samples if last and last[0] > submitted + 1 and cluster_wide else None

    try:
        samples = poll(pass_after_submit, timeout=60, interval=2, what="an exporter pass")
        queued = exec_on(
            juju, f"squeue --noheader --all --states=PENDING --partition={APP} --format=%i"
        ).split()
    finally:
        cancel(juju, [own])
    pending = {
        labels["partition"]: value
        for name, labels, value in samples
        if name == "slurm_partition_jobs" and labels.get("state") == "pending"
    }
    oldest = {
        labels["partition"]: value
        for name, labels, value in samples
        if name == "slurm_partition_oldest_pending_job_age_seconds"
    }

    assert own in queued
    assert pending == {APP: len(queued)}, f"exported pending jobs {pending}, queued {queued}"
    assert all(age < 3600 for age in oldest.values()), f"oldest pending job ages: {oldest}"


# --- 3. forged rebuild comments -----------------------------------------------------------------


def rebuild_line(victim: str, since: int | str) -> str:
    """A line of the rollout query (`%i|%T|%k`) naming the victim as a pending rebuild job."""
    return f"{victim}|PENDING|rebuild:{APP}:{since}:reboot:{NODE}"


def test_rebuild_cancel_cancels_no_victim(cluster: jubilant.Juju):
    juju = cluster
    victim = pending_victim(juju)
    forged = forge(juju, f"x\n{rebuild_line(victim, 1)}")
    try:
        task = juju.run(leader_unit(juju), "rebuild-cancel", {"partition": APP})
        fields = job_fields(juju, victim)
    finally:
        cancel(juju, [victim, *forged])

    assert touched(fields) == [], (
        f"victim {victim}: {shown(fields)}; rebuild-cancel: {task.results}"
    )


def test_a_down_node_makes_the_reconcile_hold_no_victim(cluster: jubilant.Juju):
    """The leader holds the waiting jobs of a rollout whose node failed: none is the victim."""
    juju = cluster
    victim = pending_victim(juju)
    forged = forge(juju, f"x\n{rebuild_line(victim, 1)}")
    exec_on(juju, f"scontrol update nodename={NODE} state=down reason=hostile-test")
    try:
        run_hooks(juju, leader_unit(juju))
        fields = watch(juju, [victim], 5)[victim]
    finally:
        exec_on(juju, f"scontrol update nodename={NODE} state=resume")
        cancel(juju, [victim, *forged])
        poll(lambda: all_nodes_idle(juju, [NODE]) or None, timeout=120, what=f"{NODE} idle")

    assert touched(fields) == [], f"victim {victim}: {shown(fields)}"


def test_a_failed_rebuild_makes_the_reboot_program_hold_no_victim(cluster: jubilant.Juju):
    """A rollout with `upgrade=true` whose `apt-get update` fails on the node: the program
    holds the rollout's pending jobs (its comments' prefix) and sets the node DOWN.

    The user's own job keeps the node busy while the rollout starts, so the user reads its
    start from the rebuild job's comment and forges a line the program reads (`%i %k`) before
    the rebuild job runs. The line is not the charm's (`%i|%T|%k`): only the program acts.
    """
    juju = cluster
    victim = pending_victim(juju)
    busy = user_sbatch(juju, f"--partition={APP}", f"--nodelist={NODE}", wrap="sleep 300")
    assert busy is not None
    poll(lambda: job_fields(juju, busy).get("JobState") == "RUNNING", timeout=60, what="busy")
    exec_on(juju, f"echo 'deb hostile-test-malformed' > {BROKEN_SOURCE}", unit=NODE_UNIT)
    controller = leader_unit(juju)
    forged: list[str] = []
    try:
        juju.run(controller, "rebuild-nodes", {"partition": APP, "upgrade": True})
        listed = as_user(
            juju, "squeue", "--all", "--noheader", f"--partition={REBUILD}", "--format=%k"
        )
        rollout = listed.stdout.strip().split(":")  # rebuild:<partition>:<start>:<mode>:<node>
        since = rollout[2] if len(rollout) > 2 else str(int(time.time()))  # else: a guess
        forged = forge(juju, f"x\n{victim} rebuild:{APP}:{since}:forged")
        as_user(juju, "scancel", busy)

        def down() -> bool:
            return "DOWN" in node_states(nodes(juju)[NODE])

        poll(down, timeout=300, interval=1, what=f"{NODE} down after its failed upgrade")
        fields = job_fields(juju, victim)
    finally:
        cancel(juju, [victim, *forged])
        restore_node(juju, controller)

    assert touched(fields) == [], f"victim {victim}: {shown(fields)}"


def restore_node(juju: jubilant.Juju, controller: str) -> None:
    """The operator's way back after the failed rollout: fix apt, cancel, resume, reboot.

    Slurm issued the node's reboot before the program failed, so it waits for a new boot.
    """
    exec_on(juju, f"rm -f {BROKEN_SOURCE}", unit=NODE_UNIT)
    juju.run(controller, "rebuild-cancel", {"partition": APP})
    juju.run(controller, "resume", {"nodename": NODE})
    reboot_node(juju, NODE, unit=NODE_UNIT, timeout=300)
    poll(lambda: all_nodes_idle(juju, [NODE]) or None, timeout=180, what=f"{NODE} idle")


# --- 4. a forged partition string across a takeover ---------------------------------------------


def takeover_victim(juju: jubilant.Juju) -> str:
    """Root's requeueable batch job: records each run on its node, and exits with the code
    written into its release file once there is one."""
    return root_sbatch(
        juju,
        f"--nodelist={NODE}",
        "--output=/dev/null",
        "--requeue",
        wrap=f"echo run >> {RUNS}-$SLURM_JOB_ID; "
        f"while [ ! -s {RELEASE}-$SLURM_JOB_ID ]; do sleep 1; done; "
        f"exit $(cat {RELEASE}-$SLURM_JOB_ID)",
    )


def job_state_saved_since(juju: jubilant.Juju, unit: str, job_id: str) -> None:
    """Wait until slurmctld's job state file on the share was saved since `job_id` started.

    slurmctld saves job state at most every 5 s, on a loaded host later: in CI16 a job
    running `QUIET` s before the kill was launched again by the new primary (its saved state
    older than its start). The scenario's premise is a state saved with the jobs as they are.
    """
    started = int(exec_on(juju, f'date -d "$(squeue -h -j {job_id} -o %S)" +%s', unit=unit))
    location = exec_on(
        juju, "scontrol show config | awk '$1 == \"StateSaveLocation\" {print $3}'", unit=unit
    ).strip()
    poll(
        lambda: int(exec_on(juju, f"stat -c %Y {location}/job_state", unit=unit)) >= started,
        timeout=120,
        interval=1,
        what=f"job state in {location} saved since job {job_id} started",
    )


def release(juju: jubilant.Juju, job_id: str, exit_code: int = 0) -> None:
    """Let a takeover victim end by its own exit: COMPLETED, or FAILED with `exit_code`."""
    exec_on(juju, f"echo {exit_code} > {RELEASE}-{job_id}", unit=NODE_UNIT)
    ended = "FAILED" if exit_code else "COMPLETED"
    poll(
        lambda: job_fields(juju, job_id).get("JobState") == ended,
        timeout=60,
        interval=1,
        what=f"job {job_id} {ended}",
    )


def runs_of(juju: jubilant.Juju, job_id: str) -> int:
    out = exec_on(juju, f"cat {RUNS}-{job_id} 2>/dev/null | wc -l", unit=NODE_UNIT)
    return int(out.strip() or 0)


def test_a_forged_partition_string_requeues_no_ended_job_after_a_takeover(
    cluster: jubilant.Juju,
):
    """The primary's slurmctld SIGKILLed; once the backup is in charge, the user's refused
    `sbatch -p` makes it log whole lines in the format of a launch refused for a revoked
    credential, naming three of root's requeueable jobs: two that ended by their own exit
    shortly before the kill (one COMPLETED, one FAILED with exit code 1), one that completes
    after the takeover, in the repair's window. None runs again."""
    juju = cluster
    hosts = ping_hosts(juju)
    primary, backup = hosts
    backup_unit = unit_of_host(juju.status(), "slurmctld", backup)
    completed, failed = takeover_victim(juju), takeover_victim(juju)
    release(juju, completed)
    release(juju, failed, exit_code=1)
    late = takeover_victim(juju)
    victims = [completed, failed, late]
    poll(lambda: job_fields(juju, late).get("JobState") == "RUNNING", timeout=60, what="late")
    time.sleep(QUIET)
    job_state_saved_since(juju, unit_of_host(juju.status(), "slurmctld", primary), late)
    fault_at = time.time()
    inject(juju, "kill", primary)
    try:
        poll(
            lambda: took_control_at(juju, backup_unit, fault_at - 1),
            timeout=120,
            interval=1,
            what=f"{backup_unit} in charge",
        )
        now = exec_on(juju, "date +%Y-%m-%dT%H:%M:%S.%3N", unit=backup_unit).strip()
        lines = "".join(
            f"\n[{now}] Killing non-startable batch JobId={job_id}: Job credential revoked"
            for job_id in victims
        )
        refused = user_sbatch(juju, f"--partition=nope{lines}")
        logged = exec_on(
            juju,
            f"grep -c '^\\[{now}\\] Killing non-startable batch JobId={late}: Job credential "
            "revoked$' /var/log/slurm/slurmctld.log || true",
            unit=backup_unit,
        )
        release(juju, late)
        run_hooks(juju, backup_unit)
        found = watch(juju, victims, LOOK)
        runs = {job_id: runs_of(juju, job_id) for job_id in victims}
    finally:
        cancel(juju, victims)
        exec_on(juju, f"rm -f {RELEASE}-* {RUNS}-*", unit=NODE_UNIT)
        recover(juju, "kill", primary, hosts)

    assert refused is None
    assert logged.strip() == "1", "the new primary did not log the forged line verbatim"
    done = {job_id: what for job_id, fields in found.items() if (what := touched(fields))}
    assert done == {}, {job_id: shown(fields) for job_id, fields in found.items()}
    assert runs == dict.fromkeys(victims, 1)
