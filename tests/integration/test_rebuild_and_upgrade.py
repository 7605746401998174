"""Rolling rebuild and Slurm major upgrade (issue 21) on one full cluster, against real Slurm.

The issue's lab cluster, deployed once: two slurmctld units on network state (the
filesystem-client stand-in), slurmdbd on the MySQL stand-in, slurmd applications `compute`
and `other` (two units each: two partitions), a sackd `login` and slurmrestd. On the lab the
machines really reboot (a new time namespace per boot, lab/README.md). In order:

* The `rebuild` partition is hidden and root-only; an unknown partition is refused.
* Patch rollout: 2 jobs run (one per node) and 6 two-node jobs wait when
  `rebuild-nodes partition=compute max-unavailable=1` starts. Measured, sampling the nodes
  every second on the controller: each node's boot time changes, never more than one node of
  a partition reboots at once, no job is killed or requeued, the waiting jobs start on the
  rebuilt nodes (after their new boot); `other` is not touched.
* Cancel: `rebuild-cancel` once the first node is rebuilt, while a job keeps the second busy:
  the second never reboots (its boot time unchanged for `QUIET` seconds after that job
  ends: the test cancels it then), no rebuild job is left, the nodes are idle, a job runs.
* Failure: with `upgrade=true`, the first node's `apt-get update` fails (a malformed apt
  source on that node only): it ends DOWN with the RebootProgram's reason, the rest of the
  rollout is held, rebuild-status says it stopped, and `other` is untouched. Then cleaned up.
* Last, the major upgrade 24.11 -> 26.05 of the whole cluster through the lab's mirror of
  Debian forky's Slurm (`Lab.serve_mirror`), with jobs running and waiting when it starts.
  The operator names the source on the daemons that come last first, so their statuses show
  the order while they wait. Checked afterwards from the machines' own records (dpkg's log):
  slurmdbd, then the primary controller, then the backup, then sackd and slurmrestd; both
  controllers UP in `scontrol ping` and every daemon running 26.05 (each controller's and
  slurmdbd's own start line, the nodes' `Version=`, sackd's and slurmrestd's processes on the
  new binaries, the REST API's own release); the nodes of both partitions upgraded by
  rollouts run at once (`other` idle: only the singleton names keep its reboots apart);
  `sacct` still lists every job of the module with its state, none requeued; backups listed;
  new jobs run. The major upgrade needs the lab (real Juju has no mirror to name).

Run with `-s` to see the measurements and each scenario's time.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jubilant
import pytest
from accounting_rest_helpers import http, rest_api
from deploy_helpers import deploy_accounting, deploy_rest_api, deploy_slurm
from dynamic_nodes_helpers import (
    CONTROLLER,
    all_nodes_idle,
    is_idle,
    job_state,
    job_time,
    node_states,
    nodes,
    poll,
    reboot_node,
    sh,
    submit,
    wait_job,
    wait_running,
)
from ha_helpers import (
    LOGIN,
    all_controllers_up,
    ping_hosts,
    pings,
    takeover_count,
    unit_of_host,
)
from hpc_libs.slurm import data_parser

from conftest import on_real_juju

LAB_SUITE = "trixie"
"""The upgrade's origin, 24.11, whatever $SLURM_LAB_SUITE asks for (conftest.module_releases)."""
LEADER = "slurmctld/leader"
"""rebuild-nodes runs on the leader, which records the rollout."""
SETTLE = 15 * 60
ROLLOUT = 6 * 60
UPGRADE = 10 * 60
PARTITIONS = (("compute", 2), ("other", 2))
NODES = ("compute-0", "compute-1")
"""The partition the rebuild scenarios roll out."""
OTHERS = ("other-0", "other-1")
"""The second partition, which no rollout of `compute` may touch."""
ALL_NODES = (*NODES, *OTHERS)
RUNNING, WAITING = 2, 6
"""User jobs running, and waiting, when the patch rollout starts (the issue's workload)."""
QUIET = 45
"""Seconds without a reboot that show a rollout stopped (a reboot takes about 15 s here)."""
BUSY = 600
"""Seconds of the user job that keeps the cancel test's second node busy while its first
node reboots; the test cancels it (`scancel`) once the rollout is cancelled, which frees the
node as the job's end would."""
BROKEN_SOURCE = "/etc/apt/sources.list.d/typo.list"
DOWN_STATES = ("REBOOT_ISSUED", "DOWN", "NOT_RESPONDING")
"""A node in any of these is unavailable: rebooting (issued), or not back yet."""
SAMPLER = (
    "nohup sh -c 'while :; do date +%s.%N; scontrol show nodes --oneliner"
    ' | sed -n "s/^NodeName=\\([^ ]*\\) .* State=\\([^ ]*\\) .*/\\1 \\2/p"; sleep 1; done\''
    " > /root/rebuild-samples 2>&1 < /dev/null & echo $! > /root/rebuild-sampler.pid"
)
"""On the controller: the time and every node's state each second (whatever the test's pace)."""
TARGET = "26.05"
DURING = 120
"""Seconds of the jobs running when slurmdbd's upgrade begins: they outlast it and the
primary controller's (about 10 s apart on the lab, plus the hooks that raise SlurmctldTimeout
and have the backup run with it first)."""
REST = "slurmrestd/0"
SUBMITTED: list[str] = []
"""Every user job the module submits to run to its end: the major upgrade checks that
`sacct` still lists each, completed once."""
CANCELLED: list[str] = []
"""The user jobs the module cancels itself (`scancel`): still listed, cancelled."""


def say(text: str) -> None:
    print(f"\n[rebuild-upgrade] {text}", flush=True)


@pytest.fixture(autouse=True)
def scenario_time(request: pytest.FixtureRequest) -> Iterator[None]:
    began = time.monotonic()
    yield
    say(f"{request.node.name}: {time.monotonic() - began:.0f} s")


def submit_job(juju: jubilant.Juju, partition: str, seconds: int, **kwargs: Any) -> str:
    job_id = submit(juju, partition, seconds, **kwargs)
    SUBMITTED.append(job_id)
    return job_id


def submit_wide(juju: jubilant.Juju, count: int, seconds: int = 2) -> list[str]:
    """Queue `count` exclusive two-node jobs on `compute` (they wait for both nodes)."""
    wide = f"sbatch --parsable -p compute -N2 --exclusive -o /dev/null --wrap 'sleep {seconds}'"
    ids = [sh(juju, wide).strip().split(";")[0] for _ in range(count)]
    SUBMITTED.extend(ids)
    return ids


def boot_times(records: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    return {name: job_time(records[name], "boot_time") for name in ALL_NODES if name in records}


def rebuild_jobs_left(juju: jubilant.Juju) -> list[str]:
    """Rebuild jobs that have not ended (pending, held, configuring or running)."""
    query = "squeue --noheader --all --partition=rebuild --format='%i %T %r'"
    return [line for line in sh(juju, query).splitlines() if line.strip()]


def reboots_within(juju: jubilant.Juju, seconds: float) -> dict[str, float | None]:
    """Boot times now and for `seconds` (sampled every 2 s): raise on the first that changes."""
    first = boot_times(nodes(juju))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(2)
        assert boot_times(nodes(juju)) == first, "a node rebooted after the rollout stopped"
    return first


def stop_sampler(juju: jubilant.Juju) -> tuple[list[float], dict[str, int]]:
    """Stop the controller's sampler; its sample times and, per partition, the most nodes
    down in one sample (a node's partition is its application: the name before `-N`)."""
    sh(juju, "kill $(cat /root/rebuild-sampler.pid)")
    times: list[float] = []
    most_down: dict[str, int] = {app: 0 for app, _ in PARTITIONS}
    down: dict[str, int] = dict.fromkeys(most_down, 0)

    def close_sample() -> None:
        for app, count in down.items():
            most_down[app] = max(most_down[app], count)
            down[app] = 0

    for line in sh(juju, "cat /root/rebuild-samples").splitlines():
        if line[:1].isdigit():
            times.append(float(line))
            close_sample()
        elif any(state in line for state in DOWN_STATES):
            app = line.split()[0].rsplit("-", 1)[0]
            down[app] = down.get(app, 0) + 1
    close_sample()
    return times, most_down


def largest_gap(times: list[float]) -> float:
    return max([b - a for a, b in itertools.pairwise(times)] or [0.0])


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    began = time.monotonic()
    deploy_slurm(
        juju, charm_path, controllers=2, network_state=True, computes=PARTITIONS, login=True
    )
    deploy_accounting(juju, charm_path)
    deploy_rest_api(juju, charm_path)
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    poll(lambda: all_nodes_idle(juju, list(ALL_NODES)), timeout=SETTLE, what="nodes idle")
    hosts = ping_hosts(juju)
    poll(lambda: all_controllers_up(juju, hosts), timeout=SETTLE, what=f"{hosts} all UP")
    say(f"deployed in {time.monotonic() - began:.0f} s; controllers {hosts}")
    return juju


def test_the_rebuild_partition_is_hidden_and_root_only(cluster: jubilant.Juju):
    line = sh(cluster, "scontrol show partition rebuild --oneliner")

    assert "Hidden=YES" in line and "RootOnly=YES" in line and "Default=NO" in line
    assert "PriorityJobFactor=65533" in line
    # Whole nodes: 24.11 shows the charm's OverSubscribe=EXCLUSIVE as it is, 26.05 as
    # Exclusive=NODE (with OverSubscribe=NO).
    assert "OverSubscribe=EXCLUSIVE" in line or "Exclusive=NODE" in line
    members = sh(cluster, "sinfo --noheader --Node --partition=rebuild --format=%N").split()
    assert sorted(members) == sorted(ALL_NODES)  # every node of both partitions
    as_user = "runuser -u nobody -- sinfo --noheader --format=%R"
    assert sh(cluster, as_user).split() == ["compute", "other"]  # root also sees `rebuild`


def test_rebuild_nodes_refuses_a_partition_that_is_not_the_clusters(cluster: jubilant.Juju):
    with pytest.raises(jubilant.TaskError, match="partition: 'nowhere'"):
        cluster.run(LEADER, "rebuild-nodes", {"partition": "nowhere"})


def test_a_rolling_rebuild_reboots_one_node_at_a_time_and_loses_no_job(cluster: jubilant.Juju):
    juju = cluster
    before = boot_times(nodes(juju))
    running = [submit_job(juju, "compute", 20 + 10 * i, node_name=n) for i, n in enumerate(NODES)]
    for job_id in running:
        wait_running(juju, job_id)
    waiting = submit_wide(juju, WAITING)
    assert len(running) == RUNNING
    began = time.monotonic()
    sh(juju, SAMPLER)

    task = juju.run(LEADER, "rebuild-nodes", {"partition": "compute", "max-unavailable": 1})
    say(f"rebuild-nodes: {task.results}")

    statuses, after = set(), before
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + ROLLOUT
    while time.monotonic() < deadline:
        after = boot_times(nodes(juju))
        progress = juju.run(CONTROLLER, "rebuild-status").results.get("compute", {})
        statuses.add(str(progress.get("status", "")))
        for record in json.loads(sh(juju, "scontrol show jobs --json"))["jobs"]:
            seen[str(record["job_id"])] = record  # Slurm forgets ended jobs after MinJobAge
        ended = [seen.get(j) for j in [*running, *waiting]]
        if all(after[n] != before[n] for n in NODES) and all(
            r is not None and "COMPLETED" in r["job_state"] for r in ended
        ):
            break
        time.sleep(1)
    times, most_down = stop_sampler(juju)
    say(
        f"rollout and jobs done in {time.monotonic() - began:.0f} s; {len(times)} samples,"
        f" largest gap {largest_gap(times):.1f} s; most nodes down at once {most_down};"
        f" statuses seen: {statuses}"
    )

    assert all(after[n] != before[n] for n in NODES), f"boot times {before} -> {after}"
    assert all(after[n] == before[n] for n in OTHERS), "the other partition's nodes rebooted"
    assert largest_gap(times) < 3, f"sampled every {largest_gap(times):.1f} s at worst"
    assert most_down == {"compute": 1, "other": 0}, f"nodes down at once: {most_down}"
    for job_id in [*running, *waiting]:
        record = seen.get(job_id)
        assert record is not None and "COMPLETED" in record["job_state"], record
        assert record["restart_cnt"] == 0  # never requeued
    for job_id in waiting:
        record = seen[job_id]
        start = job_time(record, "start_time") or 0
        assert all(start >= (after[n] or 0) for n in NODES), "started before a node's rebuild"
    assert "rebuild compute: 2/2 done, 0 rebooting" in statuses


def test_cancel_halfway_stops_the_rollout_and_leaves_the_cluster_healthy(cluster: jubilant.Juju):
    """compute-1 runs a job, so the rollout waits there once compute-0 is rebuilt: cancel then."""
    juju = cluster
    poll(lambda: all_nodes_idle(juju, list(NODES)), timeout=ROLLOUT, what="both nodes idle")
    before = boot_times(nodes(juju))
    done, busy = NODES  # the rollout takes the nodes in name order
    user_job = submit(juju, "compute", BUSY, node_name=busy)
    CANCELLED.append(user_job)
    wait_running(juju, user_job)
    juju.run(LEADER, "rebuild-nodes", {"partition": "compute", "max-unavailable": 1})

    def rebuilt() -> bool:
        records = nodes(juju)
        return boot_times(records)[done] != before[done] and is_idle(records[done])

    poll(rebuilt, timeout=ROLLOUT, interval=1, what=f"{done} rebuilt")
    assert job_state(juju, user_job) == "RUNNING", f"{done} took longer than {BUSY} s"
    task = juju.run(CONTROLLER, "rebuild-cancel", {"partition": "compute"})
    say(f"rebuild-cancel with {done} rebuilt and {busy} busy: {task.results}")

    sh(juju, f"scancel {user_job}")  # frees the node now, as the job's end would
    wait_job(juju, user_job, lambda r: "CANCELLED" in r["job_state"], timeout=60, what="ended")
    after = reboots_within(juju, QUIET)  # when busy's rebuild job would have started

    assert task.results["cancelled-jobs"] != "none"
    assert after[busy] == before[busy], f"{busy} rebooted after rebuild-cancel"
    assert all(after[n] == before[n] for n in OTHERS)
    assert not rebuild_jobs_left(juju)
    assert all_nodes_idle(juju, list(ALL_NODES))
    job_id = sh(juju, "sbatch --parsable -p compute -N2 -o /dev/null --wrap true").strip()
    SUBMITTED.append(job_id)
    wait_job(juju, job_id, lambda r: "COMPLETED" in r["job_state"], timeout=60, what="done")


def test_a_node_that_fails_its_upgrade_is_down_and_stops_the_rollout(cluster: jubilant.Juju):
    """It leaves compute-0 DOWN; cleaned up at its end (the major upgrade follows)."""
    juju = cluster
    poll(lambda: all_nodes_idle(juju, list(NODES)), timeout=ROLLOUT, what="both nodes idle")
    before = boot_times(nodes(juju))
    broken, healthy = NODES  # the rollout takes the nodes in name order
    sh(juju, f"echo 'deb http://10.151.0.1/debian' > {BROKEN_SOURCE}", unit="compute/0")
    reason = "rebuild: apt-get update failed"

    task = juju.run(
        LEADER,
        "rebuild-nodes",
        {"partition": "compute", "max-unavailable": 1, "upgrade": True},
    )
    say(f"rebuild-nodes upgrade=true with a broken apt source on {broken}: {task.results}")

    def is_down() -> dict[str, Any] | None:
        record = nodes(juju)[broken]
        return record if "DOWN" in node_states(record) else None

    down = poll(is_down, timeout=ROLLOUT, interval=1, what=f"{broken} down")
    after = reboots_within(juju, QUIET)
    status = juju.run(CONTROLLER, "rebuild-status").results["compute"]
    say(f"{broken}: {down['reason']!r}; rebuild-status: {status}; jobs: {rebuild_jobs_left(juju)}")

    try:
        assert down["reason"] == reason
        assert after == before, "a node rebooted although the rollout failed"
        assert status["status"] == (
            f"rebuild compute stopped: {broken} failed ({reason}); 0/2 done"
        )
        held = rebuild_jobs_left(juju)
        assert len(held) == 1 and "PENDING" in held[0] and "Held" in held[0], held
        records = nodes(juju)
        assert all(is_idle(records[n]) for n in (healthy, *OTHERS))
    finally:
        recover(juju, broken)
    assert not rebuild_jobs_left(juju)


def recover(juju: jubilant.Juju, broken: str) -> None:
    """The operator's way back: fix the node, rebuild-cancel, `resume` it, reboot it.

    Its reboot was issued before the RebootProgram failed: once resumed, Slurm still waits
    for it to come back (IDLE+NOT_RESPONDING+POWERING_UP, seen on the lab, until
    ResumeTimeout); a new boot registers it again.
    """
    unit = "compute/0"
    sh(juju, f"rm -f {BROKEN_SOURCE}", unit=unit)
    juju.run(CONTROLLER, "rebuild-cancel", {"partition": "compute"})
    juju.run(CONTROLLER, "resume", {"nodename": broken})
    reboot_node(juju, broken, unit=unit, timeout=ROLLOUT)
    poll(lambda: all_nodes_idle(juju, list(ALL_NODES)), timeout=120, what="every node idle")


# --- the major upgrade --------------------------------------------------------------------------


def message(status: jubilant.Status, unit: str) -> str:
    return status.apps[unit.split("/", 1)[0]].units[unit].workload_status.message


def wait_messages(juju: jubilant.Juju, units: list[str], prefix: str) -> dict[str, str]:
    """Wait until every unit's status message starts with `prefix`; return the messages."""

    def probe() -> dict[str, str] | None:
        status = juju.status()
        found = {unit: message(status, unit) for unit in units}
        return found if all(m.startswith(prefix) for m in found.values()) else None

    return poll(probe, timeout=180, what=f"{units}: {prefix}")


def slurm_version(juju: jubilant.Juju, unit: str) -> str:
    """The Slurm release the unit's packages are (`dpkg-query`), such as `26.05.5-1`."""
    return sh(juju, "dpkg-query --show --showformat='${Version}' slurm-client", unit=unit)


CONFIGURED_TIMEOUT = 4
"""slurmctld-timeout as the module deploys it (the option's default); raised to 300 s only
while the controllers upgrade."""


def upgraded_at(juju: jubilant.Juju, unit: str, package: str) -> tuple[datetime, datetime]:
    """When dpkg began upgrading `package` to the target on the unit, and when it was installed.

    From the machine's /var/log/dpkg.log (the lab's machines share the host's clock).
    """
    log = sh(
        juju, f"grep -E ' (upgrade|status installed) {package}:' /var/log/dpkg.log", unit=unit
    )
    began = done = None
    for line in log.splitlines():
        stamp = datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
        if f" upgrade {package}:" in line and f" {TARGET}." in line and began is None:
            began = stamp
        if " status installed " in line and line.rstrip().split()[-1].startswith(TARGET):
            done = done or stamp
    assert began is not None and done is not None, f"{unit}: no upgrade of {package}:\n{log}"
    return began, done


def started_version(juju: jubilant.Juju, unit: str, daemon: str) -> str:
    """The version in the daemon's own last `<daemon> version X started` log line."""
    out = sh(
        juju, f"grep -o '{daemon} version [0-9.]* started' /var/log/slurm/{daemon}.log", unit=unit
    )
    return out.splitlines()[-1].split()[2]


def runs_installed_binary(juju: jubilant.Juju, unit: str, service: str) -> str:
    """The service's main process executable: dpkg's upgrade replaced an old one's
    (`... (deleted)`), so a process left on the old release shows."""
    command = f"readlink /proc/$(systemctl show -p MainPID --value {service})/exe"
    return sh(juju, command, unit=unit).strip()


def rest_release(juju: jubilant.Juju) -> str:
    """The Slurm release slurmrestd reports in its own `ping` reply (`meta.slurm.release`)."""
    base, token, version = rest_api(juju, REST)
    code, body = http(juju, f"{base}/slurm/{version}/ping", token)
    assert code == 200, body
    data_parser.check_answer(body, version)
    return str(body["meta"]["slurm"]["release"])


def accounted(juju: jubilant.Juju) -> dict[str, list[str]]:
    """Every job `sacct` lists (all users, requeued runs too: `--duplicates`): id -> states."""
    out = sh(juju, "sacct -a -X -D -n -P -S 2020-01-01 -E now -o JobID,State")
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        if "|" in line:
            job_id, state = line.split("|", 1)
            found.setdefault(job_id, []).append(state)
    return found


def job_times(juju: jubilant.Juju, ids: list[str]) -> dict[str, tuple[float, float]]:
    """The jobs' start and end times (epoch) from `sacct` (ended jobs only)."""
    query = f"SLURM_TIME_FORMAT=%s sacct -X -n -P -j {','.join(ids)} -o JobID,Start,End"
    rows = [line.split("|") for line in sh(juju, query).split()]
    return {r[0]: (float(r[1]), float(r[2])) for r in rows if r[1].isdigit() and r[2].isdigit()}


def epoch_on(juju: jubilant.Juju, unit: str, stamp: datetime) -> float:
    """A time of the unit's own logs (its local time) as epoch seconds, converted there."""
    return float(sh(juju, f"date -d '{stamp:%Y-%m-%d %H:%M:%S}' +%s", unit=unit))


def node_back_on(juju: jubilant.Juju, major: str, before: dict[str, float | None]) -> bool:
    """Whether every node rebooted since `before`, runs Slurm `major` and is idle."""
    records = nodes(juju)
    return all(
        job_time(records[n], "boot_time") != before[n]
        and str(records[n].get("version", "")).startswith(major)
        and is_idle(records[n])
        for n in ALL_NODES
    )


@pytest.mark.skipif(on_real_juju(), reason="needs the lab's mirror of Slurm 26.05")
def test_a_major_upgrade_of_the_ha_cluster_in_slurms_order_loses_no_job(cluster: jubilant.Juju):
    juju = cluster
    source = juju.lab.serve_mirror()  # pyright: ignore[reportAttributeAccessIssue]
    hosts = ping_hosts(juju)
    status = juju.status()
    primary, backup = (unit_of_host(status, "slurmctld", host) for host in hosts)
    say(f"primary {primary} ({hosts[0]}), backup {backup} ({hosts[1]})")
    assert rest_release(juju).startswith("24.11")
    # Nothing before may be requeued: a requeued job shows a second (REQUEUED) run.
    jobs = {*SUBMITTED, *CANCELLED}
    poll(lambda: jobs <= set(accounted(juju)) or None, timeout=60, what="jobs in sacct")
    history = accounted(juju)
    assert all(history[j] == ["COMPLETED"] for j in SUBMITTED), history
    assert all(history[j][0].startswith("CANCELLED") for j in CANCELLED), history

    began = time.monotonic()

    # The daemons that come last are told first: they wait, and say for what.
    followers = [app for app, _ in PARTITIONS] + ["login", "slurmrestd"]
    for app in followers:
        juju.config(app, {"slurm-package-source": source})
    node_units = [f"{app}/{n}" for app, count in PARTITIONS for n in range(count)]
    waits = wait_messages(juju, [LOGIN, REST, *node_units], f"slurmctld must run {TARGET} first")
    say(f"followers wait: {waits}")
    juju.config("slurmctld", {"slurm-package-source": source})
    waits = wait_messages(juju, [primary, backup], f"slurmdbd must run {TARGET} first")
    say(f"controllers wait: {waits}")
    for unit in (primary, backup, LOGIN, REST, "slurmdbd/0", *node_units):
        assert slurm_version(juju, unit).startswith("24.11"), f"{unit} moved out of turn"

    # slurmdbd's turn; then the primary, the backup once the primary runs 26.05, the rest.
    takeovers = {unit: takeover_count(juju, unit) for unit in (primary, backup)}
    # The workload: a job on each compute node, and 6 two-node jobs waiting behind them.
    running = [submit_job(juju, "compute", DURING, node_name=n) for n in NODES]
    for job_id in running:
        wait_running(juju, job_id)
    waiting = submit_wide(juju, WAITING)
    juju.config("slurmdbd", {"slurm-package-source": source})
    poll(
        lambda: all(slurm_version(juju, u).startswith(TARGET) for u in (LOGIN, REST)) or None,
        timeout=UPGRADE,
        what="slurmdbd, slurmctld, sackd and slurmrestd on 26.05",
    )
    say(
        f"slurmdbd, both slurmctld, login and REST on {TARGET} in {time.monotonic() - began:.0f} s"
    )
    pending = wait_messages(juju, node_units, f"Slurm {TARGET} pending")
    say(f"nodes: {pending}")
    for unit in node_units:
        assert slurm_version(juju, unit).startswith("24.11"), f"{unit} moved out of turn"

    # The order, from each machine's dpkg log.
    dbd = upgraded_at(juju, "slurmdbd/0", "slurmdbd")
    first = upgraded_at(juju, primary, "slurmctld")
    second = upgraded_at(juju, backup, "slurmctld")
    login = upgraded_at(juju, LOGIN, "sackd")
    rest = upgraded_at(juju, REST, "slurmrestd")
    steps = {"slurmdbd": dbd, primary: first, backup: second, "sackd": login, "slurmrestd": rest}
    clock = {who: [f"{t:%H:%M:%S}" for t in pair] for who, pair in steps.items()}
    say(f"dpkg (upgrade begun, installed): {clock}")
    takeovers = {u: takeover_count(juju, u) - n for u, n in takeovers.items()}
    say(f"controllers taking over during their upgrades: {takeovers}")
    # SlurmctldTimeout was raised before the primary stopped: the old backup never took over.
    assert takeovers == {primary: 0, backup: 0}, f"takeovers during the upgrade: {takeovers}"
    assert dbd[1] <= first[0], "slurmctld upgraded before slurmdbd was done"
    assert first[1] <= second[0], "the backup upgraded before the primary was done"
    assert second[1] <= login[0] and second[1] <= rest[0], "a client went before the controllers"

    # The nodes: both partitions' rollouts at once, a job on compute-1 and two waiting.
    poll(lambda: all_nodes_idle(juju, list(ALL_NODES)), timeout=ROLLOUT, what="nodes idle")
    before = boot_times(nodes(juju))
    late_running = submit_job(juju, "compute", 20, node_name=NODES[1])
    wait_running(juju, late_running)
    late_waiting = submit_wide(juju, 2)
    sh(juju, SAMPLER)
    rollout = time.monotonic()
    for app, _ in PARTITIONS:
        task = juju.run(
            LEADER, "rebuild-nodes", {"partition": app, "max-unavailable": 1, "upgrade": True}
        )
        say(f"rebuild-nodes {app} upgrade=true: {task.results}")
    poll(lambda: node_back_on(juju, TARGET, before), timeout=UPGRADE, what="nodes on 26.05")
    times, most_down = stop_sampler(juju)
    say(
        f"4 nodes upgraded and back in {time.monotonic() - rollout:.0f} s; {len(times)} samples,"
        f" largest gap {largest_gap(times):.1f} s; most nodes down at once {most_down}"
    )
    assert largest_gap(times) < 3, f"sampled every {largest_gap(times):.1f} s at worst"
    assert most_down == {"compute": 1, "other": 1}, f"nodes down at once: {most_down}"
    after = boot_times(nodes(juju))

    # Every daemon on 26.05, both controllers UP.
    poll(lambda: all_controllers_up(juju, hosts), timeout=180, what=f"{hosts} all UP")
    say(f"scontrol ping --json: {pings(juju)}")
    for unit in (primary, backup):
        assert started_version(juju, unit, "slurmctld").startswith(TARGET), unit
    assert started_version(juju, "slurmdbd/0", "slurmdbd").startswith(TARGET)
    for unit, service in ((LOGIN, "sackd"), (REST, "slurmrestd")):
        assert slurm_version(juju, unit).startswith(TARGET), unit
        assert not runs_installed_binary(juju, unit, service).endswith("(deleted)"), unit
    assert rest_release(juju).startswith(TARGET)
    config = sh(juju, "scontrol show config", unit=LOGIN)
    assert re.search(rf"SLURM_VERSION\s*=\s*{TARGET}\.", config), "slurmctld's own version"
    timeout = re.search(r"SlurmctldTimeout\s*=\s*(\d+)", config)
    say(f"SlurmctldTimeout after the controllers' turn: {timeout and timeout.group(1)} s")
    assert timeout and int(timeout.group(1)) == CONFIGURED_TIMEOUT, "not restored after the turn"

    # No job lost: every job of the module in sacct, each completed once, never requeued.
    workload = [*running, *waiting, late_running, *late_waiting]
    poll(
        lambda: all(accounted(juju).get(j) == ["COMPLETED"] for j in workload) or None,
        timeout=ROLLOUT,
        what="the workload completed",
    )
    history = accounted(juju)
    lost = {j: history.get(j) for j in SUBMITTED if history.get(j) != ["COMPLETED"]}
    assert not lost, f"jobs lost, killed or requeued: {lost}"
    assert all(history[j][0].startswith("CANCELLED") for j in CANCELLED), history
    spans = job_times(juju, [*running, *late_waiting])
    assert all(spans[j][0] >= (after[n] or 0) for j in late_waiting for n in NODES), spans
    # The worst moment: the jobs ran while slurmdbd and the primary controller upgraded.
    upgrade_began = epoch_on(juju, "slurmdbd/0", dbd[0])
    primary_back = epoch_on(juju, primary, first[1])
    say(f"running jobs {[spans[j] for j in running]}; upgrades {upgrade_began}-{primary_back}")
    assert all(spans[j][0] < upgrade_began and spans[j][1] > primary_back for j in running)

    new_jobs = [submit_job(juju, app, 1) for app, _ in PARTITIONS]
    poll(
        lambda: all(accounted(juju).get(j) == ["COMPLETED"] for j in new_jobs) or None,
        timeout=180,
        what="a new job completed in each partition",
    )
    backups = {
        app: juju.run(f"{app}/0", "list-backups").results["backups"]
        for app in ("slurmctld", "slurmdbd")
    }
    say(f"backups: {backups}; whole upgrade {time.monotonic() - began:.0f} s")
    assert "slurmctld-state-24.11-to-26.05-" in backups["slurmctld"]
    assert "slurm_acct_db-24.11-to-26.05-" in backups["slurmdbd"]
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
