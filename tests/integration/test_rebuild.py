"""Slurm-controlled rolling rebuild (issue 21) end to end, against real Slurm.

slurmctld, a slurmd application `compute` with 2 units and another, `other`, with 1 (a second
partition); no login node. On the lab the machines really reboot (a new time namespace per
boot, lab/README.md).

* Patch rollout: 2 jobs run (one per node) and 6 two-node jobs wait when
  `rebuild-nodes partition=compute max-unavailable=1` starts. Measured, sampling the nodes
  every second: each node's boot time changes, never more than one node reboots at once, no
  job is killed or requeued, and the waiting jobs start on the rebuilt nodes (after their new
  boot); `other` is not touched.
* Cancel: `rebuild-cancel` once the first node is rebuilt, while a job keeps the second busy:
  the second never reboots (its boot time unchanged for `QUIET` seconds after that job
  ends), no rebuild job is left, the nodes are idle, a job runs.
* Failure: with `upgrade=true`, the first node's `apt-get update` fails (a malformed apt
  source, an operator's typo, on that node only): it ends DOWN with the RebootProgram's
  reason, the rest of the rollout is held (the second node does not reboot), rebuild-status
  says it stopped, and `other` is untouched.

Run with `-s` to see the measurements.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jubilant
import pytest
from deploy_helpers import deploy_slurm
from dynamic_nodes_helpers import (
    CONTROLLER,
    all_nodes_idle,
    is_idle,
    job_state,
    job_time,
    node_states,
    nodes,
    poll,
    sh,
    submit,
    wait_job,
    wait_running,
)

SETTLE = 10 * 60
ROLLOUT = 6 * 60
NODES = ("compute-0", "compute-1")
OTHER = "other-0"
"""The node of the second partition, which no rollout of `compute` may touch."""
RUNNING, WAITING = 2, 6
"""User jobs running, and waiting, when the patch rollout starts (the issue's workload)."""
QUIET = 45
"""Seconds without a reboot that show a rollout stopped (a reboot takes about 15 s here)."""
BUSY = 90
"""Seconds of the user job that keeps the cancel test's second node busy (its first node
reboots meanwhile: about 30 s on a loaded host)."""
BROKEN_SOURCE = "/etc/apt/sources.list.d/typo.list"
DOWN_STATES = ("REBOOT_ISSUED", "DOWN", "NOT_RESPONDING")
"""A node in any of these is unavailable: rebooting (issued), or not back yet."""
SAMPLER = (
    "nohup sh -c 'while :; do date +%s.%N; scontrol show nodes --oneliner"
    ' | sed -n "s/^NodeName=\\([^ ]*\\) .* State=\\([^ ]*\\) .*/\\1 \\2/p"; sleep 1; done\''
    " > /root/rebuild-samples 2>&1 < /dev/null & echo $! > /root/rebuild-sampler.pid"
)
"""On the controller: the time and every node's state each second (whatever the test's pace)."""


def say(text: str) -> None:
    print(f"\n[rebuild] {text}", flush=True)


def boot_times(records: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    return {
        name: job_time(records[name], "boot_time") for name in (*NODES, OTHER) if name in records
    }


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


def stop_sampler(juju: jubilant.Juju) -> tuple[list[float], int]:
    """Stop the controller's sampler; its sample times and the most nodes down in a sample."""
    sh(juju, "kill $(cat /root/rebuild-sampler.pid)")
    times, most_down, down = [], 0, 0
    for line in sh(juju, "cat /root/rebuild-samples").splitlines():
        if line[:1].isdigit():
            times.append(float(line))
            most_down, down = max(most_down, down), 0
        elif any(state in line for state in DOWN_STATES):
            down += 1
    return times, max(most_down, down)


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    began = time.monotonic()
    deploy_slurm(juju, charm_path, computes=(("compute", 2), ("other", 1)), login=False)
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    poll(lambda: all_nodes_idle(juju, [*NODES, OTHER]), timeout=SETTLE, what="nodes idle")
    say(f"deployed in {time.monotonic() - began:.0f} s")
    return juju


def test_the_rebuild_partition_is_hidden_and_root_only(cluster: jubilant.Juju):
    line = sh(cluster, "scontrol show partition rebuild --oneliner")

    assert "Hidden=YES" in line and "RootOnly=YES" in line and "Default=NO" in line
    assert "PriorityJobFactor=65533" in line and "OverSubscribe=EXCLUSIVE" in line
    as_user = "runuser -u nobody -- sinfo --noheader --format=%R"
    assert sh(cluster, as_user).split() == ["compute", "other"]  # root also sees `rebuild`


def test_a_rolling_rebuild_reboots_one_node_at_a_time_and_loses_no_job(cluster: jubilant.Juju):
    juju = cluster
    before = boot_times(nodes(juju))
    running = [submit(juju, "compute", 20 + 10 * i, node_name=n) for i, n in enumerate(NODES)]
    for job_id in running:
        wait_running(juju, job_id)
    two_nodes = "sbatch --parsable -p compute -N2 --exclusive -o /dev/null --wrap 'sleep 2'"
    waiting = [sh(juju, two_nodes).strip().split(";")[0] for _ in range(WAITING)]
    assert len(running) == RUNNING
    began = time.monotonic()
    sh(juju, SAMPLER)

    task = juju.run(CONTROLLER, "rebuild-nodes", {"partition": "compute", "max-unavailable": 1})
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
    gaps = [b - a for a, b in itertools.pairwise(times)] or [0.0]
    say(
        f"rollout and jobs done in {time.monotonic() - began:.0f} s; {len(times)} samples,"
        f" largest gap {max(gaps):.1f} s; most nodes down at once {most_down};"
        f" statuses seen: {statuses}"
    )

    assert all(after[n] != before[n] for n in NODES), f"boot times {before} -> {after}"
    assert after[OTHER] == before[OTHER], "the other partition's node rebooted"
    assert max(gaps) < 3, f"sampled every {max(gaps):.1f} s at worst, not every second"
    assert most_down <= 1, f"{most_down} nodes down at once"
    for job_id in [*running, *waiting]:
        record = seen.get(job_id)
        assert record is not None and "COMPLETED" in record["job_state"], record
        assert record["restart_cnt"] == 0  # never requeued
    for job_id in waiting:
        record = seen[job_id]
        start = job_time(record, "start_time") or 0
        assert all(start >= (after[n] or 0) for n in NODES), "started before a node's rebuild"
    assert "rebuild compute: 2/2 done, 0 rebooting" in statuses


def test_max_unavailable_bounds_the_reboots_of_idle_nodes(cluster: jubilant.Juju):
    """Both nodes free at once: only the singleton names keep their reboots apart."""
    juju = cluster
    poll(lambda: all_nodes_idle(juju, list(NODES)), timeout=ROLLOUT, what="both nodes idle")
    before = boot_times(nodes(juju))
    sh(juju, SAMPLER)

    juju.run(CONTROLLER, "rebuild-nodes", {"partition": "compute", "max-unavailable": 1})
    poll(
        lambda: (
            all(boot_times(nodes(juju))[n] != before[n] for n in NODES)
            and all_nodes_idle(juju, list(NODES))
        ),
        timeout=ROLLOUT,
        what="both nodes rebooted",
    )

    times, most_down = stop_sampler(juju)
    say(f"idle nodes: {len(times)} samples, most nodes down at once {most_down}")
    assert most_down == 1


def test_cancel_halfway_stops_the_rollout_and_leaves_the_cluster_healthy(cluster: jubilant.Juju):
    """compute-1 runs a job, so the rollout waits there once compute-0 is rebuilt: cancel then."""
    juju = cluster
    poll(lambda: all_nodes_idle(juju, list(NODES)), timeout=ROLLOUT, what="both nodes idle")
    before = boot_times(nodes(juju))
    done, busy = NODES  # the rollout takes the nodes in name order
    user_job = submit(juju, "compute", BUSY, node_name=busy)
    wait_running(juju, user_job)
    juju.run(CONTROLLER, "rebuild-nodes", {"partition": "compute", "max-unavailable": 1})

    def rebuilt() -> bool:
        records = nodes(juju)
        return boot_times(records)[done] != before[done] and is_idle(records[done])

    poll(rebuilt, timeout=ROLLOUT, interval=1, what=f"{done} rebuilt")
    assert job_state(juju, user_job) == "RUNNING", f"{done} took longer than {BUSY} s"
    task = juju.run(CONTROLLER, "rebuild-cancel", {"partition": "compute"})
    say(f"rebuild-cancel with {done} rebuilt and {busy} busy: {task.results}")

    wait_job(juju, user_job, lambda r: "COMPLETED" in r["job_state"], timeout=BUSY, what="done")
    after = reboots_within(juju, QUIET)  # when busy's rebuild job would have started

    assert task.results["cancelled-jobs"] != "none"
    assert after[busy] == before[busy], f"{busy} rebooted after rebuild-cancel"
    assert after[OTHER] == before[OTHER]
    assert not rebuild_jobs_left(juju)
    assert all_nodes_idle(juju, [*NODES, OTHER])
    job_id = sh(juju, "sbatch --parsable -p compute -N2 -o /dev/null --wrap true").strip()
    wait_job(juju, job_id, lambda r: "COMPLETED" in r["job_state"], timeout=60, what="done")


def test_rebuild_nodes_refuses_a_partition_that_is_not_the_clusters(cluster: jubilant.Juju):
    with pytest.raises(jubilant.TaskError, match="partition: 'nowhere'"):
        cluster.run(CONTROLLER, "rebuild-nodes", {"partition": "nowhere"})


def test_a_node_that_fails_its_upgrade_is_down_and_stops_the_rollout(cluster: jubilant.Juju):
    """Last: it leaves compute-0 DOWN until the cleanup at its end."""
    juju = cluster
    poll(lambda: all_nodes_idle(juju, list(NODES)), timeout=ROLLOUT, what="both nodes idle")
    before = boot_times(nodes(juju))
    broken, healthy = NODES  # the rollout takes the nodes in name order
    sh(juju, f"echo 'deb http://10.151.0.1/debian' > {BROKEN_SOURCE}", unit="compute/0")
    reason = "rebuild: apt-get update failed"

    task = juju.run(
        CONTROLLER,
        "rebuild-nodes",
        {"partition": "compute", "max-unavailable": 1, "upgrade": True},
    )
    say(f"rebuild-nodes upgrade=true with a broken apt source on {broken}: {task.results}")

    def is_down() -> dict[str, Any] | None:
        record = nodes(juju)[broken]
        return record if "DOWN" in node_states(record) else None

    down = poll(
        is_down,
        timeout=ROLLOUT,
        interval=1,
        what=f"{broken} down",
    )
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
        assert is_idle(nodes(juju)[healthy]) and is_idle(nodes(juju)[OTHER])
    finally:
        sh(juju, f"rm -f {BROKEN_SOURCE}", unit="compute/0")
        juju.run(CONTROLLER, "rebuild-cancel", {"partition": "compute"})
        sh(juju, f"scontrol update nodename={broken} state=resume")
