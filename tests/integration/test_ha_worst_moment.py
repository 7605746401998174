"""Failover at the worst moment (issue 25): the primary dies seconds after a job started.

slurmctld writes job state to `StateSaveLocation` at most every 5 s (`SAVE_MAX_WAIT` in
state_save.c, a compile-time constant in 24.11 and 26.05). A job that started after the last
save is PENDING in the state the backup reads; its batch step still runs on the node. What the
backup does with it is measured here, on two controllers of network state, one compute node and
a login node, with the primary's slurmctld SIGKILLed `delay` seconds after the job's process
started on its node. Right after the start, 20 held jobs are queued (as a user would), so the
queue keeps changing until the kill.

- `test_job_started_1s_before_the_kill_completes` (CI): with the charm's takeover repair
  (`src/takeover.py`) the job completes, on its first run or after one requeue, no node is left
  drained, and the new primary's status names what it repaired.
- `test_lost_jobs_lists_exactly_the_jobs_a_killed_primary_lost` (CI, issue 37): held jobs
  queued, the primary SIGKILLed within 2 s of the last submission; the new primary's
  `lost-jobs` action lists exactly the ids the controller lost, none of those saved before.
- `test_a_job_whose_end_the_dead_primary_never_saved_frees_its_node_at_once` (CI, soak seed
  74): the primary killed right after it was told of a job's end: the new primary has the
  busy node register again and Slurm ends the job it finds missing (a node failure: it may
  not be requeued) within a minute of the takeover, not at its time limit.
- `test_window_table` (measurement, `HA_WINDOW_TABLE=1`; `HA_WINDOW_DELAYS=0.5,1,...` and
  `HA_WINDOW_KINDS=kill,power` to choose): every delay once, a JSON line per case and a table;
  `HA_WINDOW_VECTORS=<dir>` keeps each case's `scontrol` JSON.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jubilant
import pytest
from deploy_helpers import deploy_slurm
from dynamic_nodes_helpers import all_nodes_idle, job_words, poll
from ha_helpers import (
    FaultKind,
    all_controllers_up,
    exec_on,
    known_job_ids,
    lab_of,
    ping_hosts,
    recover,
    took_control_at,
    try_exec,
    unit_hostname,
    unit_of_host,
)

RELEASES = ("forky",)
"""One release, the newer: 24.11's failovers run in test_ha, the takeover's repair and the key
change on both (test_ha_with_accounting) (CI time)."""

SETTLE = 15 * 60
NODE = "compute-0"
JOB_SECONDS = 40
"""The job outlives a failover (under 30 s) started up to 7 s after it."""
QUEUED = 20
AFTER = 5
"""Jobs submitted once the backup serves: does any get an id handed out before?"""
QUIET = 6
"""Seconds without a change before each case: the state save timer (5 s) has run out."""
LOST_SAVED, LOST_LAST = 3, 8
"""Jobs queued before the quiet time (saved), and right before the kill (lost)."""
DELAYS = (0.5, 1.0, 2.0, 3.0, 5.0, 7.0)
KILL_ASKED_AT = 0.5
"""The lab's kill (mask, then SIGKILL) lands 0.1 to 0.9 s after it is asked for: about 1 s. On
the lab a kill 0.6 to 1.6 s after the start made slurmctld drain the node and hold the job
(6 of 6), one from 1.8 s on let the node kill and restart it cleanly (4 of 4)."""
REQUEUE_DELAY = 121
"""slurmctld starts a requeued job no sooner than the credential lifetime (120 s) plus 1 s
after the requeue (job_mgr.c: the new launch credential must be newer than the revocation)."""
MARK = "/tmp/worst-moment"
JOB_SCRIPT = (
    f"echo $$ >> {MARK}-$SLURM_JOB_ID.pid; date +%s.%N >> {MARK}-$SLURM_JOB_ID.start; "
    f"sleep {JOB_SECONDS}; date +%s.%N >> {MARK}-$SLURM_JOB_ID.end"
)
LOG_EVENTS = (
    "Registered PENDING",
    "Killing non-startable",
    "launch_failed_requeued_held",
    "Requeuing",
    "requeue",
    "drain",
    "Purged files for defunct",
    "orphan",
    "Job credential revoked",
)
"""slurmctld log lines of the new primary that say what it did to the job or the node."""


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    lab_of(juju)
    deploy_slurm(juju, charm_path, controllers=2, network_state=True, computes=(("compute", 1),))
    juju.wait(
        lambda status: jubilant.all_active(status, "slurmctld", "compute", "login"),
        error=lambda status: jubilant.any_error(status, "slurmctld", "compute", "login"),
        timeout=SETTLE,
    )
    poll(lambda: all_nodes_idle(juju, [NODE]) or None, timeout=120, what=f"{NODE} idle")
    return juju


_MACHINES: dict[str, str] = {}


def on_node(juju: jubilant.Juju, command: str, timeout: float = 30) -> str:
    """Run a shell command on the compute unit's machine directly (fast enough to poll)."""
    if "compute" not in _MACHINES:
        _MACHINES["compute"] = unit_hostname(juju.status(), "compute/0")
    machine = _MACHINES["compute"]
    result = lab_of(juju).get(machine).exec(["sh", "-c", command], timeout=timeout)
    return result.stdout


def job_fields(juju: jubilant.Juju, job_id: str) -> dict[str, str]:
    """`scontrol show job -o` of one job as a dict (empty if it cannot be read)."""
    return job_words(try_exec(juju, f"timeout 15 scontrol show job -o {job_id}", wait=30) or "")


def node_fields(juju: jubilant.Juju) -> dict[str, Any]:
    out = try_exec(juju, f"timeout 15 scontrol show node {NODE} --json", wait=30) or "{}"
    nodes = json.loads(out).get("nodes", [])
    return nodes[0] if nodes else {}


def submit(juju: jubilant.Juju, script: str, *options: str) -> str:
    out = exec_on(
        juju,
        f"sbatch --parsable -p compute -N1 --mem=1 -o /dev/null {' '.join(options)} "
        f"--wrap '{script}'",
    )
    return out.strip().split(";")[0]


def queue_held(juju: jubilant.Juju, count: int, into: list[str]) -> threading.Thread:
    """Queue `count` held jobs from the login node in the background; their ids go to `into`."""

    def run() -> None:
        out = (
            try_exec(
                juju,
                f"for i in $(seq {count}); do sbatch --parsable --hold -p compute -N1 --mem=1 "
                "-o /dev/null --wrap true; done",
                wait=300,
            )
            or ""
        )
        into.extend(line.split(";")[0] for line in out.split())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def started_at(juju: jubilant.Juju, job_id: str, timeout: float = 60) -> float:
    """When the job's process started on the node (the job writes the time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = on_node(juju, f"head -n1 {MARK}-{job_id}.start 2>/dev/null || true")
        if out.strip():
            return float(out.strip())
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} did not start on {NODE} within {timeout} s")


def runs_on_node(juju: jubilant.Juju, job_id: str) -> dict[str, Any]:
    """How often the job started and ended on the node, and whether its first process lives."""
    out = on_node(
        juju,
        f"f={MARK}-{job_id}; echo $(cat $f.start 2>/dev/null | wc -l) "
        "$(cat $f.end 2>/dev/null | wc -l) "
        "$(pid=$(head -n1 $f.pid 2>/dev/null); kill -0 ${pid:-999999} 2>/dev/null "
        "&& echo alive || echo gone)",
    ).split()
    return {"starts": int(out[0]), "ends": int(out[1]), "first_process": out[2]}


def final_job(juju: jubilant.Juju, job_id: str, until: float) -> dict[str, str]:
    """Poll the job until it ended (or `until`, epoch s): state, reason, restarts, exit code."""
    fields: dict[str, str] = {}
    while time.time() < until:
        fields = job_fields(juju, job_id) or fields
        if fields.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"):
            break
        time.sleep(2)
    return fields


def primary_log(juju: jubilant.Juju, unit: str, since: float, job_id: str) -> list[str]:
    """What the new primary's slurmctld logged since `since` about the job, node or job files."""
    pattern = "|".join(LOG_EVENTS)
    out = exec_on(
        juju,
        f"journalctl -u slurmctld --no-pager -o cat --since=@{int(since)} "
        f"| grep -E 'JobId={job_id}([^0-9]|$)|{NODE}|Purged' | grep -E '{pattern}' || true",
        unit=unit,
    )
    return [line for line in out.splitlines() if line.strip()]


def wake_log(juju: jubilant.Juju, unit: str, since: float) -> list[str]:
    """How the new primary's charm was woken since `since`: its wake units' journal lines."""
    out = (
        try_exec(
            juju,
            f"journalctl --no-pager -o short-unix --since=@{int(since)} "
            "-u slurmctld-charm-primary.service -u 'slurmctld-wake-takeover-*' | tail -n 30",
            unit=unit,
        )
        or ""
    )
    return [line for line in out.splitlines() if line.strip()]


def fault_until_taken_over(
    juju: jubilant.Juju, kind: FaultKind, primary: str, backup_unit: str
) -> tuple[float, float, float]:
    """Take the primary down; when the fault was asked for, when it was done, and when the
    backup's slurmctld then began serving as the one in charge."""
    fault_at = time.time()
    lab_of(juju).fault(kind, primary)
    killed_at = time.time()
    took_control = poll(
        lambda: took_control_at(juju, backup_unit, fault_at - 1),
        timeout=120,
        interval=1,
        what=f"{backup_unit} in charge",
    )
    return fault_at, killed_at, took_control


def one_case(
    juju: jubilant.Juju, delay: float, kind: FaultKind = "kill", *, clean: bool = True
) -> dict[str, Any]:
    """Kill the primary `delay` s after a job started; what happened to the job, node and ids.

    The fault is injected from `delay` s after the start; the lab's kill (mask the unit, then
    SIGKILL) returns within about a second: `killed_after_start_s` is when it returned.
    """
    lab_of(juju)
    hosts = ping_hosts(juju)
    primary, backup = hosts[0], hosts[1]
    status = juju.status()
    backup_unit = unit_of_host(status, "slurmctld", backup)
    time.sleep(QUIET)
    job = submit(juju, JOB_SCRIPT)
    t0 = started_at(juju, job)
    queued: list[str] = []
    queuing = queue_held(juju, QUEUED, queued)
    time.sleep(max(0.0, t0 + delay - time.time()))
    fault_at, killed_at, took_control = fault_until_taken_over(juju, kind, primary, backup_unit)
    queuing.join(timeout=300)
    after = [submit(juju, "true", "--hold") for _ in range(AFTER)]
    handed_out = [job, *queued]
    duplicates = sorted(set(after) & set(handed_out), key=int)
    known = known_job_ids(juju) or []
    lost = sorted(set(handed_out) - set(known), key=int)
    ended = final_job(juju, job, until=t0 + delay + REQUEUE_DELAY + JOB_SECONDS + 90)
    time.sleep(2)
    node = node_fields(juju)
    case = {
        "kind": kind,
        "delay_s": delay,
        "fault_from_s": round(fault_at - t0, 2),
        "killed_after_start_s": round(killed_at - t0, 2),
        "backup_in_charge_s": round(took_control - fault_at, 1),
        "job": job,
        "job_state": ended.get("JobState", "?"),
        "reason": ended.get("Reason", "?"),
        "restarts": ended.get("Restarts", "?"),
        "exit_code": ended.get("ExitCode", "?"),
        **runs_on_node(juju, job),
        "node_state": ",".join(node.get("state", [])),
        "node_reason": node.get("reason", ""),
        "node_reason_by": node.get("reason_set_by_user", ""),
        "queued": len(queued),
        "lost_ids": lost,
        "after_ids": after,
        "duplicate_ids": duplicates,
        "log": primary_log(juju, backup_unit, fault_at, job),
        "status": status_of(juju, backup_unit),
        "wake_log": wake_log(juju, backup_unit, fault_at),
    }
    print("\nCASE " + json.dumps(case), flush=True)
    record_vectors(juju, case)
    if clean:
        clean_up(juju, kind, primary, hosts)
    return case


def record_vectors(juju: jubilant.Juju, case: dict[str, Any]) -> None:
    """Keep the raw `scontrol` JSON of the job and node (`HA_WINDOW_VECTORS=<dir>`)."""
    where = os.environ.get("HA_WINDOW_VECTORS")
    if not where:
        return
    name = f"{case['kind']}-{case['delay_s']}"
    Path(where).mkdir(parents=True, exist_ok=True)
    for what, command in (
        ("job", f"scontrol show job {case['job']} --json"),
        ("node", f"scontrol show node {NODE} --json"),
        ("ping", "scontrol ping --json"),
    ):
        out = try_exec(juju, f"timeout 15 {command}", wait=30) or ""
        (Path(where) / f"{name}-{what}.json").write_text(out)


def status_of(juju: jubilant.Juju, unit: str) -> str:
    return juju.status().apps["slurmctld"].units[unit].workload_status.message


def clean_up(juju: jubilant.Juju, kind: FaultKind, primary: str, hosts: list[str]) -> None:
    """Cancel every job, resume the node as an operator would, bring the primary back."""
    try_exec(juju, "scancel --user=root; sleep 2")
    recover(juju, kind, primary, hosts)
    node = node_fields(juju)
    if any(s in ("DRAIN", "DOWN") for s in node.get("state", [])):
        exec_on(juju, f"scontrol update nodename={NODE} state=resume")
    poll(lambda: all_nodes_idle(juju, [NODE]) or None, timeout=180, what=f"{NODE} idle")
    on_node(juju, f"rm -f {MARK}-*")


def table(cases: list[dict[str, Any]]) -> str:
    lines = [
        "| fault | killed after start | job ended | Restarts | first process | node after "
        "| ids lost / handed out twice |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in cases:
        process = "ran to its end" if c["ends"] >= 1 and c["starts"] == 1 else "killed"
        if c["first_process"] == "alive":
            process = "still running"
        node = c["node_state"] + (f" ({c['node_reason']})" if c["node_reason"] else "")
        lines.append(
            f"| {c['kind']} | {c['killed_after_start_s']} s | {c['job_state']} {c['reason']} "
            f"| {c['restarts']} | {process} (runs {c['starts']}) | {node} "
            f"| {len(c['lost_ids'])} / {len(c['duplicate_ids'])} |"
        )
    return "\n".join(lines)


def test_job_started_1s_before_the_kill_completes(cluster: jubilant.Juju):
    """The primary killed about 1 s after a job started: the job completes.

    On the lab Slurm then relaunched the job before its node registered with the new primary,
    and the node refused (`Duplicate jobid`): node drained, job held. The new primary's charm
    resumes the node and releases the job, which then completes on its second run (Slurm
    starts a requeued job 121 s after the requeue), and its status says so. Without the repair
    the job stays held and this test fails.
    """
    measuring_next = bool(os.environ.get("HA_WINDOW_TABLE"))  # Then the table needs the primary.
    case = one_case(cluster, KILL_ASKED_AT, clean=measuring_next)
    print(f"\nprimary killed {case['killed_after_start_s']} s after the job started")

    assert case["job_state"] == "COMPLETED", case
    assert int(case["restarts"]) <= 1, case
    assert "DRAIN" not in case["node_state"], case
    assert case["duplicate_ids"] == [], case
    casualty = any("DRAIN" in line or "Requeuing" in line for line in case["log"])
    if casualty:
        assert case["status"].startswith("repaired after takeover: resumed compute-0"), case
        assert "released job" in case["status"], case


def lost_jobs_listed(juju: jubilant.Juju, unit: str) -> dict[str, dict[str, Any]]:
    """The `lost-jobs` action's entries on a controller unit, by key (`job-<id>-<submitted>`)."""
    results = juju.run(unit, "lost-jobs").results
    return {key: value for key, value in results.items() if key.startswith("job-")}


SAVE_WAKE_S = 1
"""Time given the state saver to wake and write after the first request of a quiet time."""


def submit_held_burst(juju: jubilant.Juju, count: int, *, after_a_save: bool = False) -> list[str]:
    """Queue `count` held jobs from the login node at once (one command, all in parallel);
    their ids.

    The first request after a quiet time makes slurmctld save its state at once, the next
    save comes 5 s later (SAVE_MAX_WAIT), and only what is submitted between them can be
    lost. One after the other, the burst took about 5 s on a loaded CI host, that second save
    took every job, and nothing vanished (CI21). In parallel, on a host at 100 % CPU the
    saver woke only after all 8 were queued, the first save took them all, and again nothing
    vanished (stop 49's CI). `after_a_save` sends one held job first, to start that first
    save, and the burst `SAVE_WAKE_S` later, inside the 5 s after it (the first job is
    returned too: it may be saved or not).
    """
    sbatch = "sbatch --parsable --hold -p compute -N1 --mem=1 -o /dev/null --wrap true"
    burst = f"seq {count} | xargs -P {count} -I{{}} {sbatch}"
    command = f"{sbatch} && sleep {SAVE_WAKE_S} && {burst}" if after_a_save else burst
    out = exec_on(juju, command)
    return sorted((line.split(";")[0] for line in out.split()), key=int)


LOST_TRIES = 3
"""Tries at losing a burst: one where the saver still took every job proves nothing, and is
redone after the primary is back."""


def kill_right_after_a_burst(
    juju: jubilant.Juju, primary: str, backup_unit: str
) -> tuple[list[str], list[str], set[str], float]:
    """Queue a saved burst, then a burst the primary is SIGKILLed right after; the two
    bursts' ids, the ids the backup knows once in charge, and the seconds from the last
    submission to the kill."""
    saved = submit_held_burst(juju, LOST_SAVED)
    time.sleep(QUIET + 1)  # past the state save timer (5 s): these are saved
    last = submit_held_burst(juju, LOST_LAST, after_a_save=True)
    submitted_at = time.time()
    lab_of(juju).fault("kill", primary)
    killed_at = time.time()
    poll(
        lambda: took_control_at(juju, backup_unit, submitted_at - 1),
        timeout=120,
        interval=1,
        what=f"{backup_unit} in charge",
    )
    return saved, last, set(known_job_ids(juju) or []), killed_at - submitted_at


def test_lost_jobs_lists_exactly_the_jobs_a_killed_primary_lost(cluster: jubilant.Juju):
    """Issue 37: held jobs queued, the primary SIGKILLed within 2 s of the last submission.

    Jobs submitted `QUIET` s earlier are saved and must not be listed; the new primary's
    `lost-jobs` action lists exactly the submitted ids the controller no longer knows. The
    previous scenario leaves its primary killed and the backup's earlier finds kept: the
    primary is brought back first and only this scenario's new entries are compared.
    """
    hosts = ping_hosts(cluster)
    primary, backup = hosts[0], hosts[1]
    if not all_controllers_up(cluster, hosts):
        clean_up(cluster, "kill", primary, hosts)
    backup_unit = unit_of_host(cluster.status(), "slurmctld", backup)
    before = set(lost_jobs_listed(cluster, backup_unit))
    vanished: list[str] = []
    for tried in range(1, LOST_TRIES + 1):
        saved, last, known, kill_delay = kill_right_after_a_burst(cluster, primary, backup_unit)
        vanished = sorted(set(saved + last) - known, key=int)
        print(
            f"\ntry {tried}: killed {kill_delay:.1f} s after the last submission; "
            f"saved {saved}, last {last}, vanished {vanished}"
        )
        assert kill_delay < 2.0
        assert set(saved) <= known, "a job submitted 7 s before the kill was lost"
        if vanished or tried == LOST_TRIES:
            break
        clean_up(cluster, "kill", primary, hosts)
    assert vanished, f"no job vanished in {LOST_TRIES} tries: the scenario proved nothing"

    def listed_once_settled() -> list[str] | None:
        new = {k: v for k, v in lost_jobs_listed(cluster, backup_unit).items() if k not in before}
        return sorted((str(v["id"]) for v in new.values()), key=int) if new else None

    listed = poll(listed_once_settled, timeout=300, interval=5, what="lost jobs listed")
    time.sleep(10)  # a second look: one scan finds them all, a later one adds nothing
    listed = listed_once_settled() or []
    print(f"listed {listed}")
    assert listed == vanished
    clean_up(cluster, "kill", primary, hosts)


@pytest.mark.skipif(
    not os.environ.get("HA_WINDOW_TABLE"), reason="measurement: set HA_WINDOW_TABLE=1"
)
def test_window_table(cluster: jubilant.Juju):
    delays = [float(d) for d in os.environ.get("HA_WINDOW_DELAYS", "").split(",") if d] or DELAYS
    kinds: list[FaultKind] = [
        k  # type: ignore[misc]
        for k in os.environ.get("HA_WINDOW_KINDS", "kill").split(",")
        if k in ("kill", "power", "network")
    ]
    cases = [one_case(cluster, d, kind) for kind in kinds for d in delays]
    print("\n" + table(cases), flush=True)


SAVE_MAX_WAIT_S = 5
"""Slurm saves its state at most once every this many seconds (`SAVE_MAX_WAIT`)."""


def test_a_job_whose_end_the_dead_primary_never_saved_frees_its_node_at_once(
    cluster: jubilant.Juju,
):
    """Soak seed 74: a job's end reached the primary, which died before its next state save.

    The job's script ends on the node and the primary is told (the job shows COMPLETING or
    COMPLETED), then the primary is killed before the save that would record the end. Slurm
    saves a change at most once every 5 s (SAVE_MAX_WAIT), but at once after a quiet time: a
    held job submitted just before the script ends makes that save, so the end waits for the
    next one, 5 s later (killing "within about a second of the end" lost that race on a
    loaded host in CI27: the end was saved, and the job ended COMPLETED). The backup reads
    the last save, where the job still runs. Without the charm it ran on there, holding its
    node, until its time limit (TIMEOUT 3 minutes after its start: its node never registered
    with the new primary). The new primary's charm asks the busy nodes to register again
    (`takeover._register_busy_nodes`) and Slurm ends the job it finds missing: this one may
    not be requeued, so as a node failure, within a minute of the takeover (a requeueable one
    is requeued, soak seed 74's job 2).
    """
    states = _end_told_then_primary_killed(cluster)
    for attempt in range(2, END_TRIES + 1):
        if states[-1][1] != "COMPLETED":
            break
        # The save came before the kill (a loaded host delayed it): the end was kept, and
        # the scenario proved nothing. Again, once the primary is back.
        print(f"try {attempt - 1}: the end was saved before the kill; again")
        states = _end_told_then_primary_killed(cluster)
    assert states[-1][1] == "NODE_FAIL", states
    assert states[-1][0] <= 60, states


END_TRIES = 3
"""Tries at killing the primary between a job's end and its save: one where the save still
came first (the job COMPLETED) proves nothing, and is redone."""


def _end_told_then_primary_killed(cluster: jubilant.Juju) -> list[tuple[float, str]]:
    """The job's end told to the primary, which is killed before its next save; the job's
    states on the new primary, with the seconds after it took control."""
    hosts = ping_hosts(cluster)
    primary, backup = hosts[0], hosts[1]
    if not all_controllers_up(cluster, hosts):
        clean_up(cluster, "kill", primary, hosts)
    backup_unit = unit_of_host(cluster.status(), "slurmctld", backup)
    go, end = f"{MARK}-$SLURM_JOB_ID.go", f"{MARK}-$SLURM_JOB_ID.end"
    script = f"until [ -e {go} ]; do sleep 0.1; done; date +%s.%N >> {end}"
    job = submit(cluster, script, "--no-requeue", "--time=3")
    deadline = time.monotonic() + 120
    while job_fields(cluster, job).get("JobState") != "RUNNING":
        assert time.monotonic() < deadline, job_fields(cluster, job)
        time.sleep(0.5)
    time.sleep(SAVE_MAX_WAIT_S)  # No save is due now: the next change is saved at once.
    submit(cluster, "true", "--hold")
    time.sleep(1)  # That save is made; the next cannot come within 5 s.
    on_node(cluster, f"touch {MARK}-{job}.go")
    while not on_node(cluster, f"cat {MARK}-{job}.end 2>/dev/null || true").strip():
        assert time.monotonic() < deadline, f"job {job} never ended on {NODE}"
        time.sleep(0.1)
    while job_fields(cluster, job).get("JobState") not in ("COMPLETING", "COMPLETED"):
        assert time.monotonic() < deadline + 20, job_fields(cluster, job)
        time.sleep(0.1)
    told_at = time.time()
    _, killed_at, took_control = fault_until_taken_over(cluster, "kill", primary, backup_unit)
    states: list[tuple[float, str]] = []
    while time.time() < killed_at + 240:
        state = job_fields(cluster, job).get("JobState", "?")
        if not states or states[-1][1] != state:
            states.append((round(time.time() - took_control, 1), state))
        if state in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT"):
            break
        time.sleep(2)
    log = primary_log(cluster, backup_unit, killed_at, job)
    print(
        f"\njob {job}: primary killed {killed_at - told_at:.1f} s after it was told of the end;"
        f" states on the new primary (s after it took control): {states}; its log: {log}"
    )
    clean_up(cluster, "kill", primary, hosts)
    return states
