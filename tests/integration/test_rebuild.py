"""Slurm-controlled rolling rebuild (issue 21, first slice) end to end, against real Slurm.

slurmctld and a slurmd application `compute` with 2 units; no login node. One job runs on
compute-0 and two 2-node jobs wait when `rebuild-nodes partition=compute max-unavailable=1`
starts. Measured, sampling the nodes every second: each node's boot time changes, never more
than one node reboots at once, no job is killed or requeued, and the waiting jobs start on
the rebuilt nodes (after their new boot). On the lab the machines really reboot (a new time
namespace per boot, lab/README.md).

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
    job_time,
    nodes,
    poll,
    sh,
    submit,
    wait_running,
)

SETTLE = 10 * 60
ROLLOUT = 6 * 60
NODES = ("compute-0", "compute-1")
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
    return {name: job_time(records[name], "boot_time") for name in NODES if name in records}


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
    deploy_slurm(juju, charm_path, computes=(("compute", 2),), login=False)
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    poll(lambda: all_nodes_idle(juju, list(NODES)), timeout=SETTLE, what="both nodes idle")
    say(f"deployed in {time.monotonic() - began:.0f} s")
    return juju


def test_the_rebuild_partition_is_hidden_and_root_only(cluster: jubilant.Juju):
    line = sh(cluster, "scontrol show partition rebuild --oneliner")

    assert "Hidden=YES" in line and "RootOnly=YES" in line and "Default=NO" in line
    assert "PriorityJobFactor=65533" in line and "OverSubscribe=EXCLUSIVE" in line
    as_user = "runuser -u nobody -- sinfo --noheader --format=%R"
    assert sh(cluster, as_user).split() == ["compute"]  # hidden from users (root sees it)


def test_a_rolling_rebuild_reboots_one_node_at_a_time_and_loses_no_job(cluster: jubilant.Juju):
    juju = cluster
    before = boot_times(nodes(juju))
    running = submit(juju, "compute", 25, node_name="compute-0")
    wait_running(juju, running)
    waiting = [
        sh(juju, "sbatch --parsable -p compute -N2 --exclusive -o /dev/null --wrap 'sleep 2'")
        .strip()
        .split(";")[0]
        for _ in range(2)
    ]
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
        ended = [seen.get(j) for j in [running, *waiting]]
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
    assert most_down <= 1, f"{most_down} nodes down at once"
    for job_id in [running, *waiting]:
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
            all(b != before[n] for n, b in boot_times(nodes(juju)).items())
            and all_nodes_idle(juju, list(NODES))
        ),
        timeout=ROLLOUT,
        what="both nodes rebooted",
    )

    times, most_down = stop_sampler(juju)
    say(f"idle nodes: {len(times)} samples, most nodes down at once {most_down}")
    assert most_down == 1


def test_rebuild_nodes_refuses_a_partition_that_is_not_the_clusters(cluster: jubilant.Juju):
    with pytest.raises(jubilant.TaskError, match="partition: 'nowhere'"):
        cluster.run(CONTROLLER, "rebuild-nodes", {"partition": "nowhere"})
